"""Parked jobs (``job.wait_for_signal``) through the scripts called directly, time passed in:
parked in delayed where no worker's promotion moves it, due in K:x-parked, taken straight into
active by corral's fetch alone (``_lua/include/parked.lua``)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import redis

from corral import AsyncQueue, _scripts
from corral.bounds import MAX_TIMESTAMP_MS
from corral.clock import now_ms

PARK_JOB = _scripts.load("park_job")
SIGNAL_JOB = _scripts.load("signal_job")
PARKED_SCORE = float(MAX_TIMESTAMP_MS * 4096)
WAIT_MS = 600_000


@pytest.fixture
async def queue(redis_url: str) -> AsyncIterator[AsyncQueue]:
    q = AsyncQueue("w", connection=redis_url)
    yield q
    await q.close()


async def fetch(queue: AsyncQueue, now: int, count: int = 2) -> tuple[int, list[str]]:
    """(wake hint, ids taken) of a fetch at ``now``."""
    spec = _scripts.FetchNext(count, "wk", 0, 30_000)
    reply = await queue._run(_scripts.MOVE_TO_ACTIVE, [queue._job_prefix, now, *spec.args()])
    return int(reply[0]), [f.job_id for f in _scripts.parse_fetched(reply, 2)]


async def parked_job(queue: AsyncQueue, now: int, job_id: str | None = None) -> str:
    """Add a job, take it, and park it for "approval" until now + WAIT_MS."""
    job = await queue.add("agent", job_id=job_id)
    spec = _scripts.FetchNext(1, "wk", 0, 30_000)
    reply = await queue._run(_scripts.MOVE_TO_ACTIVE, [queue._job_prefix, now, *spec.args()])
    [taken] = _scripts.parse_fetched(reply, 2)
    assert taken.job_id == job.id
    args = [queue._job_prefix, job.id, taken.token, now, "approval", now + WAIT_MS]
    assert [int(x) for x in await queue._run(PARK_JOB, args)] == [0, now + WAIT_MS]
    return job.id


async def test_a_parked_job_is_delayed_out_of_promotion_and_due_in_x_parked(
    queue: AsyncQueue, r: redis.Redis
) -> None:
    now = now_ms()
    job_id = await parked_job(queue, now)
    assert r.zscore("bull:w:delayed", job_id) == PARKED_SCORE
    assert r.zscore("bull:w:x-parked", job_id) == now + WAIT_MS
    assert r.hget(f"bull:w:{job_id}", "delay") == str(WAIT_MS)  # bull-board's due time
    # Before it is due nothing is taken, and the wake hint is its due time (not the parked
    # score's year 2039, and not 0, "nothing scheduled").
    assert await fetch(queue, now + 1) == (now + WAIT_MS, [])
    assert r.zscore("bull:w:marker", "1") == now + WAIT_MS
    # Once due (the wait timed out) it goes straight to active, never through wait.
    assert await fetch(queue, now + WAIT_MS) == (0, [job_id])
    assert r.lrange("bull:w:active", 0, -1) == [job_id]
    assert r.zscore("bull:w:delayed", job_id) is None
    assert r.zscore("bull:w:x-parked", job_id) is None
    assert r.hget(f"bull:w:{job_id}", "delay") == "0"
    last = r.xrevrange("bull:w:events", count=1)[0][1]
    assert last == {"event": "active", "jobId": job_id, "prev": "delayed"}


async def test_a_signal_makes_the_parked_job_due_at_once(queue: AsyncQueue, r: redis.Redis) -> None:
    now = now_ms()
    job_id = await parked_job(queue, now)
    reply = await queue._run(SIGNAL_JOB, [queue._job_prefix, job_id, "approval", '"yes"', now + 5])
    assert int(reply[0]) == 1
    assert r.zscore("bull:w:x-parked", job_id) == now + 5
    assert r.zscore("bull:w:delayed", job_id) == PARKED_SCORE  # still delayed to BullMQ
    assert r.lrange("bull:w:wait", 0, -1) == []
    assert r.zscore("bull:w:marker", "0") == 0  # a blocked worker wakes
    last = r.xrevrange("bull:w:events", count=1)[0][1]
    assert last == {"event": "signaled", "jobId": job_id, "name": "approval"}
    # A fetch with no free slot takes nothing, and has no later time to wake at: the parked
    # score is no due time.
    assert await fetch(queue, now + 6, count=0) == (0, [])
    assert await fetch(queue, now + 6) == (0, [job_id])
    # Running again (its wait still recorded until it reads the payload), it is not parked:
    # a second signal is kept for it and makes nothing due.
    reply = await queue._run(SIGNAL_JOB, [queue._job_prefix, job_id, "approval", '"no"', now + 7])
    assert int(reply[0]) == 0
    assert r.zscore("bull:w:x-parked", job_id) is None


async def test_an_entry_left_by_a_removed_job_never_takes_a_new_job_of_that_id(
    queue: AsyncQueue, r: redis.Redis
) -> None:
    now = now_ms()
    await parked_job(queue, now, job_id="j")
    job = await queue.get_job("j")
    assert job is not None
    await job.remove()
    await queue.add("again", job_id="j", delay=3_600)  # delayed for an hour, not waiting
    score = r.zscore("bull:w:delayed", "j")
    # At the old wait's due time the stale entry is dropped and the new job stays delayed.
    wake, taken = await fetch(queue, now + WAIT_MS)
    assert taken == [] and wake > now + WAIT_MS
    assert r.zscore("bull:w:delayed", "j") == score
    assert r.zscore("bull:w:x-parked", "j") is None


async def test_a_parked_job_promoted_by_hand_is_taken_once(
    queue: AsyncQueue, r: redis.Redis
) -> None:
    now = now_ms()
    job_id = await parked_job(queue, now)
    job = await queue.get_job(job_id)
    assert job is not None
    await job.promote()  # delayed -> wait, its wait still recorded and its entry left
    assert r.lrange("bull:w:wait", 0, -1) == [job_id]
    # Due and in wait: the fetch takes it from wait, once (not also as a parked job).
    assert await fetch(queue, now + WAIT_MS) == (0, [job_id])
    assert r.lrange("bull:w:active", 0, -1) == [job_id]
    assert r.zscore("bull:w:x-parked", job_id) is None


@pytest.mark.parametrize("delayed_in, parked_in", [(1_000, WAIT_MS), (2 * WAIT_MS, WAIT_MS)])
async def test_parking_keeps_the_marker_at_the_earliest_due_time(
    queue: AsyncQueue, r: redis.Redis, delayed_in: int, parked_in: int
) -> None:
    now = now_ms()
    await queue.add("later", delay=delayed_in / 1000)
    assert abs((r.zscore("bull:w:marker", "1") or 0) - (now + delayed_in)) < 1_000
    await parked_job(queue, now)
    marker = r.zscore("bull:w:marker", "1") or 0
    assert abs(marker - (now + min(delayed_in, parked_in))) < 1_000
