"""A worker with ``processes=N``: jobs run in child processes, what the child asks of its job
reaches Redis, and every way a child ends (a crash, a timeout, a cancel, close) settles the
job once the child is dead, so no job runs twice at once."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import pytest

from corral import (
    AsyncQueue,
    InvalidOptionError,
    JobState,
    ProcessorImportError,
    Worker,
)
from tests.faults.harness import eventually
from tests.test_cancel_worker import cancel_from_another_process, wait_for_state
from tests.test_worker import drive, finished

ACT = "tests.fixtures.worker_children:act"
ASYNC_ACT = "tests.fixtures.child_processors:async_act"


@pytest.fixture
async def queue(redis_url: str) -> Any:
    q = AsyncQueue("q", connection=redis_url)
    yield q
    await q.close()


async def run_burst(redis_url: str, spec: str = ACT, **settings: Any) -> Any:
    worker = Worker("q", spec, connection=redis_url, **settings)
    return await asyncio.wait_for(worker.run_async(burst=True, burst_wait=5), 60)


async def test_jobs_run_in_child_processes_and_their_calls_reach_redis(
    queue: AsyncQueue, redis_url: str
) -> None:
    echo = [await queue.add("echo", {"do": "echo", "value": i}) for i in range(4)]
    calls = await queue.add("calls", {"do": "calls"})
    progress: list[Any] = []
    worker = Worker("q", ACT, connection=redis_url, processes=2)
    worker.on("progress", lambda job, value: progress.append(value))
    summary = await asyncio.wait_for(worker.run_async(burst=True), 60)
    assert summary.completed == 5
    pids = {(await queue.get_job(j.id)).returnvalue["pid"] for j in echo}  # type: ignore[union-attr]
    assert os.getpid() not in pids
    done = await queue.get_job(calls.id)
    assert done is not None
    assert done.progress == 42
    assert done.data == {"do": "calls", "updated": True}
    assert (await done.get_logs())[0] == ["a line"]
    assert progress == [42]


async def test_an_error_in_a_child_keeps_its_message_and_traceback(
    queue: AsyncQueue, redis_url: str
) -> None:
    job = await queue.add("raise", {"do": "raise", "value": 7}, attempts=2)
    give_up = await queue.add("unrecoverable", {"do": "unrecoverable"}, attempts=5)
    summary = await run_burst(redis_url, processes=1)
    assert (summary.failed, summary.retried) == (2, 1)
    done = await queue.get_job(job.id)
    assert done is not None
    assert (done.failed_reason, done.attempts_made) == ("bad value 7", 2)
    assert "child_processors.py" in done.stacktrace[-1]  # the child's frames
    assert "ValueError: bad value 7" in done.stacktrace[-1]
    never = await queue.get_job(give_up.id)
    assert never is not None
    assert (never.failed_reason, never.attempts_made) == ("give up", 1)


@pytest.mark.parametrize("spec", [ACT, ASYNC_ACT], ids=["sync", "async"])
async def test_discard_in_a_child_makes_the_failing_attempt_the_last(
    queue: AsyncQueue, redis_url: str, spec: str
) -> None:
    job = await queue.add("discard", {"do": "discard"}, attempts=3)
    after = await queue.add("raise", {"do": "raise", "value": 1}, attempts=2)  # not discarded
    summary = await run_burst(redis_url, spec, processes=1)
    done = await queue.get_job(job.id)
    assert done is not None
    assert (done.failed_reason, done.attempts_made) == ("no use retrying", 1)
    assert "ValueError: no use retrying" in done.stacktrace[-1]
    retried = await queue.get_job(after.id)
    assert retried is not None and retried.attempts_made == 2  # the next job is not discarded
    assert summary.failed == 2


async def test_an_async_processor_runs_in_a_child_too(queue: AsyncQueue, redis_url: str) -> None:
    job = await queue.add("calls", {"do": "calls"})
    assert (await run_burst(redis_url, ASYNC_ACT, processes=1)).completed == 1
    done = await queue.get_job(job.id)
    assert done is not None
    assert done.progress == {"step": 1}
    assert (await done.get_logs())[0] == ["async line"]


@pytest.mark.parametrize(
    ("do", "reason"),
    [
        ("segfault", "the child process running the job was killed by SIGSEGV"),
        ("exit", "the child process running the job exited with status 3"),
        ("sigkill", "the child process running the job was killed by SIGKILL"),
    ],
)
async def test_a_child_that_dies_fails_the_attempt_and_is_replaced(
    queue: AsyncQueue, redis_url: str, do: str, reason: str
) -> None:
    crash = await queue.add(do, {"do": do}, attempts=2)
    after = await queue.add("after", {"do": "echo", "value": 1})
    summary = await run_burst(redis_url, processes=1)
    assert (summary.failed, summary.retried, summary.completed) == (1, 1, 1)
    failed = await queue.get_job(crash.id)
    assert failed is not None
    assert failed.failed_reason is not None
    assert failed.failed_reason.startswith(reason)
    assert failed.attempts_made == 2
    assert await queue.get_job_state(after.id) == JobState.COMPLETED


async def test_the_timeout_kills_the_child_and_the_attempt_is_retried(
    queue: AsyncQueue, redis_url: str
) -> None:
    job = await queue.add("sleep", {"do": "sleep"}, timeout=0.3, attempts=2)
    summary = await run_burst(redis_url, processes=1)
    assert (summary.failed, summary.retried) == (1, 1)
    done = await queue.get_job(job.id)
    assert done is not None
    assert (done.failed_reason, done.attempts_made) == ("timed out after 0.3 s", 2)


async def test_the_soft_timeout_is_raised_in_the_child(queue: AsyncQueue, redis_url: str) -> None:
    job = await queue.add("spin", {"do": "spin"}, timeout=30, soft_timeout=0.2)
    assert (await run_burst(redis_url, processes=1)).completed == 1
    done = await queue.get_job(job.id)
    assert done is not None
    assert done.returnvalue["soft_timed_out"] is True


async def test_the_memory_limit_kills_the_child(queue: AsyncQueue, redis_url: str) -> None:
    job = await queue.add("hog", {"do": "hog", "mb": 300})
    summary = await run_burst(redis_url, processes=1, max_memory_mb=100)
    assert summary.failed == 1
    done = await queue.get_job(job.id)
    assert done is not None
    assert done.failed_reason is not None
    assert "memory limit" in done.failed_reason
    assert "max_memory_mb=100" in done.failed_reason


async def test_children_are_recycled_after_max_jobs_per_child(
    queue: AsyncQueue, redis_url: str
) -> None:
    jobs = [await queue.add("pid", {"do": "pid"}) for _ in range(6)]
    summary = await run_burst(redis_url, processes=1, max_jobs_per_child=2)
    assert summary.completed == 6
    pids = [(await queue.get_job(j.id)).returnvalue for j in jobs]  # type: ignore[union-attr]
    assert len(set(pids)) == 3  # a new child every two jobs
    assert pids[0] == pids[1] != pids[2] == pids[3] != pids[4] == pids[5]


async def wait_for(check: Any, what: str) -> Any:
    """Poll ``check`` until it returns something true, and return that."""
    found: list[Any] = []

    async def ready() -> bool:
        found[:] = [await check()]
        return bool(found[0])

    await eventually(ready, what)
    return found[0]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def child_pid(queue: AsyncQueue, job_id: str) -> int:
    """The pid of the child running the job, from the line it logs as it starts."""

    async def started() -> int | None:
        lines, _ = await (await queue.get_job(job_id)).get_logs()  # type: ignore[union-attr]
        return int(lines[0]) if lines else None

    pid: int = await wait_for(started, f"job {job_id} started")
    return pid


async def test_an_active_job_cancelled_from_another_process_kills_its_child(
    queue: AsyncQueue, redis_url: str
) -> None:
    job = await queue.add("sleep", {"do": "sleep_pid"}, attempts=3)
    worker = Worker("q", ACT, connection=redis_url, processes=1)
    task = asyncio.create_task(worker.run_async())
    try:
        pid = await child_pid(queue, job.id)
        assert cancel_from_another_process(redis_url, job.id, "stop") == "active"
        await wait_for_state(queue, job.id, "failed")
        assert not alive(pid)  # dead before the job was failed
    finally:
        await worker.close()
        await task
    done = await queue.get_job(job.id)
    assert done is not None
    assert (done.failed_reason, done.attempts_made) == ("cancelled: stop", 1)


async def test_close_kills_running_children_before_the_job_goes_back(
    queue: AsyncQueue, redis_url: str
) -> None:
    """A job goes back to wait only once its child is dead: the next worker that runs it is
    the only one running it."""
    job = await queue.add("sleep", {"do": "sleep_pid"})
    worker = Worker("q", ACT, connection=redis_url, processes=1)
    task = asyncio.create_task(worker.run_async())
    pid = await child_pid(queue, job.id)
    await worker.close(grace=0.1)
    await task
    assert not alive(pid)
    assert await queue.get_job_state(job.id) == JobState.WAITING
    # The next worker runs it again, alone (a second child, a second line in the ledger).
    second = Worker("q", ACT, connection=redis_url, processes=1)
    running = asyncio.create_task(second.run_async())
    try:

        async def two_lines() -> bool:
            lines, _ = await (await queue.get_job(job.id)).get_logs()  # type: ignore[union-attr]
            return len(lines) == 2

        await wait_for(two_lines, "the second run started")
        lines, _ = await (await queue.get_job(job.id)).get_logs()  # type: ignore[union-attr]
        assert int(lines[1]) != pid
    finally:
        await second.close(grace=0.1)
        await running


async def test_a_worker_with_children_drains_with_drive(queue: AsyncQueue, redis_url: str) -> None:
    for i in range(20):
        await queue.add("echo", {"do": "echo", "value": i})
    await drive(Worker("q", ACT, connection=redis_url, processes=2), finished(queue, 20))
    assert await queue.get_job_counts("completed") == {"completed": 20}


def lambda_processor() -> Any:
    return lambda job: None


def closure_processor() -> Any:
    def inner(job: Any) -> None:
        return None

    return inner


@pytest.mark.parametrize(
    ("processor", "settings", "error", "message"),
    [
        (lambda_processor(), {"processes": 2}, ProcessorImportError, "importable"),
        (closure_processor(), {"processes": 2}, ProcessorImportError, "importable"),
        ("tests.fixtures.nope:f", {}, ProcessorImportError, "cannot import 'tests.fixtures.nope'"),
        (
            "tests.fixtures.child_broken_import:f",
            {"processes": 1},
            ProcessorImportError,
            "cannot import 'tests.fixtures.child_broken_import'",
        ),
        (ACT, {"processes": 0}, InvalidOptionError, "processes must be"),
        (ACT, {"max_memory_mb": 100}, InvalidOptionError, "max_memory_mb needs processes="),
        (ACT, {"processes": 1, "max_jobs_per_child": 0}, InvalidOptionError, "max_jobs_per_child"),
    ],
)
def test_bad_process_settings_are_refused_at_construction(
    redis_url: str, processor: Any, settings: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        Worker("q", processor, connection=redis_url, **settings)


async def test_a_pool_that_cannot_start_children_stops_the_worker_and_loses_no_job(
    queue: AsyncQueue, redis_url: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CORRAL_TEST_BREAK_MARKER", str(tmp_path / "broken"))
    breaker = await queue.add("break", {"break": True})
    after = await queue.add("after", {})
    worker = Worker("q", "tests.fixtures.breaks_on_restart:act", connection=redis_url, processes=1)
    with pytest.raises(ProcessorImportError, match="the deployment changed under the worker"):
        await asyncio.wait_for(worker.run_async(), 60)
    crashed = await queue.get_job(breaker.id)
    assert crashed is not None
    assert crashed.failed_reason == "the child process running the job exited with status 3"
    assert await queue.get_job_state(after.id) == JobState.WAITING  # put back, never run
