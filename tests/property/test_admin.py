"""Queue-wide writes: removal, clean, drain, obliterate, pause, bulk moves, settings and limits.

Each example starts from the world (``world.py``), restored from a snapshot. A call either
does what its docstring says, or is refused with a corral error and writes nothing; after a
settings call succeeds, the queue must still take adds and hand out jobs.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import redis
from hypothesis import given, settings
from hypothesis import strategies as st

from corral import AsyncQueue, Worker
from corral.options import duration_ms
from tests.property import strategies as s
from tests.property import world
from tests.property.known import skip_known
from tests.property.support import assert_consistent, attempt, examples

job_id = st.one_of(st.sampled_from(world.ALL_IDS), s.names(), s.anything)
flag = st.one_of(st.booleans(), s.anything)
count = st.one_of(st.integers(0, 5), s.numbers)
state = st.one_of(
    st.sampled_from(
        [
            "completed",
            "failed",
            "wait",
            "waiting",
            "paused",
            "active",
            "delayed",
            "prioritized",
            "waiting-children",
        ]
    ),
    s.anything,
)
event_fields = st.one_of(
    st.none(),
    st.dictionaries(
        st.one_of(s.names(huge=False), s.ints, st.none(), st.booleans()), s.data, max_size=3
    ),
    s.anything,
)

Invoke = Callable[[AsyncQueue, dict[str, Any]], Awaitable[Any]]
#: call name -> (its arguments, how to call it, words a refusal names).
WRITES: dict[str, tuple[st.SearchStrategy[dict[str, Any]], Invoke, list[str]]] = {
    "remove": (
        st.fixed_dictionaries({"job_id": job_id, "remove_children": flag}),
        lambda q, a: q.remove(**a),
        ["job_id", "remove_children"],
    ),
    "clean": (
        st.fixed_dictionaries(
            {"grace": st.one_of(st.just(0), s.durations), "limit": count, "state": state}
        ),
        lambda q, a: q.clean(**a),
        ["grace", "limit", "state"],
    ),
    "drain": (st.fixed_dictionaries({"delayed": flag}), lambda q, a: q.drain(**a), ["delayed"]),
    "obliterate": (
        st.fixed_dictionaries({"force": flag}),
        lambda q, a: q.obliterate(**a),
        ["force"],
    ),
    "pause": (st.just({}), lambda q, a: q.pause(), []),
    "resume": (st.just({}), lambda q, a: q.resume(), []),
    "retry_jobs": (
        st.fixed_dictionaries(
            {
                "state": state,
                "count": st.one_of(st.integers(1, 3), s.numbers),
                "timestamp": st.one_of(st.none(), s.numbers),
            }
        ),
        lambda q, a: q.retry_jobs(**a),
        ["state", "count", "timestamp"],
    ),
    "promote_jobs": (
        st.fixed_dictionaries({"count": st.one_of(st.integers(1, 3), s.numbers)}),
        lambda q, a: q.promote_jobs(**a),
        ["count"],
    ),
    "set_max_len_events": (
        st.fixed_dictionaries({"max_len": st.one_of(st.integers(0, 100), s.numbers)}),
        lambda q, a: q.set_max_len_events(**a),
        ["max_len"],
    ),
    "trim_events": (
        st.fixed_dictionaries(
            {"max_len": st.one_of(st.integers(0, 10), s.numbers), "approximate": flag}
        ),
        lambda q, a: q.trim_events(**a),
        ["max_len", "approximate"],
    ),
    "publish_event": (
        st.fixed_dictionaries({"name": st.one_of(s.names(), s.anything), "fields": event_fields}),
        lambda q, a: q.publish_event(**a),
        ["event name", "fields", "name"],
    ),
    "set_global_concurrency": (
        st.fixed_dictionaries({"concurrency": st.one_of(st.integers(1, 5), s.numbers)}),
        lambda q, a: q.set_global_concurrency(**a),
        ["concurrency"],
    ),
    "set_global_rate_limit": (
        st.fixed_dictionaries(
            {
                "max_jobs": st.one_of(st.integers(1, 5), s.numbers),
                "duration": st.one_of(st.floats(0.001, 60), s.durations),
            }
        ),
        lambda q, a: q.set_global_rate_limit(**a),
        ["max_jobs", "duration"],
    ),
    "rate_limit": (
        st.fixed_dictionaries({"duration": st.one_of(st.floats(0.001, 60), s.durations)}),
        lambda q, a: q.rate_limit(**a),
        ["duration"],
    ),
    "remove_deduplication_key": (
        st.fixed_dictionaries(
            {"deduplication_id": st.one_of(st.just("dup"), s.names(), s.anything)}
        ),
        lambda q, a: q.remove_deduplication_key(**a),
        ["deduplication_id", "deduplication id"],
    ),
    "remove_job_scheduler": (
        st.fixed_dictionaries({"scheduler_id": st.one_of(st.just("sched"), s.names(), s.anything)}),
        lambda q, a: q.remove_job_scheduler(**a),
        ["scheduler_id", "scheduler id"],
    ),
}

#: Calls that change a setting the scripts read later: after them the queue must still work.
SETTINGS = {
    "set_max_len_events",
    "set_global_concurrency",
    "set_global_rate_limit",
    "rate_limit",
    "pause",
    "resume",
    "publish_event",
}


async def check_effect(
    r: redis.Redis, q: AsyncQueue, call: str, a: dict[str, Any], value: Any
) -> None:
    """The documented effect of a write that succeeded."""
    if call == "remove" and value:
        assert not r.exists(f"bull:q:{a['job_id']}")
    elif call == "clean":
        assert all(not r.exists(f"bull:q:{i}") for i in value), f"clean left {value}"
    elif call == "drain":
        assert r.llen("bull:q:wait") == 0 and r.zcard("bull:q:prioritized") == 0
        assert r.zcard("bull:q:delayed") == (0 if a["delayed"] else 1)  # d1
    elif call == "obliterate":
        assert not list(r.scan_iter(match="bull:q:*")), "obliterate left keys"
        return
    elif call == "pause":
        assert await q.is_paused()
    elif call == "resume":
        assert not await q.is_paused()
    elif call == "promote_jobs":
        assert r.zcard("bull:q:delayed") == 0 and value == 1  # d1
    elif call == "set_global_concurrency":
        assert await q.get_global_concurrency() == a["concurrency"]
    elif call == "set_global_rate_limit":
        got = await q.get_global_rate_limit()
        assert got is not None and got[0] == a["max_jobs"]
    elif call == "rate_limit":
        if duration_ms("duration", a["duration"]) >= 1000:  # a shorter one may be over now
            assert await q.get_rate_limit_ttl() > 0
    elif not isinstance(a.get("deduplication_id", a.get("scheduler_id", "")), str):
        pass  # coerced by str() on the way (finding F5): nothing to read back by that id
    elif call == "remove_deduplication_key":
        assert await q.get_deduplication_job_id(a["deduplication_id"]) is None
    elif call == "remove_job_scheduler":
        assert await q.get_job_scheduler(a["scheduler_id"]) is None
    assert_consistent(r, after=f"{call}(**{a!r:.200})")


async def still_works(raw: redis.Redis, q: AsyncQueue, url: str, what: str) -> None:
    """After a settings change: an add and a manual fetch answer, or refuse cleanly."""
    await attempt(raw, lambda: q.add("after", {"n": 1}), what=f"add after {what}")
    worker = Worker("q", None, connection=url, lock_duration=60)
    try:
        await attempt(raw, worker.get_next_job, what=f"get_next_job after {what}")
    finally:
        await worker.close()


@pytest.mark.parametrize("call", sorted(WRITES))
@settings(max_examples=examples(50))
@given(payload=st.data())
async def test_write(
    raw: redis.Redis,
    r: redis.Redis,
    redis_url: str,
    queue: AsyncQueue,
    call: str,
    payload: st.DataObject,
) -> None:
    await world.saved_world(raw, redis_url)
    strategy, invoke, words = WRITES[call]
    args = payload.draw(strategy, label="args")
    skip_known(call, **args)
    what = f"{call}(**{args!r:.300})"
    outcome = await attempt(raw, lambda: invoke(queue, args), names=words, what=what)
    if outcome.ok:
        await check_effect(r, queue, call, args, outcome.value)
        if call in SETTINGS:
            await still_works(raw, queue, redis_url, what)
