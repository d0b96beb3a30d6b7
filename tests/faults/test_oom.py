"""``-OOM``: the server's memory is full under ``noeviction`` while jobs run and a producer
adds. Fetches and adds are refused until memory is freed; running jobs are not disturbed;
then everything completes, once, and the worker consumes again."""

from __future__ import annotations

import asyncio
import contextlib

import pytest
import redis

from corral import AsyncQueue
from tests.faults.harness import Fleet, add_jobs, audit, error_count, eventually, logged


async def test_memory_full_while_jobs_run_and_a_producer_adds(
    queue: AsyncQueue, r: redis.Redis, fleet: Fleet, caplog: pytest.LogCaptureFixture
) -> None:
    ids = await add_jobs(queue, 20, ms=100)
    fleet.start("a", concurrency=4, lock_duration=4, stalled_interval=1)
    await eventually(lambda: r.zcard("bull:q:completed") >= 4, "jobs flowing")
    producer = AsyncQueue("q", connection=queue._connection, add_retries=0)
    refused = 0
    try:
        used = int(r.info("memory")["used_memory"])
        r.config_set("maxmemory", used + 256 * 1024)
        # The producer fills the little room left; its adds are refused once it is full.
        for _ in range(5000):
            if refused == 20:
                break
            try:
                job = await producer.add("job", {"ms": 5, "pad": "x" * 2000})
            except redis.OutOfMemoryError:
                refused += 1
                await asyncio.sleep(0.05)  # the server stays full for about a second
            else:
                ids.append(job.id)
        assert refused == 20
        assert error_count(r, "OOM") >= refused
    finally:
        with contextlib.suppress(redis.RedisError):
            r.config_set("maxmemory", 0)
        await producer.close()
    ids += await add_jobs(queue, 10, ms=5)  # and adds go through again
    await audit(queue, r, completed=ids, tags=["a"], caplog=caplog, fleet=fleet)
    assert logged(caplog, "OutOfMemoryError")  # the worker met the full server too
