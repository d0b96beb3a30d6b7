"""Latency of streamed partial results: from ``job.stream()`` in a worker to a reader.

``python -m bench.streams [--chunks 2000] [--rate 500] [--readers 1]`` starts its own
valkey-server (as ``make bench`` does), adds one job, and runs a corral Worker in a child
process whose processor streams ``--chunks`` chunks at ``--rate`` per second, each stamped
with the wall clock just before ``job.stream()``. ``--readers`` readers in this process
(``queue.read_stream``, started before the job runs) take the time each chunk arrives; the
figures are p50/p99/max of arrival minus stamp over every chunk of every reader, on loopback,
plus the cost of one ``job.stream()`` call in the worker. Takes about ``chunks / rate``
seconds (4 s by default).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import time
from typing import Any

import orjson

from bench.run import Server
from corral import AsyncJob, AsyncQueue, Worker
from corral.stream_items import StreamEnd, StreamItem

QUEUE = "bench-stream"


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]


async def produce(url: str, chunks: int, rate: float) -> None:
    """The worker side (run in a child process): one job, ``chunks`` chunks at ``rate``/s."""
    done = asyncio.Event()
    call_ms: list[float] = []

    async def process(job: AsyncJob) -> dict[str, Any]:
        interval = 1 / rate
        start = time.perf_counter()
        for i in range(chunks):
            # Paced against a schedule, so a slow call does not slow the rate down.
            delay = start + i * interval - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            before = time.perf_counter()
            await job.stream({"i": i, "t": time.time_ns()})
            call_ms.append((time.perf_counter() - before) * 1000)
        done.set()
        return {"chunks": chunks}

    worker = Worker(QUEUE, process, connection=url)
    running = asyncio.create_task(worker.run_async())
    await done.wait()
    await worker.close()  # waits for the job to finish
    await running
    print(orjson.dumps({"call_ms": call_ms}).decode(), flush=True)


async def read(queue: AsyncQueue, job_id: str, arrived: list[float]) -> StreamEnd | None:
    async for item in queue.read_stream(job_id):
        if isinstance(item, StreamItem):
            arrived.append((time.time_ns() - item.value["t"]) / 1e6)
        else:
            return item
    return None


async def measure(url: str, chunks: int, rate: float, readers: int) -> None:
    async with AsyncQueue(QUEUE, connection=url) as queue:
        job = await queue.add("stream", {})
        lags: list[list[float]] = [[] for _ in range(readers)]
        reading = [asyncio.create_task(read(queue, job.id, lag)) for lag in lags]
        await asyncio.sleep(0.2)  # every reader is blocked in its first XREAD
        child = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "bench.streams",
            "--produce",
            url,
            "--chunks",
            str(chunks),
            "--rate",
            str(rate),
            stdout=subprocess.PIPE,
        )
        out, _ = await child.communicate()
        ends = await asyncio.gather(*reading)
    if child.returncode != 0:
        raise SystemExit(f"the worker process exited {child.returncode}")
    call_ms = orjson.loads(out.strip().splitlines()[-1])["call_ms"]
    every = [ms for lag in lags for ms in lag]
    assert all(len(lag) == chunks for lag in lags), [len(lag) for lag in lags]
    assert all(e == StreamEnd("completed", {"chunks": chunks}) for e in ends), ends
    print(
        f"stream latency, job.stream() -> read_stream, {chunks} chunks at {rate:.0f}/s, "
        f"{readers} reader(s), loopback:"
    )
    print(
        f"  p50 {statistics.median(every):.2f} ms, p99 {percentile(every, 99):.2f} ms, "
        f"max {max(every):.2f} ms"
    )
    print(
        f"  job.stream() call: p50 {statistics.median(call_ms):.3f} ms, "
        f"p99 {percentile(call_ms, 99):.3f} ms"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.streams", description=__doc__)
    parser.add_argument("--chunks", type=int, default=2000)
    parser.add_argument("--rate", type=float, default=500)
    parser.add_argument("--readers", type=int, default=1)
    parser.add_argument("--produce", metavar="URL", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.chunks < 1 or args.rate <= 0 or args.readers < 1:
        parser.error("--chunks and --readers must be >= 1, --rate > 0")
    if args.produce:
        asyncio.run(produce(args.produce, args.chunks, args.rate))
        return 0
    srv = Server()
    try:
        asyncio.run(measure(srv.url, args.chunks, args.rate, args.readers))
    finally:
        srv.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
