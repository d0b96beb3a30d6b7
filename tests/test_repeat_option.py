"""``add(..., repeat=...)`` makes a job scheduler, named as BullMQ 5 named the repeatable; bad
``repeat`` input is refused before anything is written; and the guards of the legacy
repeatable calls (corral._async.queue_repeatable) against data that only looks legacy."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import AsyncIterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
import redis

from corral import AsyncQueue, InvalidOptionError, Queue, clock
from corral._async.queue_repeatable import _MIGRATE
from corral.repeat import LegacyRun, RepeatableJob, parse_raw_key, parse_repeat

END = 2_000_000_000_000


def md5(text: str) -> str:
    return hashlib.md5(text.encode()).hexdigest()


@pytest.fixture
async def queue(redis_url: str) -> AsyncIterator[AsyncQueue]:
    q = AsyncQueue("q", connection=redis_url)
    yield q
    await q.close()


async def test_cron_repeat_makes_a_scheduler(queue: AsyncQueue, r: redis.Redis) -> None:
    job = await queue.add("report", {"k": 1}, repeat={"pattern": "0 3 * * *"}, attempts=2)
    sid = md5("report::::0 3 * * *")
    assert job.id.startswith(f"repeat:{sid}:") and job.repeat_job_key == sid
    sched = await queue.get_job_scheduler(sid)
    assert sched is not None and sched.pattern == "0 3 * * *"
    assert (sched.template.name, sched.template.data) == ("report", {"k": 1})
    assert sched.template.opts == {"attempts": 2}
    assert r.zcard("bull:q:repeat") == 1
    # The same add again is the same scheduler (an upsert), not a second one.
    again = await queue.add("report", {"k": 2}, repeat={"cron": "0 3 * * *"}, attempts=2)
    assert again.id == job.id and r.zcard("bull:q:repeat") == 1
    assert await queue.remove_repeatable("report", {"pattern": "0 3 * * *"})
    assert r.zcard("bull:q:repeat") == 0 and not r.exists(f"bull:q:{job.id}")


async def test_every_repeat_key_has_ms_and_job_id(queue: AsyncQueue) -> None:
    start = datetime(2033, 1, 1, tzinfo=timezone.utc)
    job = await queue.add(
        "tick",
        None,
        repeat={
            "every": timedelta(minutes=1),
            "limit": 3,
            "start_date": start,
            "end_date": END,
            "tz": "UTC",
        },
        job_id="t1",
    )
    sid = md5(f"tick:t1:{END}:UTC:60000")  # BullMQ 5's key: every in ms, the job id inside
    assert job.id == f"repeat:{sid}:{int(start.timestamp() * 1000)}"
    sched = await queue.get_job_scheduler(sid)
    assert sched is not None
    assert (sched.every, sched.limit, sched.tz, sched.end_date) == (60_000, 3, "UTC", END)
    assert not await queue.remove_repeatable("tick", {"every": 60, "end_date": END, "tz": "UTC"})
    assert await queue.remove_repeatable(
        "tick", {"every": 60, "end_date": END, "tz": "UTC"}, job_id="t1"
    )


async def test_repeat_key_is_the_scheduler_id(queue: AsyncQueue) -> None:
    job = await queue.add("t", None, repeat={"every": 5, "key": "mine", "immediately": True})
    assert job.repeat_job_key == "mine"
    assert await queue.remove_repeatable("t", {"every": 999, "key": "mine"})
    assert await queue.get_job_scheduler("mine") is None


def test_sync_add_repeat(redis_url: str) -> None:
    with Queue("q", connection=redis_url) as queue:
        job = queue.add("t", {"a": 1}, repeat={"every": 30})
        [entry] = queue.get_repeatable_jobs()
        assert (entry.key, entry.every, entry.legacy) == (job.repeat_job_key, 30_000, False)
        assert queue.remove_repeatable_by_key(entry.key)


BAD_REPEATS: list[tuple[Any, str]] = [
    ("0 * * * *", "repeat must be a dict"),
    ({}, "repeat needs 'pattern' (a cron pattern) or 'every' (seconds)"),
    ({"pattern": "0 * * * *", "every": 5}, "repeat takes 'pattern' or 'every', not both"),
    ({"pattern": "0 * * * *", "cron": "0 * * * *"}, "'pattern' or 'cron' (the same thing)"),
    (
        {"every": 5, "startDate": 1},
        "unknown repeat option 'startDate' (did you mean 'start_date'?)",
    ),
    ({"every": 5, "offset": 1}, "unknown repeat option 'offset'"),
    ({"every": "5"}, "every must be seconds or a timedelta, got '5'"),
    ({"every": 0}, "every must be at least 1 ms"),
    ({"pattern": "61 * * * *"}, "minute 61 is out of range 0-59"),
    ({"pattern": 5}, "cron must be a cron pattern string, got 5"),
    ({"every": 5, "limit": "3"}, "limit must be an integer"),
    ({"every": 5, "tz": "Mars/Olympus"}, "unknown time zone 'Mars/Olympus'"),
    ({"every": 5, "immediately": "yes"}, "immediately must be True or False"),
    ({"every": 5, "end_date": "2030"}, "end_date must be a datetime or epoch ms"),
    ({"every": 5, "key": "a:b"}, "repeat key"),
    ({"every": 5, "key": 7}, "repeat key"),
]


@pytest.mark.parametrize(("repeat", "message"), BAD_REPEATS)
async def test_bad_repeat_is_refused(
    queue: AsyncQueue, r: redis.Redis, repeat: Any, message: str
) -> None:
    with pytest.raises(InvalidOptionError) as err:
        await queue.add("t", None, repeat=repeat)
    assert message in str(err.value)
    assert r.keys("*") == []


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"delay": 5}, "'delay' cannot be given with repeat"),
        ({"timestamp": 1}, "'timestamp' cannot be given with repeat"),
        ({"job_id": ""}, "job_id"),
        ({"attempts": 0}, "attempts must be an integer from 1"),
        ({"nope": 1}, "unknown job option 'nope'"),
    ],
)
async def test_options_with_repeat_are_checked(
    queue: AsyncQueue, r: redis.Redis, options: dict[str, Any], message: str
) -> None:
    with pytest.raises(InvalidOptionError) as err:
        await queue.add("t", None, repeat={"every": 5}, **options)
    assert message in str(err.value)
    assert r.keys("*") == []


async def test_repeat_belongs_to_add_alone(redis_url: str, r: redis.Redis) -> None:
    async with AsyncQueue("q", connection=redis_url) as queue:
        with pytest.raises(InvalidOptionError, match="option of add\\(\\) alone"):
            await queue.add_bulk([("t", None, {"repeat": {"every": 5}})])
        with pytest.raises(InvalidOptionError, match="option of add\\(\\) alone"):
            await queue.upsert_job_scheduler(
                "s", every=5, template=("t", None, {"repeat": {"every": 5}})
            )
    with pytest.raises(InvalidOptionError, match="option of add\\(\\) alone"):
        AsyncQueue("q", connection=redis_url, default_job_options={"repeat": {"every": 5}})
    assert r.keys("*") == []


def test_parse_repeat_keys() -> None:
    rep = parse_repeat({"pattern": "0 0 * * *", "tz": "UTC", "end_date": END})
    assert rep.raw_key("b", "bj") == f"b:bj:{END}:UTC:0 0 * * *"
    # Seen from BullMQ 5.81.5: add("b", .., {repeat: {pattern, tz, endDate}, jobId: "bj"}).
    assert rep.scheduler_id("b", "bj") == "93d1b88e425c5acb03bb76dcf51e0488"
    assert parse_repeat({"every": 60}).raw_key("tock", None) == "tock::::60000"


def test_raw_keys_read_from_the_right() -> None:
    assert parse_raw_key(f"b:bj:{END}:UTC:0 0 * * *") == ("b", "bj", END, "UTC", "0 0 * * *")
    # BullMQ 4 split "d:x::::7000" into name "d", id "x": the name was "d:x".
    assert parse_raw_key("d:x::::7000") == ("d:x", None, None, None, "7000")
    assert parse_raw_key("sched") == ("sched", None, None, None, None)
    entry = RepeatableJob.from_entry("a::::60000", 5.0, {})
    assert (entry.name, entry.every, entry.pattern, entry.next) == ("a", 60_000, None, 5)


def test_legacy_run_dates() -> None:
    entry = RepeatableJob.from_entry("k", 1.0, {"name": "n", "pattern": "0 0 * * *"})
    run = LegacyRun.from_job(
        {
            "name": "n",
            "data": '{"a":1}',
            "opts": '{"attempts":0,"priority":2,"jobId":"repeat:k:1","delay":5,'
            '"repeat":{"pattern":"0 0 * * *","count":4,'
            '"startDate":"2033-05-18T03:33:20.000Z","endDate":2100000000000}}',
        },
        entry,
    )
    assert (run.name, run.data, run.opts, run.count) == ("n", '{"a":1}', '{"priority":2}', 4)
    # tz, limit, pattern, startDate, endDate, every
    assert run.timing == ("", "", "0 0 * * *", str(END), "2100000000000", "")


def test_an_every_run_keeps_no_start_date() -> None:
    """Old Node ignored startDate for every: a migrated every scheduler must not wait for it."""
    entry = RepeatableJob.from_entry("k", 1.0, {"name": "n", "every": "1000"})
    run = LegacyRun.from_job(
        {"name": "n", "opts": '{"repeat":{"every":1000,"startDate":2100000000000}}'}, entry
    )
    assert run.timing == ("", "", "", "", "", "1000")


async def test_a_job_hash_under_a_key_is_no_entry_hash(queue: AsyncQueue, r: redis.Redis) -> None:
    """A key with colons can name an iteration's hash (``K:repeat:s:<ms>`` is scheduler s's
    run): listing does not read it as the entry's hash, and removing the entry keeps it."""
    now = clock.now_ms()
    await queue.upsert_job_scheduler("s", every=60, now_ms=now)
    run = f"bull:q:repeat:s:{now}"
    assert r.hget(run, "rjk") == "s"
    r.zadd("bull:q:repeat", {f"s:{now}": 1})  # as a BullMQ 4 key "s:<ms>" would be
    entries = {e.key: e for e in await queue.get_repeatable_jobs()}
    assert entries[f"s:{now}"].legacy and entries[f"s:{now}"].name == f"s:{now}"
    assert await queue.remove_repeatable_by_key(f"s:{now}")
    assert r.hget(run, "rjk") == "s"
    assert [s.id for s in await queue.get_job_schedulers()] == ["s"]


async def test_migration_never_overwrites_a_scheduler(
    queue: AsyncQueue, r: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    """A BullMQ 4 entry migrates to the MD5 of its key; when a scheduler has that id already
    (the same options added again by BullMQ 5, or corral), nothing is written."""
    sid = md5("t::::60000")
    job = await queue.add("t", {"new": 1}, repeat={"every": 60})
    assert job.repeat_job_key == sid
    before = r.hgetall(f"bull:q:repeat:{sid}")
    old_run = "repeat:0f21315b31c079ad78dfba0fc1efbb02:1900000000000"
    r.zadd("bull:q:repeat", {"t::::60000": 1_900_000_000_000})
    r.hset(
        f"bull:q:{old_run}",
        mapping={"name": "t", "data": '{"old":1}', "opts": '{"repeat":{"every":60000,"count":1}}'},
    )
    r.hset(f"bull:q:{old_run}", "rjk", "t::::60000")
    r.zadd("bull:q:delayed", {old_run: 1_900_000_000_000 * 4096})
    with caplog.at_level(logging.WARNING, logger="corral.schedulers"):
        assert await queue.migrate_repeatable_jobs() == []
    assert "exists already" in caplog.text
    assert r.hgetall(f"bull:q:repeat:{sid}") == before
    assert r.zscore("bull:q:repeat", "t::::60000") == 1_900_000_000_000
    assert r.exists(f"bull:q:{old_run}")


async def test_an_entry_without_a_pending_run_is_left(queue: AsyncQueue, r: redis.Redis) -> None:
    r.zadd("bull:q:repeat", {"gone::::60000": 1_900_000_000_000})
    assert await queue.migrate_repeatable_jobs() == []
    [entry] = await queue.get_repeatable_jobs()
    assert entry.legacy and entry.key == "gone::::60000"
    assert await queue.remove_repeatable_by_key(entry.key)
    assert r.keys("*") == []


async def test_migrate_script_writes_nothing_for_a_stale_read(
    queue: AsyncQueue, r: redis.Redis
) -> None:
    """migrate_repeatable.lua acts only on what its caller read: the entry at that run time,
    still legacy, and the named run still pending (another process may have got there)."""
    key, run = "k", "repeat:k:1900000000000"
    r.zadd("bull:q:repeat", {key: 1_900_000_000_000})
    r.hset("bull:q:repeat:k", mapping={"name": "n", "every": "60000"})
    r.hset(f"bull:q:{run}", mapping={"name": "n", "rjk": key, "opts": "{}"})
    r.zadd("bull:q:delayed", {run: 1_900_000_000_000 * 4096})
    timing = ["", "", "", "", "", "60000"]

    async def migrate(millis: int, pending: str) -> int:
        args = [queue._job_prefix, key, key, millis, pending, 0, "n", "", "", 1, *timing]
        return int(await queue._run(_MIGRATE, args))

    assert await migrate(1_900_000_060_000, run) == 0  # the entry moved on
    assert await migrate(1_900_000_000_000, "repeat:k:1") == 0  # no such pending run
    assert "ic" not in r.hgetall("bull:q:repeat:k")  # type: ignore[operator]
    assert await migrate(1_900_000_000_000, run) == 1
    assert r.hget("bull:q:repeat:k", "ic") == "1"
    assert await migrate(1_900_000_000_000, run) == 0  # a scheduler now: once only
