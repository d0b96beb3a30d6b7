"""Workers advancing job schedulers: each iteration taken creates the next one."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from itertools import pairwise
from typing import Any

import pytest
import redis

from corral import AsyncJob, AsyncQueue, Job, Worker, clock
from tests.test_worker import drive


@pytest.fixture
async def queue(redis_url: str) -> AsyncIterator[AsyncQueue]:
    q = AsyncQueue("q", connection=redis_url)
    yield q
    await q.close()


def run_ms(job_id: str) -> int:
    return int(job_id.rsplit(":", 1)[1])


async def test_get_next_job_creates_the_next_iteration(
    queue: AsyncQueue, r: redis.Redis, redis_url: str
) -> None:
    now = clock.now_ms()
    await queue.upsert_job_scheduler("ev", every=60, template=("t", {"n": 1}), now_ms=now)
    worker = Worker("q", None, connection=redis_url)
    try:
        job = await worker.get_next_job()
        assert job is not None and job.id == f"repeat:ev:{now}"
        assert job.repeat_job_key == "ev"
        nxt = f"repeat:ev:{now + 60_000}"
        assert r.zrange("bull:q:delayed", 0, -1) == [nxt]
        assert r.hget(f"bull:q:{nxt}", "rjk") == "ev"
        assert r.hget(f"bull:q:{nxt}", "data") == '{"n":1}'
        assert r.zscore("bull:q:repeat", "ev") == now + 60_000
        assert r.hget("bull:q:repeat:ev", "ic") == "2"
        await job.move_to_completed("ok")
    finally:
        await worker.close()


@pytest.mark.parametrize("kind", ["async", "sync"])
async def test_worker_runs_every_iteration_once(
    queue: AsyncQueue, r: redis.Redis, redis_url: str, kind: str
) -> None:
    seen: list[tuple[str, Any]] = []

    async def async_proc(job: AsyncJob) -> int:
        seen.append((job.id, job.data))
        return len(seen)

    def sync_proc(job: Job) -> int:
        seen.append((job.id, job.data))
        return len(seen)

    await queue.upsert_job_scheduler("ev", every=0.2, template=("tick", {"k": kind}))
    worker = Worker("q", async_proc if kind == "async" else sync_proc, connection=redis_url)

    async def four_done() -> bool:
        return len(seen) >= 4

    await drive(worker, four_done)
    ids = [job_id for job_id, _ in seen]
    assert len(set(ids)) == len(ids)
    assert all(data == {"k": kind} for _, data in seen)
    # Runs keep the scheduler's phase: whole multiples of every apart (one apart unless the
    # worker took one late, when the missed runs are skipped).
    gaps = [b - a for a, b in pairwise(map(run_ms, ids))]
    assert all(gap > 0 and gap % 200 == 0 for gap in gaps)
    # One pending iteration is left, the one the scheduler is scored at.
    pending = r.zrange("bull:q:delayed", 0, -1) + r.lrange("bull:q:wait", 0, -1)
    assert pending == [f"repeat:ev:{int(r.zscore('bull:q:repeat', 'ev') or 0)}"]


async def test_removed_scheduler_stops(queue: AsyncQueue, r: redis.Redis, redis_url: str) -> None:
    seen: list[str] = []

    async def proc(job: AsyncJob) -> None:
        seen.append(job.id)
        if len(seen) == 2:
            await job.queue.remove_job_scheduler("ev")  # type: ignore[attr-defined]

    await queue.upsert_job_scheduler("ev", every=0.1)
    worker = Worker("q", proc, connection=redis_url)

    async def two_done() -> bool:
        return len(seen) >= 2

    await drive(worker, two_done)
    await asyncio.sleep(0.3)
    assert len(seen) == 2
    assert r.exists("bull:q:repeat", "bull:q:repeat:ev") == 0
    assert r.zcard("bull:q:completed") == 2
    assert r.zcard("bull:q:delayed") == 0 and r.llen("bull:q:wait") == 0
