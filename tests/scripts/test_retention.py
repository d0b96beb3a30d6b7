"""Keep-last-N retention (``remove_on_complete=N``) on a finished set far larger than N."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import redis

from corral import AsyncQueue, Worker


@pytest.fixture
async def queue(redis_url: str) -> AsyncIterator[AsyncQueue]:
    q = AsyncQueue("rt", connection=redis_url)
    yield q
    await q.close()


def seed_completed(r: redis.Redis, count: int) -> None:
    """``count`` completed jobs ``old-<i>``, finished at ``i`` ms (oldest first)."""
    pipe = r.pipeline(transaction=False)
    for i in range(count):
        pipe.hset(f"bull:rt:old-{i}", mapping={"name": "n", "data": "{}", "finishedOn": i})
        pipe.zadd("bull:rt:completed", {f"old-{i}": i})
    pipe.execute()


async def finish_one(queue: AsyncQueue, worker: Worker) -> str:
    job = await queue.add("new", remove_on_complete=10)
    taken = await worker.get_next_job()
    assert taken is not None and taken.id == job.id
    await taken.move_to_completed("ok")
    return job.id


async def test_keep_last_removes_the_oldest_surplus_a_hundred_per_finish(
    queue: AsyncQueue, r: redis.Redis, redis_url: str
) -> None:
    seed_completed(r, 250)
    worker = Worker("rt", None, connection=redis_url)
    try:
        first = await finish_one(queue, worker)
        # 251 finished, 10 to keep: the 100 oldest go (at most 100 per finish).
        assert r.zcard("bull:rt:completed") == 151
        assert r.exists("bull:rt:old-99") == 0 and r.exists("bull:rt:old-100") == 1
        assert r.zrange("bull:rt:completed", 0, 0) == ["old-100"]
        new = [first, await finish_one(queue, worker), await finish_one(queue, worker)]
        # The newest ten are kept: the three just finished and the seven newest before them.
        kept = r.zrange("bull:rt:completed", 0, -1)
        assert kept == [f"old-{i}" for i in range(243, 250)] + new
        assert r.exists(*(f"bull:rt:{job_id}" for job_id in kept)) == 10
        assert sorted(int(k.rsplit("-", 1)[1]) for k in r.scan_iter("bull:rt:old-*")) == list(
            range(243, 250)
        )
    finally:
        await worker.close()
