"""``SCRIPT FLUSH`` while workers are busy: every call in flight meets NOSCRIPT, is answered
on its own connection (load, then the call again) and keeps its place; nothing is lost or
run twice."""

from __future__ import annotations

import pytest
import redis

from corral import AsyncQueue
from tests.faults.harness import (
    Fleet,
    add_jobs,
    audit,
    completed_at_least,
    error_count,
    eventually,
)


async def test_script_flush_while_many_short_jobs_are_in_flight(
    queue: AsyncQueue, r: redis.Redis, fleet: Fleet, caplog: pytest.LogCaptureFixture
) -> None:
    ids = await add_jobs(queue, 400, ms=20)
    for tag in ("a", "b"):
        fleet.start(tag, concurrency=8, lock_duration=2, stalled_interval=1)
    busy_at_flush = []
    for step in range(1, 6):  # five flushes, spread over the run
        await eventually(completed_at_least(r, step * 60), f"{step * 60} done")
        r.script_flush()
        busy_at_flush.append(r.llen("bull:q:active"))
    assert all(busy_at_flush), busy_at_flush  # every flush hit jobs in flight
    await audit(queue, r, completed=ids, tags=["a", "b"], caplog=caplog, fleet=fleet)
    assert error_count(r, "NOSCRIPT") > 0  # the flushes did meet calls of the workers
