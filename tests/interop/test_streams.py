"""A corral reader of a job's stream when a Node BullMQ worker runs the job."""

from __future__ import annotations

import asyncio

import pytest
import redis

from corral import AsyncQueue
from corral.stream_items import StreamEnd
from tests.interop.conftest import Node
from tests.test_queue_events_live import blocked_in_xread

pytestmark = pytest.mark.interop


async def test_a_node_worker_ends_the_read_with_no_chunks(
    node: Node, redis_url: str, r: redis.Redis
) -> None:
    async with AsyncQueue("q", connection=redis_url) as queue:
        job = await queue.add("gen", {"prompt": "hi"})
        reader = asyncio.create_task(_read(queue, job.id))
        await blocked_in_xread(redis_url)
        result = await asyncio.to_thread(node.run, "work_jobs.mjs", "q", 1)
        assert [p["id"] for p in result["processed"]] == [job.id]
        items = await asyncio.wait_for(reader, 30)
    assert items == [
        StreamEnd("completed", {"seen": {"prompt": "hi"}, "name": "gen", "by": "node"})
    ]
    assert not r.exists(f"bull:q:{job.id}:x-stream")


async def _read(queue: AsyncQueue, job_id: str) -> list[object]:
    return [item async for item in queue.read_stream(job_id)]
