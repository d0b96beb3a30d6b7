"""The worker's own scripts called directly: stalled check, lock renewal, and giving back the
jobs of a fetch whose reply was lost. Time is passed in (``now_ms``), never slept through."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import redis

from corral import AsyncQueue, _scripts
from corral.clock import now_ms


@pytest.fixture
async def queue(redis_url: str) -> AsyncIterator[AsyncQueue]:
    q = AsyncQueue("w", connection=redis_url)
    yield q
    await q.close()


async def fetch(queue: AsyncQueue, count: int, *, base: str = "wk", first: int = 0) -> list[str]:
    spec = _scripts.FetchNext(count, base, first, 30_000)
    reply = await queue._run(_scripts.MOVE_TO_ACTIVE, [queue._job_prefix, now_ms(), *spec.args()])
    return [f.job_id for f in _scripts.parse_fetched(reply, 2)]


async def check(queue: AsyncQueue, interval_ms: int = 30_000) -> tuple[int, list[str]]:
    reply = await queue._run(_scripts.CHECK_STALLED, [queue._job_prefix, now_ms(), interval_ms])
    return int(reply[0]), list(reply[1:])


async def test_stalled_check_recovers_an_active_job_without_a_lock_in_one_pass(
    queue: AsyncQueue, r: redis.Redis
) -> None:
    await queue.add("a")
    [job_id] = await fetch(queue, 1)
    r.delete(f"bull:w:{job_id}:lock")  # its worker died and the lock expired
    wait_ms, recovered = await check(queue)
    assert recovered == [job_id]
    assert r.lrange("bull:w:wait", 0, -1) == [job_id]
    assert r.hget(f"bull:w:{job_id}", "stc") == "1"
    assert wait_ms == 30_000  # nothing else active: the next check after the whole interval


async def test_stalled_check_leaves_a_job_whose_lock_is_held(
    queue: AsyncQueue, r: redis.Redis
) -> None:
    await queue.add("a")
    [job_id] = await fetch(queue, 1)
    r.sadd("bull:w:stalled", job_id)  # suspected by an earlier check: the lock still decides
    _, recovered = await check(queue)
    assert recovered == []
    assert r.lrange("bull:w:active", 0, -1) == [job_id]
    assert r.hget(f"bull:w:{job_id}", "stc") is None
    # BullMQ's workers read K:stalled for their own two-pass check: it lists the active job.
    assert r.smembers("bull:w:stalled") == {job_id}


async def test_stalled_check_runs_again_when_the_earliest_lock_expires(
    queue: AsyncQueue, r: redis.Redis
) -> None:
    await queue.add("a")
    await queue.add("b")
    first, second = await fetch(queue, 2)
    r.pexpire(f"bull:w:{first}:lock", 700)
    r.pexpire(f"bull:w:{second}:lock", 5_000)
    wait_ms, _ = await check(queue)
    assert 600 < wait_ms <= 710  # just after the earliest lock can have expired
    assert 600 < r.pttl("bull:w:stalled-check") <= 710
    # Within that time the queue's check is throttled for everyone, and says for how long.
    throttled_ms, recovered = await check(queue)
    assert recovered == [] and 0 < throttled_ms <= wait_ms


async def test_stalled_check_never_waits_less_than_10_ms(queue: AsyncQueue, r: redis.Redis) -> None:
    await queue.add("a")
    [job_id] = await fetch(queue, 1)
    r.pexpire(f"bull:w:{job_id}:lock", 1)
    r.delete("bull:w:stalled-check")
    wait_ms, _ = await check(queue)
    assert wait_ms >= 10


async def test_renewal_reports_lost_tokens_not_ids(queue: AsyncQueue, r: redis.Redis) -> None:
    await queue.add("a")
    [job_id] = await fetch(queue, 1, base="new")
    # The same job held twice by one worker: an old lease (lost) and the current one.
    lost = await queue._run(
        _scripts.EXTEND_LOCKS, [queue._job_prefix, 30_000, job_id, "old:0", job_id, "new:0"]
    )
    assert lost == ["old:0"]


async def test_a_lost_fetch_gives_back_only_its_own_jobs_unstarted(
    queue: AsyncQueue, r: redis.Redis
) -> None:
    for name in "abcd":
        await queue.add(name)
    kept = await fetch(queue, 1, base="wk", first=0)  # a job its worker runs
    lost = await fetch(queue, 2, base="wk", first=1)  # a fetch whose reply never arrived
    # Another worker's, with the same numbers and a base as long as ours.
    other = await fetch(queue, 1, base="wx", first=1)
    released = await queue._run(_scripts.RELEASE_FETCHED, [queue._job_prefix, "wk", 1, 2])
    assert sorted(released) == sorted(lost)
    assert sorted(r.lrange("bull:w:active", 0, -1)) == sorted(kept + other)
    # Back at the head of wait (the right end), in the order they were taken, not counted as
    # stalled, without a lock.
    assert r.lrange("bull:w:wait", -2, -1) == list(reversed(lost))
    for job_id in lost:
        assert r.hget(f"bull:w:{job_id}", "stc") is None
        assert not r.exists(f"bull:w:{job_id}:lock")
    assert await fetch(queue, 1, base="wk", first=9) == [lost[0]]


async def test_giving_back_with_no_matching_job_changes_nothing(
    queue: AsyncQueue, r: redis.Redis
) -> None:
    await queue.add("a")
    [job_id] = await fetch(queue, 1, base="wk", first=5)
    assert await queue._run(_scripts.RELEASE_FETCHED, [queue._job_prefix, "wk", 0, 5]) == []
    assert await queue._run(_scripts.RELEASE_FETCHED, [queue._job_prefix, "wk", 6, 3]) == []
    assert r.lrange("bull:w:active", 0, -1) == [job_id]


@pytest.mark.parametrize("stray", ["0:1733212345678", "gone"], ids=["old-marker", "removed"])
async def test_a_fetch_drops_an_id_without_a_job_and_takes_the_next(
    queue: AsyncQueue, r: redis.Redis, stray: str
) -> None:
    job = await queue.add("a")
    # An id in wait with no job hash: a marker BullMQ 4 pushed there, or a job deleted by
    # hand. It must not be locked, left in active, or given a hash of its own.
    r.rpush("bull:w:wait", stray)
    assert await fetch(queue, 2) == [job.id]
    assert r.lrange("bull:w:active", 0, -1) == [job.id]
    assert r.exists(f"bull:w:{stray}", f"bull:w:{stray}:lock") == 0
    assert r.llen("bull:w:wait") == 0
