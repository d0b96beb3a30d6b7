"""A flow's children finishing: parent bookkeeping, failure policies, and the job methods.

What Node BullMQ 6.7.0 was seen to write: a completed child leaves ``:dependencies`` and
puts its return value in ``:processed``; the last one releases the parent with
``waiting{prev: waiting-children}`` on the parent's queue (before the child's own event).
A child's final failure acts by its policy: fpof -> ``:unsuccessful`` + ``defa`` and the
parent released at once, to be failed by the next fetch; cpof -> ``:failed`` and released at
once; idof -> ``:failed``, released when last; rdof -> dropped, released when last; none ->
the parent keeps waiting.
"""

from __future__ import annotations

import pytest
import redis

from corral import (
    AsyncFlowProducer,
    AsyncJob,
    AsyncQueue,
    FlowJob,
    JobNode,
    JobNotFoundError,
    JobState,
    LockMismatchError,
    _scripts,
    clock,
)
from tests._async.support import events

T = 1_700_000_000_000


@pytest.fixture(autouse=True)
def frozen(monkeypatch: pytest.MonkeyPatch) -> int:
    """Scripts that take the time get ``T`` (the jobs' timestamps stay real)."""
    monkeypatch.setattr(clock, "now_ms", lambda: T)
    return T


async def take(queue: AsyncQueue, count: int = 10) -> dict[str, AsyncJob]:
    """Fetch ready jobs as a worker would; job name -> job."""
    reply = await queue._run(
        _scripts.MOVE_TO_ACTIVE, [queue._job_prefix, T, count, "tok", 0, 30000, ""]
    )
    jobs = [
        queue._bind(f.job_id, f.fields, token=f.token) for f in _scripts.parse_fetched(reply, 2)
    ]
    return {job.name: job for job in jobs}


async def two_children(
    flows: AsyncFlowProducer,
    child_opts: dict[str, object],
    parent_opts: dict[str, object] | None = None,
) -> JobNode[AsyncJob]:
    """P (pq) waiting for c1 and c2 (cq, ids c1/c2); c2 is delayed a minute."""
    return await flows.add(
        FlowJob(
            "P",
            "pq",
            None,
            {"job_id": "P", **(parent_opts or {})},  # type: ignore[typeddict-item]
            children=[
                FlowJob("c1", "cq", None, {"job_id": "c1", **child_opts}),  # type: ignore[typeddict-item]
                FlowJob("c2", "cq", None, {"job_id": "c2", "delay": 60, **child_opts}),  # type: ignore[typeddict-item]
            ],
        )
    )


async def fail_c1(cq: AsyncQueue) -> None:
    await (await take(cq))["c1"].move_to_failed(RuntimeError("boom c1"))


# -- completion ------------------------------------------------------------------------------


async def test_completed_children_release_the_parent(
    flows: AsyncFlowProducer, pq: AsyncQueue, cq: AsyncQueue, r: redis.Redis
) -> None:
    await two_children(flows, {})
    await (await take(cq))["c1"].move_to_completed({"got": 1})
    assert r.hgetall("bull:pq:P:processed") == {"bull:cq:c1": '{"got":1}'}
    assert r.smembers("bull:pq:P:dependencies") == {"bull:cq:c2"}
    assert r.zrange("bull:pq:waiting-children", 0, -1) == ["P"]

    await (await cq.get_job("c2")).promote()  # type: ignore[union-attr]
    c2 = (await take(cq))["c2"]
    await c2.move_to_completed(None)
    assert r.exists("bull:pq:P:dependencies") == 0
    assert r.lrange("bull:pq:wait", 0, -1) == ["P"]
    assert r.zrange("bull:pq:marker", 0, -1) == ["0"]
    assert events(r, "pq")[-1] == {"event": "waiting", "jobId": "P", "prev": "waiting-children"}
    # The parent's release comes before the child's own `completed`, as BullMQ writes them.
    # Then `drained`: the child's queue has nothing left, as BullMQ 6.7.0 writes it.
    assert [e["event"] for e in events(r, "cq")][-2:] == ["completed", "drained"]

    parent = (await take(pq))["P"]
    assert await parent.get_children_values() == {"bull:cq:c1": {"got": 1}, "bull:cq:c2": None}
    assert await parent.get_dependencies_count() == {
        "processed": 2,
        "unprocessed": 0,
        "failed": 0,
        "ignored": 0,
    }


@pytest.mark.parametrize(
    ("parent_opts", "where"),
    [({"priority": 5}, "prioritized"), ({"delay": 5}, "delayed"), ({"lifo": True}, "wait")],
)
async def test_a_released_parent_goes_where_its_options_say(
    flows: AsyncFlowProducer,
    cq: AsyncQueue,
    r: redis.Redis,
    parent_opts: dict[str, object],
    where: str,
) -> None:
    await flows.add(
        FlowJob("P", "pq", None, {"job_id": "P", **parent_opts}, children=[FlowJob("c", "cq")])  # type: ignore[typeddict-item]
    )
    await (await take(cq))["c"].move_to_completed(1)
    if where == "prioritized":
        assert r.zrange("bull:pq:prioritized", 0, -1, withscores=True) == [("P", 5 * 2**32 + 1)]
    elif where == "delayed":
        # Due `delay` after the release, as Node schedules it; a `delayed` event, no `waiting`.
        assert r.zrange("bull:pq:delayed", 0, -1, withscores=True) == [("P", (T + 5000) * 4096)]
        assert events(r, "pq")[-1] == {"event": "delayed", "jobId": "P", "delay": str(T + 5000)}
        assert r.zrange("bull:pq:marker", 0, -1, withscores=True) == [("1", T + 5000)]
    else:
        assert r.lrange("bull:pq:wait", 0, -1) == ["P"]


async def test_a_retried_child_leaves_the_parent_alone(
    flows: AsyncFlowProducer, cq: AsyncQueue, r: redis.Redis
) -> None:
    await two_children(flows, {"attempts": 2, "fail_parent_on_failure": True})
    await fail_c1(cq)
    assert r.smembers("bull:pq:P:dependencies") == {"bull:cq:c1", "bull:cq:c2"}
    assert r.exists("bull:pq:P:unsuccessful") == 0 and r.hget("bull:pq:P", "defa") is None


# -- failure policies ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("policy", "released", "failed_hash", "unsuccessful"),
    [
        ("fail_parent_on_failure", True, {}, ["bull:cq:c1"]),
        ("continue_parent_on_failure", True, {"bull:cq:c1": "boom c1"}, []),
        ("ignore_dependency_on_failure", False, {"bull:cq:c1": "boom c1"}, []),
        ("remove_dependency_on_failure", False, {}, []),
        (None, False, {}, []),
    ],
)
async def test_failure_policies_with_a_child_still_pending(
    flows: AsyncFlowProducer,
    pq: AsyncQueue,
    cq: AsyncQueue,
    r: redis.Redis,
    policy: str | None,
    released: bool,
    failed_hash: dict[str, str],
    unsuccessful: list[str],
) -> None:
    await two_children(flows, {policy: True} if policy else {})
    await fail_c1(cq)
    state = await pq.get_job_state("P")
    assert state is (JobState.WAITING if released else JobState.WAITING_CHILDREN)
    pending = {"bull:cq:c2"} if policy else {"bull:cq:c1", "bull:cq:c2"}
    assert r.smembers("bull:pq:P:dependencies") == pending
    assert r.hgetall("bull:pq:P:failed") == failed_hash
    assert r.zrange("bull:pq:P:unsuccessful", 0, -1) == unsuccessful
    if policy == "fail_parent_on_failure":
        assert r.zscore("bull:pq:P:unsuccessful", "bull:cq:c1") == T  # the child's finishedOn
        assert r.hget("bull:pq:P", "defa") == "child bull:cq:c1 failed"
    else:
        assert r.hget("bull:pq:P", "defa") is None


@pytest.mark.parametrize("policy", ["ignore_dependency_on_failure", "remove_dependency_on_failure"])
async def test_ignored_failures_release_the_parent_when_last(
    flows: AsyncFlowProducer, pq: AsyncQueue, cq: AsyncQueue, r: redis.Redis, policy: str
) -> None:
    await two_children(flows, {policy: True})
    await (await cq.get_job("c2")).promote()  # type: ignore[union-attr]
    jobs = await take(cq)
    await jobs["c2"].move_to_completed("ok")
    await jobs["c1"].move_to_failed(RuntimeError("boom c1"))
    assert await pq.get_job_state("P") is JobState.WAITING
    parent = await pq.get_job("P")
    assert parent is not None
    ignored = {"bull:cq:c1": "boom c1"} if policy.startswith("ignore") else {}
    assert await parent.get_ignored_children_failures() == ignored
    assert await parent.get_failed_children_values() == ignored
    assert await parent.get_dependencies() == {
        "processed": {"bull:cq:c2": "ok"},
        "unprocessed": [],
        "failed": [],
        "ignored": ignored,
    }


async def test_fail_parent_on_failure_fails_the_parent_at_its_fetch(
    flows: AsyncFlowProducer, pq: AsyncQueue, cq: AsyncQueue, r: redis.Redis
) -> None:
    await two_children(flows, {"fail_parent_on_failure": True}, {"attempts": 3})
    await fail_c1(cq)
    assert await take(pq) == {}  # failed at fetch: no processor sees it
    h = r.hgetall("bull:pq:P")
    assert (h["failedReason"], h["finishedOn"], h["atm"]) == (
        "child bull:cq:c1 failed",
        str(T),
        "1",
    )
    assert "defa" not in h
    assert r.zrange("bull:pq:failed", 0, -1) == ["P"] and r.llen("bull:pq:active") == 0
    assert events(r, "pq")[-2:] == [
        {
            "event": "failed",
            "jobId": "P",
            "failedReason": "child bull:cq:c1 failed",
            "prev": "active",
        },
        {"event": "retries-exhausted", "jobId": "P", "attemptsMade": "1"},
    ]
    parent = await pq.get_job("P")
    assert parent is not None
    deps = await parent.get_dependencies()
    assert (deps["failed"], deps["unprocessed"]) == (["bull:cq:c1"], ["bull:cq:c2"])


async def test_a_deferred_failure_climbs_the_tree(
    flows: AsyncFlowProducer, pq: AsyncQueue, cq: AsyncQueue, r: redis.Redis
) -> None:
    await flows.add(
        FlowJob(
            "root",
            "pq",
            None,
            {"job_id": "root", "remove_on_fail": True},
            children=[
                FlowJob(
                    "mid",
                    "cq",
                    None,
                    {"job_id": "mid", "fail_parent_on_failure": True},
                    children=[
                        FlowJob(
                            "leaf", "cq", None, {"job_id": "leaf", "fail_parent_on_failure": True}
                        )
                    ],
                )
            ],
        )
    )
    await (await take(cq))["leaf"].move_to_failed(RuntimeError("leaf broke"))
    assert r.hget("bull:cq:mid", "defa") == "child bull:cq:leaf failed"
    assert await take(cq) == {}  # mid fails at fetch, and tells root
    assert r.hget("bull:cq:mid", "failedReason") == "child bull:cq:leaf failed"
    assert r.hget("bull:pq:root", "defa") == "child bull:cq:mid failed"
    assert r.zrange("bull:pq:root:unsuccessful", 0, -1) == ["bull:cq:mid"]
    assert await take(pq) == {}
    assert r.exists("bull:pq:root") == 0  # removeOnFail applies to a failure at fetch too
    assert [e["event"] for e in events(r, "pq")][-3:] == ["waiting", "failed", "retries-exhausted"]


async def test_no_policy_keeps_the_parent_waiting_up_the_tree(
    flows: AsyncFlowProducer, pq: AsyncQueue, cq: AsyncQueue
) -> None:
    await flows.add(
        FlowJob(
            "root",
            "pq",
            None,
            {"job_id": "root"},
            children=[FlowJob("leaf", "cq", None, {"job_id": "leaf"})],
        )
    )
    await (await take(cq))["leaf"].move_to_failed(RuntimeError("no"))
    assert await take(pq) == {}
    assert await pq.get_job_state("root") is JobState.WAITING_CHILDREN


# -- dynamic children and the child's link ---------------------------------------------------


async def test_move_to_waiting_children(pq: AsyncQueue, cq: AsyncQueue, r: redis.Redis) -> None:
    await pq.add("dyn", job_id="D")
    parent = (await take(pq))["dyn"]
    assert await parent.move_to_waiting_children() is False  # nothing pending: nothing changes
    assert r.lrange("bull:pq:active", 0, -1) == ["D"]

    child = await cq.add("kid", parent={"id": "D", "queue": parent.queue_qualified_name})
    before = r.hgetall("bull:pq:D")
    with pytest.raises(LockMismatchError):
        await parent.move_to_waiting_children("someone-else")
    assert await parent.move_to_waiting_children() is True
    assert parent.token is None
    assert r.hgetall("bull:pq:D") == before  # the attempt is not counted
    assert r.exists("bull:pq:D:lock") == 0 and r.llen("bull:pq:active") == 0
    assert r.zrange("bull:pq:waiting-children", 0, -1, withscores=True) == [("D", T)]
    assert events(r, "pq")[-1] == {"event": "waiting-children", "jobId": "D", "prev": "active"}

    await (await take(cq))["kid"].move_to_completed({"k": 10})
    again = (await take(pq))["dyn"]
    assert await again.get_children_values() == {f"bull:cq:{child.id}": {"k": 10}}
    assert await again.move_to_waiting_children() is False


async def test_remove_child_dependency(
    flows: AsyncFlowProducer, pq: AsyncQueue, cq: AsyncQueue, r: redis.Redis
) -> None:
    await two_children(flows, {})
    c1 = await cq.get_job("c1")
    assert c1 is not None
    assert await c1.remove_child_dependency() is True
    assert (c1.parent_key, c1.parent) == (None, None)
    assert "parentKey" not in r.hgetall("bull:cq:c1") and "parent" not in r.hgetall("bull:cq:c1")
    assert await pq.get_job_state("P") is JobState.WAITING_CHILDREN
    assert await c1.remove_child_dependency() is False  # no parent any more
    c2 = await cq.get_job("c2")
    assert c2 is not None
    assert await c2.remove_child_dependency() is True
    assert r.lrange("bull:pq:wait", 0, -1) == ["P"]  # it was the last pending child
    assert await cq.get_job_state("c2") is JobState.DELAYED  # the child itself stays
    r.delete("bull:cq:c2")
    with pytest.raises(JobNotFoundError):
        await c2.remove_child_dependency()


async def test_remove_unprocessed_children(
    flows: AsyncFlowProducer, pq: AsyncQueue, cq: AsyncQueue, r: redis.Redis
) -> None:
    await two_children(flows, {})
    parent = await pq.get_job("P")
    assert parent is not None
    assert await parent.remove_unprocessed_children() == 2
    assert r.exists("bull:cq:c1", "bull:cq:c2") == 0
    assert r.lrange("bull:pq:wait", 0, -1) == ["P"]
    assert await parent.remove_unprocessed_children() == 0
