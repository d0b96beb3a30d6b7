"""Job timeouts: a processor that runs past its ``timeout`` is stopped where it runs (the task
cancelled, the thread interrupted) and the attempt fails with "timed out after N s", retried per
``attempts``; ``soft_timeout`` warns it first. The job is settled only once the processor has
ended, so it never runs twice at once."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from corral import (
    AsyncJob,
    AsyncQueue,
    InvalidOptionError,
    Job,
    JobTimeoutWarning,
    Worker,
)
from tests.test_cancel_worker import wait_for_state
from tests.test_worker import drive, finished


@pytest.fixture
async def queue(redis_url: str) -> Any:
    q = AsyncQueue("q", connection=redis_url)
    yield q
    await q.close()


async def spin_async(job: AsyncJob) -> None:
    while True:
        await asyncio.sleep(0.005)


def spin_calls(job: Job) -> None:
    while True:
        sum(range(10))


def spin_bare(job: Job) -> None:
    while True:
        pass


def spin_swallowing(job: Job) -> None:
    # Catches every Exception: the hard stop is a BaseException, so it still gets out.
    while True:
        try:
            sum(range(10))
        except Exception:
            continue


@pytest.mark.parametrize(
    "body",
    [spin_async, spin_calls, spin_bare, spin_swallowing],
    ids=["async", "thread", "thread-bare-loop", "thread-except-Exception"],
)
async def test_a_stuck_processor_is_stopped_at_its_deadline_and_retried(
    queue: AsyncQueue, redis_url: str, body: Callable[[Any], Any]
) -> None:
    job = await queue.add("stuck", {}, timeout=0.3, attempts=2)
    runs: list[str] = []
    worker = Worker("q", body, connection=redis_url)
    worker.on("failed", lambda j, err: runs.append(str(err)))
    await drive(worker, finished(queue, 1))
    done = await queue.get_job(job.id)
    assert done is not None
    assert done.failed_reason == "timed out after 0.3 s"
    assert done.attempts_made == 2  # the first timeout was retried
    assert runs == ["timed out after 0.3 s"] * 2


async def test_the_thread_is_free_for_the_next_job_after_a_timeout(
    queue: AsyncQueue, redis_url: str
) -> None:
    threads: list[int] = []

    def body(job: Job) -> str:
        threads.append(threading.get_ident())
        if job.name == "stuck":
            spin_calls(job)
        return "ok"

    stuck = await queue.add("stuck", {}, timeout=0.2)
    fine = await queue.add("fine", {})
    await drive(Worker("q", body, connection=redis_url), finished(queue, 2))
    assert (await queue.get_job(stuck.id)).failed_reason == "timed out after 0.2 s"  # type: ignore[union-attr]
    assert (await queue.get_job(fine.id)).returnvalue == "ok"  # type: ignore[union-attr]


async def test_a_thread_blocked_in_a_c_call_keeps_its_job_until_it_returns(
    queue: AsyncQueue, redis_url: str
) -> None:
    """The stop reaches a thread only between bytecodes: while it is blocked, the job stays
    active and locked (no other worker can take it), and fails once the thread is out."""
    release = threading.Event()
    past_deadline = threading.Event()

    def blocked(job: Job) -> None:
        past_deadline.set()
        release.wait()  # a lock acquire: no bytecode runs until it returns

    job = await queue.add("blocked", {}, timeout=0.2)
    worker = Worker("q", blocked, connection=redis_url)
    task = asyncio.create_task(worker.run_async())
    try:
        await asyncio.get_running_loop().run_in_executor(None, past_deadline.wait, 10)
        while time.time() < (await queue.get_job(job.id)).processed_on / 1000 + 0.6:  # type: ignore[union-attr]
            await asyncio.sleep(0.05)
        assert await queue.get_job_state(job.id) == "active"  # well past its 0.2 s deadline
        release.set()
        await wait_for_state(queue, job.id, "failed")
        assert (await queue.get_job(job.id)).failed_reason == "timed out after 0.2 s"  # type: ignore[union-attr]
    finally:
        release.set()
        await worker.close()
        await task


async def soft_async(job: AsyncJob) -> str:
    try:
        await asyncio.sleep(60)
    except asyncio.CancelledError:
        assert job.time_left() is not None
        return f"warned soft={job.soft_timed_out}"
    return "not warned"


def soft_thread(job: Job) -> str:
    try:
        spin_calls(job)
    except JobTimeoutWarning:
        return f"warned soft={job.soft_timed_out}"
    return "not warned"


@pytest.mark.parametrize("body", [soft_async, soft_thread], ids=["async", "thread"])
async def test_the_soft_timeout_warns_before_the_hard_one(
    queue: AsyncQueue, redis_url: str, body: Callable[[Any], Any]
) -> None:
    job = await queue.add("soft", {}, timeout=30, soft_timeout=0.2)
    await drive(Worker("q", body, connection=redis_url), finished(queue, 1))
    done = await queue.get_job(job.id)
    assert done is not None
    assert done.returnvalue == "warned soft=True"


@pytest.mark.parametrize("body", [spin_async, spin_calls], ids=["async", "thread"])
async def test_a_soft_timeout_left_unhandled_fails_the_attempt(
    queue: AsyncQueue, redis_url: str, body: Callable[[Any], Any]
) -> None:
    job = await queue.add("soft", {}, timeout=30, soft_timeout=0.2, attempts=2)
    await drive(Worker("q", body, connection=redis_url), finished(queue, 1))
    done = await queue.get_job(job.id)
    assert done is not None
    assert done.failed_reason == "soft timeout: still running after 0.2 s"
    assert done.attempts_made == 2


async def test_an_async_processor_that_swallows_the_stop_is_stopped_again(
    queue: AsyncQueue, redis_url: str
) -> None:
    swallowed = 0

    async def stubborn(job: AsyncJob) -> str:
        nonlocal swallowed
        while True:
            try:
                await asyncio.sleep(60)
            except asyncio.CancelledError:
                swallowed += 1
                if swallowed == 2:
                    raise
        return "unreachable"

    job = await queue.add("stubborn", {}, timeout=0.2)
    await drive(Worker("q", stubborn, connection=redis_url), finished(queue, 1))
    assert swallowed == 2
    assert (await queue.get_job(job.id)).failed_reason == "timed out after 0.2 s"  # type: ignore[union-attr]


async def test_the_worker_timeout_applies_to_jobs_without_their_own(
    queue: AsyncQueue, redis_url: str
) -> None:
    deadlines: dict[str, float | None] = {}

    async def body(job: AsyncJob) -> str:
        deadlines[job.name] = job.time_left()
        if job.name == "own":
            return "ok"
        await spin_async(job)
        return "unreachable"

    default = await queue.add("default", {})
    own = await queue.add("own", {}, timeout=60)
    await drive(Worker("q", body, connection=redis_url, timeout=0.2), finished(queue, 2))
    assert (await queue.get_job(default.id)).failed_reason == "timed out after 0.2 s"  # type: ignore[union-attr]
    assert (await queue.get_job(own.id)).returnvalue == "ok"  # type: ignore[union-attr]
    assert 0 < deadlines["default"] <= 0.2  # type: ignore[operator]
    assert 59 < deadlines["own"] <= 60  # type: ignore[operator]


async def test_no_timeout_means_no_deadline(queue: AsyncQueue, redis_url: str) -> None:
    seen: list[Any] = []

    async def body(job: AsyncJob) -> None:
        seen.append((job.deadline, job.time_left(), job.soft_timed_out))

    await queue.add("plain", {})
    await drive(Worker("q", body, connection=redis_url), finished(queue, 1))
    assert seen == [(None, None, False)]


@pytest.mark.parametrize(
    ("opts", "message"),
    [
        ({"timeout": 0}, "timeout must be more than 0"),
        ({"timeout": -1}, "timeout must be a finite number >= 0"),
        ({"timeout": "5"}, "timeout must be seconds"),
        ({"timeout": float("nan")}, "timeout must be a finite number"),
        ({"timeout": True}, "timeout must be seconds"),
        ({"soft_timeout": 0}, "soft_timeout must be more than 0"),
        ({"timeout": 1, "soft_timeout": 1}, "soft_timeout must be less than timeout"),
        ({"timeout": 1, "soft_timeout": 2}, "soft_timeout must be less than timeout"),
    ],
)
async def test_bad_timeouts_are_refused_before_anything_is_written(
    queue: AsyncQueue, redis_url: str, opts: dict[str, Any], message: str
) -> None:
    client = await queue.client()
    before = sorted(await client.keys("*"))
    with pytest.raises(InvalidOptionError, match=message):
        await queue.add("x", {}, **opts)
    with pytest.raises(InvalidOptionError, match=message):
        Worker("q", soft_async, connection=redis_url, **opts)
    assert sorted(await client.keys("*")) == before
