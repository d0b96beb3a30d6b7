"""Calls that wait, with hostile timeouts: ``job.wait_until_finished`` and
``QueueEvents.next_event``. A bounded timeout returns (or raises the documented
``TimeoutError``) within about that long; a timeout that is no number is refused at once.
Timeouts that mean "forever" (``None``, ``inf``, 1e300) are left out: they would wait."""

from __future__ import annotations

import asyncio
from typing import Any

import redis
from hypothesis import given, settings
from hypothesis import strategies as st

from corral import AsyncQueue, AsyncQueueEvents
from tests.property import world
from tests.property.known import skip_known
from tests.property.support import RawError, examples, unchanged

#: Seconds the tests give a call with a timeout below 1 s before calling it a hang.
GUARD_S = 5.0

timeouts = st.one_of(
    st.sampled_from([0, -1, 1e-9, 0.01, -0.0, float("nan"), -float("inf"), "1", b"", True, []]),
    st.floats(-1e9, 0.05),
)


async def _bounded(raw: redis.Redis, call: Any, what: str) -> None:
    """Run ``call`` (a read); the documented TimeoutError is fine, a hang is not."""
    try:
        await unchanged(raw, lambda: asyncio.wait_for(call(), GUARD_S), what)
    except RawError as exc:
        cause = exc.__cause__
        if isinstance(cause, TimeoutError) and "did not finish" in str(cause):
            return  # wait_until_finished's own, documented TimeoutError
        if isinstance(cause, TimeoutError):
            raise AssertionError(f"{what} still waited after {GUARD_S}s") from None
        raise


@settings(max_examples=examples(40))
@given(job_id=st.sampled_from(["c1", "f1", "w1", "missing"]), timeout=timeouts)
async def test_wait_until_finished(
    raw: redis.Redis, redis_url: str, queue: AsyncQueue, job_id: str, timeout: Any
) -> None:
    skip_known("job.wait_until_finished", job_id=job_id, timeout=timeout)
    await world.saved_world(raw, redis_url)
    job = await queue.get_job(job_id) if job_id != "missing" else None
    waited = job if job is not None else (await queue.get_job("w1"))
    assert waited is not None
    if job is None:
        waited.id = "missing"
    await _bounded(
        raw,
        lambda: waited.wait_until_finished(timeout=timeout),
        f"{job_id}.wait_until_finished(timeout={timeout!r})",
    )


@settings(max_examples=examples(30))
@given(timeout=timeouts)
async def test_next_event(raw: redis.Redis, redis_url: str, timeout: Any) -> None:
    skip_known("QueueEvents.next_event", timeout=timeout)
    events = AsyncQueueEvents("q", connection=redis_url, last_event_id="$")
    try:
        await _bounded(
            raw, lambda: events.next_event(timeout=timeout), f"next_event(timeout={timeout!r})"
        )
    finally:
        await events.close()
