"""Worker against a real server: what one job's journey leaves in BullMQ 6.7.0's keys."""

from __future__ import annotations

import asyncio
import gc
import threading
import weakref
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
import pytest
import redis

from corral import AsyncQueue, Job, UnrecoverableError, Worker
from corral.bounds import MAX_TIMESTAMP_MS


async def drive(worker: Worker, done: Callable[[], Awaitable[bool]], timeout: float = 15) -> None:
    """Run ``worker`` until ``done()`` is true, then close it; fail on timeout."""
    task = asyncio.create_task(worker.run_async())
    deadline = asyncio.get_running_loop().time() + timeout
    try:
        while not await done():
            if task.done():
                task.result()
                raise AssertionError("worker stopped on its own")
            assert asyncio.get_running_loop().time() < deadline, "timed out"
            await asyncio.sleep(0.02)
    finally:
        await worker.close()
        await task


def idle(queue: AsyncQueue) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        counts = await queue.get_job_counts("waiting", "active", "delayed")
        return not any(counts.values())

    return check


def finished(queue: AsyncQueue, n: int) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        counts = await queue.get_job_counts("completed", "failed")
        return counts["completed"] + counts["failed"] >= n

    return check


@pytest.fixture
async def queue(redis_url: str) -> Any:
    q = AsyncQueue("q", connection=redis_url)
    yield q
    await q.close()


def events(r: redis.Redis, job_id: str) -> list[dict[str, str]]:
    return [f for _, f in r.xrange("bull:q:events", "-", "+") if f.get("jobId") == job_id]


async def test_async_processor_completes_a_job(
    queue: AsyncQueue, r: redis.Redis, redis_url: str
) -> None:
    seen: list[Job] = []

    async def process(job: Job) -> dict[str, Any]:
        seen.append(job)
        return {"echo": job.data, "ok": True}

    await queue.add("greet", {"who": "ada"})
    await drive(Worker("q", process, connection=redis_url, name="w-1"), finished(queue, 1))

    assert seen[0].token and seen[0].attempts_started == 1
    h = r.hgetall("bull:q:1")
    assert orjson.loads(h["returnvalue"]) == {"echo": {"who": "ada"}, "ok": True}
    assert (h["atm"], h["ats"], h["pb"]) == ("1", "1", "w-1")
    assert int(h["finishedOn"]) >= int(h["processedOn"]) >= int(h["timestamp"])
    assert r.zrange("bull:q:completed", 0, -1, withscores=True) == [("1", float(h["finishedOn"]))]
    assert r.llen("bull:q:active") == 0
    assert r.exists("bull:q:1:lock") == 0
    assert [e["event"] for e in events(r, "1")] == ["added", "waiting", "active", "completed"]
    completed = events(r, "1")[-1]
    assert completed["prev"] == "active"
    assert orjson.loads(completed["returnvalue"]) == {"echo": {"who": "ada"}, "ok": True}
    assert any(f == {"event": "drained"} for _, f in r.xrange("bull:q:events", "-", "+"))
    job = await queue.get_job("1")
    assert job is not None and job.returnvalue == {"echo": {"who": "ada"}, "ok": True}


async def test_plain_function_runs_in_a_thread(queue: AsyncQueue, redis_url: str) -> None:
    threads: list[str] = []

    def process(job: Job) -> int:
        threads.append(threading.current_thread().name)
        return int(job.data["n"]) * 2

    for n in range(5):
        await queue.add("double", {"n": n})
    await drive(Worker("q", process, connection=redis_url, concurrency=2), finished(queue, 5))
    assert all(name.startswith("corral-job") for name in threads)
    values = sorted([(await queue.get_job(str(i))).returnvalue for i in range(1, 6)])  # type: ignore[union-attr]
    assert values == [0, 2, 4, 6, 8]


async def test_failure_records_reason_and_stacktrace(
    queue: AsyncQueue, r: redis.Redis, redis_url: str
) -> None:
    async def process(job: Job) -> None:
        raise ValueError("card declined")

    await queue.add("charge", {"amount": 5})
    await drive(Worker("q", process, connection=redis_url), finished(queue, 1))

    h = r.hgetall("bull:q:1")
    assert h["failedReason"] == "card declined"
    stack = orjson.loads(h["stacktrace"])
    assert len(stack) == 1 and "ValueError: card declined" in stack[0]
    assert r.zscore("bull:q:failed", "1") == float(h["finishedOn"])
    assert h["atm"] == "1"
    assert [e["event"] for e in events(r, "1")][-2:] == ["failed", "retries-exhausted"]
    assert events(r, "1")[-2] == {
        "event": "failed",
        "jobId": "1",
        "failedReason": "card declined",
        "prev": "active",
    }
    assert events(r, "1")[-1]["attemptsMade"] == "1"


async def test_retry_then_success(queue: AsyncQueue, r: redis.Redis, redis_url: str) -> None:
    async def process(job: Job) -> str:
        if job.attempts_made == 0:
            raise RuntimeError("flaky")
        return "second time lucky"

    await queue.add("flaky", attempts=3)
    await drive(Worker("q", process, connection=redis_url), finished(queue, 1))
    h = r.hgetall("bull:q:1")
    assert (h["atm"], h["ats"], h["returnvalue"]) == ("2", "2", '"second time lucky"')
    assert h["failedReason"] == "flaky"  # kept from the failed attempt, as BullMQ does
    assert len(orjson.loads(h["stacktrace"])) == 1
    kinds = [e["event"] for e in events(r, "1")]
    assert kinds == ["added", "waiting", "active", "waiting", "active", "completed"]
    assert events(r, "1")[3]["prev"] == "active"
    assert r.zcard("bull:q:failed") == 0


async def test_a_retry_far_in_an_exponential_run_is_due_before_2039(
    queue: AsyncQueue, r: redis.Redis, redis_url: str
) -> None:
    """1000 ms doubled 1100 times is no float: the retry was stored as delay "inf" with an
    infinite score (and a custom strategy's infinity crashed the finish)."""

    def process(job: Job) -> None:
        raise RuntimeError("still down")

    def forever(attempts: int, delay: int, error: BaseException, job: Any) -> float:
        return float("inf")

    exponential = {"type": "exponential", "delay": 1000}
    await queue.add("far", attempts=5000, backoff=exponential)
    async with AsyncQueue("q", connection=redis_url, backoff_types=["forever"]) as custom:
        await custom.add("custom", attempts=5000, backoff={"type": "forever"})
    for job_id in ("1", "2"):
        r.hset(f"bull:q:{job_id}", "atm", 1100)
    worker = Worker("q", process, connection=redis_url, backoff_strategies={"forever": forever})
    summary = await worker.run_async(burst=True, max_jobs=2)
    assert summary.retried == 2
    for job_id, score in r.zrange("bull:q:delayed", 0, -1, withscores=True):
        delay = int(r.hget(f"bull:q:{job_id}", "delay"))  # type: ignore[arg-type]
        assert 0 < delay < MAX_TIMESTAMP_MS
        assert score <= MAX_TIMESTAMP_MS * 4096 + 4095  # a finite score, read back exactly


async def test_unrecoverable_error_skips_remaining_attempts(
    queue: AsyncQueue, r: redis.Redis, redis_url: str
) -> None:
    async def process(job: Job) -> None:
        raise UnrecoverableError("bad input")

    await queue.add("x", attempts=5)
    await drive(Worker("q", process, connection=redis_url), finished(queue, 1))
    assert r.hget("bull:q:1", "atm") == "1"
    assert r.zscore("bull:q:failed", "1") is not None


async def test_return_value_that_is_not_json_fails_the_job(
    queue: AsyncQueue, r: redis.Redis, redis_url: str
) -> None:
    async def process(job: Job) -> object:
        return {1, 2}

    await queue.add("x")
    await drive(Worker("q", process, connection=redis_url), finished(queue, 1))
    assert "not JSON serializable" in r.hget("bull:q:1", "failedReason")


class Unprintable(Exception):
    def __str__(self) -> str:
        raise ValueError("no message for you")


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        (ValueError("bad \ud800 text"), "bad \\ud800 text"),
        (Unprintable(), "Unprintable (its message cannot be read)"),
    ],
)
async def test_an_error_that_cannot_be_stored_as_is_still_fails_the_job(
    queue: AsyncQueue, r: redis.Redis, redis_url: str, error: Exception, reason: str
) -> None:
    # Such an error used to crash the worker's slot: the job stayed active until its lock
    # expired, then failed as stalled, its reason and its retries lost.
    async def process(job: Job) -> None:
        raise error

    await queue.add("x", attempts=2)
    await drive(Worker("q", process, connection=redis_url), finished(queue, 1))
    assert r.hget("bull:q:1", "failedReason") == reason
    assert r.hget("bull:q:1", "atm") == "2"  # both attempts ran: the retry was not lost


async def test_concurrency_limits_jobs_running_at_once(queue: AsyncQueue, redis_url: str) -> None:
    running = 0
    peak = 0

    async def process(job: Job) -> None:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.05)
        running -= 1

    for _ in range(20):
        await queue.add("slow")
    await drive(Worker("q", process, connection=redis_url, concurrency=4), finished(queue, 20))
    assert peak == 4


async def test_priority_and_delay_order(queue: AsyncQueue, r: redis.Redis, redis_url: str) -> None:
    order: list[str] = []

    async def process(job: Job) -> None:
        order.append(job.name)

    await queue.add("later", delay=0.3)
    await queue.add("p5", priority=5)
    await queue.add("p1", priority=1)
    await queue.add("plain")
    await drive(Worker("q", process, connection=redis_url), finished(queue, 4))
    assert order == ["plain", "p1", "p5", "later"]
    assert r.hget("bull:q:1", "delay") == "0"  # reset when promoted from delayed


async def test_remove_on_complete_deletes_the_job(
    queue: AsyncQueue, r: redis.Redis, redis_url: str
) -> None:
    async def process(job: Job) -> str:
        return "done"

    await queue.add("gone", remove_on_complete=True)
    for _ in range(4):
        await queue.add("kept", remove_on_complete=2)
    await drive(Worker("q", process, connection=redis_url), idle(queue))
    assert r.exists("bull:q:1") == 0
    assert r.zrange("bull:q:completed", 0, -1) == ["4", "5"]
    assert [r.exists(f"bull:q:{i}") for i in (2, 3, 4, 5)] == [0, 0, 1, 1]


async def test_lost_lock_refuses_the_result(
    queue: AsyncQueue, r: redis.Redis, redis_url: str
) -> None:
    started = asyncio.Event()
    release = asyncio.Event()

    async def process(job: Job) -> str:
        started.set()
        await release.wait()
        return "late"

    await queue.add("x")
    worker = Worker("q", process, connection=redis_url)
    task = asyncio.create_task(worker.run_async())
    await asyncio.wait_for(started.wait(), 10)
    # Another worker took the job over: its token now holds the lock.
    r.set("bull:q:1:lock", "someone-else:0", px=30_000)
    release.set()
    await asyncio.sleep(0.3)
    await worker.close()
    await task
    assert r.hget("bull:q:1", "returnvalue") is None
    assert r.lrange("bull:q:active", 0, -1) == ["1"]
    assert r.get("bull:q:1:lock") == "someone-else:0"


@pytest.mark.parametrize("kind", ["async", "sync"])
async def test_finished_jobs_are_freed_without_the_cycle_collector(
    queue: AsyncQueue, redis_url: str, kind: str
) -> None:
    """A job must not refer to itself (say, through a progress callback): a worker holding
    thousands of them until a GC pass spends its time in the collector."""
    refs: list[weakref.ref[Any]] = []

    async def process_async(job: Job) -> None:
        await job.update_progress(50)
        refs.append(weakref.ref(job))

    def process_sync(job: Job) -> None:
        job.update_progress(50)
        refs.append(weakref.ref(job))

    await queue.add_bulk([("j", {"i": i}) for i in range(20)])
    gc.collect()
    gc.disable()
    try:
        process = process_async if kind == "async" else process_sync
        await drive(Worker("q", process, connection=redis_url, concurrency=4), finished(queue, 20))
        await asyncio.sleep(0)
        assert len(refs) == 20
        alive = [ref() for ref in refs if ref() is not None]
        assert len(alive) <= 4, f"{len(alive)} finished jobs still alive"
    finally:
        gc.enable()
