"""The ``kill9`` scenario: workers ``kill -9``'d one at a time under load and replaced;
jobs lost, completed or run twice, and the recovery time of the jobs interrupted."""

from __future__ import annotations

import random
import time
from collections import Counter, defaultdict
from typing import Any

import redis

from bench.chaos import K
from bench.chaos.figures import figure, stats
from bench.chaos.processes import Agent, Run, Valkey
from bench.chaos.records import read_events, read_records, ready_records, tracebacks, wait_ready
from bench.chaos.sizes import Sizes


def kill9(run: Run, sz: Sizes, rng: random.Random) -> dict[str, Any]:
    srv = Valkey(run)
    srv.start()
    c = srv.client()
    # The stream must keep every event to count completions: opts.maxLenEvents is only set
    # by an add when missing (HSETNX), and every trim reads it.
    c.hset(f"{K}:meta", "opts.maxLenEvents", 100_000_000)
    records = run.tmpdir("records-")
    lock = sz.kill9_lock

    def start_worker() -> Agent:
        return Agent(
            run,
            "worker",
            srv.url,
            records=records,
            concurrency=sz.kill9_concurrency,
            sleep=sz.kill9_sleep,
            lock=lock,
            stalled=sz.kill9_stalled,
            max_stalled=1000,  # a job killed under twice is recovered, not failed
        )

    workers = [start_worker() for _ in range(sz.kill9_workers)]
    wait_ready(run, records, workers)
    producer = Agent(run, "produce", srv.url, count=sz.kill9_jobs, rate=sz.kill9_rate)
    if producer.read_line(60) != "READY":
        raise RuntimeError(f"producer did not start:\n{producer.stderr()}")
    t0 = time.time()
    kills: list[dict[str, Any]] = []
    for r in range(sz.kill9_rounds):
        time.sleep(max(0.0, t0 + (r + 1) * sz.kill9_every - time.time()))
        ready = ready_records(records)
        candidates = [w for w in workers if w.alive() and w.pid in ready]
        if not candidates:
            continue
        victim = rng.choice(candidates)
        # Who holds what just before the kill (a job fetched but not started has a lock too).
        active = c.lrange(f"{K}:active", 0, -1)
        pipe = c.pipeline(transaction=False)
        for job_id in active:
            pipe.get(f"{K}:{job_id}:lock")
        pipe.llen(f"{K}:wait")
        *tokens, waiting = pipe.execute()
        locks = dict(zip(active, tokens, strict=True))
        t_kill = victim.kill9()
        kills.append({"pid": victim.pid, "t": t_kill, "locks": locks, "waiting": waiting})
        workers.append(start_worker())
    run.check_corral(producer.read_json(sz.kill9_jobs / sz.kill9_rate + 60)["corral"])
    # Wait until every job is done (stalled ones come back after a lock duration), then a bit
    # longer: a job that would run again after completing shows up meanwhile.
    deadline = time.monotonic() + max(30.0, 10 * lock)
    while c.zcard(f"{K}:completed") < sz.kill9_jobs and time.monotonic() < deadline:
        time.sleep(0.1)
    drained_at = time.time()
    time.sleep(lock + 1.0)
    killed = {k["pid"] for k in kills}
    died = [w.pid for w in workers if not w.alive() and w.pid not in killed]
    for w in workers:
        w.stop()
    return analyze_kill9(c, sz, read_records(records), kills, workers, died, t0, drained_at)


def analyze_kill9(
    c: redis.Redis,
    sz: Sizes,
    records: list[dict[str, Any]],
    kills: list[dict[str, Any]],
    workers: list[Agent],
    died: list[int],
    t0: float,
    drained_at: float,
) -> dict[str, Any]:
    ids = [str(i) for i in range(1, sz.kill9_jobs + 1)]
    starts: dict[str, list[tuple[float, int]]] = defaultdict(list)
    for r in records:
        if r.get("ev") == "start":
            starts[r["job"]].append((float(r["t"]), int(r["pid"])))
    for runs in starts.values():
        runs.sort()
    base_of = {r["pid"]: r.get("token_base") for r in records if r.get("ev") == "ready"}
    for r in records:  # the token base from the jobs' tokens where the worker has no attribute
        if r.get("ev") == "start" and not base_of.get(r["pid"]):
            base_of[r["pid"]] = str(r["token"]).rpartition(":")[0]

    events = read_events(c, f"{K}:events")
    info = c.xinfo_stream(f"{K}:events")
    completions: Counter[str] = Counter()
    first_completed: dict[str, float] = {}
    stalled_at: dict[str, list[float]] = defaultdict(list)  # back in wait (server clock)
    for event_id, fields in events:
        at = int(event_id.split("-")[0]) / 1000
        if fields.get("event") == "completed":
            completions[fields["jobId"]] += 1
            first_completed.setdefault(fields["jobId"], at)
        elif fields.get("event") == "stalled":
            stalled_at[fields["jobId"]].append(at)

    completed = set(c.zrange(f"{K}:completed", 0, -1))
    state_of = {}
    for name in ("wait", "active"):
        for job_id in c.lrange(f"{K}:{name}", 0, -1):
            state_of[job_id] = name
    for name in ("failed", "delayed", "prioritized"):
        for job_id in c.zrange(f"{K}:{name}", 0, -1):
            state_of[job_id] = name
    lost = [j for j in ids if j not in completed]

    # Jobs whose worker was killed under them: started on the victim before the kill and not
    # completed before it; or locked by the victim without having started (fetched next).
    kill_at = {k["pid"]: k["t"] for k in kills}
    interrupted: list[dict[str, Any]] = []
    for k in kills:
        pid, t_kill = k["pid"], k["t"]
        started = {j for j, runs in starts.items() for t, p in runs if p == pid and t < t_kill}
        base = base_of.get(pid)
        held = {
            j
            for j, token in k["locks"].items()
            if token and base and token.startswith(base + ":") and j not in started
        }
        for j, kind in [(j, "started") for j in started] + [(j, "held") for j in held]:
            done = first_completed.get(j)
            if done is not None and done < t_kill:
                continue
            after = [t for t, p in starts.get(j, []) if p != pid and t >= t_kill]
            # The stream's ids are ms: a stalled event in the kill's ms is counted too.
            back = [t for t in stalled_at.get(j, []) if t >= t_kill - 0.001]
            interrupted.append(
                {
                    "job": j,
                    "pid": pid,
                    "kind": kind,
                    "recovery_s": (min(after) - t_kill) if after else None,
                    "back_in_wait_s": (min(back) - t_kill) if back else None,
                }
            )

    doubles = {j: runs for j, runs in starts.items() if len(runs) > 1}
    unexplained = {
        j: runs
        for j, runs in doubles.items()
        if not all(p in kill_at and kill_at[p] > t for t, p in runs[:-1])
    }

    def of(kind: str, key: str) -> dict[str, Any]:
        return stats([i[key] for i in interrupted if i["kind"] == kind and i[key] is not None])

    recovery = of("started", "recovery_s")
    back_in_wait = of("started", "back_in_wait_s")
    held_recovery = of("held", "recovery_s")
    goal = sz.kill9_lock + 0.5
    never_rerun = [i for i in interrupted if i["recovery_s"] is None]
    twice_completed = {j: n for j, n in completions.items() if n > 1}
    figures = [
        figure("kills", len(kills)),
        figure("jobs lost (not completed)", len(lost), "0", not lost),
        figure("jobs completed twice", len(twice_completed), "0", not twice_completed),
        figure("jobs run twice", len(doubles)),
        figure("  of which not explained by a kill", len(unexplained), "0", not unexplained),
        figure("jobs interrupted by a kill (running)", recovery["n"]),
        figure(
            "recovery p50 s (kill -> runs again)",
            recovery["p50"],
            f"<= {goal:g}",
            _le(recovery["p50"], goal),
        ),
        figure(
            "recovery max s (kill -> runs again)",
            recovery["max"],
            f"<= {goal:g}",
            _le(recovery["max"], goal),
        ),
        figure("kill -> back in wait p50 / max s", [back_in_wait["p50"], back_in_wait["max"]]),
        figure("jobs fetched, not started, at a kill", held_recovery["n"]),
        figure("  their recovery p50 / max s", [held_recovery["p50"], held_recovery["max"]]),
        figure("jobs waiting at the kills (max)", max((k["waiting"] for k in kills), default=0)),
        figure("interrupted jobs never run again", len(never_rerun), "0", not never_rerun),
        figure("workers that died on their own", len(died), "0", not died),
        # Completions are counted in the stream: it must hold every event ever added.
        figure(
            "events stream kept whole",
            info.get("entries-added") == len(events),
            "yes",
            info.get("entries-added") == len(events),
        ),
    ]
    return {
        "figures": figures,
        "details": {
            "jobs": sz.kill9_jobs,
            "drain_s": drained_at - t0,
            "lost": {j: state_of.get(j, "missing") for j in lost},
            "completed_twice": twice_completed,
            "run_twice": {j: [(round(t - t0, 3), p) for t, p in r] for j, r in doubles.items()},
            "unexplained_double_runs": {
                j: [(round(t - t0, 3), p) for t, p in r] for j, r in unexplained.items()
            },
            "kills": [
                {
                    "pid": k["pid"],
                    "t": round(k["t"] - t0, 3),
                    "active": len(k["locks"]),
                    "waiting": k["waiting"],
                }
                for k in kills
            ],
            "interrupted": interrupted,
            "recovery": recovery,
            "back_in_wait": back_in_wait,
            "held_recovery": held_recovery,
            "stalled_events": sum(len(v) for v in stalled_at.values()),
            "events": len(events),
            "events_added": info.get("entries-added"),
            "worker_tracebacks": tracebacks(workers),
            "worker_stderr_tail": [w.stderr()[-1500:] for w in workers if w.pid in died],
        },
    }


def _le(value: float | None, goal: float) -> bool | None:
    return None if value is None else value <= goal
