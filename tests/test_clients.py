"""The clients of queues, flow producers and event readers: first use, event loops, errors."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys

import pytest
import redis

from corral import AsyncQueue, AsyncQueueEvents
from corral._async.queue_events import wait_until_finished
from corral.events import Added


async def test_callers_that_first_use_a_queue_together_share_one_client(redis_url: str) -> None:
    queue = AsyncQueue("q", connection=redis_url)
    try:
        clients = await asyncio.gather(*(queue.client() for _ in range(20)))
        assert len({id(c) for c in clients}) == 1
        assert clients[0] is await queue.client()
    finally:
        await queue.close()


def test_a_queue_used_from_a_new_event_loop_reconnects(redis_url: str) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "tests.fixtures.two_loops", redis_url],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == [
        "first 1 first-parent {'waiting': 2, 'waiting-children': 1} True",
        "second 4 second-parent {'waiting': 4, 'waiting-children': 2} True",
    ]


async def test_closing_a_reader_in_the_middle_of_a_read_logs_nothing(
    redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="corral.events")
    events = AsyncQueueEvents("q", connection=redis_url)
    reading = asyncio.create_task(events.next_event())
    client = redis.Redis.from_url(redis_url)
    try:
        while not [c for c in client.client_list() if c["cmd"] == "xread"]:
            await asyncio.sleep(0.01)  # it is blocked in XREAD
        await events.close()
        assert await reading is None
    finally:
        client.close()
    assert [r.getMessage() for r in caplog.records] == []


async def test_a_reader_waits_out_an_error_reply_and_reads_on(
    redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    async with (
        AsyncQueue("q", connection=redis_url) as queue,
        AsyncQueueEvents("q", connection=redis_url, last_event_id="0") as events,
    ):
        reading = asyncio.create_task(events.next_event())
        client = redis.Redis.from_url(redis_url, decode_responses=True)
        try:
            blocked: list[int] = []
            while not blocked:
                blocked = [int(c["id"]) for c in client.client_list() if c["cmd"] == "xread"]
                await asyncio.sleep(0.01)
            # The server ends the blocked read with an error reply (-UNBLOCKED), as a failover
            # does; the reader retries it rather than raising.
            assert client.client_unblock(blocked[0], error=True)
            await queue.add("after")
            event = await asyncio.wait_for(reading, 10)
        finally:
            client.close()
    assert isinstance(event, Added) and event.job_name == "after"
    warned = [r.getMessage() for r in caplog.records if r.name == "corral.events"]
    assert len(warned) == 2 and "UNBLOCKED" in warned[0] and "back after" in warned[1], warned
    assert not [r for r in caplog.records if r.exc_info]


async def test_waiting_for_a_job_whose_event_was_trimmed_reads_its_state(
    redis_url: str, r: redis.Redis
) -> None:
    async with AsyncQueue("q", connection=redis_url) as queue:
        job = await queue.add("j")
        waiting = asyncio.create_task(wait_until_finished(queue, job.id, 30))
        while not [c for c in r.client_list() if c["cmd"] == "xread"]:
            await asyncio.sleep(0.01)
        # The job completes, and its event is trimmed away before the waiter reads it.
        r.lrem("bull:q:wait", 0, job.id)
        r.hset(f"bull:q:{job.id}", mapping={"returnvalue": '{"ok": 1}', "finishedOn": 1})
        r.zadd("bull:q:completed", {job.id: 1})
        r.xtrim("bull:q:events", maxlen=0)
        r.xadd("bull:q:events", {"event": "other", "jobId": "x"})
        assert await asyncio.wait_for(waiting, 10) == {"ok": 1}
        # Before raising a timeout it looks once more: a job that ended just then is seen.
        late = await queue.add("late")
        r.zadd("bull:q:failed", {late.id: 1})
        r.hset(f"bull:q:{late.id}", "failedReason", "too late")
        with pytest.raises(Exception, match="too late"):
            await wait_until_finished(queue, late.id, 0.05)
