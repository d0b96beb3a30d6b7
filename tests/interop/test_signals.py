"""A job parked by corral's ``wait_for_signal`` seen by Node BullMQ 6.7.0 (black box): Node's
Queue reads it as delayed, and a Node worker on the same queue never takes it, neither while it
is parked nor once it is woken or its wait times out (it would run it from the start, knowing
nothing of the wait): only a corral worker runs it again (_lua/include/parked.lua)."""

from __future__ import annotations

import asyncio

import redis

from corral import AsyncJob, AsyncQueue, SignalTimeout, Worker
from corral.clock import now_ms
from tests.interop.conftest import Node
from tests.test_signals import Running, parked, until


async def wait_then_return(job: AsyncJob) -> dict[str, object]:
    return {"by": "corral", "approval": await job.wait_for_signal("approval", timeout=600)}


async def wait_briefly(job: AsyncJob) -> dict[str, object]:
    try:
        return {"by": "corral", "approval": await job.wait_for_signal("approval", timeout=1)}
    except SignalTimeout:
        return {"by": "corral", "approval": "timed out"}


async def test_node_reads_a_parked_job_as_delayed_and_its_worker_never_takes_it(
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
        # A Node worker on the queue runs the other jobs and not the parked one.
        other = await queue.add("plain", {})
        ran = await asyncio.to_thread(node.run, "work_jobs.mjs", "q", 1)
        assert [p["id"] for p in ran["processed"]] == [other.id]
        assert await parked(r, job.id)()
        # Woken, it is still out of Node's reach: due for a corral worker only.
        assert await queue.signal(job.id, "approval", "yes") == "woken"
        other = await queue.add("plain", {})
        ran = await asyncio.to_thread(node.run, "work_jobs.mjs", "q", 1)
        assert [p["id"] for p in ran["processed"]] == [other.id]
        seen = await asyncio.to_thread(node.run, "read_jobs.mjs", "q", job.id)
        assert seen["jobs"][job.id]["state"] == "delayed"
        worker = Running(Worker("q", wait_then_return, connection=redis_url))
        try:
            assert await job.wait_until_finished(timeout=15) == {"by": "corral", "approval": "yes"}
        finally:
            await worker.stop()
    r.close()


async def test_a_node_worker_leaves_a_timed_out_wait_to_a_corral_worker(
    node: Node, redis_url: str
) -> None:
    r = redis.Redis.from_url(redis_url, decode_responses=True)
    async with AsyncQueue("q", connection=redis_url) as queue:
        job = await queue.add("agent", {"topic": "x"})
        worker = Running(Worker("q", wait_briefly, connection=redis_url))
        try:
            await until(parked(r, job.id), "parked")
        finally:
            await worker.stop()
        due = int(r.hget(f"bull:q:{job.id}", "x-wait-due") or 0)

        async def timed_out() -> bool:
            return now_ms() > due

        await until(timed_out, "the wait's timeout")
        # Past its due time, a Node worker's promotion of due delayed jobs still skips it.
        other = await queue.add("plain", {})
        ran = await asyncio.to_thread(node.run, "work_jobs.mjs", "q", 1)
        assert [p["id"] for p in ran["processed"]] == [other.id]
        assert await parked(r, job.id)()
        worker = Running(Worker("q", wait_briefly, connection=redis_url))
        try:
            done = await job.wait_until_finished(timeout=15)
        finally:
            await worker.stop()
        assert done == {"by": "corral", "approval": "timed out"}
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
