"""Job schedulers against a real server: the keys and fields Node BullMQ 6.7.0 writes, upsert,
get/list/count/remove, next iterations, limit and end_date, and refused input."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
import redis

from corral import AsyncQueue, InvalidOptionError, JobStateError, _scripts, clock
from corral._async.queue_schedulers import schedule_next_iteration
from corral.schedule import cron_next
from tests._async.support import events


def job_hash(r: redis.Redis, job_id: str) -> dict[str, Any]:
    fields: dict[str, Any] = r.hgetall(f"bull:q:{job_id}")  # type: ignore[assignment]
    if "opts" in fields:
        fields["opts"] = json.loads(fields["opts"])
    return fields


def pending(r: redis.Redis) -> list[str]:
    """Every job waiting to run: wait, prioritized and delayed."""
    waiting: list[str] = r.lrange("bull:q:wait", 0, -1)  # type: ignore[assignment]
    prioritized: list[str] = r.zrange("bull:q:prioritized", 0, -1)  # type: ignore[assignment]
    delayed: list[str] = r.zrange("bull:q:delayed", 0, -1)  # type: ignore[assignment]
    return waiting + prioritized + delayed


# -- what upsert writes ----------------------------------------------------------------------


async def test_upsert_every_writes_bullmq_layout(queue: AsyncQueue, r: redis.Redis) -> None:
    now = clock.now_ms()
    job = await queue.upsert_job_scheduler(
        "ev",
        every=2,
        template=("tick", {"a": 1}, {"attempts": 3, "remove_on_complete": 10}),
        now_ms=now,
    )
    iteration = f"repeat:ev:{now}"
    assert job is not None and job.id == iteration
    assert job.repeat_job_key == "ev" and job.data == {"a": 1}
    assert r.zrange("bull:q:repeat", 0, -1, withscores=True) == [("ev", float(now))]
    # Field for field what Node BullMQ 6.7.0 writes (first run now, offset = now mod every).
    assert r.hgetall("bull:q:repeat:ev") == {
        "name": "tick",
        "every": "2000",
        "offset": str(now % 2000),
        "opts": '{"attempts":3,"removeOnComplete":10}',
        "data": '{"a":1}',
        "ic": "1",
    }
    assert job_hash(r, iteration) == {
        "name": "tick",
        "data": '{"a":1}',
        "opts": {
            "repeatJobKey": "ev",
            "jobId": iteration,
            "repeat": {"count": 1, "every": 2000},
            "attempts": 3,
            "removeOnComplete": 10,
            "timestamp": now,
            "delay": 0,
        },
        "timestamp": str(now),
        "delay": "0",
        "priority": "0",
        "rjk": "ev",
    }
    assert r.lrange("bull:q:wait", 0, -1) == [iteration]
    assert r.get("bull:q:id") == "1"  # iterations count in K:id, as in BullMQ
    assert events(r) == [
        {"event": "added", "jobId": iteration, "name": "tick"},
        {"event": "waiting", "jobId": iteration},
    ]


async def test_upsert_cron_with_tz(queue: AsyncQueue, r: redis.Redis) -> None:
    now = clock.now_ms()
    run = cron_next("*/5 * * * * *", "Europe/Paris", now)
    job = await queue.upsert_job_scheduler(
        "cr", cron="*/5 * * * * *", tz="Europe/Paris", template={"name": "c"}, now_ms=now
    )
    iteration = f"repeat:cr:{run}"
    assert job is not None and job.id == iteration
    assert r.hgetall("bull:q:repeat:cr") == {
        "name": "c",
        "tz": "Europe/Paris",
        "pattern": "*/5 * * * * *",
        "offset": "0",
        "ic": "1",
    }
    assert job_hash(r, iteration) == {
        "name": "c",
        "data": "{}",  # no template data: BullMQ's iterations carry {}
        "opts": {
            "repeatJobKey": "cr",
            "jobId": iteration,
            "repeat": {"count": 1, "pattern": "*/5 * * * * *", "tz": "Europe/Paris"},
            "timestamp": now,
            "delay": run - now,
            "prevMillis": run,
        },
        "timestamp": str(now),
        "delay": str(run - now),
        "priority": "0",
        "rjk": "cr",
    }
    assert r.zrange("bull:q:delayed", 0, -1, withscores=True) == [(iteration, run * 4096.0)]
    assert r.zscore("bull:q:repeat", "cr") == run


async def test_upsert_stores_dates_limit_and_template_priority(
    queue: AsyncQueue, r: redis.Redis
) -> None:
    now = clock.now_ms()
    start, end = now + 60_000, now + 3_600_000
    job = await queue.upsert_job_scheduler(
        "s",
        every=timedelta(minutes=1),
        limit=5,
        start_date=start,
        end_date=end,
        template=("p", None, {"priority": 3}),
        now_ms=now,
    )
    assert job is not None and job.id == f"repeat:s:{start}"
    # The fields Node BullMQ writes (compared as a dict: HGETALL order is the server's).
    assert r.hgetall("bull:q:repeat:s") == {
        "name": "p",
        "limit": "5",
        "startDate": str(start),
        "endDate": str(end),
        "every": "60000",
        "offset": str(start % 60_000),
        "opts": '{"attempts":0,"priority":3}',
        "ic": "1",
    }
    opts = job_hash(r, job.id)["opts"]
    assert opts["repeat"] == {
        "count": 1,
        "every": 60000,
        "startDate": start,
        "endDate": end,
        "limit": 5,
    }
    assert job_hash(r, job.id)["priority"] == "3"
    # Delayed first; promoted into prioritized by a fetch once due.
    assert r.zrange("bull:q:delayed", 0, -1) == [job.id]


async def test_default_job_options_apply_to_the_template(redis_url: str, r: redis.Redis) -> None:
    async with AsyncQueue("q", connection=redis_url, default_job_options={"attempts": 4}) as q:
        await q.upsert_job_scheduler("d", every=10, template=("n", 1))
    assert r.hget("bull:q:repeat:d", "opts") == '{"attempts":4}'


# -- reading and removing --------------------------------------------------------------------


async def test_get_list_count_and_remove(queue: AsyncQueue, r: redis.Redis) -> None:
    now = clock.now_ms()
    await queue.upsert_job_scheduler("a", every=60, template=("ta", {"x": 1}), now_ms=now)
    await queue.upsert_job_scheduler("b", every=30, now_ms=now + 1)
    await queue.upsert_job_scheduler("c", cron="0 0 1 1 *", tz="UTC", now_ms=now + 2)
    assert await queue.count_job_schedulers() == 3

    a = await queue.get_job_scheduler("a")
    assert a is not None
    assert (a.id, a.name, a.every, a.pattern, a.iteration_count, a.next_run) == (
        "a", "ta", 60_000, None, 1, now
    )  # fmt: skip
    assert a.offset == now % 60_000 and a.template.data == {"x": 1} and a.template.opts == {}
    c = await queue.get_job_scheduler("c")
    assert c is not None and c.pattern == "0 0 1 1 *" and c.tz == "UTC" and c.every is None
    assert await queue.get_job_scheduler("nope") is None

    # Latest next run first by default, as BullMQ lists them.
    assert [s.id for s in await queue.get_job_schedulers()] == ["c", "b", "a"]
    assert [s.id for s in await queue.get_job_schedulers(asc=True)] == ["a", "b", "c"]
    assert [s.id for s in await queue.get_job_schedulers(0, 0, asc=True)] == ["a"]

    # a's iteration is waiting, c's delayed: both go, each with a `removed` event.
    assert await queue.remove_job_scheduler("a") is True
    assert await queue.remove_job_scheduler("c") is True
    assert await queue.remove_job_scheduler("a") is False
    assert await queue.count_job_schedulers() == 1
    assert r.exists("bull:q:repeat:a", "bull:q:repeat:c", f"bull:q:repeat:a:{now}") == 0
    assert pending(r) == [f"repeat:b:{now + 1}"]
    removed = [e for e in events(r) if e["event"] == "removed"]
    assert removed == [
        {"event": "removed", "jobId": f"repeat:a:{now}", "prev": "waiting"},
        {"event": "removed", "jobId": f"repeat:c:{c.next_run}", "prev": "delayed"},
    ]


# -- upsert again ----------------------------------------------------------------------------


async def test_upsert_same_timing_keeps_the_run_and_rewrites_the_iteration(
    queue: AsyncQueue, r: redis.Redis
) -> None:
    now = clock.now_ms()
    await queue.upsert_job_scheduler("ev", every=1, template=("t", {"v": 1}), now_ms=now)
    # Later, 8 processes could say the same: one pending iteration, same run, new data.
    for i in range(8):
        job = await queue.upsert_job_scheduler(
            "ev", every=1, template=("t", {"v": 2}), now_ms=now + 2500 + i
        )
        assert job is not None and job.id == f"repeat:ev:{now}"
    assert pending(r) == [f"repeat:ev:{now}"]
    fields = job_hash(r, f"repeat:ev:{now}")
    assert fields["data"] == '{"v":2}' and fields["timestamp"] == str(now + 2507)
    sched = await queue.get_job_scheduler("ev")
    assert sched is not None and sched.iteration_count == 1 and sched.next_run == now


async def test_upsert_new_timing_replaces_the_pending_iteration(
    queue: AsyncQueue, r: redis.Redis
) -> None:
    now = clock.now_ms()
    await queue.upsert_job_scheduler("ev", every=1, now_ms=now)
    await queue.upsert_job_scheduler("ev", cron="0 0 1 1 *", tz="UTC", now_ms=now + 10)
    run = cron_next("0 0 1 1 *", "UTC", now + 10)
    assert pending(r) == [f"repeat:ev:{run}"]
    assert r.exists(f"bull:q:repeat:ev:{now}") == 0
    job = await queue.upsert_job_scheduler("ev", every=3, now_ms=now + 20)
    assert job is not None and job.id == f"repeat:ev:{now + 20}"
    assert pending(r) == [job.id]
    # ic and (for every) offset are kept, as BullMQ does; the hash is rewritten otherwise.
    assert r.hgetall("bull:q:repeat:ev") == {
        "name": "ev",
        "every": "3000",
        "offset": str(now % 1000),
        "ic": "1",
    }


# -- next iterations -------------------------------------------------------------------------


async def test_next_iteration_is_created_once(queue: AsyncQueue, r: redis.Redis) -> None:
    now = clock.now_ms()
    job = await queue.upsert_job_scheduler("ev", every=1, now_ms=now)
    assert job is not None
    assert await schedule_next_iteration(queue, job, now_ms=now + 5) == f"repeat:ev:{now + 1000}"
    # A second call (or a worker taking the job again after a stall) creates nothing.
    assert await schedule_next_iteration(queue, job, now_ms=now + 6) is None
    assert r.hget("bull:q:repeat:ev", "ic") == "2"
    assert sorted(pending(r)) == sorted([job.id, f"repeat:ev:{now + 1000}"])


async def test_late_iteration_skips_missed_runs(queue: AsyncQueue) -> None:
    now = clock.now_ms()
    job = await queue.upsert_job_scheduler("ev", every=1, now_ms=now)
    assert job is not None
    assert await schedule_next_iteration(queue, job, now_ms=now + 3_500) == (
        f"repeat:ev:{now + 4000}"
    )


async def test_replaced_iteration_creates_nothing(queue: AsyncQueue) -> None:
    now = clock.now_ms()
    old = await queue.upsert_job_scheduler("ev", every=1, now_ms=now)
    await queue.upsert_job_scheduler("ev", every=2, now_ms=now + 1)
    assert old is not None
    assert await schedule_next_iteration(queue, old, now_ms=now + 2) is None
    await queue.remove_job_scheduler("ev")
    assert await schedule_next_iteration(queue, old, now_ms=now + 2) is None


async def test_limit_stops_the_iterations(queue: AsyncQueue, r: redis.Redis) -> None:
    now = clock.now_ms()
    job = await queue.upsert_job_scheduler("l", every=1, limit=3, now_ms=now)
    made = []
    t = now
    while job is not None:
        t += 1000
        nxt = await schedule_next_iteration(queue, job, now_ms=t - 990)
        made.append(nxt)
        job = await queue.get_job(nxt) if nxt else None
    assert made == [f"repeat:l:{now + 1000}", f"repeat:l:{now + 2000}", None]
    # The scheduler stays, scored at its last run, as BullMQ leaves it.
    sched = await queue.get_job_scheduler("l")
    assert sched is not None and sched.iteration_count == 3 and sched.next_run == now + 2000
    # Once its iterations are gone (they ran), upserting it again restarts it at the next
    # multiple of every, with offset 0, as BullMQ does.
    await queue.drain(delayed=True)
    restarted = await queue.upsert_job_scheduler("l", every=1, limit=3, now_ms=now + 5_500)
    assert restarted is not None
    assert restarted.id == f"repeat:l:{(now + 5_500) // 1000 * 1000 + 1000}"
    assert r.hget("bull:q:repeat:l", "offset") == "0"


async def test_end_date_stops_the_iterations(queue: AsyncQueue) -> None:
    now = clock.now_ms()
    job = await queue.upsert_job_scheduler("e", every=1, end_date=now + 1500, now_ms=now)
    assert job is not None
    # Created while end_date has not passed, even if it runs after it (BullMQ's rule).
    second = await schedule_next_iteration(queue, job, now_ms=now + 900)
    assert second == f"repeat:e:{now + 1000}"
    nxt = await queue.get_job(second)
    assert nxt is not None
    assert await schedule_next_iteration(queue, nxt, now_ms=now + 1600) is None

    # cron: no tick after end_date. From 200 ms past a second, the ticks are at +800, +1800...
    base = now // 1000 * 1000 + 200
    short = await queue.upsert_job_scheduler(
        "c1", cron="* * * * * *", tz="UTC", end_date=base + 1500, now_ms=base
    )
    longer = await queue.upsert_job_scheduler(
        "c2", cron="* * * * * *", tz="UTC", end_date=base + 1800, now_ms=base
    )
    assert short is not None and short.id == f"repeat:c1:{base + 800}"
    assert longer is not None and longer.id == f"repeat:c2:{base + 800}"
    assert await schedule_next_iteration(queue, short, now_ms=base + 805) is None
    made = await schedule_next_iteration(queue, longer, now_ms=base + 805)
    assert made == f"repeat:c2:{base + 1800}"


# -- refused input ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "exactly one of every"),
        ({"every": 1, "cron": "* * * * *"}, "exactly one of every"),
        ({"every": 0}, "every must be at least 1 ms"),
        ({"cron": "99 * * * *"}, "invalid cron pattern '99"),
        ({"cron": "* * * * *", "tz": "Nowhere/Land"}, "unknown time zone 'Nowhere/Land'"),
        ({"every": 1, "limit": 0}, "limit must be"),
        ({"every": 1, "start_date": 2_000, "end_date": 1_000}, "start_date"),
        ({"every": 1, "end_date": 1_000}, "end_date .* is before the first run"),
        ({"every": 1, "template": ("n", {1, 2})}, "data must be JSON-serializable"),
        ({"every": 1, "template": ("n", 1, {"job_id": "x"})}, "cannot set 'job_id'"),
        ({"every": 1, "template": ("n", 1, {"delay": 5})}, "cannot set 'delay'"),
        ({"every": 1, "template": ("n", 1, {"atempts": 5})}, "unknown job option 'atempts'"),
        ({"every": 1, "template": ("", 1)}, "template name"),
        ({"every": 1, "template": {"nam": "x"}}, "template takes"),
        ({"every": 1, "template": "name"}, "template must be"),
    ],
)
async def test_refused_input_writes_nothing(
    queue: AsyncQueue, r: redis.Redis, kwargs: dict[str, Any], message: str
) -> None:
    await queue.upsert_job_scheduler("ok", every=1)
    before = r.dbsize()
    with pytest.raises(InvalidOptionError, match=message):
        await queue.upsert_job_scheduler("s", **kwargs)
    assert r.dbsize() == before
    assert await queue.count_job_schedulers() == 1


async def test_refused_scheduler_id(queue: AsyncQueue, r: redis.Redis) -> None:
    with pytest.raises(InvalidOptionError, match="scheduler id"):
        await queue.upsert_job_scheduler("", every=1)
    assert r.dbsize() == 0


async def test_pending_iteration_cannot_be_removed_but_past_ones_can(
    queue: AsyncQueue, r: redis.Redis
) -> None:
    first = await queue.upsert_job_scheduler("tick", every=60, template=("tick", {}))
    assert first is not None and first.id.startswith("repeat:tick:")
    with pytest.raises(JobStateError, match="pending iteration of a job scheduler"):
        await first.remove()
    assert r.exists(f"bull:q:{first.id}") == 1
    # Once worked, the iteration is history: removing it leaves no trace in any set.
    worker_token = "tok"
    reply = await queue._run(
        _scripts.MOVE_TO_ACTIVE, [queue._job_prefix, clock.now_ms(), 1, worker_token, 0, 30_000, ""]
    )
    taken = queue._bind(str(reply[2]), {}, token=str(reply[3]))
    await taken.refresh()
    await schedule_next_iteration(queue, taken)
    await taken.move_to_completed("done", str(reply[3]))
    await taken.remove()
    assert r.exists(f"bull:q:{first.id}") == 0
    assert r.zscore("bull:q:completed", first.id) is None
    assert r.zcard("bull:q:repeat") == 1
