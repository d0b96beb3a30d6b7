"""A job parked by corral's ``wait_for_signal`` seen by Node BullMQ 6.7.0 (black box): Node's
Queue reads it as delayed, a Node worker on the same queue leaves it alone while it is parked,
and once it is woken (or its timeout comes) a Node worker would run it as a plain job, from the
start, knowing nothing of the wait: docs/agents.md says such queues are processed by corral
workers only."""

from __future__ import annotations

import asyncio

import redis

from corral import AsyncJob, AsyncQueue, Worker
from tests.interop.conftest import Node
from tests.test_signals import Running, parked, until


async def wait_then_return(job: AsyncJob) -> dict[str, object]:
    return {"by": "corral", "approval": await job.wait_for_signal("approval", timeout=600)}


async def test_node_reads_a_parked_job_as_delayed_and_its_worker_leaves_it_alone(
    node: Node, redis_url: str
) -> None:
    r = redis.Redis.from_url(redis_url, decode_responses=True)
    async with AsyncQueue("q", connection=redis_url) as queue:
        job = await queue.add("agent", {"topic": "x"})
        worker = Running(Worker("q", wait_then_return, connection=redis_url))
        try:
            await until(parked(r, job.id), "parked")
        finally:
            await worker.stop()
        seen = await asyncio.to_thread(node.run, "read_jobs.mjs", "q", job.id)
        assert seen["jobs"][job.id]["state"] == "delayed"
        assert seen["counts"]["delayed"] == 1 and seen["counts"]["active"] == 0
        # A Node worker on the queue runs the other jobs and not the parked one (not due).
        other = await queue.add("plain", {})
        ran = await asyncio.to_thread(node.run, "work_jobs.mjs", "q", 1)
        assert [p["id"] for p in ran["processed"]] == [other.id]
        assert await parked(r, job.id)()
        # Woken, the job is a plain waiting job to Node: its worker runs it from the start
        # (here: returns without any approval), which is why these queues are corral-only.
        assert await queue.signal(job.id, "approval", "yes") == "woken"
        ran = await asyncio.to_thread(node.run, "work_jobs.mjs", "q", 1)
        assert [p["id"] for p in ran["processed"]] == [job.id]
        done = await queue.get_job(job.id)
        assert done is not None and done.returnvalue == {
            "seen": {"topic": "x"},
            "name": "agent",
            "by": "node",
        }
    r.close()


async def test_a_corral_worker_completes_a_job_woken_next_to_a_node_producer(
    node: Node, redis_url: str
) -> None:
    r = redis.Redis.from_url(redis_url, decode_responses=True)
    added = await asyncio.to_thread(node.run, "add_jobs.mjs", "q", 1)  # a job added by Node
    job_id = str(added["ids"][0])
    async with AsyncQueue("q", connection=redis_url) as queue:
        worker = Running(Worker("q", wait_then_return, connection=redis_url))
        try:
            await until(parked(r, job_id), "parked")
            assert await queue.signal(job_id, "approval", {"ok": True}) == "woken"
            job = await queue.get_job(job_id)
            assert job is not None
            assert await job.wait_until_finished(timeout=15) == {
                "by": "corral",
                "approval": {"ok": True},
            }
        finally:
            await worker.stop()
        seen = await asyncio.to_thread(node.run, "read_jobs.mjs", "q", job_id)
        assert seen["jobs"][job_id]["state"] == "completed"
        assert seen["jobs"][job_id]["returnvalue"] == {"by": "corral", "approval": {"ok": True}}
    r.close()
