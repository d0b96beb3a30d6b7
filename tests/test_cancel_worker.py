"""Remote cancel, the worker's side: a job cancelled while a worker runs it is stopped where it
runs and failed for good; a request the worker missed (its connection was down) is found when
it subscribes again; a job fetched with a cancel request fails without running."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import Any

import pytest
import redis

from corral import AsyncJob, AsyncQueue, Job, JobState, Worker
from tests.faults.harness import eventually
from tests.test_worker import drive, finished


@pytest.fixture
async def queue(redis_url: str) -> Any:
    q = AsyncQueue("q", connection=redis_url)
    yield q
    await q.close()


def cancel_from_another_process(redis_url: str, job_id: str, reason: str) -> str:
    """``Queue("q").cancel(job_id, reason)`` in a process of its own; what it returned."""
    code = (
        "import sys; from corral import Queue\n"
        "with Queue('q', connection=sys.argv[1]) as q: print(q.cancel(sys.argv[2], sys.argv[3]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, redis_url, job_id, reason],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return done.stdout.strip()


async def wait_for_state(queue: AsyncQueue, job_id: str, state: str) -> None:
    async def there() -> bool:
        return await queue.get_job_state(job_id) == state

    await eventually(there, f"job {job_id} {state}")


seen: list[str] = []


async def waits_async(job: AsyncJob) -> None:
    try:
        await asyncio.sleep(3600)
    except asyncio.CancelledError:
        seen.append("cancelled")
        raise


def waits_thread(job: Job) -> None:
    try:
        while True:
            sum(range(10))
    except BaseException as exc:
        seen.append(type(exc).__name__)
        raise


@pytest.mark.parametrize("body", [waits_async, waits_thread], ids=["async", "thread"])
async def test_an_active_job_cancelled_from_another_process_is_stopped_and_not_retried(
    queue: AsyncQueue, redis_url: str, body: Callable[[Any], Any]
) -> None:
    seen.clear()
    job = await queue.add("long", {}, attempts=5)
    worker = Worker("q", body, connection=redis_url)
    task = asyncio.create_task(worker.run_async())
    try:
        await wait_for_state(queue, job.id, "active")
        assert cancel_from_another_process(redis_url, job.id, "no longer needed") == "active"
        await wait_for_state(queue, job.id, "failed")
    finally:
        await worker.close()
        await task
    done = await queue.get_job(job.id)
    assert done is not None
    assert done.failed_reason == "cancelled: no longer needed"
    assert done.attempts_made == 1  # failed for good, though 4 attempts were left
    assert seen and seen[0] in ("cancelled", "Stop")


async def test_a_cancel_sent_while_the_worker_was_not_listening_is_found(
    queue: AsyncQueue, redis_url: str, r: redis.Redis
) -> None:
    """The request is published once; a worker whose subscription was down reads the
    jobs' marks when it subscribes again."""
    job = await queue.add("long", {})
    worker = Worker("q", waits_async, connection=redis_url)
    task = asyncio.create_task(worker.run_async())
    try:
        await wait_for_state(queue, job.id, "active")
        r.hset(f"bull:q:{job.id}", "x-cancel", "while you were away")  # the mark, no message
        killed = 0
        for _ in range(500):  # the listener may not have subscribed yet: kill when it has
            killed = r.execute_command("CLIENT", "KILL", "TYPE", "pubsub")
            if killed:
                break
            await asyncio.sleep(0.01)
        assert killed
        await wait_for_state(queue, job.id, "failed")
    finally:
        await worker.close()
        await task
    done = await queue.get_job(job.id)
    assert done is not None
    assert done.failed_reason == "cancelled: while you were away"


async def test_a_job_fetched_with_a_cancel_request_fails_without_running(
    queue: AsyncQueue, redis_url: str, r: redis.Redis
) -> None:
    """A job whose worker died after a cancel was requested goes back to wait with its mark:
    the next worker fails it instead of running it."""
    ran = threading.Event()

    def body(job: Job) -> None:
        ran.set()

    job = await queue.add("marked", {}, attempts=3)
    r.hset(f"bull:q:{job.id}", "x-cancel", "")
    await drive(Worker("q", body, connection=redis_url), finished(queue, 1))
    done = await queue.get_job(job.id)
    assert done is not None
    assert done.failed_reason == "cancelled"
    assert not ran.is_set()
    assert await queue.get_job_state(job.id) == JobState.FAILED


async def test_a_cancel_of_another_workers_job_leaves_this_one_alone(
    queue: AsyncQueue, redis_url: str
) -> None:
    first = await queue.add("long", {})
    second = await queue.add("long", {})
    worker = Worker("q", waits_async, connection=redis_url, concurrency=2)
    task = asyncio.create_task(worker.run_async())
    try:
        await wait_for_state(queue, first.id, "active")
        await wait_for_state(queue, second.id, "active")
        assert await queue.cancel(first.id) == JobState.ACTIVE
        await wait_for_state(queue, first.id, "failed")
        assert await queue.get_job_state(second.id) == "active"
    finally:
        await worker.close(grace=0.1)
        await task
    assert await queue.get_job_state(second.id) == "waiting"  # close put it back
