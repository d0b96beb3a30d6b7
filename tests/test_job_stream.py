"""Streamed partial results: ``job.stream`` in a processor, ``queue.read_stream`` beside it."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
import pytest
import redis

from corral import (
    AsyncJob,
    AsyncQueue,
    InvalidOptionError,
    Job,
    JobNotFoundError,
    Queue,
    Worker,
)
from corral._async.job_stream import DEFAULT_STREAM_TTL, MAX_CHUNK_BYTES
from corral.errors import JobFinishedError, LockMismatchError, LockMissingError
from corral.stream_items import StreamEnd, StreamItem
from tests.test_queue_events_live import blocked_in_xread
from tests.test_worker import drive, finished

Read = list[StreamItem | StreamEnd]


@pytest.fixture
async def queue(redis_url: str) -> Any:
    q = AsyncQueue("q", connection=redis_url)
    yield q
    await q.close()


async def read_all(queue: AsyncQueue, job_id: str, from_id: str = "0") -> Read:
    return [item async for item in queue.read_stream(job_id, from_id)]


def chunks(items: Read) -> list[Any]:
    return [i.value for i in items if isinstance(i, StreamItem)]


async def run_jobs(
    queue: AsyncQueue, redis_url: str, process: Callable[[AsyncJob], Awaitable[Any]], n: int = 1
) -> None:
    await drive(Worker("q", process, connection=redis_url), finished(queue, n))


async def test_a_live_reader_gets_every_chunk_in_order_then_the_return_value(
    queue: AsyncQueue, redis_url: str
) -> None:
    async def process(job: AsyncJob) -> dict[str, int]:
        for i in range(50):
            await job.stream({"token": i})
        return {"n": 50}

    job = await queue.add("gen", {})
    reader = asyncio.create_task(read_all(queue, job.id))
    await blocked_in_xread(redis_url)  # the reader waits before the first chunk is written
    await run_jobs(queue, redis_url, process)
    items = await asyncio.wait_for(reader, 30)
    assert chunks(items) == [{"token": i} for i in range(50)]
    assert items[-1] == StreamEnd("completed", {"n": 50})
    ids = [i.id for i in items if isinstance(i, StreamItem)]
    assert ids == sorted(ids, key=lambda s: tuple(map(int, s.split("-"))))
    assert {i.attempt for i in items if isinstance(i, StreamItem)} == {1}


async def test_a_failure_ends_the_read_with_its_reason(queue: AsyncQueue, redis_url: str) -> None:
    async def process(job: AsyncJob) -> None:
        await job.stream("partial")
        raise ValueError("the model fell over")

    job = await queue.add("gen", {})
    reader = asyncio.create_task(read_all(queue, job.id))
    await blocked_in_xread(redis_url)
    await run_jobs(queue, redis_url, process)
    items = await asyncio.wait_for(reader, 30)
    assert chunks(items) == ["partial"]
    end = items[-1]
    assert isinstance(end, StreamEnd) and end.state == "failed" and not end.completed
    assert "the model fell over" in end.value


async def test_a_retried_attempt_is_no_end_and_its_chunks_carry_its_number(
    queue: AsyncQueue, redis_url: str
) -> None:
    async def process(job: AsyncJob) -> str:
        await job.stream(f"try {job.attempts_made + 1}")
        if job.attempts_made == 0:
            raise ValueError("flaky")
        return "ok"

    job = await queue.add("gen", {}, attempts=2)
    reader = asyncio.create_task(read_all(queue, job.id))
    await blocked_in_xread(redis_url)
    await run_jobs(queue, redis_url, process)
    items = await asyncio.wait_for(reader, 30)
    assert [(i.value, i.attempt) for i in items if isinstance(i, StreamItem)] == [
        ("try 1", 1),
        ("try 2", 2),
    ]
    assert items[-1] == StreamEnd("completed", "ok")


async def test_a_late_reader_replays_the_chunks_then_the_outcome_and_resumes_from_an_id(
    queue: AsyncQueue, redis_url: str
) -> None:
    async def process(job: AsyncJob) -> str:
        for word in ("a", "b", "c", "d", "e"):
            await job.stream(word)
        return "abcde"

    job = await queue.add("gen", {})
    await run_jobs(queue, redis_url, process)
    items = await read_all(queue, job.id)
    assert chunks(items) == ["a", "b", "c", "d", "e"]
    assert items[-1] == StreamEnd("completed", "abcde")
    third = items[2]
    assert isinstance(third, StreamItem)
    rest = await read_all(queue, job.id, from_id=third.id)
    assert chunks(rest) == ["d", "e"]  # after the id given: no repeats
    assert rest[-1] == StreamEnd("completed", "abcde")


async def test_a_reader_that_drops_and_resumes_from_its_last_id_gets_the_rest(
    queue: AsyncQueue, redis_url: str
) -> None:
    release = asyncio.Event()

    async def process(job: AsyncJob) -> str:
        await job.stream(1)
        await job.stream(2)
        await release.wait()
        await job.stream(3)
        return "done"

    job = await queue.add("gen", {})
    worker = asyncio.create_task(run_jobs(queue, redis_url, process))
    seen: list[StreamItem] = []
    async for item in queue.read_stream(job.id):
        assert isinstance(item, StreamItem)
        seen.append(item)
        if len(seen) == 2:
            break  # the connection drops mid-job
    release.set()
    rest = await read_all(queue, job.id, from_id=seen[-1].id)
    await worker
    assert [i.value for i in seen] + chunks(rest) == [1, 2, 3]
    assert rest[-1] == StreamEnd("completed", "done")


async def test_a_job_that_never_streams_ends_cleanly(queue: AsyncQueue, redis_url: str) -> None:
    async def process(job: AsyncJob) -> int:
        return 7

    job = await queue.add("quiet", {})
    reader = asyncio.create_task(read_all(queue, job.id))
    await blocked_in_xread(redis_url)
    await run_jobs(queue, redis_url, process)
    assert await asyncio.wait_for(reader, 30) == [StreamEnd("completed", 7)]


async def test_a_finish_whose_event_was_trimmed_still_ends_the_read(
    queue: AsyncQueue, redis_url: str, r: redis.Redis
) -> None:
    job = await queue.add("gen", {})
    reader = asyncio.create_task(read_all(queue, job.id))
    await blocked_in_xread(redis_url)
    # A finish that left no event (trimmed before the reader saw it): only the state says so.
    r.lrem("bull:q:wait", 0, job.id)
    r.zadd("bull:q:completed", {job.id: 1})
    r.hset(f"bull:q:{job.id}", mapping={"returnvalue": '"late"', "finishedOn": 1})
    assert await asyncio.wait_for(reader, 30) == [StreamEnd("completed", "late")]


async def test_the_stream_is_bounded_and_expires_after_its_last_chunk(
    queue: AsyncQueue, r: redis.Redis
) -> None:
    job = await queue.add("gen", {})
    for i in range(1000):
        await job.stream(i, max_len=10)
    key = f"bull:q:{job.id}:x-stream"
    # MAXLEN ~ drops whole nodes (100 entries by default): about the newest 10 stay.
    assert 10 <= r.xlen(key) <= 110
    assert r.xrevrange(key, count=1)[0][1]["v"] == "999"
    assert 0 < r.pttl(key) <= DEFAULT_STREAM_TTL * 1000
    await job.stream("last", ttl=5)
    assert 0 < r.pttl(key) <= 5000


async def test_bad_chunks_and_options_are_refused_before_anything_is_written(
    queue: AsyncQueue, r: redis.Redis
) -> None:
    job = await queue.add("gen", {})
    with pytest.raises(InvalidOptionError, match=f"over the limit of {MAX_CHUNK_BYTES}"):
        await job.stream("x" * MAX_CHUNK_BYTES)
    with pytest.raises(InvalidOptionError, match="JSON"):
        await job.stream({1, 2})
    with pytest.raises(InvalidOptionError, match="max_len"):
        await job.stream("a", max_len=0)
    with pytest.raises(InvalidOptionError, match="ttl"):
        await job.stream("a", ttl=0)
    with pytest.raises(InvalidOptionError, match="from_id"):
        await read_all(queue, job.id, from_id="later")
    with pytest.raises(InvalidOptionError, match="from_id"):
        await read_all(queue, job.id, from_id="$")
    assert not r.exists(f"bull:q:{job.id}:x-stream")


async def test_missing_and_finished_jobs(queue: AsyncQueue, redis_url: str, r: redis.Redis) -> None:
    with pytest.raises(JobNotFoundError, match="nope"):
        await read_all(queue, "nope")
    with pytest.raises(JobNotFoundError):
        await read_all(queue, "wait")  # a queue key's name is no job
    job = await queue.add("gen", {})
    await job.remove()
    with pytest.raises(JobNotFoundError):
        await job.stream("orphan")
    assert not r.exists(f"bull:q:{job.id}:x-stream")  # no orphan stream

    async def process(job: AsyncJob) -> None:
        return None

    done = await queue.add("gen", {})
    await run_jobs(queue, redis_url, process, 1)
    with pytest.raises(JobFinishedError):
        await done.stream("after the end")


async def test_an_attempt_that_lost_its_lock_streams_nothing(
    queue: AsyncQueue, redis_url: str, r: redis.Redis
) -> None:
    await queue.add("gen", {})
    worker = Worker("q", None, connection=redis_url)
    try:
        job = await worker.get_next_job()
        assert job is not None
        await job.stream("mine")
        r.set(f"bull:q:{job.id}:lock", "another-worker")  # stalled, then taken elsewhere
        with pytest.raises(LockMismatchError):
            await job.stream("stale")
        r.delete(f"bull:q:{job.id}:lock")
        with pytest.raises(LockMissingError):
            await job.stream("stale")
        entries = r.xrange(f"bull:q:{job.id}:x-stream")
        assert [orjson.loads(fields["v"]) for _, fields in entries] == ["mine"]
    finally:
        await worker.close()


@pytest.mark.parametrize("how", ["remove", "remove_on_complete", "clean", "obliterate"])
async def test_the_stream_goes_with_the_job(
    queue: AsyncQueue, redis_url: str, r: redis.Redis, how: str
) -> None:
    async def process(job: AsyncJob) -> str:
        await job.stream("chunk")
        assert r.exists(f"bull:q:{job.id}:x-stream")
        return "ok"

    opts: dict[str, Any] = {"remove_on_complete": True} if how == "remove_on_complete" else {}
    job = await queue.add("gen", {}, **opts)
    reader = asyncio.create_task(read_all(queue, job.id))
    await blocked_in_xread(redis_url)

    async def read() -> bool:
        return reader.done()

    await drive(Worker("q", process, connection=redis_url), read)
    # A live reader ends even when the job is gone the moment it completed.
    assert reader.result() == [
        StreamItem(reader.result()[0].id, "chunk", 1),
        StreamEnd("completed", "ok"),
    ]
    if how == "remove":
        await job.remove()
    elif how == "clean":
        assert await queue.clean(0, 0) == [job.id]
    elif how == "obliterate":
        await queue.obliterate()
    assert not r.exists(f"bull:q:{job.id}")
    assert not r.exists(f"bull:q:{job.id}:x-stream")


def test_sync_processor_and_sync_reader(redis_url: str) -> None:
    def process(job: Job) -> str:
        for word in ("x", "y"):
            job.stream(word)
        return "xy"

    with Queue("q", connection=redis_url) as queue:
        job = queue.add("gen", {})
        worker = Worker("q", process, connection=redis_url)

        async def run() -> None:
            async with AsyncQueue("q", connection=redis_url) as aq:
                await drive(worker, finished(aq, 1))

        asyncio.run(run())
        items = list(queue.read_stream(job.id))
    assert chunks(items) == ["x", "y"]
    assert items[-1] == StreamEnd("completed", "xy")


async def test_a_job_gone_at_its_finish_ends_with_its_event(
    queue: AsyncQueue, r: redis.Redis
) -> None:
    # The state poll found no job (removeOnComplete took it) but its event came after the
    # reader's position: the event says how it ended, rather than JobNotFoundError.
    r.xadd("bull:q:events", {"event": "added", "jobId": "9"})
    start = r.xrevrange("bull:q:events", count=1)[0][0]
    r.xadd("bull:q:events", {"event": "completed", "jobId": "8", "returnvalue": "1"})
    r.xadd("bull:q:events", {"event": "completed", "jobId": "9", "returnvalue": '{"a":1}'})
    assert await queue._stream_end("9", start) == StreamEnd("completed", {"a": 1})
    with pytest.raises(JobNotFoundError):
        await queue._stream_end("9", r.xrevrange("bull:q:events", count=1)[0][0])
