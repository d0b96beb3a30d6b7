"""``job.step``, ``job.stream`` and ``job.wait_for_signal`` in child processes
(``Worker(processes=N)``): the child asks, the parent does them on the real job
(corral._child_calls), and a park frees the worker's slot as it does in-process."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import redis

from corral import AsyncQueue, StreamEnd, StreamItem, Worker
from tests.test_signals import Running, idle, parked, until

SPECS = ["tests.fixtures.agent_children:approve", "tests.fixtures.agent_children:async_approve"]


@pytest.fixture
async def queue(redis_url: str) -> AsyncIterator[AsyncQueue]:
    q = AsyncQueue("q", connection=redis_url)
    yield q
    await q.close()


@pytest.mark.parametrize("spec", SPECS, ids=["sync", "async"])
async def test_a_child_parks_streams_and_resumes_after_the_signal(
    queue: AsyncQueue, r: redis.Redis, redis_url: str, spec: str
) -> None:
    job = await queue.add("agent", {"topic": "tides"})
    worker = Running(Worker("q", spec, connection=redis_url, processes=1))
    try:
        await until(parked(r, job.id), "the job parked")
        await until(idle(worker), "the slot freed")
        fresh = await queue.get_job(job.id)
        assert fresh is not None and fresh.attempts_made == 0  # a park is no attempt
        assert await queue.signal(job.id, "approval", {"ok": True}) == "woken"
        result = await job.wait_until_finished(timeout=30)
    finally:
        await worker.stop()
    draft = result["draft"]
    assert draft["text"] == "a draft on tides"
    assert result["verdict"] == {"ok": True}
    assert result["steps"] == {"draft": draft}  # recorded once, returned on the second run
    items = [item async for item in queue.read_stream(job.id)]
    words = [i.value for i in items if isinstance(i, StreamItem)]
    assert words == ["a", "draft", "on", "tides"] * 2  # streamed by each of the two runs
    end = items[-1]
    assert isinstance(end, StreamEnd) and end.state == "completed"


@pytest.mark.parametrize("spec", SPECS, ids=["sync", "async"])
async def test_a_childs_wait_times_out_with_signal_timeout(
    queue: AsyncQueue, redis_url: str, spec: str
) -> None:
    job = await queue.add("agent", {"topic": "tides", "timeout": 0.2})
    worker = Running(Worker("q", spec, connection=redis_url, processes=1))
    try:
        result = await job.wait_until_finished(timeout=30)
    finally:
        await worker.stop()
    assert result["timed_out"] == "approval"
