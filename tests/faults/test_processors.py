"""Processors that end in ways an ordinary ``except Exception`` misses: ``BaseException``
subclasses (``SystemExit``, ``KeyboardInterrupt`` from a plain function, a custom one from an
async function), a ``CancelledError`` that escapes (an async processor awaiting a task someone
else cancelled), and a plain function that blocks until well after ``close(grace=...)``. Each
job settles (failed with a reason that says what happened, retried per ``attempts``), none
stays active, and the worker keeps consuming."""

from __future__ import annotations

import asyncio
import sys
import threading
from collections.abc import Callable
from typing import Any

import pytest
import redis

from corral import AsyncJob, AsyncQueue, Job
from tests.faults.harness import Fleet, audit, eventually, stalled_checks


class Custom(BaseException):
    """Derives from BaseException only, as some frameworks' control-flow exceptions do."""


def exits(job: Job) -> None:
    sys.exit(3)


async def exits_async(job: AsyncJob) -> None:
    raise SystemExit("leaving")


def interrupted(job: Job) -> None:
    raise KeyboardInterrupt


async def custom(job: AsyncJob) -> None:
    raise Custom("a custom BaseException")


async def escaped_cancel(job: AsyncJob) -> None:
    other = asyncio.create_task(asyncio.sleep(60))
    asyncio.get_running_loop().call_soon(other.cancel)  # someone else cancels it
    await other


@pytest.mark.parametrize(
    ("body", "plain", "reason"),
    [
        pytest.param(exits, True, "SystemExit: 3", id="SystemExit-plain"),
        pytest.param(exits_async, False, "SystemExit: leaving", id="SystemExit-async"),
        pytest.param(interrupted, True, "KeyboardInterrupt", id="KeyboardInterrupt-plain"),
        pytest.param(custom, False, "Custom", id="BaseException-async"),
        pytest.param(escaped_cancel, False, "CancelledError", id="escaped-CancelledError"),
    ],
)
async def test_a_processor_ending_in_a_base_exception_fails_the_attempt(
    queue: AsyncQueue,
    r: redis.Redis,
    fleet: Fleet,
    caplog: pytest.LogCaptureFixture,
    body: Callable[[Any], Any],
    plain: bool,
    reason: str,
) -> None:
    failing = [(await queue.add("failing", attempts=2)).id for _ in range(3)]
    fleet.start("a", body, plain=plain, concurrency=2, lock_duration=2, stalled_interval=1)
    await audit(queue, r, completed=[], failed=failing, tags=["a"], caplog=caplog, fleet=fleet)
    for job_id in failing:
        assert fleet.runs[job_id] == 2  # retried once, per attempts
        failed_reason, atm = r.hmget(f"bull:q:{job_id}", "failedReason", "atm")
        assert atm == "2"
        assert failed_reason is not None and reason in failed_reason, failed_reason


async def test_a_plain_function_blocked_past_close_keeps_its_job_until_it_ends(
    queue: AsyncQueue, r: redis.Redis, fleet: Fleet, caplog: pytest.LogCaptureFixture
) -> None:
    release = threading.Event()
    blocked = threading.Event()

    def stuck(job: Job) -> str:
        blocked.set()
        release.wait(60)
        return "finally"

    job = await queue.add("stuck")
    settings: dict[str, Any] = {"lock_duration": 1, "stalled_interval": 0.5}
    first = fleet.start("first", stuck, plain=True, **settings)
    await eventually(blocked.is_set, "the plain function running")
    fleet.start("other", **settings)  # would take the job if the first let go of its lock
    closing = asyncio.create_task(first.close(grace=0.2))
    # Many lock lifetimes past the grace period: the job is still the first worker's.
    await stalled_checks(r, 6)
    assert not closing.done()
    assert r.lrange("bull:q:active", 0, -1) == [job.id]
    assert fleet.runs[job.id] == 1 and fleet.stalled == []
    release.set()  # the thread ends: its result is the job's, and close returns
    await asyncio.wait_for(closing, 30)
    await fleet.close("first")
    await audit(queue, r, completed=[job.id], tags=["other"], caplog=caplog, fleet=fleet)
    assert r.hget(f"bull:q:{job.id}", "returnvalue") == '"finally"'
    assert [m for m in caplog.messages if "still runs in its thread" in m]
