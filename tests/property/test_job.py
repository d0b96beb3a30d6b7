"""Methods of a job, on a job of each state of the world (and on one that does not exist).

Each example restores the world, takes one job and calls one method with hostile arguments:
it either does what its docstring says or is refused with a corral error, writing nothing.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import redis
from hypothesis import given, settings
from hypothesis import strategies as st

from corral import AsyncJob, AsyncQueue
from corral._codec import encode_data
from tests.property import strategies as s
from tests.property import world
from tests.property.known import skip_known
from tests.property.support import assert_consistent, attempt, examples

#: The scheduler's pending iteration (its id holds the run time, read from the world).
ITERATION = "<iteration>"
job_ids = st.sampled_from([*world.ALL_IDS, ITERATION, "missing", "wait", "meta"])
bound = st.one_of(st.integers(-4, 4), s.numbers)
flag = st.one_of(st.booleans(), s.anything)
token = st.one_of(st.none(), st.just("<lock>"), s.names(huge=False))


class Unprintable(Exception):
    def __str__(self) -> str:
        raise ValueError("no message")


class Surrogate(Exception):
    def __str__(self) -> str:
        return "bad \ud800 text"


#: What a processor may raise (and a caller may pass to move_to_failed): messages UTF-8
#: cannot encode, a megabyte, a __str__ that raises, non-str arguments, not exceptions at all.
errors = st.one_of(
    st.builds(RuntimeError, s.names()),
    st.sampled_from(
        [
            RuntimeError(),
            RuntimeError(b"bytes"),
            RuntimeError(s.MEGABYTE),
            Unprintable(),
            Surrogate(),
            KeyboardInterrupt(),
            SystemExit(3),
            ValueError("\x00\n"),
        ]
    ),
    s.anything,
)

Invoke = Callable[[AsyncJob, dict[str, Any]], Awaitable[Any]]
#: method -> (its arguments, how to call it, words a refusal names).
METHODS: dict[str, tuple[st.SearchStrategy[dict[str, Any]], Invoke, list[str]]] = {
    "update_data": (
        st.fixed_dictionaries({"data": s.data}),
        lambda j, a: j.update_data(**a),
        ["data"],
    ),
    "update_progress": (
        st.fixed_dictionaries({"progress": s.data}),
        lambda j, a: j.update_progress(**a),
        ["progress", "data"],
    ),
    "log": (
        st.fixed_dictionaries({"line": st.one_of(s.names(), s.anything)}),
        lambda j, a: j.log(**a),
        ["log line", "line"],
    ),
    "get_logs": (
        st.fixed_dictionaries({"start": bound, "end": bound, "asc": flag}),
        lambda j, a: j.get_logs(**a),
        ["start", "end", "asc"],
    ),
    "clear_logs": (
        st.fixed_dictionaries({"keep": st.one_of(st.integers(0, 4), s.numbers)}),
        lambda j, a: j.clear_logs(**a),
        ["keep"],
    ),
    "change_delay": (
        st.fixed_dictionaries({"delay": st.one_of(st.floats(0, 3600), s.durations)}),
        lambda j, a: j.change_delay(**a),
        ["delay"],
    ),
    "change_priority": (
        st.fixed_dictionaries({"priority": st.one_of(st.integers(0, 10), s.numbers), "lifo": flag}),
        lambda j, a: j.change_priority(**a),
        ["priority", "lifo"],
    ),
    "promote": (st.just({}), lambda j, a: j.promote(), []),
    "retry": (
        st.fixed_dictionaries(
            {
                "state": st.one_of(st.sampled_from(["failed", "completed"]), s.anything),
                "reset_attempts_made": flag,
                "reset_attempts_started": flag,
            }
        ),
        lambda j, a: j.retry(**a),
        ["state", "reset_attempts_made", "reset_attempts_started"],
    ),
    "remove": (
        st.fixed_dictionaries({"remove_children": flag}),
        lambda j, a: j.remove(**a),
        ["remove_children"],
    ),
    "extend_lock": (
        st.fixed_dictionaries(
            {"duration": st.one_of(st.floats(0.001, 60), s.durations), "token": token}
        ),
        lambda j, a: j.extend_lock(**a),
        ["duration", "token"],
    ),
    "move_to_delayed": (
        st.fixed_dictionaries(
            {"timestamp_ms": st.one_of(st.integers(0, 2**42), s.numbers), "token": token}
        ),
        lambda j, a: j.move_to_delayed(**a),
        ["timestamp_ms", "token"],
    ),
    "move_to_wait": (
        st.fixed_dictionaries({"token": token}),
        lambda j, a: j.move_to_wait(**a),
        ["token"],
    ),
    "move_to_failed": (
        st.fixed_dictionaries({"error": errors, "token": token}),
        lambda j, a: j.move_to_failed(**a),
        ["error", "token"],
    ),
    "move_to_completed": (
        st.fixed_dictionaries({"return_value": s.data, "token": token}),
        lambda j, a: j.move_to_completed(**a),
        ["return_value", "return value", "token"],
    ),
}


async def _job(r: redis.Redis, queue: AsyncQueue, job_id: str) -> AsyncJob:
    if job_id == ITERATION:
        waiting = [str(i) for i in r.lrange("bull:q:wait", 0, -1)]
        job_id = next(i for i in waiting if i.startswith("repeat:"))
    job = await queue.get_job(job_id)
    if job is None:  # a job object whose job is gone: every method must say so cleanly
        job = AsyncJob(queue_name="q", id=job_id, name="gone", data=None)
        job.queue = queue
    return job


def check_effect(r: redis.Redis, job: AsyncJob, call: str, a: dict[str, Any], value: Any) -> None:
    """The documented effect of a method that succeeded."""
    key = f"bull:q:{job.id}"
    if call == "update_data":
        assert r.hget(key, "data") == encode_data(a["data"])
    elif call == "update_progress":
        assert r.hget(key, "progress") == encode_data(a["progress"])
    elif call == "log":
        assert value == r.llen(f"{key}:logs")
    elif call == "get_logs":
        lines, total = value
        assert len(lines) <= total == r.llen(f"{key}:logs")
    elif call == "change_delay":
        assert r.zscore("bull:q:delayed", job.id) is not None
    elif call == "change_priority":
        assert int(r.hget(key, "priority") or 0) == a["priority"]
    elif call == "promote":
        assert r.zscore("bull:q:delayed", job.id) is None
    elif call == "retry":
        assert job.id in r.lrange("bull:q:wait", 0, -1) or r.zscore("bull:q:prioritized", job.id)
    elif call == "remove":
        assert not r.exists(key)
    elif call == "move_to_completed":
        assert r.zscore("bull:q:completed", job.id) is not None
    elif call == "move_to_failed":
        assert r.zscore("bull:q:failed", job.id) is not None or r.zscore("bull:q:delayed", job.id)
    assert_consistent(r, after=f"job {job.id}.{call}(**{a!r:.200})")


@pytest.mark.parametrize("call", sorted(METHODS))
@settings(max_examples=examples(40))
@given(job_id=job_ids, payload=st.data())
async def test_job_method(
    raw: redis.Redis,
    r: redis.Redis,
    redis_url: str,
    queue: AsyncQueue,
    call: str,
    job_id: str,
    payload: st.DataObject,
) -> None:
    await world.saved_world(raw, redis_url)
    strategy, invoke, words = METHODS[call]
    args = payload.draw(strategy, label="args")
    if args.get("token") == "<lock>":
        args["token"] = r.get(f"bull:q:{job_id}:lock")
    skip_known(f"job.{call}", job_id=job_id, **args)
    job = await _job(r, queue, job_id)
    what = f"job {job_id}.{call}(**{args!r:.300})"
    outcome = await attempt(raw, lambda: invoke(job, args), names=words, what=what)
    if outcome.ok:
        check_effect(r, job, call, args, outcome.value)
