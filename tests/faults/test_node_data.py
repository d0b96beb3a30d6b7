"""Node BullMQ writes job data Python's JSON decoder refuses: a string cut in the middle of an
emoji leaves a lone surrogate, which ``JSON.stringify`` writes as an escape (``"\\ud83d"``).
The job fails for good, with a reason that says its data cannot be decoded; the worker goes
on with the other jobs."""

from __future__ import annotations

import json

import pytest
import redis

from corral import AsyncQueue
from tests.faults.harness import FaultServer, Fleet, add_jobs, audit
from tests.interop.conftest import Node

pytestmark = pytest.mark.interop


async def test_node_data_with_a_lone_surrogate_fails_its_job_and_the_worker_goes_on(
    node_ready: None,
    server: FaultServer,
    queue: AsyncQueue,
    r: redis.Redis,
    fleet: Fleet,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # As Node sends it: JSON text whose string ends in half of a surrogate pair.
    spec = '[{"name": "cut", "data": {"s": "caf\\u00e9 \\ud83d"}, "opts": {"attempts": 3}}]'
    assert json.loads(spec)[0]["data"]["s"] == "caf\u00e9 \ud83d"
    (bad,) = Node(server.url).run("add_list.mjs", "q", spec)["ids"]
    assert "\\ud83d" in r.hget(f"bull:q:{bad}", "data")  # stored as Node wrote it
    good = await add_jobs(queue, 5)
    fleet.start("a", concurrency=2, lock_duration=2, stalled_interval=1)
    await audit(queue, r, completed=good, failed=[bad], tags=["a"], caplog=caplog, fleet=fleet)
    reason, atm = r.hmget(f"bull:q:{bad}", "failedReason", "atm")
    assert reason is not None and "job data cannot be decoded" in reason, reason
    assert atm == "1"  # not retried: the same bytes would fail every attempt
    assert fleet.runs[bad] == 0
