"""One logical queue over three shards on a 3-master cluster: one shard on each master, and
one worker that drains them all, each shard's calls going to its own master."""

from __future__ import annotations

import asyncio

from corral import AsyncJob, AsyncShardedQueue, Worker
from corral._shards import shard_slot
from tests.cluster.conftest import Cluster


async def test_three_shards_live_on_three_masters(cluster: Cluster) -> None:
    async with AsyncShardedQueue("orders", shards=3, connection=cluster.url) as queue:
        await queue.add_bulk([("x", {"i": i}) for i in range(90)])
        owners = [cluster.owner(shard_slot(shard.name)) for shard in queue.queues]
        assert len({owner.port for owner in owners}) == 3  # a master each
        for shard, owner in zip(queue.queues, owners, strict=True):
            with owner.client() as r:
                assert r.llen(f"bull:{shard.name}:wait") == 30
                assert r.dbsize() == len(r.keys(f"bull:{shard.name}:*"))  # only its shard

        seen: list[str] = []

        async def process(job: AsyncJob) -> int:
            seen.append(job.queue_name)
            return int(job.data["i"])

        worker = Worker("orders", process, connection=cluster.url, shards=3, concurrency=6)
        summary = await asyncio.wait_for(worker.run_async(burst=True), 60)
        assert (summary.completed, summary.failed) == (90, 0)
        assert sorted(seen) == sorted(shard.name for shard in queue.queues for _ in range(30))
        assert await queue.get_job_counts("completed", "waiting") == {
            "completed": 90,
            "waiting": 0,
        }
        for shard, owner in zip(queue.queues, owners, strict=True):
            with owner.client() as r:
                assert r.zcard(f"bull:{shard.name}:completed") == 30
