"""Flows run by workers: fan-in across queues, dynamic children, deferred failures."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
import redis

from corral import (
    AsyncFlowProducer,
    AsyncJob,
    AsyncQueue,
    FlowJob,
    Job,
    JobState,
    WaitingChildrenError,
    Worker,
)
from tests.test_worker import drive


@pytest.fixture
async def flows(redis_url: str) -> AsyncIterator[AsyncFlowProducer]:
    producer = AsyncFlowProducer(connection=redis_url)
    yield producer
    await producer.close()


def finished(queue: AsyncQueue, job_id: str) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return await queue.get_job_state(job_id) in (JobState.COMPLETED, JobState.FAILED)

    return check


async def run_both(url: str, process: Any, done: Callable[[], Awaitable[bool]]) -> None:
    """Workers on pq and cq with the same processor until ``done()``."""
    cq_worker = Worker("cq", process, connection=url, concurrency=4)
    task = asyncio.create_task(cq_worker.run_async())
    try:
        await drive(Worker("pq", process, connection=url), done)
    finally:
        await cq_worker.close()
        await task


async def test_a_three_level_flow_across_two_queues_fans_in(
    flows: AsyncFlowProducer, redis_url: str
) -> None:
    order: list[str] = []

    async def process(job: AsyncJob) -> Any:
        order.append(job.name)
        values = await job.get_children_values()
        if not values:
            return job.data["n"]
        return sum(values.values())

    node = await flows.add(
        FlowJob(
            "total",
            "pq",
            children=[
                FlowJob(
                    "sub",
                    "cq",
                    children=[FlowJob("leaf-a", "pq", {"n": 1}), FlowJob("leaf-b", "cq", {"n": 2})],
                ),
                FlowJob("leaf-c", "cq", {"n": 4}),
            ],
        )
    )
    async with AsyncQueue("pq", connection=redis_url) as pq:
        await run_both(redis_url, process, finished(pq, node.job.id))
        total = await pq.get_job(node.job.id)
    assert total is not None and total.returnvalue == 7
    assert order.index("sub") > max(order.index("leaf-a"), order.index("leaf-b"))
    assert order[-1] == "total"


async def test_dynamic_children_from_inside_a_processor(redis_url: str, r: redis.Redis) -> None:
    async def process(job: AsyncJob) -> Any:
        if job.name == "kid":
            return job.data["k"] * 10
        step = job.data.get("step", 0)
        if step == 0:
            async with AsyncQueue("cq", connection=redis_url) as cq:
                for k in (1, 2):
                    await cq.add(
                        "kid",
                        {"k": k},
                        job_id=f"k{k}",
                        parent={"id": job.id, "queue": job.queue_qualified_name},
                    )
            await job.update_data({"step": 1})
            if await job.move_to_waiting_children():
                raise WaitingChildrenError
        return {"sum": sum((await job.get_children_values()).values())}

    async with AsyncQueue("pq", connection=redis_url) as pq:
        await pq.add("dyn", {}, job_id="D")

        async def waiting_children() -> bool:
            return await pq.get_job_state("D") is JobState.WAITING_CHILDREN

        # No worker on cq yet: the children cannot finish before the parent waits for them.
        await drive(Worker("pq", process, connection=redis_url), waiting_children)
        await run_both(redis_url, process, finished(pq, "D"))
        job = await pq.get_job("D")
    assert job is not None and job.returnvalue == {"sum": 30}
    assert (job.attempts_made, job.attempts_started) == (1, 2)
    kinds = [f["event"] for _, f in r.xrange("bull:pq:events")]
    assert kinds[kinds.index("waiting-children") :][:4] == [
        "waiting-children",
        "waiting",
        "active",
        "completed",
    ]


async def test_a_blocking_processor_waits_for_its_children(redis_url: str) -> None:
    def process(job: Job) -> Any:
        if job.name == "kid":
            return "kid done"
        if not job.data.get("spawned"):
            job.update_data({"spawned": True})
            with_parent = {"id": job.id, "queue": job.queue_qualified_name}
            job.queue.add("kid", parent=with_parent)  # type: ignore[attr-defined]
            if job.move_to_waiting_children():
                raise WaitingChildrenError
        return job.get_children_values()

    async with AsyncQueue("pq", connection=redis_url) as pq:
        await pq.add("sync", {}, job_id="S")
        await drive(Worker("pq", process, connection=redis_url), finished(pq, "S"))
        job = await pq.get_job("S")
    assert job is not None and list(job.returnvalue.values()) == ["kid done"]


async def test_a_failing_child_fails_its_parent_through_workers(
    flows: AsyncFlowProducer, redis_url: str
) -> None:
    ran: list[str] = []

    async def process(job: AsyncJob) -> Any:
        ran.append(job.name)
        if job.name == "bad":
            raise RuntimeError("bad input")
        return "ok"

    node = await flows.add(
        FlowJob(
            "parent",
            "pq",
            children=[
                FlowJob("bad", "cq", None, {"fail_parent_on_failure": True}),
                FlowJob("good", "cq"),
            ],
        )
    )
    async with AsyncQueue("pq", connection=redis_url) as pq:
        await run_both(redis_url, process, finished(pq, node.job.id))
        parent = await pq.get_job(node.job.id)
    assert parent is not None
    assert parent.failed_reason == f"child bull:cq:{node.children[0].job.id} failed"
    assert "parent" not in ran
