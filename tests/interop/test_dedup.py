"""Deduplication and metrics shared with Node BullMQ 6.7.0."""

from __future__ import annotations

import asyncio
import json

import pytest
import redis

from corral import AsyncJob, AsyncQueue, Worker
from corral.dedup import Dedup
from tests.interop.conftest import Node
from tests.test_worker import drive, finished

pytestmark = pytest.mark.interop


async def ok(job: AsyncJob) -> str:
    return "ok"


async def test_dedup_ids_are_shared(node: Node, redis_url: str, r: redis.Redis) -> None:
    async with AsyncQueue("dd", connection=redis_url) as queue:
        kept = await queue.add("a", {"by": "corral"}, deduplication=Dedup("order-1"))
        # Node's add with the same id is dropped in favour of corral's job...
        added = await asyncio.to_thread(
            node.run,
            "add_list.mjs",
            "dd",
            json.dumps(
                [
                    {
                        "name": "a",
                        "data": {"by": "node"},
                        "opts": {"deduplication": {"id": "order-1"}},
                    }
                ]
            ),
        )
        assert added["ids"] == [kept.id]
        # ...and corral's add with Node's throttled id is dropped in favour of Node's.
        theirs = await asyncio.to_thread(
            node.run,
            "add_list.mjs",
            "dd",
            json.dumps([{"name": "b", "opts": {"deduplication": {"id": "t", "ttl": 60000}}}]),
        )
        mine = await queue.add("b", deduplication=Dedup("t", ttl=60))
        assert mine.id == theirs["ids"][0]
        assert await queue.get_deduplication_job_id("t") == mine.id
        dedup_events = [f for _, f in r.xrange("bull:dd:events") if f["event"] == "deduplicated"]
        assert [e["deduplicationId"] for e in dedup_events] == ["order-1", "t"]

        # A corral worker finishing Node's simple-mode job frees the id for Node's next add.
        await asyncio.to_thread(
            node.run,
            "add_list.mjs",
            "dd",
            json.dumps([{"name": "c", "opts": {"deduplication": {"id": "s"}}}]),
        )
        await drive(Worker("dd", ok, connection=redis_url), finished(queue, 3))
        assert r.exists("bull:dd:de:s") == 0 and r.exists("bull:dd:de:order-1") == 0
        assert r.exists("bull:dd:de:t") == 1  # the ttl outlives the job, as in BullMQ
        again = await asyncio.to_thread(
            node.run,
            "add_list.mjs",
            "dd",
            json.dumps([{"name": "c", "opts": {"deduplication": {"id": "s"}}}]),
        )
        assert again["ids"][0] not in (kept.id, mine.id)


async def test_node_reads_corral_metrics(node: Node, redis_url: str) -> None:
    async with AsyncQueue("mx", connection=redis_url) as queue:
        for _ in range(5):
            await queue.add("a")

        async def flaky(job: AsyncJob) -> str:
            if job.id == "5":
                raise ValueError("no")
            return "ok"

        worker = Worker("mx", flaky, connection=redis_url, metrics_max_data_points=10)
        await drive(worker, finished(queue, 5))
        ours = await queue.get_metrics("completed")
    results = (
        await asyncio.to_thread(
            node.run,
            "queue_calls.mjs",
            "mx",
            json.dumps([["getMetrics", "completed"], ["getMetrics", "failed"]]),
        )
    )["results"]
    assert results[0]["meta"]["count"] == ours.count == 4
    assert results[0]["data"] == ours.data == []
    assert results[1]["meta"]["count"] == 1
