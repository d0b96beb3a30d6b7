"""Runs that end by themselves: ``burst`` (drain, then exit), ``max_jobs`` and ``max_time``;
the summary they return; and ``corral worker --burst``'s exit status."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from corral import AsyncJob, AsyncQueue, InvalidOptionError, Worker
from corral.options import Backoff


@pytest.fixture
async def queue(redis_url: str) -> Any:
    q = AsyncQueue("q", connection=redis_url)
    yield q
    await q.close()


async def run(worker: Worker, timeout: float = 20, **limits: Any) -> Any:
    return await asyncio.wait_for(worker.run_async(**limits), timeout)


async def echo(job: AsyncJob) -> Any:
    if job.data.get("fail"):
        raise ValueError("asked to fail")
    if job.data.get("fail_once") and job.attempts_made == 0:
        raise ValueError("first try fails")
    if job.data.get("spawn"):
        await job.queue.add("spawned", {})
    return job.data


async def test_burst_drains_the_queue_and_returns(queue: AsyncQueue, redis_url: str) -> None:
    for i in range(5):
        await queue.add("j", {"i": i})
    summary = await run(Worker("q", echo, connection=redis_url, concurrency=2), burst=True)
    assert (summary.completed, summary.failed, summary.stopped) == (5, 0, "drained")
    assert await queue.get_job_counts("completed", "waiting", "active") == {
        "completed": 5,
        "waiting": 0,
        "active": 0,
    }


async def test_burst_on_an_empty_queue_returns_at_once(redis_url: str) -> None:
    summary = await run(Worker("empty", echo, connection=redis_url), burst=True)
    assert (summary.processed, summary.stopped) == (0, "drained")


async def test_burst_runs_the_work_its_jobs_add(queue: AsyncQueue, redis_url: str) -> None:
    await queue.add("parent", {"spawn": True})
    summary = await run(Worker("q", echo, connection=redis_url, concurrency=3), burst=True)
    assert summary.completed == 2


async def test_burst_waits_for_a_delayed_job_due_within_burst_wait(
    queue: AsyncQueue, redis_url: str
) -> None:
    soon = await queue.add("soon", {}, delay=0.3)
    summary = await run(Worker("q", echo, connection=redis_url), burst=True, burst_wait=5)
    assert summary.completed == 1
    assert await queue.get_job_state(soon.id) == "completed"


async def test_burst_leaves_a_delayed_job_due_later(queue: AsyncQueue, redis_url: str) -> None:
    later = await queue.add("later", {}, delay=60)
    summary = await run(Worker("q", echo, connection=redis_url), burst=True, burst_wait=1)
    assert (summary.processed, summary.stopped) == (0, "drained")
    assert await queue.get_job_state(later.id) == "delayed"


async def test_burst_counts_retries_and_final_failures(queue: AsyncQueue, redis_url: str) -> None:
    await queue.add("flaky", {"fail_once": True}, attempts=2, backoff=Backoff.fixed(0.2))
    await queue.add("bad", {"fail": True})
    summary = await run(Worker("q", echo, connection=redis_url), burst=True, burst_wait=5)
    assert (summary.completed, summary.failed, summary.retried) == (1, 1, 1)


async def test_max_jobs_stops_after_that_many_and_loses_none(
    queue: AsyncQueue, redis_url: str
) -> None:
    for i in range(6):
        await queue.add("j", {"i": i})
    summary = await run(Worker("q", echo, connection=redis_url, concurrency=2), max_jobs=3)
    assert (summary.completed, summary.stopped) == (3, "max_jobs")
    counts = await queue.get_job_counts("completed", "waiting", "active")
    assert counts == {"completed": 3, "waiting": 3, "active": 0}


async def test_max_time_closes_the_run(queue: AsyncQueue, redis_url: str) -> None:
    started = asyncio.Event()

    async def slow(job: AsyncJob) -> None:
        started.set()
        await asyncio.sleep(60)

    job = await queue.add("slow", {})
    worker = Worker("q", slow, connection=redis_url, close_grace=0.1)
    summary = await run(worker, max_time=0.5)
    assert started.is_set()
    assert (summary.processed, summary.stopped) == (0, "max_time")
    assert await queue.get_job_state(job.id) == "waiting"  # cut short: back in wait


@pytest.mark.parametrize(
    ("limits", "message"),
    [
        ({"burst": "yes"}, "burst must be True or False"),
        ({"burst_wait": 2}, "burst_wait needs burst=True"),
        ({"burst": True, "burst_wait": -1}, "burst_wait must be a finite number"),
        ({"max_jobs": 0}, "max_jobs must be"),
        ({"max_time": 0}, "max_time must be more than 0"),
    ],
)
async def test_bad_run_limits_are_refused(redis_url: str, limits: Any, message: str) -> None:
    with pytest.raises(InvalidOptionError, match=message):
        await Worker("q", echo, connection=redis_url).run_async(**limits)


def corral_worker(redis_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            *(sys.executable, "-m", "corral.cli", "worker", "tests.fixtures.processors:shout"),
            *("--queue", "cli-burst", "--url", redis_url, *args),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=Path(__file__).parent.parent,
    )


def test_the_cli_burst_exit_status(redis_url: str) -> None:
    from corral import Queue

    queue = Queue("cli-burst", connection=redis_url)
    try:
        queue.add("ok", {"text": "hi"})
        done = corral_worker(redis_url, "--burst")
        assert done.returncode == 0, done.stderr
        assert "drained: 1 completed, 0 failed" in done.stdout

        queue.add("bad", {"no_text": True})  # shout() raises KeyError on it
        done = corral_worker(redis_url, "--burst")
        assert done.returncode == 0, done.stderr  # a failed job is not the worker's failure
        queue.add("bad", {"no_text": True})
        done = corral_worker(redis_url, "--burst", "--fail-on-job-failure")
        assert done.returncode == 1, done.stderr
        assert "0 completed, 1 failed" in done.stdout
    finally:
        queue.close()
