"""The server hangs with a busy worker's finishes in flight, then crashes (``kill -9``) or is
stopped, and restarts from its AOF on the same port. A finish that landed is recognised when
it is resent, one that did not is resent with the same lock token, and jobs a lost reply
fetched are given back: nothing is lost or completed twice, and the worker resumes."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Callable

import pytest

from corral import AsyncJob, AsyncQueue, Worker
from tests.faults.harness import FaultServer, Fleet, add_jobs, audit, eventually, logged


def calls_in_flight(worker: Worker) -> int:
    """Calls the worker sent on its script connection and has no reply to yet."""
    caller = worker._queue._caller if worker._queue is not None else None
    wire = caller._wire if caller is not None else None
    protocol = wire._protocol if wire is not None else None
    return len(protocol.waiters) if protocol is not None and protocol.lost is None else 0


@pytest.mark.parametrize("end", ["kill", "stop"])
async def test_a_server_restart_while_finishes_are_in_flight(
    servers: Callable[..., FaultServer], caplog: pytest.LogCaptureFixture, end: str
) -> None:
    # Every write is on disk before its reply: what a worker heard of survives a crash.
    server = servers("--appendonly", "yes", "--appendfsync", "always")
    r = server.client()
    running: set[str] = set()

    async def process(job: AsyncJob) -> str:
        running.add(job.id)
        await asyncio.sleep(0.005)
        running.discard(job.id)
        return "done"

    async with AsyncQueue("q", connection=server.url) as queue, Fleet(server.url) as fleet:
        ids = await add_jobs(queue, 300)
        # Locks outlive the restart by far: no job may run twice.
        worker = fleet.start("a", process, concurrency=8, lock_duration=5, stalled_interval=1)
        await eventually(lambda: r.zcard("bull:q:completed") >= 60, "jobs flowing")
        assert server.process is not None
        os.kill(server.process.pid, signal.SIGSTOP)  # hangs: calls go out, nothing comes back
        try:
            # Every job that ran has returned and its finish is on its way.
            await eventually(
                lambda: not running and calls_in_flight(worker) > 0, "finishes in flight"
            )
        finally:
            if end == "kill":
                await asyncio.to_thread(server.kill)
            else:  # SIGTERM: what the server read, it runs and saves before it exits
                server.process.terminate()
                os.kill(server.process.pid, signal.SIGCONT)
                await asyncio.to_thread(server.process.wait)
            await asyncio.to_thread(server.start)
        assert 60 <= r.zcard("bull:q:completed") < 300  # restarted mid-stream
        await audit(queue, r, completed=ids, tags=["a"], caplog=caplog, fleet=fleet)
    r.close()
    assert logged(caplog, "finish: ")  # finishes were cut off, and resent
