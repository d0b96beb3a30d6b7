"""Failovers of the master of a queue's slot during a drain, on a cluster of each test's own.

- A requested failover (``CLUSTER FAILOVER`` on the replica): the old master becomes a replica
  and answers ``MOVED`` to the new one; workers and producers follow it, nothing is lost (the
  replica caught up before the switch), every job completes once.
- A killed master (SIGKILL, no warning) while producers add jobs with and without
  ``durable=True``: the replica takes over (and the killed node, restarted, rejoins as its
  replica); no acknowledged durable add is lost, none stuck active, every worker still
  consumes. What the non-durable adds lost is printed (the figures
  in docs/deployment.md), not asserted: it depends on where replication was at the kill.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator

import pytest
import redis
from redis.crc import key_slot

from corral import AsyncQueue, AsyncQueueEvents, NotDurableError
from tests.cluster.conftest import Cluster, wait_for
from tests.faults.harness import Fleet, add_jobs, audit, eventually

QUEUE = "{q}"
SLOT = int(key_slot(b"q"))


@contextlib.contextmanager
def client_of(cluster: Cluster, port: int) -> Iterator[redis.Redis]:
    with cluster.node(port).client(socket_timeout=5) as r:
        yield r


async def test_workers_and_producers_follow_a_requested_failover(
    fresh_cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    cluster = fresh_cluster
    old = cluster.owner(SLOT)
    new = cluster.replica_of(old)
    url = cluster.url
    queue = AsyncQueue(QUEUE, connection=url)
    # No retries of its own: its first call after the switch meets MOVED on the connection it
    # kept to the old master, and must be sent to the new one at once.
    once = AsyncQueue(QUEUE, connection=url, add_retries=0)
    # An events reader blocked on the old master's stream follows it too.
    events = AsyncQueueEvents(QUEUE, connection=url)
    heard: set[str] = set()
    events.on("completed", lambda event: heard.add(event.job_id))
    listening = asyncio.create_task(events.run())
    try:
        ids = await add_jobs(queue, 400, ms=10)
        ids.append((await once.add("before")).id)
        async with Fleet(url, QUEUE) as fleet:
            settings = {"concurrency": 4, "lock_duration": 15, "stalled_interval": 1}
            fleet.start("async", **settings)
            fleet.start("plain", plain=True, **settings)
            with old.client() as r:
                await eventually(lambda: r.zcard("bull:{q}:completed") >= 50, "50 completed")
            started = time.monotonic()
            with new.client() as r:
                r.execute_command("CLUSTER", "FAILOVER")
            wait_for(lambda: cluster.owner(SLOT).port == new.port, "the replica to take the slot")
            switched = time.monotonic() - started
            with new.client() as new_r:
                at_switch = new_r.zcard("bull:{q}:completed")
                await eventually(lambda: new_r.zcard("bull:{q}:completed") > at_switch, "a job")
                resumed = time.monotonic() - started
                ids.append((await once.add("after")).id)  # MOVED, sent again: it did not run
                later = await add_jobs(queue, 100)  # the producer follows too
                ids += later
                print(
                    f"\ncluster failover: slot moved after {switched:.2f}s, first job completed"
                    f" on the new master {resumed:.2f}s after the request"
                )
                await audit(
                    queue, new_r, completed=ids, tags=["async", "plain"], caplog=caplog, fleet=fleet
                )
                await eventually(lambda: set(later) <= heard, "the events of the new master")
                # A cancel published on the new master reaches the worker running the job.
                await fleet.close("plain")  # the async worker takes it: a cancellable sleep
                long = (await queue.add("job", {"ms": 600_000})).id

                async def state_is(state: str) -> bool:
                    return await queue.get_job_state(long) == state

                await eventually(lambda: state_is("active"), "the long job started")
                assert await queue.cancel(long, "failed over") == "active"
                await eventually(lambda: state_is("failed"), "the cancelled job failed")
    finally:
        await events.close()
        await listening
        await queue.close()
        await once.close()


async def test_workers_and_producers_follow_a_resharding_of_the_queues_slot(
    fresh_cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    """The queue's slot migrates to another master mid-drain, in small batches of keys
    (``CLUSTER SETSLOT ... MIGRATING/IMPORTING``, ``MIGRATE``): calls meet ``ASK`` and
    ``TRYAGAIN`` meanwhile and wait, then ``MOVED``; none is lost, none runs twice."""
    cluster = fresh_cluster
    src = cluster.owner(SLOT)
    dst = next(n for n in cluster.masters() if n is not src)
    with src.client() as r:
        src_id = r.execute_command("CLUSTER", "MYID")
    with dst.client() as r:
        dst_id = r.execute_command("CLUSTER", "MYID")
    url = cluster.url
    queue = AsyncQueue(QUEUE, connection=url)
    try:
        ids = await add_jobs(queue, 400, ms=10)
        async with Fleet(url, QUEUE) as fleet:
            settings = {"concurrency": 4, "lock_duration": 15, "stalled_interval": 1}
            fleet.start("async", **settings)
            fleet.start("plain", plain=True, **settings)
            with src.client() as src_r, dst.client() as dst_r:
                await eventually(lambda: src_r.zcard("bull:{q}:completed") >= 50, "50 done")
                started = time.monotonic()
                dst_r.execute_command("CLUSTER", "SETSLOT", SLOT, "IMPORTING", src_id)
                src_r.execute_command("CLUSTER", "SETSLOT", SLOT, "MIGRATING", dst_id)
                batches = 0
                while keys := src_r.execute_command("CLUSTER", "GETKEYSINSLOT", SLOT, 5):
                    src_r.execute_command(
                        "MIGRATE", "127.0.0.1", dst.port, "", 0, 5000, "KEYS", *keys
                    )
                    batches += 1
                    await asyncio.sleep(0.02)  # the workers and producers run in between
                for node in cluster.masters():
                    with node.client() as r:
                        r.execute_command("CLUSTER", "SETSLOT", SLOT, "NODE", dst_id)
                moved = time.monotonic() - started
                ids += await add_jobs(queue, 100)
                print(
                    f"\ncluster resharding: the slot moved in {batches} batches over"
                    f" {moved:.2f}s while the workers ran"
                )
                await audit(
                    queue, dst_r, completed=ids, tags=["async", "plain"], caplog=caplog, fleet=fleet
                )
    finally:
        await queue.close()


async def produce(
    queue: AsyncQueue, durable: bool, stop: asyncio.Event, acked: list[str], unsure: list[str]
) -> None:
    """Add jobs one at a time until ``stop``: ``acked`` the ids of adds that returned, ``unsure``
    of those that raised (written or not)."""
    n = 0
    while not stop.is_set():
        n += 1
        job_id = f"{'d' if durable else 'n'}{n}"
        try:
            await queue.add("job", {"ms": 5}, job_id=job_id, durable=durable)
            acked.append(job_id)
        except NotDurableError:
            unsure.append(job_id)
        except (redis.ConnectionError, redis.TimeoutError, redis.ResponseError):
            unsure.append(job_id)
            await asyncio.sleep(0.05)


async def test_a_killed_master_loses_no_acknowledged_durable_add(
    fresh_cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    cluster = fresh_cluster
    old = cluster.owner(SLOT)
    new = cluster.replica_of(old)
    url = cluster.url
    # A short add_retries: an add that fails during the failover raises (and counts as unsure)
    # rather than waiting it out, so that both producers keep adding across the kill.
    durable = AsyncQueue(QUEUE, connection=url, add_retries=2, durable_timeout=0.5)
    plain = AsyncQueue(QUEUE, connection=url, add_retries=2)
    stop = asyncio.Event()
    acked: dict[bool, list[str]] = {True: [], False: []}
    unsure: dict[bool, list[str]] = {True: [], False: []}
    producers = [
        asyncio.create_task(produce(q, d, stop, acked[d], unsure[d]))
        for q, d in ((durable, True), (plain, False))
    ]
    try:
        async with Fleet(url, QUEUE) as fleet:
            # Locks outlast the failover: a job in flight is finished on the new master.
            settings = {"concurrency": 4, "lock_duration": 15, "stalled_interval": 1}
            fleet.start("async", **settings)
            fleet.start("plain", plain=True, **settings)
            with old.client() as r:
                await eventually(lambda: r.zcard("bull:{q}:completed") >= 100, "100 completed")
            before = {d: len(acked[d]) for d in acked}
            started = time.monotonic()
            old.kill()
            wait_for(lambda: cluster.owner(SLOT).port == new.port, "the replica to take over")
            switched = time.monotonic() - started
            with new.client() as new_r:
                at_switch = new_r.zcard("bull:{q}:completed")
                await eventually(lambda: new_r.zcard("bull:{q}:completed") > at_switch, "a job")
                resumed = time.monotonic() - started
                # The new master has no replica until the killed node is back (it rejoins as
                # the new master's replica): durable adds raise meanwhile.
                old.start()
                wait_for(cluster.ready, "the old master back as a replica")
                await eventually(
                    lambda: all(len(acked[d]) > before[d] + 20 for d in acked), "adds resumed"
                )
                stop.set()
                await asyncio.gather(*producers)

                def exists(job_id: str) -> bool:
                    return bool(new_r.exists(f"bull:{{q}}:{job_id}"))

                lost = {d: [j for j in acked[d] if not exists(j)] for d in acked}
                kept_unsure = [j for d in unsure for j in unsure[d] if exists(j)]
                print(
                    f"\ncluster kill: replica promoted after {switched:.2f}s, first job completed"
                    f" on it {resumed:.2f}s after the kill; acknowledged adds lost: durable"
                    f" {len(lost[True])} of {len(acked[True])}, plain {len(lost[False])} of"
                    f" {len(acked[False])}; adds that raised: {len(unsure[True])} durable,"
                    f" {len(unsure[False])} plain ({len(kept_unsure)} of them written)"
                )
                assert lost[True] == [], "an acknowledged durable add was lost"
                completed = [j for d in acked for j in acked[d] if j not in lost[d]] + kept_unsure
                # A job finished on the old master after its last replicated write ran again
                # on the new one: at least once, completed once.
                await audit(
                    durable,
                    new_r,
                    completed=completed,
                    tags=["async", "plain"],
                    caplog=caplog,
                    fleet=fleet,
                    at_least_once=True,
                )
    finally:
        stop.set()
        await asyncio.gather(*producers, return_exceptions=True)
        await durable.close()
        await plain.close()
