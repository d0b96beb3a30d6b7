"""Dead-letter queues: a job that fails for good with a DLQ is copied there once, with its
whole history, whatever failed it (its processor, a cancel, too many stalls, undecodable data),
and whoever copies it (the worker that failed it, or any other after that one died).

The record that drives the copy is written by the scripts that fail a job
(``_lua/include/dead_letter.lua``); each guard there has a test here that fails without it.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
import redis

from corral import (
    AsyncQueue,
    AsyncShardedQueue,
    InvalidOptionError,
    JobNotFoundError,
    Worker,
    _scripts,
)
from corral._async.dead_letter_queue import AsyncDeadLetterQueue, copy_dead_letters
from corral.errors import UnrecoverableError


def fails(job: Any) -> None:
    raise RuntimeError(f"card declined (attempt {job.attempts_made + 1})")


async def until(check: Callable[[], Awaitable[bool]], what: str) -> None:
    """Wait until ``check()`` holds (a condition, not a sleep: it gives up after 10 s)."""
    for _ in range(1000):
        if await check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
async def orders(redis_url: str) -> AsyncIterator[AsyncQueue]:
    queue = AsyncQueue("orders", connection=redis_url, dead_letter_queue="orders-dead")
    yield queue
    await queue.close()


@pytest.fixture
async def dlq(redis_url: str) -> AsyncIterator[AsyncDeadLetterQueue]:
    dead = AsyncDeadLetterQueue("orders-dead", connection=redis_url)
    yield dead
    await dead.close()


def pending(r: redis.Redis, queue: str = "orders") -> dict[str, str]:
    """The dead letters of ``queue`` not copied yet (the numbering counter left out)."""
    records: dict[str, str] = r.hgetall(f"bull:{queue}:x-dlq")  # type: ignore[assignment]
    return {k: v for k, v in records.items() if k != "#"}


async def fail_by_hand(redis_url: str, queue: str, *, worker_dlq: str = "") -> str:
    """Fetch one job of ``queue`` and fail it for good with a bare finish script call, as a
    worker does before it copies the dead letter: the record stays pending (a worker that
    died right after its finish)."""
    worker = Worker(queue, None, connection=redis_url)
    try:
        job = await worker.get_next_job()
        assert job is not None
        fetch = _scripts.FetchNext(0, "", 0, 0, dead_letter_queue=worker_dlq)
        await job.move_to_failed(UnrecoverableError("gone for good"), fetch=fetch)
        return job.id
    finally:
        await worker.close()


async def test_a_final_failure_is_copied_with_its_whole_history(
    redis_url: str, r: redis.Redis, orders: AsyncQueue, dlq: AsyncDeadLetterQueue
) -> None:
    job = await orders.add(
        "charge", {"amount": 5}, attempts=2, remove_on_fail=True, job_id="order-7"
    )
    await job.log("charging")
    await Worker("orders", fails, connection=redis_url).run_async(burst=True)

    letters = await dlq.get_dead_letters()
    assert [(d.id, d.queue, d.job_id, d.name) for d in letters] == [
        ("orders-1", "orders", "order-7", "charge")
    ]
    letter = letters[0]
    assert letter.failed_reason == "card declined (attempt 2)"
    assert letter.attempts_made == 2
    data = letter.data
    assert data["data"] == {"amount": 5}
    assert data["opts"]["attempts"] == 2 and data["opts"]["x-dlq"] == "orders-dead"
    # Every attempt's stack, the first failure's reason included.
    assert len(data["stacktrace"]) == 2
    assert "card declined (attempt 1)" in data["stacktrace"][0]
    assert data["attemptsStarted"] == 2 and data["logs"] == ["charging"]
    assert data["timestamp"] <= data["processedOn"] <= data["finishedOn"] <= data["deadLetteredAt"]
    # removeOnFail deleted the job right after: the record was taken before it did.
    assert not r.exists("bull:orders:order-7")
    assert pending(r) == {}
    # The DLQ job is an ordinary waiting job of an ordinary queue.
    assert r.lrange("bull:orders-dead:wait", 0, -1) == ["orders-1"]


async def test_a_job_without_a_dead_letter_queue_leaves_no_record(
    redis_url: str, r: redis.Redis
) -> None:
    async with AsyncQueue("plain", connection=redis_url) as queue:
        await queue.add("j", attempts=1)
    await Worker("plain", fails, connection=redis_url).run_async(burst=True)
    assert r.zcard("bull:plain:failed") == 1
    assert not r.exists("bull:plain:x-dlq")


async def test_a_sharded_queue_gives_every_shard_its_dead_letter_queue(
    redis_url: str, dlq: AsyncDeadLetterQueue
) -> None:
    async with AsyncShardedQueue(
        "orders", shards=2, connection=redis_url, dead_letter_queue="orders-dead"
    ) as queue:
        jobs = [await queue.add("charge", {"i": i}, attempts=1) for i in range(4)]
        assert len({queue.shard_index(job.id) for job in jobs}) == 2
    await Worker("orders", fails, shards=2, connection=redis_url).run_async(burst=True)
    letters = await dlq.get_dead_letters()
    assert sorted(d.job_id for d in letters) == sorted(job.id for job in jobs)


async def test_a_retried_attempt_leaves_no_record(
    redis_url: str, r: redis.Redis, orders: AsyncQueue
) -> None:
    await orders.add("charge", attempts=3, backoff=3600)
    worker = Worker("orders", None, connection=redis_url)
    job = await worker.get_next_job()
    assert job is not None
    await job.move_to_failed(RuntimeError("try again"))
    assert await job.get_state() == "delayed"
    await worker.close()
    assert not r.exists("bull:orders:x-dlq")


async def test_the_jobs_own_queue_wins_over_the_workers(redis_url: str, r: redis.Redis) -> None:
    async with AsyncQueue("mixed", connection=redis_url) as queue:
        plain = await queue.add("a")
        own = await queue.add("b", dead_letter_queue="b-dead")
    await Worker("mixed", fails, connection=redis_url, dead_letter_queue="w-dead").run_async(
        burst=True
    )
    async with AsyncDeadLetterQueue("w-dead", connection=redis_url) as w_dead:
        assert [d.job_id for d in await w_dead.get_dead_letters()] == [plain.id]
    async with AsyncDeadLetterQueue("b-dead", connection=redis_url) as b_dead:
        assert [d.job_id for d in await b_dead.get_dead_letters()] == [own.id]


async def test_a_manual_finish_uses_the_dead_letter_queue_of_its_fetch(
    redis_url: str, r: redis.Redis
) -> None:
    async with AsyncQueue("manual", connection=redis_url) as queue:
        await queue.add("j")
    job_id = await fail_by_hand(redis_url, "manual", worker_dlq="m-dead")
    [record] = pending(r, "manual").values()
    assert json.loads(record)["q"] == "m-dead" and json.loads(record)["id"] == job_id


async def test_a_job_stalled_too_often_is_dead_lettered_at_fetch(
    redis_url: str, r: redis.Redis
) -> None:
    async with AsyncQueue("stally", connection=redis_url) as queue:
        job = await queue.add("j")
    r.hset(f"bull:stally:{job.id}", "stc", 2)  # recovered from two stalls already
    ran: list[str] = []
    worker = Worker(
        "stally", ran.append, connection=redis_url, max_stalled_count=1, dead_letter_queue="s-dead"
    )
    await worker.run_async(burst=True)
    assert ran == []
    async with AsyncDeadLetterQueue("s-dead", connection=redis_url) as s_dead:
        [letter] = await s_dead.get_dead_letters()
    assert letter.job_id == job.id
    assert letter.failed_reason == "job stalled more than allowable limit"
    assert letter.data["stalledCounter"] == 2


async def test_a_cancelled_job_is_copied_by_the_cancel(
    redis_url: str, r: redis.Redis, orders: AsyncQueue, dlq: AsyncDeadLetterQueue
) -> None:
    job = await orders.add("charge", {"amount": 1}, delay=3600)
    await orders.cancel(job.id, "customer left")
    [letter] = await dlq.get_dead_letters()
    assert (letter.job_id, letter.failed_reason) == (job.id, "cancelled: customer left")
    assert letter.attempts_made == 0
    assert pending(r) == {}


async def test_undecodable_data_is_kept_as_its_text_and_replayed_as_it_was(
    redis_url: str, r: redis.Redis, orders: AsyncQueue, dlq: AsyncDeadLetterQueue
) -> None:
    job = await orders.add("charge", {"ok": True})
    r.hset(f"bull:orders:{job.id}", "data", '{"s":"\\ud800"}')  # a lone surrogate, as Node can
    await Worker("orders", fails, connection=redis_url).run_async(burst=True)
    [letter] = await dlq.get_dead_letters()
    assert letter.failed_reason is not None and "cannot be decoded" in letter.failed_reason
    assert letter.data["data"] is None and letter.data["dataText"] == '{"s":"\\ud800"}'
    replay = await dlq.replay(letter.id)
    assert r.hget(f"bull:orders:{replay.job_id}", "data") == '{"s":"\\ud800"}'


async def test_a_job_dead_lettered_twice_gives_two_dead_letters(
    redis_url: str, r: redis.Redis, orders: AsyncQueue, dlq: AsyncDeadLetterQueue
) -> None:
    job = await orders.add("charge")
    await Worker("orders", fails, connection=redis_url).run_async(burst=True)
    await job.retry()
    await Worker("orders", fails, connection=redis_url).run_async(burst=True)
    letters = await dlq.get_dead_letters()
    assert [(d.id, d.job_id, d.attempts_made) for d in letters] == [
        ("orders-1", job.id, 1),
        ("orders-2", job.id, 2),
    ]


# -- the fault: a worker that dies between failing the job and copying it -------------------


async def test_a_record_left_by_a_dead_worker_is_copied_exactly_once(
    redis_url: str, r: redis.Redis, orders: AsyncQueue, dlq: AsyncDeadLetterQueue
) -> None:
    await orders.add("charge", {"amount": 3})
    job_id = await fail_by_hand(redis_url, "orders")
    assert len(pending(r)) == 1 and await dlq.count() == 0  # failed, not copied

    # Two sweepers at once (two workers starting), then one more.
    copied = await asyncio.gather(copy_dead_letters(orders), copy_dead_letters(orders))
    assert sum(copied) >= 1
    await copy_dead_letters(orders)
    assert [d.job_id for d in await dlq.get_dead_letters()] == [job_id]
    assert pending(r) == {}


async def test_a_copy_sent_again_after_its_add_landed_adds_nothing(
    redis_url: str, r: redis.Redis, orders: AsyncQueue, dlq: AsyncDeadLetterQueue
) -> None:
    await orders.add("charge")
    await fail_by_hand(redis_url, "orders")
    record = pending(r)
    await copy_dead_letters(orders)
    # The copier died after the add, before its HDEL: the record is still there.
    r.hset("bull:orders:x-dlq", mapping=record)
    await copy_dead_letters(orders)
    assert await dlq.count() == 1 and pending(r) == {}
    # Even when the DLQ job was deleted in between (within the copy's idempotency window).
    r.hset("bull:orders:x-dlq", mapping=record)
    await dlq.queue.remove("orders-1")
    await copy_dead_letters(orders)
    assert await dlq.count() == 0 and pending(r) == {}


async def test_a_worker_copies_what_a_dead_worker_left_when_it_starts(
    redis_url: str, r: redis.Redis, orders: AsyncQueue, dlq: AsyncDeadLetterQueue
) -> None:
    await orders.add("charge")
    await fail_by_hand(redis_url, "orders")
    worker = Worker("orders", fails, connection=redis_url)
    task = asyncio.create_task(worker.run_async())
    try:
        await until(lambda: _count(dlq, 1), "the dead letter in the DLQ")
    finally:
        await worker.close()
        await task
    assert pending(r) == {}


async def _count(dlq: AsyncDeadLetterQueue, n: int) -> bool:
    return await dlq.count() == n


async def test_an_unreadable_record_is_left_and_the_others_copied(
    redis_url: str, r: redis.Redis, orders: AsyncQueue, dlq: AsyncDeadLetterQueue, caplog: Any
) -> None:
    await orders.add("charge")
    await fail_by_hand(redis_url, "orders")
    r.hset("bull:orders:x-dlq", "999", "not json")
    with caplog.at_level(logging.ERROR, logger="corral.dead_letter"):
        assert await copy_dead_letters(orders) == 1
    assert pending(r) == {"999": "not json"}
    assert await dlq.count() == 1
    assert "dead letter 999 not copied" in caplog.text


# -- replay and purge ------------------------------------------------------------------------


async def test_replay_adds_the_job_back_once_and_links_both_ways(
    redis_url: str, r: redis.Redis, orders: AsyncQueue, dlq: AsyncDeadLetterQueue
) -> None:
    await orders.add(
        "charge",
        {"amount": 9},
        job_id="order-9",
        attempts=2,
        priority=3,
        deduplication={"id": "order-9"},
        timeout=30,
    )
    await Worker("orders", fails, connection=redis_url).run_async(burst=True)
    [letter] = await dlq.get_dead_letters()

    replay = await dlq.replay(letter.id)
    assert (replay.id, replay.queue, replay.already) == (letter.id, "orders", False)
    new = await orders.get_job(replay.job_id)
    assert new is not None and new.id != "order-9"
    assert (new.name, new.data, new.priority) == ("charge", {"amount": 9}, 3)
    # The first run's options, less its id and deduplication id; the link to the DLQ job.
    assert "jobId" not in new.opts and "de" not in new.opts
    assert new.opts["attempts"] == 2 and new.opts["x-timeout"] == 30_000
    assert new.opts["x-dlq"] == "orders-dead"
    assert new.opts["x-replay-of"] == {"queue": "orders-dead", "id": letter.id, "jobId": "order-9"}
    # The DLQ job names the new one (a field, and a log line for bull-board).
    assert (await dlq.get_dead_letter(letter.id)).replayed_as == new.id  # type: ignore[union-attr]
    assert r.lrange(f"bull:orders-dead:{letter.id}:logs", 0, -1) == [
        f"replayed as job {new.id} of queue orders"
    ]
    # Once only.
    again = await dlq.replay(letter.id)
    assert (again.job_id, again.already) == (new.id, True)
    assert await orders.count() == 1


async def test_a_replay_sent_again_before_its_link_was_written_adds_nothing(
    redis_url: str, r: redis.Redis, orders: AsyncQueue, dlq: AsyncDeadLetterQueue
) -> None:
    await orders.add("charge")
    await Worker("orders", fails, connection=redis_url).run_async(burst=True)
    first = await dlq.replay("orders-1")
    r.hdel("bull:orders-dead:orders-1", "x-replayed")  # as if it died before the link
    second = await dlq.replay("orders-1")
    assert second.job_id == first.job_id and await orders.count() == 1


async def test_the_replay_link_is_not_written_on_a_purged_job(
    redis_url: str, r: redis.Redis, dlq: AsyncDeadLetterQueue
) -> None:
    note = _scripts.load("note_replay")
    assert await dlq.queue._run(note, [dlq.queue._job_prefix, "gone-1", "5", "line"]) == 0
    assert r.keys("bull:orders-dead:*") == []


async def test_replay_errors_name_the_job(
    redis_url: str, orders: AsyncQueue, dlq: AsyncDeadLetterQueue
) -> None:
    with pytest.raises(JobNotFoundError, match="no job nope in dead-letter queue orders-dead"):
        await dlq.replay("nope")
    await dlq.queue.add("by-hand", {"x": 1}, job_id="hand")
    with pytest.raises(InvalidOptionError, match="job hand is not a dead letter"):
        await dlq.replay("hand")


async def test_replay_all_then_purge(
    redis_url: str, r: redis.Redis, orders: AsyncQueue, dlq: AsyncDeadLetterQueue
) -> None:
    for i in range(3):
        await orders.add("charge", {"i": i})
    await Worker("orders", fails, connection=redis_url).run_async(burst=True)
    await dlq.replay("orders-2")
    done = await dlq.replay_all()
    assert [(d.id, d.already) for d in done] == [
        ("orders-1", False),
        ("orders-2", True),
        ("orders-3", False),
    ]
    assert r.llen("bull:orders:wait") == 3
    await dlq.queue.add("by-hand", job_id="hand")
    assert await dlq.purge(replayed_only=True) == 3
    assert await dlq.count() == 1
    assert await dlq.purge() == 1
    assert r.keys("bull:orders-dead:*") == []


# -- bad input ---------------------------------------------------------------------------------


async def test_a_dead_letter_queue_must_be_another_queue(redis_url: str) -> None:
    with pytest.raises(InvalidOptionError, match="dead_letter_queue must be another queue"):
        AsyncQueue("q", connection=redis_url, dead_letter_queue="q")
    with pytest.raises(InvalidOptionError, match="dead_letter_queue must be another queue"):
        Worker("q", fails, connection=redis_url, dead_letter_queue="q")
    async with AsyncQueue("q", connection=redis_url) as queue:
        with pytest.raises(InvalidOptionError, match="dead_letter_queue must be another queue"):
            await queue.add("j", dead_letter_queue="q")
        with pytest.raises(InvalidOptionError, match="dead_letter_queue must not contain ':'"):
            await queue.add("j", dead_letter_queue="a:b")
        with pytest.raises(InvalidOptionError, match="dead_letter_queue must be a non-empty"):
            await queue.add("j", dead_letter_queue="")  # type: ignore[typeddict-item]
        assert await queue.count() == 0
