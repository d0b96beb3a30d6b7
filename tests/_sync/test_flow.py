# Generated from tests/_async/test_flow.py by scripts/unasync.py: do not edit.
"""Flows against a real server: what FlowProducer and parent= leave in BullMQ 6.7.0's keys.

The layout asserted here is the one Node's FlowProducer writes (observed with BullMQ 6.7.0):
parents before children, a parent in waiting-children (score = its timestamp) with events
``added`` + ``waiting-children``, each child with ``parentKey``, ``parent`` JSON, ``opts.parent``
and a place in its parent's ``:dependencies``; UUID ids, and ``K:id`` counted per job.
"""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

import pytest
import redis

from corral import (
    FlowProducer,
    Job,
    Queue,
    FlowJob,
    InvalidOptionError,
    JobLockedError,
    JobNode,
    JobState,
    ParentNotFoundError,
    _scripts,
)
from tests._sync.support import events

T = 1_700_000_000_000


def snapshot(r: redis.Redis) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in sorted(r.keys("*")):
        kind = r.type(key)
        if kind == "hash":
            out[key] = r.hgetall(key)
        elif kind == "zset":
            out[key] = r.zrange(key, 0, -1, withscores=True)
        elif kind == "set":
            out[key] = sorted(r.smembers(key))
        elif kind == "list":
            out[key] = r.lrange(key, 0, -1)
        elif kind == "stream":
            out[key] = r.xrange(key)
        else:
            out[key] = r.get(key)
    return out


def take(queue: Queue, count: int = 10) -> list[Job]:
    """Fetch ready jobs as a worker would (lock tokens ``tok:<n>``)."""
    reply = queue._run(
        _scripts.MOVE_TO_ACTIVE, [queue._job_prefix, T, count, "tok", 0, 30000, ""]
    )
    return [
        queue._bind(f.job_id, f.fields, token=f.token) for f in _scripts.parse_fetched(reply, 2)
    ]


def tree() -> FlowJob:
    """root (pq) <- [mid (cq) <- [leaf1 (pq), leaf2 (cq)], leaf3 (cq)]."""
    return FlowJob(
        "root",
        "pq",
        {"r": 1},
        children=[
            FlowJob(
                "mid",
                "cq",
                {"m": 1},
                {"fail_parent_on_failure": True},
                children=[FlowJob("leaf1", "pq", {"l": 1}), FlowJob("leaf2", "cq", {"l": 2})],
            ),
            FlowJob("leaf3", "cq", None, {"job_id": "custom-3"}),
        ],
    )


def ids(node: JobNode[Job]) -> dict[str, str]:
    """job name -> id, for the whole tree."""
    out = {node.job.name: node.job.id}
    for child in node.children:
        out.update(ids(child))
    return out


# -- adding ------------------------------------------------------------------------------------


def test_add_writes_the_layout_of_nodes_flow_producer(
    flows: FlowProducer, r: redis.Redis
) -> None:
    node = flows.add(tree())
    n = ids(node)
    assert [c.job.name for c in node.children] == ["mid", "leaf3"]
    assert [c.job.name for c in node.children[0].children] == ["leaf1", "leaf2"]
    for name in ("root", "mid", "leaf1", "leaf2"):
        assert uuid.UUID(n[name]).version == 4
    assert n["leaf3"] == "custom-3"
    assert (r.get("bull:pq:id"), r.get("bull:cq:id")) == ("2", "3")

    root = r.hgetall(f"bull:pq:{n['root']}")
    assert json.loads(root["opts"]) == {"attempts": 0}
    assert "parentKey" not in root and root["data"] == '{"r":1}'
    mid = r.hgetall(f"bull:cq:{n['mid']}")
    assert mid["parentKey"] == f"bull:pq:{n['root']}"
    assert json.loads(mid["parent"]) == {"id": n["root"], "queueKey": "bull:pq", "fpof": True}
    assert json.loads(mid["opts"]) == {
        "attempts": 0,
        "parent": {"id": n["root"], "queue": "bull:pq"},
        "fpof": True,
    }
    leaf3 = r.hgetall("bull:cq:custom-3")
    assert leaf3["data"] == "{}"  # no data is stored as {}, as Node's FlowProducer does
    assert json.loads(leaf3["opts"])["jobId"] == "custom-3"
    assert json.loads(r.hget(f"bull:pq:{n['leaf1']}", "parent")) == {  # type: ignore[arg-type]
        "id": n["mid"],
        "queueKey": "bull:cq",
    }

    assert r.smembers(f"bull:pq:{n['root']}:dependencies") == {
        f"bull:cq:{n['mid']}",
        "bull:cq:custom-3",
    }
    assert r.smembers(f"bull:cq:{n['mid']}:dependencies") == {
        f"bull:pq:{n['leaf1']}",
        f"bull:cq:{n['leaf2']}",
    }
    assert r.zrange("bull:pq:waiting-children", 0, -1, withscores=True) == [
        (n["root"], float(root["timestamp"]))
    ]
    assert r.zrange("bull:cq:waiting-children", 0, -1) == [n["mid"]]
    assert r.lrange("bull:pq:wait", 0, -1) == [n["leaf1"]]
    assert r.lrange("bull:cq:wait", 0, -1) == [n["leaf2"], "custom-3"]
    # Parents before children, level by level.
    assert events(r, "pq") == [
        {"event": "added", "jobId": n["root"], "name": "root"},
        {"event": "waiting-children", "jobId": n["root"]},
        {"event": "added", "jobId": n["leaf1"], "name": "leaf1"},
        {"event": "waiting", "jobId": n["leaf1"]},
    ]
    assert [e["event"] for e in events(r, "cq")] == [
        "added",
        "waiting-children",
        *["added", "waiting"] * 2,
    ]
    assert node.children[0].job.parent_key == f"bull:pq:{n['root']}"


def test_nodes_may_be_dicts(flows: FlowProducer, r: redis.Redis) -> None:
    node = flows.add(
        {
            "name": "p",
            "queue_name": "pq",
            "opts": {"job_id": "p1", "priority": 4},
            "children": [{"name": "c", "queue_name": "cq", "data": [1, 2], "opts": {"delay": 5}}],
        }
    )
    assert node.job.id == "p1" and node.state is None
    child = node.children[0].job
    assert r.hget(f"bull:cq:{child.id}", "data") == "[1,2]"
    assert r.zrange("bull:cq:delayed", 0, -1) == [child.id]
    assert r.hget("bull:pq:p1", "priority") == "4"  # applies when the parent is released
    assert r.zrange("bull:pq:waiting-children", 0, -1) == ["p1"]


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ({"attempts": 0}, "root.children[0].children[1] ('leaf2'): attempts"),
        ({"parent": {"id": "x", "queue": "bull:pq"}}, "only the root may name one"),
        ({"fail_parent_on_failure": True, "ignore_dependency_on_failure": True}, "at most one"),
        ({"job_id": "1"}, "job_id must not be all digits"),
    ],
)
def test_a_bad_node_is_named_and_nothing_is_written(
    flows: FlowProducer, r: redis.Redis, bad: dict[str, Any], message: str
) -> None:
    flow = tree()
    flow.children[0].children[1].options = bad  # type: ignore[union-attr]
    with pytest.raises(InvalidOptionError, match=re.escape(message)):
        flows.add(flow)
    assert r.keys("*") == []


def test_bad_shapes_are_refused(flows: FlowProducer, r: redis.Redis) -> None:
    with pytest.raises(
        InvalidOptionError, match=re.escape("root.children[0]: unknown key 'queue'")
    ):
        flows.add(
            {"name": "p", "queue_name": "pq", "children": [{"name": "c", "queue": "x"}]}
        )
    with pytest.raises(InvalidOptionError, match="queue name must not contain ':'"):
        flows.add(FlowJob("p", "a:b"))
    with pytest.raises(InvalidOptionError, match="data must be JSON-serializable"):
        flows.add(FlowJob("p", "pq", children=[FlowJob("c", "cq", {1, 2})]))
    assert r.keys("*") == []


def test_add_bulk_is_all_or_nothing(flows: FlowProducer, r: redis.Redis) -> None:
    bad = FlowJob("p", "pq", children=[FlowJob("c", "cq", None, {"priority": -1})])
    with pytest.raises(InvalidOptionError, match=re.escape("flow 1: flow node root.children[0]")):
        flows.add_bulk([tree(), bad])
    assert r.keys("*") == []
    # A root whose own parent is missing: refused before the transaction writes anything.
    orphan = FlowJob("p", "pq", None, {"parent": {"id": "gone", "queue": "bull:other"}})
    with pytest.raises(ParentNotFoundError) as info:
        flows.add_bulk([tree(), orphan])
    assert (info.value.queue, info.value.job_id) == ("other", "gone")
    assert r.keys("*") == []

    nodes = flows.add_bulk([tree(), FlowJob("solo", "pq")])
    assert [n.job.name for n in nodes] == ["root", "solo"]
    assert r.zcard("bull:pq:waiting-children") == 1
    assert r.llen("bull:pq:wait") == 2  # leaf1 and solo (a leaf is a normal add)


def test_a_root_can_hang_below_an_existing_job(
    flows: FlowProducer, pq: Queue, r: redis.Redis
) -> None:
    holder = pq.add("holder", job_id="h")
    node = flows.add(
        FlowJob("sub", "cq", None, {"parent": {"id": "h", "queue": holder.queue_qualified_name}})
    )
    assert r.smembers("bull:pq:h:dependencies") == {f"bull:cq:{node.job.id}"}
    assert r.hget(f"bull:cq:{node.job.id}", "parentKey") == "bull:pq:h"


# -- Queue.add with parent= ------------------------------------------------------------------


def test_add_with_parent_links_the_child(
    pq: Queue, cq: Queue, r: redis.Redis
) -> None:
    parent = pq.add("p")
    child = cq.add(
        "c",
        {"v": 1},
        parent={"id": parent.id, "queue": parent.queue_qualified_name},
        ignore_dependency_on_failure=True,
    )
    h = r.hgetall(f"bull:cq:{child.id}")
    assert h["parentKey"] == "bull:pq:1"
    assert json.loads(h["parent"]) == {"id": "1", "queueKey": "bull:pq", "idof": True}
    assert json.loads(h["opts"]) == {
        "attempts": 0,
        "parent": {"id": "1", "queue": "bull:pq"},
        "idof": True,
    }
    assert r.smembers("bull:pq:1:dependencies") == {f"bull:cq:{child.id}"}
    assert (child.parent_key, child.parent) == ("bull:pq:1", json.loads(h["parent"]))
    assert (cq.get_job(child.id)).parent == child.parent  # type: ignore[union-attr]


def test_add_with_a_missing_parent_writes_nothing(cq: Queue, r: redis.Redis) -> None:
    cq.add("first")
    before = snapshot(r)
    with pytest.raises(ParentNotFoundError, match="bull:pq:nope") as info:
        cq.add("c", parent={"id": "nope", "queue": "bull:pq"})
    assert (info.value.queue, info.value.job_id) == ("pq", "nope")
    assert snapshot(r) == before  # K:id not counted either
    with pytest.raises(ParentNotFoundError):
        cq.add_bulk([("a", {}), ("b", {}, {"parent": {"id": "nope", "queue": "bull:pq"}})])
    assert snapshot(r) == before


@pytest.mark.parametrize(
    "parent",
    [{"id": "1"}, {"id": "a:b", "queue": "bull:pq"}, {"id": "1", "queue": "pq"}, "bull:pq:1"],
)
def test_bad_parent_options_are_refused(cq: Queue, parent: Any) -> None:
    with pytest.raises(InvalidOptionError, match="parent"):
        cq.add("c", parent=parent)


def test_add_bulk_may_name_a_parent_added_before_in_the_batch(
    cq: Queue, r: redis.Redis
) -> None:
    jobs = cq.add_bulk(
        [("p", {}, {"job_id": "p"}), ("c", {}, {"parent": {"id": "p", "queue": "bull:cq"}})]
    )
    assert r.smembers("bull:cq:p:dependencies") == {f"bull:cq:{jobs[1].id}"}


# -- reading a flow back -------------------------------------------------------------------------


def test_get_flow_reads_the_tree_with_states(
    flows: FlowProducer, cq: Queue
) -> None:
    n = ids(flows.add(tree()))
    (done,) = take(cq, 1)  # the right end of wait: leaf3, queued before leaf2
    assert done.name == "leaf3"
    done.move_to_completed("three")
    got = flows.get_flow(n["root"], "pq")
    assert got is not None
    assert (got.job.id, got.state) == (n["root"], JobState.WAITING_CHILDREN)
    assert {c.job.name: c.state for c in got.children} == {
        "mid": JobState.WAITING_CHILDREN,
        "leaf3": JobState.COMPLETED,
    }
    (mid,) = [c for c in got.children if c.job.name == "mid"]
    assert {c.job.name: c.state for c in mid.children} == {
        "leaf1": JobState.WAITING,
        "leaf2": JobState.WAITING,
    }
    assert mid.children[0].job.queue_name in ("pq", "cq")
    shallow = flows.get_flow(n["root"], "pq", depth=1)
    assert shallow is not None and all(c.children == [] for c in shallow.children)
    capped = flows.get_flow(n["root"], "pq", max_children=1)
    assert capped is not None and len(capped.children) == 2  # one pending, one processed
    capped = flows.get_flow(n["mid"], "cq", max_children=1)
    assert capped is not None and len(capped.children) == 1  # two pending: one is read
    assert flows.get_flow("nope", "pq") is None


# -- removal -------------------------------------------------------------------------------------


def test_removing_a_parent_removes_its_children(
    flows: FlowProducer, pq: Queue, r: redis.Redis
) -> None:
    n = ids(flows.add(tree()))
    assert pq.remove(n["root"]) is True
    assert (
        sorted(k for k in r.keys("*") if not k.endswith((":events", ":id", ":meta", ":marker")))
        == []
    )
    assert events(r, "pq")[-1] == {
        "event": "removed",
        "jobId": n["root"],
        "prev": "waiting-children",
    }


def test_removing_the_last_pending_child_releases_the_parent(
    flows: FlowProducer, pq: Queue, cq: Queue, r: redis.Redis
) -> None:
    node = flows.add(
        FlowJob("p", "pq", children=[FlowJob("a", "cq"), FlowJob("b", "cq", None, {"delay": 60})])
    )
    a, b = (c.job for c in node.children)
    a.remove()
    assert r.zrange("bull:pq:waiting-children", 0, -1) == [node.job.id]
    b.remove()
    assert r.zcard("bull:pq:waiting-children") == 0
    assert r.lrange("bull:pq:wait", 0, -1) == [node.job.id]
    assert r.zrange("bull:pq:marker", 0, -1) == ["0"]
    assert events(r, "pq")[-1] == {
        "event": "waiting",
        "jobId": node.job.id,
        "prev": "waiting-children",
    }
    assert [e["prev"] for e in events(r, "cq") if e["event"] == "removed"] == ["wait", "delayed"]


def test_draining_a_child_queue_releases_the_parent(
    flows: FlowProducer, cq: Queue, r: redis.Redis
) -> None:
    node = flows.add(FlowJob("p", "pq", children=[FlowJob("a", "cq"), FlowJob("b", "cq")]))
    cq.drain()
    assert r.lrange("bull:pq:wait", 0, -1) == [node.job.id]
    assert r.exists(f"bull:pq:{node.job.id}:dependencies") == 0


def test_remove_refuses_a_flow_with_an_active_child(
    flows: FlowProducer, pq: Queue, cq: Queue
) -> None:
    node = flows.add(FlowJob("p", "pq", children=[FlowJob("a", "cq")]))
    take(cq)
    with pytest.raises(JobLockedError):
        node.job.remove()
