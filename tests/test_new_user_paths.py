"""Small things a new user meets (issue 17): each gets a clear answer rather than a traceback
from deep inside a library."""

from __future__ import annotations

import warnings

import pytest

from corral import (
    AsyncFlowProducer,
    AsyncQueue,
    AsyncQueueEvents,
    ClosedError,
    Queue,
    Worker,
)


async def test_worker_run_inside_an_event_loop_says_to_use_run_async(redis_url: str) -> None:
    worker = Worker("q", lambda job: 1, connection=redis_url)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # and no "coroutine was never awaited" left behind
        with pytest.raises(RuntimeError, match=r"use `await worker.run_async\(\)`"):
            worker.run()
    await worker.close()


async def test_a_blocking_queue_used_in_an_event_loop_warns_once(redis_url: str) -> None:
    queue = Queue("q", connection=redis_url)
    with pytest.warns(RuntimeWarning, match="blocking Queue is used inside a running event loop"):
        queue.add("a")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        queue.add("b")  # the client is open: no second warning
    queue.close()


def test_a_blocking_queue_outside_any_loop_does_not_warn(redis_url: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with Queue("q", connection=redis_url) as queue:
            queue.add("a")


def test_a_closed_queue_raises_instead_of_reconnecting(redis_url: str) -> None:
    queue = Queue("q", connection=redis_url)
    queue.add("a")
    queue.close()
    with pytest.raises(ClosedError, match="this Queue is closed: make a new one"):
        queue.add("b")


async def test_closed_async_objects_raise_instead_of_reconnecting(redis_url: str) -> None:
    queue = AsyncQueue("q", connection=redis_url)
    await queue.add("a")
    await queue.close()
    with pytest.raises(ClosedError, match="this Queue is closed"):
        await queue.get_job_counts()
    flows = AsyncFlowProducer(connection=redis_url)
    await flows.add({"name": "root", "queue_name": "q"})
    await flows.close()
    with pytest.raises(ClosedError, match="this FlowProducer is closed"):
        await flows.add({"name": "root", "queue_name": "q"})
    # An events reader ends its iteration on close instead (its documented way to stop).
    events = AsyncQueueEvents("q", connection=redis_url)
    await events.close()
    assert await events.next_event(timeout=0.01) is None


def test_the_option_types_come_from_corral_itself() -> None:
    import corral
    from corral import options

    for name in ("Backoff", "Duration", "JobOptionsDict", "ParentOptions", "Retention"):
        assert getattr(corral, name) is getattr(options, name), name
        assert name in corral.__all__
