"""``python -m bench --curves``: how corral's and Node BullMQ's costs grow with the work
(issue 18), both at the same points on one fresh Valkey server, corral then Node at each.

Groups of points, each run on a flushed server for one side, then the other:

- ``backlog``: drain rate and server CPU per job with 10k, 100k and 1M jobs waiting (a window
  of the drain is timed, not the drain of all 1M); at each level also the rate of single and
  bulk adds into the queue (``adds``) and the server memory per queued and per completed job
  (``memory``);
- ``completed``: the drain rate with 1M completed jobs retained, then with jobs that keep the
  last 1000 (``remove_on_complete``) while those 1M are there;
- ``delayed``: 100k delayed jobs all due at the same time, the rate from then on;
- ``priorities``: 100k jobs over 100 priority levels;
- ``queues``: 500 queues, one worker process per 50 (corral: a lanes worker; Node: 50
  ``Worker`` objects in the process): the total drain rate.

Every waiting, delayed or prioritized job is added by the side's own bulk add (several
producer processes, untimed); the 1M completed jobs are written by a bench-only Lua script in
the layout both sides write (see docs/benchmarks.md, "Scale curves"). Output: a Markdown
table per curve, ``bench/results/curves.json`` and PNG charts (bench/plot.py).
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import redis

from bench import plot
from bench import run as harness
from bench.common import PREFIX, QUEUE

CHARTS = harness.ROOT / "docs" / "benchmarks"
GROUPS = ("backlog", "completed", "delayed", "priorities", "queues")
POLL_S = 0.02
#: The poll of many queues (5 keys each) costs the server more: it runs less often.
POLL_MANY_S = 0.1

#: What is left of the jobs of the queues whose keys are given five by five (wait, active,
#: prioritized, delayed, failed): {jobs not finished, jobs failed}. Bench-only, read-only.
#: Kept jobs corral's finish deletes at most per job it finishes (RETENTION_BATCH of
#: corral/_lua/include/remove.lua): a trim of 1M takes 10,000 finishes.
TRIM_SLICE = 100

COUNT_LUA = """
local left, failed = 0, 0
for i = 1, #KEYS, 5 do
  left = left + redis.call('LLEN', KEYS[i]) + redis.call('LLEN', KEYS[i + 1])
    + redis.call('ZCARD', KEYS[i + 2]) + redis.call('ZCARD', KEYS[i + 3])
  failed = failed + redis.call('ZCARD', KEYS[i + 4])
end
return {left, failed}
"""

#: Bench-only: ARGV[2] completed jobs with ids ARGV[1].. in queue KEYS[1] (the ``bull:bench``
#: base), field for field what both sides leave of a default job with data {"i": i} that a
#: no-op processor completed (seen with HGETALL: same fields, same order, for both), finished
#: 1 ms apart, ending at ARGV[3]; ``K:id`` is set past them so that later adds do not reuse an
#: id. Keys are built from the base: a standalone server only, as the benchmark's is.
FILL_COMPLETED_LUA = """
local base, first, n, last = KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
for i = first, first + n - 1 do
  local done = last - (first + n - 1 - i)
  local id = tostring(i)
  redis.call('HSET', base .. ':' .. id, 'name', 'bench', 'data', '{"i":' .. (i - 1) .. '}',
    'opts', '{"attempts":0}', 'timestamp', tostring(done - 2), 'delay', '0', 'priority', '0',
    'processedOn', tostring(done - 1), 'ats', '1', 'atm', '1', 'returnvalue', 'null',
    'finishedOn', tostring(done))
  redis.call('ZADD', base .. ':completed', done, id)
end
redis.call('SET', base .. ':id', first + n - 1)
return n
"""


@dataclass(frozen=True)
class CurveSizes:
    """The job counts of the points (issue 18's); ``--scale`` shrinks them."""

    backlogs: tuple[int, ...] = (10_000, 100_000, 1_000_000)
    #: Jobs timed per drain window: this many, or 90% of the jobs there are if fewer.
    window: int = 20_000
    concurrency: int = 100
    singles: int = 3000
    bulk: int = 20_000
    chunk: int = 1000
    completed: int = 1_000_000
    keep: int = 1000
    delayed: int = 100_000
    priority_jobs: int = 100_000
    priorities: int = 100
    queues: int = 500
    queues_per_worker: int = 50
    slots_per_queue: int = 2
    jobs_per_queue: int = 100
    #: Producer processes of a fill (of 20k jobs or more; smaller fills use one).
    producers: int = 2

    def scaled(self, f: float) -> CurveSizes:
        """Every job count times ``f`` (``--scale``), and fewer queues."""

        def n(x: int, least: int) -> int:
            return max(least, round(x * f))

        queues = n(self.queues, 4)
        return replace(
            self,
            backlogs=tuple(n(b, 20) for b in self.backlogs),
            window=n(self.window, 10),
            singles=n(self.singles, 10),
            bulk=n(self.bulk, 10),
            completed=n(self.completed, 20),
            keep=n(self.keep, 2),
            delayed=n(self.delayed, 20),
            priority_jobs=n(self.priority_jobs, 20),
            queues=queues,
            # As many worker processes as at full scale (10), fewer for a few queues.
            queues_per_worker=max(2, math.ceil(queues * self.queues_per_worker / self.queues)),
        )


def window(sz: CurveSizes, jobs: int) -> int:
    """The jobs a drain window times: ``sz.window``, or 90% of ``jobs`` if that is fewer."""
    return min(sz.window, jobs * 9 // 10)


@dataclass
class Context:
    """What the groups share: the server, the sizes, each side's fill rate."""

    srv: harness.Server
    sz: CurveSizes
    #: Each side's rate (jobs/s, process start-up included) in its largest fill so far, of
    #: ``fill_sizes`` jobs: it sets how far ahead the delayed jobs are due.
    fill_rates: dict[str, float] = field(default_factory=dict)
    fill_sizes: dict[str, int] = field(default_factory=dict)

    def waiting(self) -> int:
        return int(self.srv.client.llen(f"{harness.QUEUE_KEY}:wait"))

    def memory(self) -> int:
        time.sleep(0.2)  # the server frees a closed client's buffers in its next cycle
        return self.srv.memory()["data"]


# ---------------------------------------------------------------------------------------------
# fills, windows


def spawn(side: str, url: str, **args: Any) -> tuple[subprocess.Popen[bytes], Any]:
    err = tempfile.TemporaryFile()  # noqa: SIM115 (closed by the caller)
    proc = subprocess.Popen(
        harness.producer_cmd(side, **args),
        env=harness.child_env(url),
        cwd=harness.SNAPSHOT or harness.ROOT,  # -m puts the cwd first on sys.path
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=err,
    )
    return proc, err


def fill(ctx: Context, side: str, count: int, queues: int = 0, **flags: Any) -> dict[str, Any]:
    """Add ``count`` jobs (to each of ``queues`` queues, when given) with the side's own bulk
    add, split over producer processes; untimed as a measurement, timed for the delayed due."""
    total = count * max(1, queues)
    nprocs = max(1, min(ctx.sz.producers, total // 10_000, queues or total))
    parts: list[dict[str, Any]] = []
    for k in range(nprocs):
        if queues:
            lo, hi = queues * k // nprocs, queues * (k + 1) // nprocs
            parts.append({"count": count, "queues": hi - lo, "queue-start": lo})
        else:
            lo, hi = count * k // nprocs, count * (k + 1) // nprocs
            parts.append({"count": hi - lo, "offset": lo})
    t0 = time.perf_counter()
    procs: list[tuple[subprocess.Popen[bytes], Any]] = []
    outs = []
    try:
        for part in parts:
            if part["count"] > 0:
                procs.append(
                    spawn(side, ctx.srv.url, mode="bulk", chunk=ctx.sz.chunk, **part, **flags)
                )
        for proc, err in procs:
            stdout, _ = proc.communicate(timeout=900)
            if proc.returncode != 0:
                err.seek(0)
                tail = err.read().decode(errors="replace")[-3000:]
                raise RuntimeError(f"{side} fill exited {proc.returncode}:\n{tail}")
            out = json.loads(stdout.decode().strip().splitlines()[-1])
            outs.append(harness.checked(side, out))
    finally:
        for proc, err in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            err.close()
    elapsed = time.perf_counter() - t0
    # The rate of the side's largest fill so far (smaller ones are mostly process start-up).
    if total >= max(10_000, ctx.fill_sizes.get(side, 0)):
        ctx.fill_sizes[side], ctx.fill_rates[side] = total, total / elapsed
    return {"count": total, "elapsed_s": elapsed, "overran": any(o.get("overran") for o in outs)}


def fill_completed(ctx: Context, count: int) -> float:
    """The bench-only Lua fill of ``count`` completed jobs (10,000 per call); its seconds."""
    script = ctx.srv.client.register_script(FILL_COMPLETED_LUA)
    t0 = time.perf_counter()
    last = int(time.time() * 1000) - 1000
    for first in range(1, count + 1, 10_000):
        n = min(10_000, count + 1 - first)
        script(keys=[harness.QUEUE_KEY], args=[first, n, last - (count + 1 - first - n)])
    return time.perf_counter() - t0


Sample = tuple[float, int, float, float]  # perf_counter, jobs done, server CPU s, workers CPU s


def interpolate(samples: list[Sample], column: int, value: float) -> tuple[float, float, float]:
    """(time, server CPU, workers CPU) where sample ``column`` (0: time, 1: done) reaches
    ``value``, linear between the two polls around it."""
    if value <= samples[0][column]:
        return samples[0][0], samples[0][2], samples[0][3]
    for a, b in itertools.pairwise(samples):
        if b[column] >= value:
            f = (value - a[column]) / (b[column] - a[column]) if b[column] > a[column] else 1.0
            return tuple(a[j] + f * (b[j] - a[j]) for j in (0, 2, 3))  # type: ignore[return-value]
    raise RuntimeError(f"the polls never reached {value} (column {column})")


def start_workers(ctx: Context, side: str, args: list[dict[str, Any]]) -> list[harness.WorkerProc]:
    return [harness.WorkerProc(side, ctx.srv.url, mode="drain", **a) for a in args]


def run_window(
    ctx: Context,
    procs: list[harness.WorkerProc],
    queues: list[str],
    total: int,
    jobs: int,
    *,
    due_ms: float | None = None,
    finish_all: bool = False,
) -> dict[str, Any]:
    """GO to the started workers ``procs``; time from GO (or from ``due_ms``) to the
    completion of the ``jobs``-th of the ``total`` jobs of ``queues`` (polled every 20 ms,
    100 ms for many queues), then STOP them (after every job, with ``finish_all``)."""
    srv = ctx.srv
    keys = [
        f"{PREFIX}:{q}:{s}"
        for q in queues
        for s in ("wait", "active", "prioritized", "delayed", "failed")
    ]
    count = srv.client.register_script(COUNT_LUA)
    other = harness.OtherLoad(srv)
    try:
        for p in procs:
            p.wait_ready(timeout=120)
        pids = [srv.process.pid] + [p.pid for p in procs]

        def sample() -> Sample:
            while True:
                try:
                    left, failed = (int(x) for x in count(keys=keys))
                    break
                except redis.ResponseError as exc:
                    # A side's script holds the server for seconds (Node's keep-last-N on 1M
                    # kept jobs does): wait for it, it is part of that side's time.
                    if not str(exc).startswith("BUSY"):
                        raise
                    time.sleep(POLL_S)
            t = time.perf_counter()
            cpu = [harness.cpu_seconds(pid) for pid in pids]
            return t, total - left - failed, cpu[0], sum(cpu[1:])

        samples = [sample()]
        go_wall = time.time() * 1000
        for p in procs:
            p.send("GO")
        deadline = time.monotonic() + 600
        goal = total if finish_all else jobs
        while samples[-1][1] < goal:
            time.sleep(POLL_S if len(queues) < 10 else POLL_MANY_S)
            for p in procs:
                if not p.alive():
                    raise RuntimeError(f"{p.side} worker died:\n{p.stderr_tail()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"only {samples[-1][1]} of {goal} jobs done after 600 s")
            samples.append(sample())
        for p in procs:
            p.send("STOP")
        for p in procs:
            p.finish(timeout=120)
    finally:
        for p in procs:
            p.kill()
    t_go = samples[0][0]
    start = interpolate(samples, 0, t_go)
    late = 0.0
    if due_ms is not None:
        late = max(0.0, go_wall - due_ms) / 1000  # the workers were ready after the due time
        start = interpolate(samples, 0, t_go + max(0.0, due_ms - go_wall) / 1000)
    end = interpolate(samples, 1, jobs)
    half = interpolate(samples, 1, jobs // 2)
    left, failed = (int(x) for x in count(keys=keys))
    secs = end[0] - start[0]
    return {
        "rate": jobs / secs,
        "jobs": jobs,
        "elapsed_s": secs,
        "server_us_per_job": (end[1] - start[1]) / jobs * 1e6,
        "worker_us_per_job": (end[2] - start[2]) / jobs * 1e6,
        # The window's second half alone: a one-time cost (a trim) is over by then.
        "rate_2nd_half": (jobs - jobs // 2) / max(1e-9, end[0] - half[0]),
        "polls": len(samples),
        "late_s": late,
        "failed": failed,
        "left": left,
        "other_load_cores": other.cores(),
    }


def adds(ctx: Context, side: str, level: int) -> dict[str, dict[str, Any]]:
    """The queue topped up to ``level`` jobs, then timed single adds and bulk adds into it,
    by one producer process (bench/produce.py's ``adds`` mode)."""
    sz = ctx.sz
    other = harness.OtherLoad(ctx.srv)
    top_up = level - ctx.waiting()
    out = harness.run_producer(
        side, ctx.srv.url, mode="adds", fill=top_up, count=sz.singles, bulk=sz.bulk, chunk=sz.chunk
    )
    load = other.cores()
    return {
        f"single:{level}": {
            "rate": sz.singles / out["elapsed_s"],
            "elapsed_s": out["elapsed_s"],
            "other_load_cores": load,
        },
        f"bulk:{level}": {
            "rate": sz.bulk / out["bulk_elapsed_s"],
            "elapsed_s": out["bulk_elapsed_s"],
            "other_load_cores": load,
        },
    }


# ---------------------------------------------------------------------------------------------
# the groups: each returns {point key: measurement} for one side, on a flushed server


def backlog_group(ctx: Context, side: str) -> dict[str, dict[str, Any]]:
    sz, out = ctx.sz, {}
    for level in sz.backlogs:
        before, waiting = ctx.memory(), ctx.waiting()
        filled = fill(ctx, side, level - waiting)
        queued = (ctx.memory() - before) / max(1, level - waiting)
        before = ctx.memory()
        done0 = ctx.srv.client.zcard(f"{harness.QUEUE_KEY}:completed")
        procs = start_workers(ctx, side, [{"concurrency": sz.concurrency}])
        out[f"backlog:{level}"] = run_window(ctx, procs, [QUEUE], level, window(sz, level))
        out[f"backlog:{level}"]["fill"] = filled
        finished = ctx.srv.client.zcard(f"{harness.QUEUE_KEY}:completed") - done0
        out[f"memory:{level}"] = {
            "queued": queued,
            "completed": queued + (ctx.memory() - before) / max(1, finished),
        }
        out.update(adds(ctx, side, level))
    return out


def completed_group(ctx: Context, side: str) -> dict[str, dict[str, Any]]:
    sz, out = ctx.sz, {}
    lua_s = fill_completed(ctx, sz.completed)
    jobs = math.ceil(sz.window / 0.9)
    # keep-last-N on 1M kept jobs: first the trim of what is over N (corral deletes at most
    # TRIM_SLICE of them per finish, so these jobs are enough for it), then the steady state.
    trim = math.ceil(sz.completed / TRIM_SLICE * 1.2)
    keep = {"remove-on-complete": sz.keep}
    for case, flags, n in (("retained", {}, jobs), ("trim", keep, trim), ("keep", keep, jobs)):
        procs = start_workers(ctx, side, [{"concurrency": sz.concurrency}])
        filled = fill(ctx, side, n, **flags)
        point = run_window(ctx, procs, [QUEUE], n, min(n, sz.window), finish_all=True)
        point["fill"] = filled
        point["completed_left"] = ctx.srv.client.zcard(f"{harness.QUEUE_KEY}:completed")
        point["lua_fill_s"] = lua_s
        out[f"completed:{case}"] = point
    return out


def delayed_group(ctx: Context, side: str) -> dict[str, dict[str, Any]]:
    n = ctx.sz.delayed
    # Due once the fill is surely over (from this side's largest fill so far; 5,000 jobs/s if
    # none, with --only delayed) and the workers started meanwhile are ready: the clock starts
    # at the due time.
    est = n / ctx.fill_rates.get(side, 5000.0)
    due = time.time() * 1000 + 1000 * (2.0 + 1.5 * est)
    procs = start_workers(ctx, side, [{"concurrency": ctx.sz.concurrency}])
    flags: dict[str, Any] = {"delay-until": f"{due:.0f}"}
    filled = fill(ctx, side, n, **flags)
    delayed = ctx.srv.client.zcard(f"{harness.QUEUE_KEY}:delayed")
    point = run_window(ctx, procs, [QUEUE], n, n * 9 // 10, due_ms=due)
    point.update(fill=filled, delayed_at_go=delayed)
    return {"delayed:due": point}


def priorities_group(ctx: Context, side: str) -> dict[str, dict[str, Any]]:
    sz = ctx.sz
    procs = start_workers(ctx, side, [{"concurrency": sz.concurrency}])
    filled = fill(ctx, side, sz.priority_jobs, priorities=sz.priorities)
    prioritized = ctx.srv.client.zcard(f"{harness.QUEUE_KEY}:prioritized")
    point = run_window(ctx, procs, [QUEUE], sz.priority_jobs, window(sz, sz.priority_jobs))
    point.update(fill=filled, prioritized_at_go=prioritized)
    return {"priorities:spread": point}


def queues_group(ctx: Context, side: str) -> dict[str, dict[str, Any]]:
    sz = ctx.sz
    per = sz.queues_per_worker
    args = [
        {"concurrency": sz.slots_per_queue, "queues": min(per, sz.queues - k), "queue-start": k}
        for k in range(0, sz.queues, per)
    ]
    procs = start_workers(ctx, side, args)
    filled = fill(ctx, side, sz.jobs_per_queue, queues=sz.queues)
    total = sz.jobs_per_queue * sz.queues
    names = [f"{QUEUE}-{j}" for j in range(sz.queues)]
    point = run_window(ctx, procs, names, total, total * 9 // 10)
    point.update(fill=filled, worker_processes=len(args))
    return {"queues:many": point}


RUNNERS: dict[str, Callable[[Context, str], dict[str, dict[str, Any]]]] = {
    "backlog": backlog_group,
    "completed": completed_group,
    "delayed": delayed_group,
    "priorities": priorities_group,
    "queues": queues_group,
}


# ---------------------------------------------------------------------------------------------
# main


def main(opts: argparse.Namespace) -> int:
    """``python -m bench --curves`` (bench/run.py parses the options)."""
    if not opts.scale > 0:
        raise SystemExit(f"--scale must be > 0, got {opts.scale}")
    sz = CurveSizes().scaled(opts.scale) if opts.scale != 1 else CurveSizes()
    wanted = [w.strip() for item in opts.only for w in item.split(",") if w.strip()]
    unknown = sorted(set(wanted) - set(GROUPS))
    if unknown:
        raise SystemExit(f"unknown curve(s) {', '.join(unknown)}; choose from {', '.join(GROUPS)}")
    groups = [g for g in GROUPS if not wanted or g in wanted]
    runs = opts.runs or 1
    out_path = Path(opts.json) if opts.json else harness.RESULTS / "curves.json"
    charts = Path(opts.charts) if opts.charts else CHARTS

    started = time.monotonic()
    snapshot, digest = harness.snapshot_corral()
    srv = harness.Server()
    results: dict[str, dict[str, list[dict[str, Any]]]] = {}
    try:
        info = harness.machine(srv)
        info["corral_sources"] = digest
        print(
            f"scale curves: corral {info['corral']} (sources {digest}) vs BullMQ "
            f"{info['bullmq']} on Valkey {info['valkey']}; {info['nproc']} x {info['cpu']}; "
            f"scale {opts.scale:g}, {runs} run(s) per side",
            flush=True,
        )
        ctx = Context(srv, sz)
        for run in range(1, runs + 1):
            for group in groups:
                for side in harness.SIDES:
                    srv.flush()
                    t = time.monotonic()
                    for key, value in RUNNERS[group](ctx, side).items():
                        results.setdefault(key, {}).setdefault(side, []).append(value)
                    print(
                        f"  {group:<10} {side:<6} run {run}/{runs}: {time.monotonic() - t:.1f}s",
                        file=sys.stderr,
                        flush=True,
                    )
    finally:
        srv.stop()
        shutil.rmtree(snapshot, ignore_errors=True)

    points = plot.summarize(sz, groups, results)
    text = plot.tables(points)
    print()
    print(text)
    elapsed = time.monotonic() - started
    loads = [
        r["other_load_cores"]
        for sides in results.values()
        for rs in sides.values()
        for r in rs
        if "other_load_cores" in r
    ]
    if loads:
        print(
            f"load from other processes: median {statistics.median(loads):.2f}, "
            f"max {max(loads):.2f} cores (of {os.cpu_count()})"
        )
    written = plot.charts(points, charts)
    print(
        f"total {elapsed:.0f}s; results in {out_path}; "
        f"charts in {charts}: {', '.join(p.name for p in written)}"
    )
    out_path.parent.mkdir(parents=True, exist_ok=True)
    report = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": "python -m bench " + " ".join(opts.argv),
        "machine": info,
        "sizes": asdict(sz),
        "scale": opts.scale,
        "runs_per_side": runs,
        "elapsed_s": elapsed,
        "points": points,
        "runs": results,
        "table": text,
        "charts": [str(p) for p in written],
    }
    out_path.write_text(json.dumps(report, indent=2) + "\n")
    return 0
