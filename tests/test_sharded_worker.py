"""Worker(shards=N) against a real server: it consumes every shard, shares its concurrency
among them in turn, keeps each shard's order, and refuses what it cannot do."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from corral import AsyncJob, AsyncShardedQueue, ConfigurationError, InvalidOptionError, Worker
from corral._sharded_worker import ShardedWorker
from tests.faults.harness import eventually


@pytest.fixture
async def queue(redis_url: str) -> AsyncIterator[AsyncShardedQueue]:
    q = AsyncShardedQueue("orders", shards=3, connection=redis_url)
    yield q
    await q.close()


def ids_in(queue: AsyncShardedQueue, shard: int, n: int, stem: str) -> list[str]:
    """``n`` custom ids that fall in ``shard``, in order."""
    found: list[str] = []
    i = 0
    while len(found) < n:
        if queue.shard_index(f"{stem}-{i}") == shard:
            found.append(f"{stem}-{i}")
        i += 1
    return found


async def test_a_sharded_worker_drains_every_shard(
    queue: AsyncShardedQueue, redis_url: str
) -> None:
    await queue.add_bulk([("x", {"i": i}) for i in range(30)])
    seen: list[tuple[str, int]] = []

    async def process(job: AsyncJob) -> int:
        seen.append((job.queue_name, job.data["i"]))
        return int(job.data["i"]) * 2

    worker = Worker("orders", process, connection=redis_url, shards=3, concurrency=4)
    assert isinstance(worker, ShardedWorker) and worker.concurrency == 4
    summary = await worker.run_async(burst=True)
    assert (summary.completed, summary.stopped) == (30, "drained")
    assert sorted(i for _, i in seen) == list(range(30))
    assert {name for name, _ in seen} == {q.name for q in queue.queues}
    counts = await queue.get_job_counts("completed", "waiting", "active")
    assert counts == {"completed": 30, "waiting": 0, "active": 0}
    completed = await queue.get_completed()
    assert sorted(job.returnvalue for job in completed) == [2 * i for i in range(30)]


async def test_each_shard_keeps_its_order(queue: AsyncShardedQueue, redis_url: str) -> None:
    added = [await queue.add("x", {"i": i}) for i in range(24)]
    order: list[str] = []
    worker = Worker("orders", lambda job: order.append(job.id), connection=redis_url, shards=3)
    await worker.run_async(burst=True)
    for shard in queue.queues:
        mine = [job.id for job in added if job.queue_name == shard.name]
        assert [i for i in order if i in mine] == mine  # FIFO within the shard


async def test_a_busy_shard_does_not_starve_a_trickling_one(
    queue: AsyncShardedQueue, redis_url: str
) -> None:
    busy = ids_in(queue, 0, 300, "busy")
    await queue.add_bulk([("busy", None, {"job_id": i}) for i in busy])
    done: list[str] = []
    # Where the trickling jobs were added and where they ended, in the order of completions.
    added_at: dict[str, int] = {}

    async def process(job: AsyncJob) -> None:
        await asyncio.sleep(0.002)  # a job takes a little while: completions come in turns
        done.append(job.id)

    worker = Worker("orders", process, connection=redis_url, shards=3, concurrency=2)
    task = asyncio.create_task(worker.run_async())
    try:
        await eventually(lambda: len(done) >= 20, "the busy shard's first jobs")
        for trickle in ids_in(queue, 1, 5, "trickle"):
            await queue.add("trickle", job_id=trickle)
            added_at[trickle] = len(done)
            await eventually(lambda t=trickle: t in done, f"{trickle} done")  # type: ignore[misc]
        waited = {t: done.index(t) - added_at[t] for t in added_at}
        # Each trickling job ran after a handful of the busy shard's, not after all of them.
        assert max(waited.values()) <= 20, waited
        assert len([i for i in done if i.startswith("busy")]) < 200
    finally:
        await worker.close()
        await task


async def test_concurrency_is_shared_by_the_shards(
    queue: AsyncShardedQueue, redis_url: str
) -> None:
    await queue.add_bulk([("x", None)] * 40)
    running = 0
    most = 0
    gate = asyncio.Event()

    async def process(job: AsyncJob) -> None:
        nonlocal running, most
        running += 1
        most = max(most, running)
        if most >= 3:
            gate.set()
        await gate.wait()
        await asyncio.sleep(0)
        running -= 1

    worker = Worker("orders", process, connection=redis_url, shards=3, concurrency=3)
    summary = await worker.run_async(burst=True)
    assert summary.completed == 40
    assert most == 3  # all the slots were used, and never more (each shard alone could)


async def test_max_jobs_counts_over_the_shards(queue: AsyncShardedQueue, redis_url: str) -> None:
    await queue.add_bulk([("x", None)] * 30)
    worker = Worker("orders", lambda job: None, connection=redis_url, shards=3, concurrency=2)
    summary = await worker.run_async(max_jobs=7)
    assert (summary.completed, summary.stopped) == (7, "max_jobs")
    counts = await queue.get_job_counts("completed", "waiting", "active")
    assert counts == {"completed": 7, "waiting": 23, "active": 0}


async def test_changing_concurrency_while_running(queue: AsyncShardedQueue, redis_url: str) -> None:
    await queue.add_bulk([("x", None)] * 60)
    running = 0
    most = 0
    release = asyncio.Event()

    async def process(job: AsyncJob) -> None:
        nonlocal running, most
        running += 1
        most = max(most, running)
        await release.wait()
        running -= 1

    worker = Worker("orders", process, connection=redis_url, shards=3, concurrency=1)
    task = asyncio.create_task(worker.run_async(burst=True))
    try:
        await eventually(lambda: running == 1, "one job running")
        worker.concurrency = 5
        await eventually(lambda: running == 5, "five jobs running")
        release.set()
        summary = await task
    finally:
        release.set()
        await worker.close()
    assert summary.completed == 60 and most == 5


async def test_get_next_job_asks_the_shards_in_turn(
    queue: AsyncShardedQueue, redis_url: str
) -> None:
    await queue.add_bulk([("x", None)] * 6)
    worker = Worker("orders", None, connection=redis_url, shards=3)
    try:
        taken = [await worker.get_next_job() for _ in range(3)]
        assert {job.queue_name for job in taken if job is not None} == {
            q.name for q in queue.queues
        }
        for job in taken:
            assert job is not None
            await job.move_to_completed("ok")
        assert (await queue.get_job_counts("completed"))["completed"] == 3
    finally:
        await worker.close()


async def test_another_count_of_shards_stops_the_worker(
    queue: AsyncShardedQueue, redis_url: str
) -> None:
    await queue.add("x")
    worker = Worker("orders", lambda job: None, connection=redis_url, shards=2)
    with pytest.raises(ConfigurationError, match=r"made for 3 shards.*shards=2"):
        await worker.run_async(burst=True)
    assert (await queue.get_job_counts("waiting"))["waiting"] == 1


@pytest.mark.parametrize(
    ("settings", "error"),
    [
        ({"limiter": {"max": 10, "duration": 1}}, "a rate limit counts per shard"),
        ({"processes": 2}, "processes with shards=3"),
        ({"prefix": "{bull}"}, "has a hash tag"),
    ],
)
def test_what_a_sharded_worker_refuses(settings: dict[str, Any], error: str) -> None:
    with pytest.raises(InvalidOptionError, match=error):
        Worker("orders", "tests.test_sharded_worker:ids_in", shards=3, **settings)


async def test_a_sharded_queue_name_needs_its_count(queue: AsyncShardedQueue) -> None:
    for shards in (1, 2):
        with pytest.raises(InvalidOptionError, match=r"has 3 shards.*give shards=3"):
            Worker(queue.name, lambda job: None, shards=shards)
    assert isinstance(Worker(queue.name, lambda job: None, shards=3), ShardedWorker)


def test_one_shard_is_the_plain_worker() -> None:
    worker = Worker("orders", lambda job: None, shards=1)
    assert type(worker) is Worker and worker.queue_name == "orders"

    class Mine(Worker):
        pass

    with pytest.raises(InvalidOptionError, match="needs the class Worker itself"):
        Mine("orders", lambda job: None, shards=3)
