"""Size tests of flows: a flow of 100k children never holds the server for long.

A flow too big for one transaction is written in chunks (``corral._flow_chunks``). SLOWLOG
records the script calls inside a MULTI/EXEC one by one, not the EXEC that holds the server
for all of them, so the transactions are timed with the latency monitor as well: its
``command`` event keeps the longest command, EXEC included, to the millisecond.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator

import pytest
import redis

from corral import AsyncFlowProducer, FlowJob, JobState, _flow_chunks
from tests.limits.conftest import ASSERTED_MS, ServerTimer


class Transactions:
    """The longest command, transactions included, since :meth:`reset` (latency monitor)."""

    def __init__(self, url: str) -> None:
        self.client = redis.Redis.from_url(url, decode_responses=True)
        self.client.config_set("latency-monitor-threshold", 1)
        self.reset()

    def reset(self) -> None:
        self.client.execute_command("LATENCY", "RESET")

    def count(self) -> int:
        """How many transactions the server has run."""
        stats = self.client.info("commandstats").get("cmdstat_exec", {"calls": 0})
        return int(stats["calls"])

    def check(self, what: str) -> int:
        longest = 0
        for event in self.client.execute_command("LATENCY", "LATEST"):
            if event[0] == "command":
                longest = int(event[3])  # the event's maximum since the reset, in ms
        line = f"{what}: longest command or transaction {longest} ms"
        print(line)
        report = os.environ.get("CORRAL_LIMITS_REPORT")
        if report:
            with open(report, "a", encoding="utf-8") as out:
                out.write(json.dumps({"case": what, "ms": longest, "command": "EXEC"}) + "\n")
        assert longest < ASSERTED_MS, line
        self.reset()
        return longest

    def close(self) -> None:
        self.client.config_set("latency-monitor-threshold", 0)
        self.client.close()


@pytest.fixture
def transactions(limits_url: str) -> Iterator[Transactions]:
    timer = Transactions(limits_url)
    yield timer
    timer.close()


async def test_a_flow_of_100k_children_is_written_in_short_calls(
    limits_url: str, server_timer: ServerTimer, transactions: Transactions
) -> None:
    n = 100_000
    async with AsyncFlowProducer(connection=limits_url) as flows:
        server_timer.reset()
        transactions.reset()
        before = transactions.count()
        node = await flows.add(
            FlowJob("report", "pq", children=[FlowJob("part", "cq", {"i": i}) for i in range(n)])
        )
        chunks = transactions.count() - before
        server_timer.check("flow add, 100k children")
        transactions.check("flow add, 100k children")
        assert len(node.children) == n
        assert chunks == -(-(n + 1) // _flow_chunks.FLOW_CHUNK_JOBS)
        assert await node.job.get_state() == JobState.WAITING_CHILDREN
        counts = await node.job.get_dependencies_count()
        assert counts["unprocessed"] == n  # every child, and no mark left
        assert await flows.get_unfinished_flows("pq") == []


async def test_a_flow_of_many_parents_is_written_in_short_calls(
    limits_url: str, server_timer: ServerTimer, transactions: Transactions
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
        transactions.reset()
        node = await flows.add(tree)
        server_timer.check("flow add, 2k parents x 10 children")
        transactions.check("flow add, 2k parents x 10 children")
        assert len(node.children) == parents
        client = await flows.client()
        assert await client.zcard("bull:pq:waiting-children") == parents + 1
        assert await flows.get_unfinished_flows("pq") == []
