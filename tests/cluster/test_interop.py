"""Node BullMQ 6.7.0 and corral work the same queue on a Redis Cluster: hash-tagged names are
the same on both sides, and each processes what the other added."""

from __future__ import annotations

import pytest

from corral import AsyncJob, AsyncQueue, Worker
from tests.cluster.conftest import Cluster
from tests.interop.conftest import Node
from tests.interop.conftest import node_ready as node_ready  # the fixture, shared

pytestmark = pytest.mark.interop


async def test_node_and_corral_work_each_others_jobs_on_a_cluster(
    cluster: Cluster, node_ready: None
) -> None:
    node = Node(cluster.url)
    async with AsyncQueue("{mixed}", connection=cluster.url) as queue:
        added = await queue.add_bulk([("py", {"i": i}) for i in range(20)])
        done = node.run("work_jobs.mjs", "{mixed}", 20)
        assert sorted(j["id"] for j in done["processed"]) == sorted(j.id for j in added)
        job = await queue.get_job(added[0].id)
        assert job is not None and job.returnvalue["by"] == "node"

        from_node = node.run("add_jobs.mjs", "{mixed}", 10)["ids"]
        seen: list[str] = []

        async def process(job: AsyncJob) -> str:
            seen.append(job.id)
            return "python"

        summary = await Worker("{mixed}", process, connection=cluster.url).run_async(burst=True)
        assert summary.completed == 10 and sorted(seen) == sorted(from_node)
