"""A failover and back, as ``REPLICAOF`` does it: the workers' server A becomes a replica of B
(a blocked ``BZPOPMIN`` gets ``-UNBLOCKED``, writes get ``-READONLY``), then a primary again.
The workers stay connected to A the whole time; B had A's data, so every job survives."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
import redis

from corral import AsyncJob, AsyncQueue
from tests.faults.harness import (
    FaultServer,
    Fleet,
    add_jobs,
    audit,
    blocked_on_marker,
    error_count,
    eventually,
)


def replication(r: redis.Redis) -> dict[str, object]:
    return dict(r.info("replication"))


def in_sync(replica: redis.Redis, primary: redis.Redis) -> Callable[[], bool]:
    def check() -> bool:
        info = replication(replica)
        return (
            info.get("master_link_status") == "up"
            and info.get("slave_repl_offset") == replication(primary)["master_repl_offset"]
        )

    return check


async def test_a_failover_to_another_server_and_back_loses_and_repeats_nothing(
    servers: Callable[..., FaultServer],
    server: FaultServer,
    queue: AsyncQueue,
    r: redis.Redis,
    fleet: Fleet,
    caplog: pytest.LogCaptureFixture,
) -> None:
    b_server = servers()
    b = b_server.client()
    for each in (r, b):
        each.config_set("repl-diskless-sync-delay", 0)  # a full sync starts at once
    release = asyncio.Event()
    held: set[str] = set()

    async def process(job: AsyncJob) -> str:
        if job.name == "held":
            held.add(job.id)
            await release.wait()  # finishes while A is read-only
        else:
            await asyncio.sleep(0.005)
        return "done"

    ids = await add_jobs(queue, 100)
    ids += [(await queue.add("held")).id for _ in range(3)]
    for tag in ("a", "b"):
        fleet.start(tag, process, concurrency=2, lock_duration=4, stalled_interval=1)
    # Three slots hold a job each; the fourth waits on the marker.
    await eventually(lambda: len(held) == 3, "three held jobs running")
    await eventually(lambda: blocked_on_marker(r), "a worker blocked on the marker")
    try:
        b.replicaof("127.0.0.1", server.port)
        await eventually(in_sync(b, r), "B in sync with A")
        # The switch: writes to A wait while B catches up and takes over, so none is lost.
        r.execute_command("CLIENT", "PAUSE", 10_000, "WRITE")
        await eventually(in_sync(b, r), "B caught up")
        b.replicaof("NO", "ONE")
        r.replicaof("127.0.0.1", b_server.port)
        r.execute_command("CLIENT", "UNPAUSE")
        await eventually(in_sync(r, b), "A a replica of B")
        release.set()  # the held jobs finish now: their finishes are refused, and resent
        await asyncio.sleep(1)  # A stays read-only for a while
        await eventually(in_sync(r, b), "A has all of B")
        r.replicaof("NO", "ONE")
    finally:
        r.replicaof("NO", "ONE")
        b.close()
    assert error_count(r, "UNBLOCKED") > 0 and error_count(r, "READONLY") > 0
    ids += await add_jobs(queue, 20)
    await audit(queue, r, completed=ids, tags=["a", "b"], caplog=caplog, fleet=fleet)
