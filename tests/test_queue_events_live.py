"""QueueEvents beside running workers: callbacks, waiting for results, server restarts."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio

from corral import AsyncJob, AsyncQueue, AsyncQueueEvents, JobFailedError, JobNotFoundError, Worker
from corral._async.queue_events import wait_until_finished
from corral.events import Added, Completed, QueueEvent
from tests.conftest import ServerProcess, free_port, server_binary
from tests.test_worker import drive, finished


async def work(job: AsyncJob) -> Any:
    if job.name == "fail":
        raise ValueError(f"cannot {job.data['what']}")
    await asyncio.sleep(job.data.get("sleep", 0))
    return {"done": job.data.get("what")}


async def blocked_in_xread(url: str, count: int = 1) -> None:
    """Return once ``count`` connections are blocked reading the events stream: a reader
    that started from "$" (or a wait that took the stream's position) sees what comes next."""
    client = redis.asyncio.Redis.from_url(url, decode_responses=True)
    try:
        deadline = asyncio.get_running_loop().time() + 30
        while len([c for c in await client.client_list() if c["cmd"] == "xread"]) < count:
            assert asyncio.get_running_loop().time() < deadline, "no reader got to XREAD"
            await asyncio.sleep(0.01)
    finally:
        await client.aclose()


@pytest.fixture
async def queue(redis_url: str) -> Any:
    q = AsyncQueue("q", connection=redis_url)
    yield q
    await q.close()


async def test_callbacks_and_async_iteration(queue: AsyncQueue, redis_url: str) -> None:
    events = AsyncQueueEvents("q", connection=redis_url)
    completed: list[tuple[str, Any]] = []
    everything: list[QueueEvent] = []
    events.on("completed", lambda e: completed.append((e.job_id, e.returnvalue)))
    events.on("*", everything.append)
    listening = asyncio.create_task(events.run())
    await blocked_in_xread(redis_url)  # the listener pinned "$" before the jobs are added
    for what in ("a", "b"):
        await queue.add("ok", {"what": what})
    await drive(Worker("q", work, connection=redis_url), finished(queue, 2))
    while len(completed) < 2:
        await asyncio.sleep(0.02)
    await events.close()
    await listening
    assert completed == [("1", {"done": "a"}), ("2", {"done": "b"})]
    assert isinstance(everything[0], Added)


async def test_wait_until_finished(queue: AsyncQueue, redis_url: str) -> None:
    ok = await queue.add("ok", {"what": "x", "sleep": 0.2})
    bad = await queue.add("fail", {"what": "y"}, attempts=2)
    gone = await queue.add("ok", {"what": "z"}, remove_on_complete=True)
    # Start waiting before any worker runs, so every wait sees its job finish.
    waits = [asyncio.create_task(wait_until_finished(queue, job.id, 10)) for job in (ok, bad, gone)]
    await blocked_in_xread(redis_url, 3)
    worker = Worker("q", work, connection=redis_url, concurrency=3)
    running = asyncio.create_task(worker.run_async())
    try:
        results = await asyncio.gather(*waits, return_exceptions=True)
        assert results[0] == {"done": "x"}
        assert isinstance(results[1], JobFailedError)
        assert results[1].failed_reason == "cannot y" and results[1].job_id == bad.id
        # Removed on completion while we waited: the result still comes from the event.
        assert results[2] == {"done": "z"}
        # Already finished before the call; and the same through the job's method.
        assert await wait_until_finished(queue, ok.id, 0) == {"done": "x"}
        assert await ok.wait_until_finished(timeout=1) == {"done": "x"}
        with pytest.raises(JobFailedError, match="cannot y"):
            await wait_until_finished(queue, bad.id, 0)
        with pytest.raises(JobNotFoundError, match="removed after it finished"):
            await wait_until_finished(queue, gone.id, 0)
    finally:
        await worker.close()
        await running
    slow = await queue.add("ok", {"what": "never"})  # no worker runs now
    with pytest.raises(TimeoutError, match=f"job {slow.id} of queue q did not finish in 0.3s"):
        await wait_until_finished(queue, slow.id, 0.3)


@pytest.mark.timeout(60)
async def test_listener_survives_a_server_restart() -> None:
    srv = ServerProcess(
        server_binary(), free_port(), Path(tempfile.mkdtemp(prefix="corral-events-"))
    )
    srv.start()
    seen: list[QueueEvent] = []
    events = AsyncQueueEvents("r", connection=srv.url)

    async def listen() -> None:
        async for event in events:
            seen.append(event)

    listening = asyncio.create_task(listen())
    try:
        async with AsyncQueue("r", connection=srv.url) as q:
            await blocked_in_xread(srv.url)  # the listener pinned "$"
            await q.add("before")
            while len(seen) < 2:
                await asyncio.sleep(0.02)
        await asyncio.to_thread(srv.stop)
        await asyncio.sleep(2)
        await asyncio.to_thread(srv.start)  # persistence is off: the stream starts anew
        async with AsyncQueue("r", connection=srv.url) as q:
            await q.add("after")
            while len(seen) < 4:
                assert not listening.done()
                await asyncio.sleep(0.02)
    finally:
        await events.close()
        await listening
        srv.stop()
    names = [(type(e).__name__, getattr(e, "job_name", None)) for e in seen]
    assert names == [("Added", "before"), ("Waiting", None), ("Added", "after"), ("Waiting", None)]
    assert isinstance(seen[-1], Completed) is False
