"""Pickup latency of interactive jobs while a background backlog saturates the worker.

``python -m bench.lanes [--backlog 10000] [--rate 20] [--seconds 15]`` (also part of
``make bench``) starts its own valkey-server, then for each setup below: adds a backlog of
``--backlog`` one-second background jobs, starts one worker (a child process) and waits until
it runs as many background jobs as it may, then adds interactive jobs (which return at once)
at ``--rate`` per second for ``--seconds`` seconds, the backlog still there all along. An
interactive job's pickup latency is the time its processor starts minus the job's
``timestamp`` (set when it was added; same machine clock). Setups, all at 12 jobs at once:

- lanes 8+4: ``Worker({"interactive": 8, "background": 4}, ...)``;
- lanes 8+4 borrow: the same with ``borrow=True`` (the background lane runs on the idle
  interactive slots, and gives each back as its one-second job ends);
- lanes 8+4 borrow spare=1: ``borrow=True, spare=1`` (the idle interactive lane keeps one
  free slot, lends the other seven);
- shared FIFO: one queue holding both kinds, ``concurrency=12``;
- shared priority: the same, interactive jobs ``priority=1``, background ``priority=10``.

Takes about 5 x (``--seconds`` + 5) seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import statistics
import subprocess
import sys
import time

from bench.run import Server
from corral import AsyncJob, AsyncQueue, Worker

INTERACTIVE, BACKGROUND, SHARED = "bench-interactive", "bench-background", "bench-shared"
SETUPS = ("lanes", "borrow", "spare", "shared", "priority")
TITLES = {
    "lanes": "lanes 8+4",
    "borrow": "lanes 8+4 borrow",
    "spare": "lanes 8+4 borrow spare=1",
    "shared": "shared FIFO, c=12",
    "priority": "shared priority, c=12",
}


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]


def work(url: str, setup: str) -> None:
    """The worker side (a child process): runs until SIGTERM."""

    async def process(job: AsyncJob) -> float | None:
        if job.name == "click":
            return time.time() * 1000 - job.timestamp
        await asyncio.sleep(1)
        return None

    if setup in ("lanes", "borrow", "spare"):
        borrow = {"borrow": True, "spare": int(setup == "spare")} if setup != "lanes" else {}
        worker = Worker({INTERACTIVE: 8, BACKGROUND: 4}, process, connection=url, **borrow)
    else:
        worker = Worker(SHARED, process, connection=url, concurrency=12)
    worker.run()


async def measure(srv: Server, setup: str, backlog: int, rate: float, seconds: float) -> None:
    srv.flush()
    lanes = setup in ("lanes", "borrow", "spare")
    background = AsyncQueue(BACKGROUND if lanes else SHARED, connection=srv.url)
    interactive = AsyncQueue(INTERACTIVE if lanes else SHARED, connection=srv.url)
    batch_opts = {"priority": 10} if setup == "priority" else {}
    click_opts = {"priority": 1} if setup == "priority" else {}
    try:
        for start in range(0, backlog, 1000):
            count = min(1000, backlog - start)
            await background.add_bulk([("batch", None, batch_opts)] * count)
        child = subprocess.Popen(
            [sys.executable, "-m", "bench.lanes", "--work", srv.url, "--setup", setup]
        )
        try:
            saturated = {"lanes": 4, "spare": 11}.get(setup, 12)
            deadline = time.monotonic() + 30
            while (await background.get_job_counts("active"))["active"] < saturated:
                if time.monotonic() > deadline or child.poll() is not None:
                    raise SystemExit(f"{setup}: the worker did not take the backlog")
                await asyncio.sleep(0.05)
            ids = []
            interval = 1 / rate
            begin = time.perf_counter()
            for i in range(int(rate * seconds)):
                # Paced against a schedule: a slow add does not slow the rate down.
                delay = begin + i * interval - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                ids.append((await interactive.add("click", None, **click_opts)).id)
            deadline = time.monotonic() + 3  # time for the last ones to be taken
            while time.monotonic() < deadline:
                done = (await interactive.get_job_counts("completed"))["completed"]
                if done >= len(ids):
                    break
                await asyncio.sleep(0.05)
            left = await background.get_job_counts("waiting", "prioritized")
        finally:
            child.send_signal(signal.SIGTERM)
            child.wait(timeout=60)
        jobs = await asyncio.gather(*(interactive.get_job(i) for i in ids))
    finally:
        await background.close()
        await interactive.close()
    lags = [float(j.returnvalue) for j in jobs if j is not None and j.returnvalue is not None]
    # The shared queue's waiting jobs include the interactive jobs not started.
    backlog_left = sum(left.values()) - (0 if lanes else len(ids) - len(lags))
    head = f"  {TITLES[setup]:<26}"
    if not lags:
        print(f"{head} none of {len(ids)} started (backlog left: {backlog_left})")
        return
    print(
        f"{head} p50 {statistics.median(lags):7.2f} ms  p99 {percentile(lags, 99):7.2f} ms  "
        f"max {max(lags):7.2f} ms  started {len(lags)}/{len(ids)}  "
        f"(backlog left: {backlog_left})"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.lanes", description=__doc__)
    parser.add_argument("--backlog", type=int, default=10_000)
    parser.add_argument("--rate", type=float, default=20)
    parser.add_argument("--seconds", type=float, default=12)
    parser.add_argument("--only", choices=SETUPS, action="append")
    parser.add_argument("--work", metavar="URL", help=argparse.SUPPRESS)
    parser.add_argument("--setup", choices=SETUPS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.work:
        work(args.work, args.setup)
        return 0
    if args.backlog < 12 or args.rate <= 0 or args.seconds <= 0:
        parser.error("--backlog must be >= 12, --rate and --seconds > 0")
    srv = Server()
    print(
        f"interactive pickup latency (added -> processor starts), {args.rate:.0f}/s for "
        f"{args.seconds:.0f} s, behind {args.backlog} one-second background jobs, loopback:"
    )
    try:
        for setup in args.only or SETUPS:
            asyncio.run(measure(srv, setup, args.backlog, args.rate, args.seconds))
    finally:
        srv.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
