"""``-BUSY``: another client's Lua script runs for longer than ``busy-reply-threshold``, and
every call of the workers meanwhile is refused. Lock renewal and the stalled check wait it out
(before the fix, one BUSY ended both and the running job was recovered as stalled and ran
twice): with ``lock_duration`` above the script's run time nothing is recovered or repeated."""

from __future__ import annotations

import asyncio

import pytest
import redis

from corral import AsyncJob, AsyncQueue
from tests.faults.harness import (
    FaultServer,
    Fleet,
    add_jobs,
    audit,
    error_count,
    events_of,
    eventually,
    stalled_checks,
)

#: Spins for ARGV[1] microseconds of wall time: the server answers nothing else meanwhile.
BUSY_LOOP = """
local t = redis.call('TIME')
local start = t[1] * 1000000 + t[2]
repeat
  local now = redis.call('TIME')
until now[1] * 1000000 + now[2] - start > tonumber(ARGV[1])
return 1
"""


def run_busy_script(server: FaultServer, seconds: float) -> None:
    with server.client(socket_timeout=seconds + 30) as other:
        other.eval(BUSY_LOOP, 0, int(seconds * 1_000_000))


async def test_a_long_script_of_another_client_neither_stalls_nor_repeats_running_jobs(
    server: FaultServer,
    queue: AsyncQueue,
    r: redis.Redis,
    fleet: Fleet,
    caplog: pytest.LogCaptureFixture,
) -> None:
    r.config_set("busy-reply-threshold", 100)
    started: set[str] = set()
    release = asyncio.Event()

    async def long_job(job: AsyncJob) -> str:
        started.add(job.id)
        await release.wait()  # runs until after the BUSY episode
        return "done"

    async def process(job: AsyncJob) -> str:
        if job.name == "long":
            return await long_job(job)
        await asyncio.sleep(job.data["ms"] / 1000)
        return "short"

    long_ids = [(await queue.add("long")).id for _ in range(2)]
    short_ids = await add_jobs(queue, 60, ms=30)
    for tag in ("a", "b"):
        # Locks live 6 s, renewed every 3 s: the 1.5 s script cannot outlast one.
        fleet.start(tag, process, concurrency=2, lock_duration=6, stalled_interval=0.5)
    await eventually(lambda: started == set(long_ids), "both long jobs running")
    await eventually(lambda: r.zcard("bull:q:completed") >= 5, "short jobs flowing")
    await asyncio.to_thread(run_busy_script, server, 1.5)
    assert error_count(r, "BUSY") > 0  # the workers' calls were refused meanwhile
    # Two stalled checks after the episode: a lock lost to it would be recovered now.
    await stalled_checks(r, 2)
    release.set()
    await audit(
        queue, r, completed=long_ids + short_ids, tags=["a", "b"], caplog=caplog, fleet=fleet
    )
    assert fleet.stalled == [] and events_of(r, "stalled") == []
