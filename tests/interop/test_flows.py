"""Flows shared by corral and Node BullMQ 6.7.0: trees added by one, run by the other.

Both sides use the same processor (``node/work_flow.mjs`` and :func:`processor` below): it
returns ``{"by", "name", "children": <children values>, "ignored": <ignored failures>}``, or
fails with ``<by> failure for <name>`` for the names it is told to fail. Queues: parents in
``pq``, children in ``cq`` (and a grandchild back in ``pq``), all under the prefix ``bull``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable, Collection
from typing import Any

import pytest

from corral import AsyncFlowProducer, AsyncJob, AsyncQueue, FlowJob, JobState, Worker
from tests.interop.conftest import SCRIPTS, Node, first_line
from tests.interop.test_lifecycle import node_result, node_run, started, wait_until

pytestmark = pytest.mark.interop


def processor(fail: Collection[str] = ()) -> Callable[[AsyncJob], Awaitable[dict[str, Any]]]:
    """corral's twin of work_flow.mjs's processor."""

    async def process(job: AsyncJob) -> dict[str, Any]:
        if job.name in fail:
            raise RuntimeError(f"corral failure for {job.name}")
        return {
            "by": "corral",
            "name": job.name,
            "children": await job.get_children_values(),
            "ignored": await job.get_ignored_children_failures(),
        }

    return process


@contextlib.asynccontextmanager
async def corral_workers(
    url: str, *queues: str, fail: Collection[str] = ()
) -> AsyncIterator[list[Worker]]:
    """corral workers on ``queues`` for the block."""
    workers = [Worker(q, processor(fail), connection=url, concurrency=4) for q in queues]
    tasks = [asyncio.create_task(w.run_async()) for w in workers]
    try:
        yield workers
    finally:
        for worker in workers:
            await worker.close()
        await asyncio.gather(*tasks)


def start_node_workers(
    node: Node, queues: str, count: int, fail: str = ""
) -> subprocess.Popen[str]:
    """work_flow.mjs on ``queues`` until ``count`` jobs finished; returns once it is READY."""
    proc = subprocess.Popen(
        ["node", str(SCRIPTS / "work_flow.mjs"), queues, str(count)],
        env={**node.env, "WORK_FAIL": fail},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    line = first_line(proc)
    if line != "READY":
        with started(proc):
            raise AssertionError(f"work_flow.mjs did not get ready: {line!r}")
    return proc


async def node_workers(
    node: Node, queues: str, count: int, fail: str = ""
) -> subprocess.Popen[str]:
    return await asyncio.to_thread(start_node_workers, node, queues, count, fail)


def finished_state(queue: AsyncQueue, job_id: str) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return await queue.get_job_state(job_id) in (JobState.COMPLETED, JobState.FAILED)

    return check


async def node_flow(node: Node, tree: dict[str, Any]) -> dict[str, Any]:
    return (await node_run(node, "add_flow.mjs", json.dumps(tree)))["tree"]  # type: ignore[no-any-return]


def names(tree: dict[str, Any]) -> dict[str, str]:
    """name -> full job key, for a tree as add_flow.mjs prints it."""
    out = {tree["name"]: f"bull:{tree['queue']}:{tree['id']}"}
    for child in tree["children"]:
        out.update(names(child))
    return out


#: root (pq) <- [mid (cq) <- [l1 (pq), l2 (cq)], l3 (cq)], in Node's FlowJob shape.
NODE_TREE = {
    "name": "root",
    "queueName": "pq",
    "data": {"r": 1},
    "children": [
        {
            "name": "mid",
            "queueName": "cq",
            "children": [
                {"name": "l1", "queueName": "pq", "data": {"n": 1}},
                {"name": "l2", "queueName": "cq", "data": {"n": 2}},
            ],
        },
        {"name": "l3", "queueName": "cq", "data": {"n": 3}},
    ],
}


def corral_tree() -> FlowJob:
    """NODE_TREE, as a corral FlowJob."""
    return FlowJob(
        "root",
        "pq",
        {"r": 1},
        children=[
            FlowJob(
                "mid",
                "cq",
                children=[FlowJob("l1", "pq", {"n": 1}), FlowJob("l2", "cq", {"n": 2})],
            ),
            FlowJob("l3", "cq", {"n": 3}),
        ],
    )


def leaf(by: str, name: str) -> dict[str, Any]:
    return {"by": by, "name": name, "children": {}, "ignored": {}}


# -- whole trees -------------------------------------------------------------------------------


async def test_a_node_flow_is_run_by_corral_workers(node: Node, redis_url: str) -> None:
    keys = names(await node_flow(node, NODE_TREE))
    root_id = keys["root"].rsplit(":", 1)[1]
    async with AsyncQueue("pq", connection=redis_url) as pq:
        async with corral_workers(redis_url, "pq", "cq"):
            await wait_until(finished_state(pq, root_id), timeout=30)
        root = await pq.get_job(root_id)
    assert root is not None and root.returnvalue == {
        "by": "corral",
        "name": "root",
        "children": {
            keys["mid"]: {
                "by": "corral",
                "name": "mid",
                "children": {keys["l1"]: leaf("corral", "l1"), keys["l2"]: leaf("corral", "l2")},
                "ignored": {},
            },
            keys["l3"]: leaf("corral", "l3"),
        },
        "ignored": {},
    }
    seen = (await node_run(node, "read_flow.mjs", "pq", root_id))["tree"]
    assert seen["state"] == "completed"
    assert [c["state"] for c in seen["children"]] == ["completed", "completed"]
    assert seen["dependencies"]["unprocessed"] == []


async def test_a_corral_flow_is_run_by_node_workers(node: Node, redis_url: str) -> None:
    async with AsyncFlowProducer(connection=redis_url) as flows:
        added = await flows.add(corral_tree())
    root_id = added.job.id
    before = (await node_run(node, "read_flow.mjs", "pq", root_id))["tree"]
    assert before["state"] == "waiting-children"
    mid = next(c for c in before["children"] if c["name"] == "mid")
    assert (mid["state"], mid["parentKey"]) == ("waiting-children", f"bull:pq:{root_id}")
    assert sorted(c["name"] for c in mid["children"]) == ["l1", "l2"]
    assert sorted(mid["dependencies"]["unprocessed"]) == sorted(
        f"bull:{c.job.queue_name}:{c.job.id}" for c in added.children[0].children
    )

    with started(await node_workers(node, "pq,cq", 5)) as proc:
        out = await node_result(proc)
    assert out["failed"] == [] and [c["name"] for c in out["completed"]][-1] == "root"
    root_value = out["completed"][-1]["returnvalue"]
    mid_key = f"bull:cq:{added.children[0].job.id}"
    assert set(root_value["children"]) == {mid_key, f"bull:cq:{added.children[1].job.id}"}
    assert set(root_value["children"][mid_key]["children"]) == {
        f"bull:{c.job.queue_name}:{c.job.id}" for c in added.children[0].children
    }
    async with AsyncQueue("pq", connection=redis_url) as pq:
        root = await pq.get_job(root_id)
        assert root is not None and root.returnvalue == root_value
        assert await root.get_children_values() == root_value["children"]


async def test_node_runs_the_children_and_corral_the_parent(node: Node, redis_url: str) -> None:
    async with AsyncFlowProducer(connection=redis_url) as flows:
        added = await flows.add(
            FlowJob("parent", "pq", children=[FlowJob("c1", "cq"), FlowJob("c2", "cq")])
        )
    with started(await node_workers(node, "cq", 2)) as proc:
        await node_result(proc)
    async with AsyncQueue("pq", connection=redis_url) as pq:
        assert await pq.get_job_state(added.job.id) is JobState.WAITING
        async with corral_workers(redis_url, "pq"):
            await wait_until(finished_state(pq, added.job.id))
        parent = await pq.get_job(added.job.id)
    assert parent is not None and parent.returnvalue["children"] == {
        f"bull:cq:{c.job.id}": leaf("node", c.job.name) for c in added.children
    }


# -- failure policies across languages ---------------------------------------------------------


def two_children_node(policy: str) -> dict[str, Any]:
    return {
        "name": "parent",
        "queueName": "pq",
        "children": [
            {"name": "bad", "queueName": "cq", "opts": {policy: True}},
            {"name": "good", "queueName": "cq"},
        ],
    }


def two_children_corral(policy: str) -> FlowJob:
    return FlowJob(
        "parent",
        "pq",
        children=[FlowJob("bad", "cq", None, {policy: True}), FlowJob("good", "cq")],
    )


async def test_node_fails_a_child_and_corral_fails_the_parent(node: Node, redis_url: str) -> None:
    async with AsyncFlowProducer(connection=redis_url) as flows:
        added = await flows.add(two_children_corral("fail_parent_on_failure"))
    bad_key = f"bull:cq:{added.children[0].job.id}"
    with started(await node_workers(node, "cq", 2, fail="bad")) as proc:
        out = await node_result(proc)
    assert [f["name"] for f in out["failed"]] == ["bad"]
    ran: list[str] = []
    async with AsyncQueue("pq", connection=redis_url) as pq:
        async with corral_workers(redis_url, "pq") as (worker,):
            worker.on("active", lambda job: ran.append(job.name))
            await wait_until(finished_state(pq, added.job.id))
        parent = await pq.get_job(added.job.id)
        assert parent is not None and parent.failed_reason == f"child {bad_key} failed"
        assert (await parent.get_dependencies())["failed"] == [bad_key]
    assert ran == []  # failed at fetch, never processed


async def test_corral_fails_a_child_and_node_fails_the_parent(node: Node, redis_url: str) -> None:
    keys = names(await node_flow(node, two_children_node("failParentOnFailure")))
    async with (
        AsyncQueue("cq", connection=redis_url) as cq,
        corral_workers(redis_url, "cq", fail={"bad"}),
    ):
        await wait_until(lambda: _count(cq, "completed", "failed", at_least=2))
    with started(await node_workers(node, "pq", 1)) as proc:
        out = await node_result(proc)
    assert out["completed"] == []
    assert [(f["name"], f["failedReason"]) for f in out["failed"]] == [
        ("parent", f"child {keys['bad']} failed")
    ]


@pytest.mark.parametrize("parent_side", ["node", "corral"])
async def test_an_ignored_child_failure_crosses_languages(
    node: Node, redis_url: str, parent_side: str
) -> None:
    """idof: the child fails in one language, the parent runs in the other and sees it."""
    if parent_side == "node":
        keys = names(await node_flow(node, two_children_node("ignoreDependencyOnFailure")))
        async with (
            AsyncQueue("cq", connection=redis_url) as cq,
            corral_workers(redis_url, "cq", fail={"bad"}),
        ):
            await wait_until(lambda: _count(cq, "completed", "failed", at_least=2))
        with started(await node_workers(node, "pq", 1)) as proc:
            value = (await node_result(proc))["completed"][0]["returnvalue"]
        child_by, reason = "corral", "corral failure for bad"
    else:
        async with AsyncFlowProducer(connection=redis_url) as flows:
            added = await flows.add(two_children_corral("ignore_dependency_on_failure"))
        keys = {c.job.name: f"bull:cq:{c.job.id}" for c in added.children}
        with started(await node_workers(node, "cq", 2, fail="bad")) as proc:
            await node_result(proc)
        async with AsyncQueue("pq", connection=redis_url) as pq:
            async with corral_workers(redis_url, "pq"):
                await wait_until(finished_state(pq, added.job.id))
            parent = await pq.get_job(added.job.id)
        assert parent is not None
        value = parent.returnvalue
        child_by, reason = "node", "node failure for bad"
    assert value["ignored"] == {keys["bad"]: reason}
    assert value["children"] == {keys["good"]: leaf(child_by, "good")}


async def _count(queue: AsyncQueue, *states: str, at_least: int) -> bool:
    counts = await queue.get_job_counts(*states)
    return sum(counts.values()) >= at_least
