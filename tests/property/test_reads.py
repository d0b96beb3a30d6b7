"""The queue's getters: any input gives an answer or a corral error, and writes nothing.

The world (``world.py``) is built once per test; reads never change it, which is checked
after every example, so the examples of a test share it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import redis
from hypothesis import given, settings
from hypothesis import strategies as st

from corral import AsyncQueue, JobState
from tests.property import strategies as s
from tests.property import world
from tests.property.known import skip_known
from tests.property.support import examples, unchanged

STATE_NAMES = [
    "waiting",
    "wait",
    "active",
    "delayed",
    "prioritized",
    "completed",
    "failed",
    "waiting-children",
    "waiting_children",
    "paused",
    "unknown",
    "WAITING",
    *JobState,
]
state = st.one_of(st.sampled_from(STATE_NAMES), s.anything)
states = st.one_of(st.none(), state, st.lists(state, max_size=3))
job_id = st.one_of(st.sampled_from(world.ALL_IDS), s.names(), s.anything)
bound = st.one_of(st.integers(-5, 5), s.numbers)
flag = st.one_of(st.booleans(), s.anything)

#: call name -> (strategy of its keyword arguments, how to call it).
Read = tuple[st.SearchStrategy[dict[str, Any]], Callable[[AsyncQueue, dict[str, Any]], Any]]
READS: dict[str, Read] = {
    "get_job": (st.fixed_dictionaries({"job_id": job_id}), lambda q, a: q.get_job(**a)),
    "get_job_state": (
        st.fixed_dictionaries({"job_id": job_id}),
        lambda q, a: q.get_job_state(**a),
    ),
    "get_jobs": (
        st.fixed_dictionaries({"states": states, "start": bound, "end": bound, "asc": flag}),
        lambda q, a: q.get_jobs(**a),
    ),
    "get_job_counts": (
        st.fixed_dictionaries({"states": st.lists(state, max_size=3)}),
        lambda q, a: q.get_job_counts(*a["states"]),
    ),
    "get_job_logs": (
        st.fixed_dictionaries({"job_id": job_id, "start": bound, "end": bound, "asc": flag}),
        lambda q, a: q.get_job_logs(**a),
    ),
    "get_metrics": (
        st.fixed_dictionaries(
            {
                "kind": st.one_of(st.sampled_from(["completed", "failed"]), s.anything),
                "start": bound,
                "end": bound,
            }
        ),
        lambda q, a: q.get_metrics(**a),
    ),
    "get_counts_per_priority": (
        st.fixed_dictionaries(
            {
                "priorities": st.one_of(
                    st.lists(st.one_of(st.integers(0, 10), s.numbers), max_size=3), s.anything
                )
            }
        ),
        lambda q, a: q.get_counts_per_priority(**a),
    ),
    "get_deduplication_job_id": (
        st.fixed_dictionaries(
            {"deduplication_id": st.one_of(st.just("dup"), s.names(), s.anything)}
        ),
        lambda q, a: q.get_deduplication_job_id(**a),
    ),
    "get_job_scheduler": (
        st.fixed_dictionaries({"scheduler_id": st.one_of(st.just("sched"), s.names(), s.anything)}),
        lambda q, a: q.get_job_scheduler(**a),
    ),
    "get_job_schedulers": (
        st.fixed_dictionaries({"start": bound, "end": bound, "asc": flag}),
        lambda q, a: q.get_job_schedulers(**a),
    ),
    "get_completed": (
        st.fixed_dictionaries({"start": bound, "end": bound}),
        lambda q, a: q.get_completed(**a),
    ),
    "get_rate_limit_ttl": (
        st.fixed_dictionaries({"max_jobs": st.one_of(st.none(), st.integers(1, 5), s.numbers)}),
        lambda q, a: q.get_rate_limit_ttl(**a),
    ),
}


def check_answer(call: str, args: dict[str, Any], value: Any) -> None:
    """What a read that answered must have answered."""
    if call == "get_job" and value is not None:
        assert value.id == args["job_id"]
    elif call == "get_job_state":
        assert isinstance(value, JobState)
        if args["job_id"] in world.ALL_IDS:
            assert value is not JobState.UNKNOWN
    elif call in ("get_jobs", "get_completed"):
        assert isinstance(value, list) and all(
            job.id in world.ALL_IDS or job.id.startswith("repeat:") for job in value
        )
    elif call == "get_job_counts":
        assert all(isinstance(n, int) and n >= 0 for n in value.values())
    elif call == "get_job_logs":
        lines, total = value
        assert isinstance(total, int) and len(lines) <= total


@pytest.mark.parametrize("call", sorted(READS))
@settings(max_examples=examples(60))
@given(payload=st.data())
async def test_read(
    raw: redis.Redis, redis_url: str, queue: AsyncQueue, call: str, payload: st.DataObject
) -> None:
    if not raw.exists("bull:q:meta"):  # once per test: reads leave the world as it is
        await world.saved_world(raw, redis_url)
    strategy, invoke = READS[call]
    args = payload.draw(strategy, label="args")
    skip_known(call, **args)
    outcome = await unchanged(raw, lambda: invoke(queue, args), what=f"{call}(**{args!r:.300})")
    if outcome.ok:
        check_answer(call, args, outcome.value)
