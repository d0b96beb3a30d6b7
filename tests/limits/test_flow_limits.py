"""Size tests of flows: a flow of 100k children never holds the server for long.

A flow too big for one transaction is written in chunks (``corral._flow_chunks``). SLOWLOG
records the script calls inside a MULTI/EXEC one by one, not the EXEC that holds the server
for all of them, so the transactions are timed with the latency monitor as well: its
``command`` event keeps the longest command, EXEC included, to the millisecond.
"""

from __future__ import annotations

from corral import AsyncFlowProducer, FlowJob, JobState, _flow_chunks
from tests.limits.conftest import ServerTimer


async def test_a_flow_of_100k_children_is_written_in_short_calls(
    limits_url: str, server_timer: ServerTimer
) -> None:
    n = 100_000
    async with AsyncFlowProducer(connection=limits_url) as flows:
        server_timer.reset()
        before = server_timer.transactions()
        node = await flows.add(
            FlowJob("report", "pq", children=[FlowJob("part", "cq", {"i": i}) for i in range(n)])
        )
        chunks = server_timer.transactions() - before
        server_timer.check("flow add, 100k children")
        assert len(node.children) == n
        assert chunks == -(-(n + 1) // _flow_chunks.FLOW_CHUNK_JOBS)
        assert await node.job.get_state() == JobState.WAITING_CHILDREN
        counts = await node.job.get_dependencies_count()
        assert counts["unprocessed"] == n  # every child, and no mark left
        assert await flows.get_unfinished_flows("pq") == []


async def test_a_flow_of_many_parents_is_written_in_short_calls(
    limits_url: str, server_timer: ServerTimer
) -> None:
    # 2,000 parents of 10 children each, under one root: a mark on most parents.
    parents = 2_000
    tree = FlowJob(
        "root",
        "pq",
        children=[
            FlowJob("mid", "pq", children=[FlowJob("leaf", "cq") for _ in range(10)])
            for _ in range(parents)
        ],
    )
    async with AsyncFlowProducer(connection=limits_url) as flows:
        server_timer.reset()
        node = await flows.add(tree)
        server_timer.check("flow add, 2k parents x 10 children")
        assert len(node.children) == parents
        client = await flows.client()
        assert await client.zcard("bull:pq:waiting-children") == parents + 1
        assert await flows.get_unfinished_flows("pq") == []
