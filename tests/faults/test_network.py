"""Network faults between a worker and its server, through ``tests/faults/proxy.py``: a finish
whose reply is lost, a fetch whose reply is lost, a half-open connection (the peer vanished:
no FIN, no RST), connections dropped again and again."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
import redis

from corral import AsyncJob, AsyncQueue, _scripts
from tests.faults.harness import (
    FaultServer,
    Fleet,
    add_jobs,
    audit,
    blocked_on_marker,
    completed_at_least,
    events_of,
    eventually,
    logged,
    ttl_renewed,
)
from tests.faults.proxy import FaultProxy


@pytest.fixture
def proxy(server: FaultServer) -> Iterator[FaultProxy]:
    with FaultProxy(server.port) as p:
        yield p


async def test_a_finish_whose_reply_is_lost_completes_the_job_once(
    queue: AsyncQueue, r: redis.Redis, proxy: FaultProxy, caplog: pytest.LogCaptureFixture
) -> None:
    go = asyncio.Event()
    started: list[str] = []

    async def process(job: AsyncJob) -> str:
        started.append(job.id)
        if job.name == "first":
            await go.wait()
        return "done"

    first = await queue.add("first")
    rest = await add_jobs(queue, 3)  # the lost finish had taken the next one of these
    async with Fleet(proxy.url) as fleet:
        fleet.start("a", process, lock_duration=10, stalled_interval=5)
        await eventually(lambda: started == [first.id], "the first job running")
        proxy.lose_reply_to(b"EVALSHA", _scripts.FINISH_JOBS.sha.encode())
        go.set()
        await audit(queue, r, completed=[first.id, *rest], tags=["a"], caplog=caplog, fleet=fleet)
    assert proxy.lost == 1
    assert logged(caplog, "finish: ConnectionError")  # it was the finish's reply
    assert logged(caplog, "given back to wait (fetched, not started)")  # and its next job
    assert events_of(r, "stalled") == []


async def test_a_fetch_whose_reply_is_lost_gives_its_jobs_back_unstarted(
    queue: AsyncQueue, r: redis.Redis, proxy: FaultProxy, caplog: pytest.LogCaptureFixture
) -> None:
    async with Fleet(proxy.url) as fleet:
        # A long drain delay: the fetch after the marker is the only one in a while.
        fleet.start("a", concurrency=4, lock_duration=10, stalled_interval=5, drain_delay=30)
        await eventually(lambda: blocked_on_marker(r), "the worker waiting for jobs")
        proxy.lose_reply_to(b"EVALSHA", _scripts.MOVE_TO_ACTIVE.sha.encode())
        ids = await add_jobs(queue, 4)
        await audit(queue, r, completed=ids, tags=["a"], caplog=caplog, fleet=fleet)
    assert proxy.lost == 1
    given_back = logged(caplog, "given back to wait (fetched, not started)")
    assert given_back
    assert events_of(r, "stalled") == []
    for job_id in ids:  # not counted as stalled, one attempt each
        assert r.hmget(f"bull:q:{job_id}", "stc", "atm") in ([None, "1"], ["0", "1"])


async def test_a_half_open_connection_costs_no_lock(
    server: FaultServer,
    queue: AsyncQueue,
    r: redis.Redis,
    proxy: FaultProxy,
    caplog: pytest.LogCaptureFixture,
) -> None:
    release = asyncio.Event()

    async def process(job: AsyncJob) -> str:
        if job.name == "held":
            await release.wait()  # runs through the fault, on renewals alone
        else:
            await asyncio.sleep(0.02)
        return "done"

    async with Fleet(proxy.url) as fleet:
        # Locks of 6 s are renewed every 3 s; a reply overdue by 1.5 s (a quarter of the
        # lock) drops the connection, so that what is stuck in it is sent again in time.
        settings = {"concurrency": 2, "lock_duration": 6, "stalled_interval": 1}
        fleet.start("a", process, **settings)
        held = [(await queue.add("held")).id for _ in range(2)]
        await eventually(lambda: r.llen("bull:q:active") == 2, "the held jobs running")
        await ttl_renewed(r, f"bull:q:{held[0]}:lock")
        # The worst moment: just before the next renewal, when the locks have least left.
        await asyncio.sleep(2.5)
        # The connections open now go silent for good (no FIN, no RST: a NAT forgot them);
        # new ones get through.
        proxy.blackhole()
        proxy.heal(keep_holes=True)
        # A worker beside it, on a sound connection: it would recover a lock that expired.
        fleet.start("b", process, **settings)
        ids = held + await add_jobs(queue, 20)
        await ttl_renewed(r, f"bull:q:{held[0]}:lock")
        release.set()
        await audit(queue, r, completed=ids, tags=["a", "b"], caplog=caplog, fleet=fleet)
    assert logged(caplog, "TimeoutError")  # the silent connections were given up


async def test_a_half_open_connection_does_not_hang_an_idle_worker(
    queue: AsyncQueue, r: redis.Redis, proxy: FaultProxy, caplog: pytest.LogCaptureFixture
) -> None:
    async with Fleet(proxy.url) as fleet:
        fleet.start("a", lock_duration=2, stalled_interval=1, drain_delay=1)
        await eventually(lambda: blocked_on_marker(r), "the worker waiting for jobs")
        proxy.blackhole()
        proxy.heal(keep_holes=True)  # its blocked read never hears of anything again
        ids = await add_jobs(queue, 3)
        await audit(queue, r, completed=ids, tags=["a"], caplog=caplog, fleet=fleet)


async def test_connections_dropped_again_and_again(
    queue: AsyncQueue, r: redis.Redis, proxy: FaultProxy, caplog: pytest.LogCaptureFixture
) -> None:
    ids = await add_jobs(queue, 200, ms=5)
    async with Fleet(proxy.url) as fleet:
        for tag in ("a", "b"):
            fleet.start(tag, concurrency=4, lock_duration=5, stalled_interval=1)
        for n in range(1, 6):
            await eventually(completed_at_least(r, n * 30), f"{n * 30} done")
            proxy.drop()
        await audit(queue, r, completed=ids, tags=["a", "b"], caplog=caplog, fleet=fleet)
