"""Flows never strand a parent, and big flows are written in chunks.

A child that is not created (deduplicated, an idempotency key's hit, a job id that exists) is
no dependency: its node is the existing job and its parent does not wait for it. Each case is
run on both paths: a flow that fits one transaction, and one written in chunks (the chunk size
is made small here, so that small flows take the chunked path). Chunked flows: a parent never
runs before all its children are written, even when the first ones complete meanwhile; a
resent chunk creates nothing twice; a failure part-way releases the parents written, and a
producer that dies part-way leaves a record an operator releases the flow with.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from redis.exceptions import ConnectionError, ResponseError

from corral import (
    AsyncFlowProducer,
    AsyncJob,
    AsyncQueue,
    FlowJob,
    InvalidOptionError,
    JobNode,
    JobState,
    _flow_chunks,
    _scripts,
)
from corral._async import flow as flow_module
from corral.errors import FlowAddError
from tests._async.support import snapshot

T = 1_700_000_000_000


@pytest.fixture(params=["atomic", "chunked"])
def path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run the test on both paths: one transaction, or a transaction per job."""
    if request.param == "chunked":
        monkeypatch.setattr(_flow_chunks, "FLOW_CHUNK_JOBS", 1)
    return str(request.param)


@pytest.fixture
def chunks_of_two(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_flow_chunks, "FLOW_CHUNK_JOBS", 2)


class Calls:
    """Wraps the flow module's ``run_atomically``: counts transactions and runs a hook before
    (or instead of) each one."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.real = flow_module.run_atomically
        self.count = 0
        self.before: dict[int, Callable[[], Any]] = {}
        self.after: dict[int, Callable[[], Any]] = {}
        monkeypatch.setattr(flow_module, "run_atomically", self)

    async def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.count += 1
        hook = self.before.pop(self.count, None)
        if hook is not None:
            await hook()
        result = await self.real(*args, **kwargs)
        hook = self.after.pop(self.count, None)
        if hook is not None:
            await hook()
        return result


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[Calls]:
    yield Calls(monkeypatch)


async def take(queue: AsyncQueue, count: int = 10) -> list[AsyncJob]:
    """Fetch ready jobs as a worker would."""
    reply = await queue._run(
        _scripts.MOVE_TO_ACTIVE, [queue._job_prefix, T, count, "tok", 0, 30000, ""]
    )
    return [
        queue._bind(f.job_id, f.fields, token=f.token) for f in _scripts.parse_fetched(reply, 2)
    ]


async def complete_all(queue: AsyncQueue) -> int:
    """Take and complete every ready job of ``queue``; how many."""
    done = 0
    while True:
        jobs = await take(queue)
        if not jobs:
            return done
        for job in jobs:
            await job.move_to_completed(job.name)
        done += len(jobs)


def parent_of(children: list[FlowJob], name: str = "parent") -> FlowJob:
    return FlowJob(name, "pq", {"p": 1}, children=children)


def dependencies(r: redis.Redis, job: AsyncJob) -> set[str]:
    return r.smembers(f"{job.queue_qualified_name}:{job.id}:dependencies")  # type: ignore[return-value]


# -- a child that is not created is no dependency ---------------------------------------------


async def test_a_deduplicated_child_is_the_job_that_holds_the_id(
    path: str, flows: AsyncFlowProducer, cq: AsyncQueue, pq: AsyncQueue, r: redis.Redis
) -> None:
    holder = await cq.add("first", {"n": 0}, deduplication={"id": "d"})
    node = await flows.add(
        parent_of([FlowJob("dup", "cq", {"n": 1}, {"deduplication": {"id": "d"}})])
    )
    assert [c.job.id for c in node.children] == [holder.id]
    assert node.children[0].job.data == {"n": 0}
    # The parent had nothing to wait for: it is queued at once.
    assert await node.job.get_state() == JobState.WAITING
    assert dependencies(r, node.job) == set()
    assert r.hget(f"bull:cq:{holder.id}", "parentKey") is None


async def test_a_deduplicated_child_beside_a_new_one(
    path: str, flows: AsyncFlowProducer, cq: AsyncQueue, r: redis.Redis
) -> None:
    holder = await cq.add("first", None, deduplication={"id": "d"})
    node = await flows.add(
        parent_of(
            [
                FlowJob("dup", "cq", None, {"deduplication": {"id": "d"}}),
                FlowJob("new", "cq"),
                FlowJob("new2", "cq"),
            ]
        )
    )
    new = node.children[1].job
    assert node.children[0].job.id == holder.id
    assert dependencies(r, node.job) == {f"bull:cq:{new.id}", f"bull:cq:{node.children[2].job.id}"}
    assert await node.job.get_state() == JobState.WAITING_CHILDREN
    await complete_all(cq)  # the holder and both new children
    assert await node.job.get_state() == JobState.WAITING


async def test_an_idempotent_hit_child_is_the_first_job(
    path: str, flows: AsyncFlowProducer, cq: AsyncQueue, r: redis.Redis
) -> None:
    first = await cq.add("first", {"n": 0}, idempotency_key="k")
    node = await flows.add(parent_of([FlowJob("again", "cq", {"n": 1}, {"idempotency_key": "k"})]))
    assert node.children[0].job.id == first.id
    assert node.children[0].job.data == {"n": 0}
    assert await node.job.get_state() == JobState.WAITING
    assert dependencies(r, node.job) == set()


async def test_a_child_whose_job_id_exists_is_the_existing_job(
    path: str, flows: AsyncFlowProducer, cq: AsyncQueue, r: redis.Redis
) -> None:
    existing = await cq.add("existing", {"n": 0}, job_id="x")
    node = await flows.add(
        parent_of([FlowJob("child", "cq", {"n": 1}, {"job_id": "x"}), FlowJob("c2", "cq")])
    )
    child, other = node.children
    assert (child.job.id, child.job.name, child.job.data) == ("x", "existing", {"n": 0})
    assert r.hget("bull:cq:x", "parentKey") is None  # not linked to the new parent
    assert dependencies(r, node.job) == {f"bull:cq:{other.job.id}"}
    await complete_all(cq)
    assert await node.job.get_state() == JobState.WAITING
    assert existing.id == "x"


async def test_a_parent_whose_children_all_exist_runs_and_so_does_its_parent(
    path: str, flows: AsyncFlowProducer, cq: AsyncQueue, pq: AsyncQueue
) -> None:
    await cq.add("a", None, job_id="a")
    await cq.add("b", None, job_id="b")
    node = await flows.add(
        FlowJob(
            "top",
            "pq",
            children=[
                FlowJob(
                    "mid",
                    "pq",
                    children=[
                        FlowJob("a", "cq", None, {"job_id": "a"}),
                        FlowJob("b", "cq", None, {"job_id": "b"}),
                    ],
                )
            ],
        )
    )
    mid = node.children[0].job
    assert await mid.get_state() == JobState.WAITING
    assert await node.job.get_state() == JobState.WAITING_CHILDREN
    [taken] = await take(pq)
    assert taken.id == mid.id
    await taken.move_to_completed("mid done")
    assert await node.job.get_state() == JobState.WAITING


async def test_the_children_of_a_deduplicated_node_are_not_written(
    path: str, flows: AsyncFlowProducer, cq: AsyncQueue, pq: AsyncQueue, r: redis.Redis
) -> None:
    holder = await pq.add("held", None, deduplication={"id": "d"})
    node = await flows.add(
        FlowJob(
            "top",
            "pq",
            children=[
                FlowJob("mid", "pq", None, {"deduplication": {"id": "d"}}, [FlowJob("leaf", "cq")]),
                FlowJob("other", "cq"),
            ],
        )
    )
    mid, other = node.children
    assert (mid.job.id, mid.children) == (holder.id, [])
    assert r.llen("bull:cq:wait") == 1  # only "other": "leaf" had no parent to join
    assert dependencies(r, node.job) == {f"bull:cq:{other.job.id}"}


# -- ids refused before anything is written ----------------------------------------------------


def own_parent() -> FlowJob:
    return FlowJob(
        "p", "pq", None, {"job_id": "same"}, [FlowJob("c", "pq", None, {"job_id": "same"})]
    )


def own_grandparent() -> FlowJob:
    grandchild = FlowJob("c", "pq", None, {"job_id": "same"})
    return FlowJob("p", "pq", None, {"job_id": "same"}, [FlowJob("m", "cq", children=[grandchild])])


def root_own_parent() -> FlowJob:
    return FlowJob("p", "pq", None, {"job_id": "j", "parent": {"id": "j", "queue": "bull:pq"}})


@pytest.mark.parametrize(
    "make, message",
    [
        (
            own_parent,
            r"flow node root.children\[0\] \('c'\): job id 'same' is the id of its parent",
        ),
        (own_grandparent, "job id 'same' is the id of the node root above it"),
        (root_own_parent, r"flow node root \('p'\): job id 'j' is the id of its parent"),
    ],
)
async def test_a_child_with_the_id_of_its_parent_is_refused(
    path: str,
    flows: AsyncFlowProducer,
    r: redis.Redis,
    make: Callable[[], FlowJob],
    message: str,
) -> None:
    before = snapshot(r)
    with pytest.raises(InvalidOptionError, match=message):
        await flows.add(make())
    bigger = make()  # chunked on that path
    bigger.children = [*bigger.children, *(FlowJob("x", "cq") for _ in range(3))]
    with pytest.raises(InvalidOptionError, match="cannot be its own child"):
        await flows.add(bigger)
    with pytest.raises(InvalidOptionError, match="flow 1: flow node"):
        await flows.add_bulk([FlowJob("ok", "pq"), bigger])
    assert snapshot(r) == before


async def test_the_same_id_in_two_branches_is_one_job(
    path: str, flows: AsyncFlowProducer, r: redis.Redis
) -> None:
    node = await flows.add(
        parent_of(
            [
                FlowJob("a", "cq", {"n": 1}, {"job_id": "twin"}),
                FlowJob("b", "cq", {"n": 2}, {"job_id": "twin"}),
            ]
        )
    )
    assert [c.job.id for c in node.children] == ["twin", "twin"]
    assert [c.job.name for c in node.children] == ["a", "a"]
    assert dependencies(r, node.job) == {"bull:cq:twin"}


# -- big flows in chunks -------------------------------------------------------------------


def wide(n: int) -> FlowJob:
    return parent_of([FlowJob(f"c{i}", "cq", {"i": i}) for i in range(n)])


async def test_a_small_flow_is_one_transaction(flows: AsyncFlowProducer, calls: Calls) -> None:
    await flows.add(wide(5))
    assert calls.count == 1


async def test_a_big_flow_goes_in_chunks_and_its_parent_waits_for_the_last(
    chunks_of_two: None,
    flows: AsyncFlowProducer,
    calls: Calls,
    cq: AsyncQueue,
    pq: AsyncQueue,
    r: redis.Redis,
) -> None:
    states: list[JobState] = []

    async def complete_written_children() -> None:
        # The children written so far complete before the next chunk is written.
        await complete_all(cq)
        [parent_id] = r.zrange("bull:pq:waiting-children", 0, -1)
        states.append(await pq.get_job_state(parent_id))

    calls.before = {2: complete_written_children, 3: complete_written_children}
    node = await flows.add(wide(5))  # 6 jobs: 3 chunks of 2
    assert calls.count == 3
    assert states == [JobState.WAITING_CHILDREN, JobState.WAITING_CHILDREN]
    assert await node.job.get_state() == JobState.WAITING_CHILDREN
    assert [c.job.name for c in node.children] == [f"c{i}" for i in range(5)]
    assert await node.job.get_dependencies_count() == {
        "processed": 3,
        "unprocessed": 2,
        "failed": 0,
        "ignored": 0,
    }
    assert await flows.get_unfinished_flows("pq") == []
    assert r.keys("bull:pq:x-flow:*") == []
    await complete_all(cq)
    assert await node.job.get_state() == JobState.WAITING
    assert len(await node.job.get_children_values()) == 5


async def test_a_marked_parent_shows_no_mark_among_its_children(
    chunks_of_two: None, flows: AsyncFlowProducer, calls: Calls, r: redis.Redis
) -> None:
    seen: dict[str, Any] = {}

    async def look() -> None:
        [parent_id] = r.zrange("bull:pq:waiting-children", 0, -1)
        members = r.smembers(f"bull:pq:{parent_id}:dependencies")
        seen["marks"] = sorted(m for m in members if m.endswith(":"))  # type: ignore[union-attr]
        seen["flows"] = await flows.get_unfinished_flows("pq")
        tree = await flows.get_flow(parent_id, "pq")
        assert tree is not None
        seen["children"] = len(tree.children)
        seen["unprocessed"] = len((await tree.job.get_dependencies())["unprocessed"])

    calls.before = {2: look}
    node = await flows.add(wide(3))
    [unfinished] = seen["flows"]
    assert seen["marks"] == [f"bull:pq:x-flow:{unfinished.flow_id}:"]
    assert (unfinished.root, unfinished.jobs, unfinished.trees) == (
        f"bull:pq:{node.job.id}",
        4,
        1,
    )
    assert (unfinished.written, unfinished.marked) == (0, 1)
    assert (seen["children"], seen["unprocessed"]) == (1, 1)


async def test_a_lost_reply_resends_the_chunk_and_creates_nothing_twice(
    chunks_of_two: None, flows: AsyncFlowProducer, calls: Calls, cq: AsyncQueue, r: redis.Redis
) -> None:
    async def lose_the_reply() -> None:
        raise ConnectionError("reply lost")

    calls.after = {2: lose_the_reply}  # chunk 2 was written, its answer did not come back
    node = await flows.add(wide(5))
    assert calls.count == 4
    assert [c.job.name for c in node.children] == [f"c{i}" for i in range(5)]
    assert all(c.job.data == {"i": i} for i, c in enumerate(node.children))
    assert r.llen("bull:cq:wait") == 5
    assert len(dependencies(r, node.job)) == 5
    await complete_all(cq)
    assert await node.job.get_state() == JobState.WAITING


async def test_a_failure_part_way_releases_the_parents_written(
    chunks_of_two: None,
    flows: AsyncFlowProducer,
    calls: Calls,
    cq: AsyncQueue,
    pq: AsyncQueue,
    r: redis.Redis,
) -> None:
    async def refuse() -> None:
        raise ResponseError("ERR something no resend fixes")

    calls.before = {3: refuse}
    # Parents first: top, parent, leaf, c0, c1; chunks [top, parent], [leaf, c0], [c1].
    tree = FlowJob("top", "pq", children=[wide(2), FlowJob("leaf", "cq")])
    with pytest.raises(FlowAddError) as caught:
        await flows.add(tree)
    error = caught.value
    assert isinstance(error.__cause__, ResponseError)
    assert error.written == [
        "root",
        "root.children[0]",
        "root.children[1]",
        "root.children[0].children[0]",
    ]
    assert error.unsure == ["root.children[0].children[1]"]
    assert error.released
    assert await flows.get_unfinished_flows("pq") == []
    assert r.keys("*x-flow*") == []
    # The parents progress with the children they got.
    assert await complete_all(cq) == 2  # leaf and c0
    [parent] = await take(pq)
    assert parent.name == "parent"
    await parent.move_to_completed("ok")
    [top] = await take(pq)
    assert top.name == "top"


async def test_a_producer_that_dies_part_way_leaves_a_flow_to_release(
    chunks_of_two: None, flows: AsyncFlowProducer, calls: Calls, cq: AsyncQueue, r: redis.Redis
) -> None:
    class Died(BaseException):
        pass

    async def die() -> None:
        raise Died()

    calls.before = {3: die}
    with pytest.raises(Died):
        await flows.add(wide(5))
    [unfinished] = await flows.get_unfinished_flows("pq")
    assert (unfinished.jobs, unfinished.written, unfinished.marked) == (6, 2, 1)
    assert unfinished.started_ms <= unfinished.updated_ms
    parent_key = unfinished.root
    assert await complete_all(cq) == 3
    # Its children completed, the mark keeps it waiting: the rest of the flow never came.
    parent_id = parent_key.rpartition(":")[2]
    assert r.zrange("bull:pq:waiting-children", 0, -1) == [parent_id]
    assert await flows.release_unfinished_flow("pq", unfinished.flow_id) == 1
    assert r.lrange("bull:pq:wait", 0, -1) == [parent_id]
    assert await flows.get_unfinished_flows("pq") == []
    assert r.keys("*x-flow*") == []
    assert await flows.release_unfinished_flow("pq", unfinished.flow_id) == 0


async def test_a_flow_cut_short_can_be_removed_instead(
    chunks_of_two: None, flows: AsyncFlowProducer, calls: Calls, pq: AsyncQueue, r: redis.Redis
) -> None:
    class Died(BaseException):
        pass

    async def die() -> None:
        raise Died()

    calls.before = {2: die}
    with pytest.raises(Died):
        await flows.add(FlowJob("top", "pq", children=[wide(3)]))
    [unfinished] = await flows.get_unfinished_flows("pq")
    assert await pq.remove(unfinished.root.rpartition(":")[2])  # with the written parent
    assert await flows.release_unfinished_flow("pq", unfinished.flow_id) == 1
    assert await pq.get_job_counts() == dict.fromkeys(await pq.get_job_counts(), 0)
    assert r.keys("*x-flow*") == []


async def test_add_bulk_of_many_flows_goes_in_chunks(
    chunks_of_two: None, flows: AsyncFlowProducer, calls: Calls, cq: AsyncQueue
) -> None:
    nodes = await flows.add_bulk([wide(1), wide(2), FlowJob("alone", "cq")])
    assert calls.count == 3
    assert [len(n.children) for n in nodes] == [1, 2, 0]
    await complete_all(cq)
    for node in nodes[:2]:
        assert await node.job.get_state() == JobState.WAITING


async def test_nested_parents_in_chunks_each_wait_for_their_own_children(
    chunks_of_two: None, flows: AsyncFlowProducer, cq: AsyncQueue, pq: AsyncQueue
) -> None:
    node: JobNode[AsyncJob] = await flows.add(
        FlowJob("top", "pq", children=[wide(3), wide(2), FlowJob("leaf", "cq")])
    )
    assert await complete_all(cq) == 6
    parents = await take(pq)
    assert sorted(p.name for p in parents) == ["parent", "parent"]
    assert await node.job.get_state() == JobState.WAITING_CHILDREN
    for parent in parents:
        await parent.move_to_completed(parent.id)
    assert await node.job.get_state() == JobState.WAITING
