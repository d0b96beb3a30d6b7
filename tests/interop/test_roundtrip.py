"""corral and Node BullMQ 6.7.0 on the same queue, in both directions."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from corral import AsyncQueue, Job, Worker
from tests.interop.conftest import Node
from tests.test_worker import drive, finished

pytestmark = pytest.mark.interop

PAYLOADS: list[Any] = [
    {"user": {"id": 7, "tags": ["a", "b"], "address": {"geo": [47.37, 8.54]}, "none": None}},
    {"text": "héllo wörld 日本語 🚀", "combining": "e\u0301", "quote": 'say "hi"\n\t\\'},
    {},
    [1, [2, [3, {"deep": True}]], [], {}],
    {"n": -2.5e-7, "big": 1234567890123, "f": False},
]


async def test_node_adds_corral_works_node_listens(node: Node, redis_url: str) -> None:
    listener = await asyncio.to_thread(node.start, "listen_completed.mjs", "q", 100)
    added = await asyncio.to_thread(node.run, "add_jobs.mjs", "q", 100)
    assert len(added["ids"]) == 100

    async def process(job: Job) -> dict[str, Any]:
        return {"seen": job.data, "name": job.name, "by": "corral"}

    queue = AsyncQueue("q", connection=redis_url)
    await drive(Worker("q", process, connection=redis_url, concurrency=10), finished(queue, 100))
    heard = await asyncio.to_thread(Node.result, listener)

    expected = {
        j["id"]: {"seen": j["data"], "name": j["name"], "by": "corral"} for j in added["jobs"]
    }
    assert heard["completed"] == expected
    assert heard["failed"] == {}
    assert await queue.get_job_counts("completed", "waiting", "active") == {
        "completed": 100,
        "waiting": 0,
        "active": 0,
    }
    await queue.close()


async def test_corral_adds_node_reads_and_works(node: Node, redis_url: str) -> None:
    queue = AsyncQueue("q", connection=redis_url)
    written = []
    for i in range(100):
        options: dict[str, Any] = {}
        if i % 10 == 0:
            options["job_id"] = f"custom-{i}"
        if i % 7 == 0:
            options["attempts"] = 3
        job = await queue.add(f"job-{i}", PAYLOADS[i % len(PAYLOADS)], **options)
        written.append(job)
    await queue.close()

    ids = [j.id for j in written]
    before = await asyncio.to_thread(node.run, "read_jobs.mjs", "q", *ids)
    for job in written:
        seen = before["jobs"][job.id]
        assert (seen["name"], seen["data"], seen["timestamp"]) == (
            job.name,
            job.data,
            job.timestamp,
        )
        assert seen["opts"] == job.opts
        assert seen["state"] == "waiting"
    assert before["counts"]["waiting"] == 100

    worked = await asyncio.to_thread(node.run, "work_jobs.mjs", "q", 100)
    assert sorted(p["id"] for p in worked["processed"]) == sorted(ids)
    by_id = {j.id: j for j in written}
    for p in worked["processed"]:
        job = by_id[p["id"]]
        assert (p["name"], p["data"], p["opts"], p["timestamp"]) == (
            job.name,
            job.data,
            job.opts,
            job.timestamp,
        )

    queue = AsyncQueue("q", connection=redis_url)
    done = await queue.get_job(ids[1])
    assert done is not None
    assert done.returnvalue == {"seen": written[1].data, "name": "job-1", "by": "node"}
    assert done.attempts_made == 1
    assert await queue.get_job_counts("completed") == {"completed": 100}
    await queue.close()


async def test_node_reads_a_job_corral_failed(node: Node, redis_url: str) -> None:
    async def process(job: Job) -> None:
        raise ValueError(f"cannot handle {job.data['kind']}")

    queue = AsyncQueue("q", connection=redis_url)
    await queue.add("bad", {"kind": "gif"}, attempts=2)
    await drive(Worker("q", process, connection=redis_url), finished(queue, 1))
    await queue.close()

    seen = (await asyncio.to_thread(node.run, "read_jobs.mjs", "q", "1"))["jobs"]["1"]
    assert seen["state"] == "failed"
    assert seen["failedReason"] == "cannot handle gif"
    assert seen["attemptsMade"] == 2
    assert len(seen["stacktrace"]) == 2
    assert all("ValueError: cannot handle gif" in s for s in seen["stacktrace"])
    assert seen["finishedOn"] >= seen["processedOn"] >= seen["timestamp"]
