"""One logical queue over 1 and over 3 shards on a Redis Cluster: how the server load splits.

``python -m bench.shards [--jobs N] [--runs R]`` (also the last part of ``make bench``, and
``make bench BENCH_ARGS="--only shards"``) starts a cluster of 3 masters and 3 replicas
on loopback (the test suite's, tests/cluster/conftest.py), then for 1 and 3 shards: adds N
jobs to ``ShardedQueue("bench", shards=S)`` and drains them with one ``Worker(...,
shards=S)`` process-local worker, reading each master's CPU (``INFO cpu``) and calls
(``INFO commandstats``) before and after. On this 2-core machine every master shares the
same cores as the client, so jobs/s cannot grow with the shards: what shows is how the
server's work spreads over the masters, which is what lets a real cluster (one master per
machine) grow. docs/scaling.md projects it.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import redis

from corral import AsyncJob, AsyncShardedQueue, Worker
from tests.cluster.conftest import Cluster, start_cluster


def server_cpu(node: Any) -> float:
    with node.client(socket_timeout=5) as r:
        info = r.info("cpu")
    return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])


def evalsha_calls(node: Any) -> int:
    with node.client(socket_timeout=5) as r:
        stats = r.info("commandstats")
    return int(stats.get("cmdstat_evalsha", {}).get("calls", 0))


async def drain(url: str, shards: int, jobs: int, concurrency: int) -> float:
    """Add ``jobs`` and drain them; the drain's seconds."""
    # One shard is a plain queue: on a cluster its name carries the hash tag itself.
    name = "{bench}" if shards == 1 else "bench"
    async with AsyncShardedQueue(name, shards=shards, connection=url) as queue:
        for start in range(0, jobs, 1000):
            await queue.add_bulk([("job", {"i": i}) for i in range(start, start + 1000)])

        async def process(job: AsyncJob) -> None:
            return None

        worker = Worker(name, process, connection=url, shards=shards, concurrency=concurrency)
        started = time.perf_counter()
        summary = await worker.run_async(burst=True)
        elapsed = time.perf_counter() - started
        assert summary.completed == jobs, summary
        await queue.obliterate(force=True)
    return elapsed


def measure(cluster: Cluster, shards: int, jobs: int, concurrency: int) -> dict[str, Any]:
    masters = sorted(cluster.masters(), key=lambda n: n.port)
    cpu = [server_cpu(n) for n in masters]
    calls = [evalsha_calls(n) for n in masters]
    elapsed = asyncio.run(drain(cluster.url, shards, jobs, concurrency))
    cpu = [server_cpu(n) - before for n, before in zip(masters, cpu, strict=True)]
    calls = [evalsha_calls(n) - before for n, before in zip(masters, calls, strict=True)]
    return {"elapsed": elapsed, "cpu": cpu, "calls": calls}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.shards", description=__doc__)
    parser.add_argument("--jobs", type=int, default=30_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args(argv)
    cluster = start_cluster(Path(tempfile.mkdtemp(prefix="corral-bench-shards-")))
    try:
        print(f"{args.jobs} jobs, concurrency {args.concurrency}, median of {args.runs} runs")
        print("shards  jobs/s   server CPU µs/job   per master (CPU share, script calls)")
        for shards in (1, 3):
            runs = [measure(cluster, shards, args.jobs, args.concurrency) for _ in range(args.runs)]
            rate = statistics.median(args.jobs / r["elapsed"] for r in runs)
            per_master = [statistics.median(r["cpu"][i] for r in runs) for i in range(3)]
            calls = [statistics.median(r["calls"][i] for r in runs) for i in range(3)]
            total = sum(per_master)
            split = ", ".join(
                f"{100 * c / total:.0f}% ({n:,.0f})" for c, n in zip(per_master, calls, strict=True)
            )
            print(f"{shards:6}  {rate:7,.0f}   {1e6 * total / args.jobs:17.1f}   {split}")
    except redis.RedisError as exc:
        print(f"cluster error: {exc}")
        return 1
    finally:
        cluster.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
