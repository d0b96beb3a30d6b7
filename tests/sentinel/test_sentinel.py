"""Queues, workers and events through a ``redis+sentinel://`` URL, and failovers during a
drain: the workers follow the new master without a restart, and every job ends completed once.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from corral import AsyncJob, AsyncQueue, AsyncQueueEvents, Queue, Worker, _twins, _wire
from tests.faults.harness import Fleet, add_jobs, audit, eventually
from tests.sentinel.conftest import SERVICE, Deployment


async def test_queue_worker_and_events_through_the_sentinels(deployment: Deployment) -> None:
    url = deployment.url
    with deployment.master().client() as r:
        async with AsyncQueue("q", connection=url) as queue:
            job = await queue.add("a", {"x": 1})
            assert (await queue.get_job(job.id)) is not None
            assert r.llen("bull:q:wait") == 1  # written on the master the sentinels name
            client = await queue.client()
            assert _wire.params_of(client) is None  # redis-py's connections, not the wire's
            twin = _twins.blocking_twin(client, read_timeout=6, client_name="w")
            sync = _twins.sync_twin(client)
            try:  # the twins ask the sentinels too: on pools of their own, same master
                assert twin.connection_pool is not client.connection_pool
                assert await twin.ping() and sync.ping()
                assert twin.connection_pool.master_address == client.connection_pool.master_address
            finally:
                await _twins.close_async(twin)
                _twins.close_sync(sync)

        def blocking() -> dict[str, int]:  # the blocking API's own pool, off the event loop
            with Queue("q", connection=url) as sync_queue:
                sync_queue.add("b", {"x": 2})
                return sync_queue.get_job_counts("wait")

        assert await asyncio.to_thread(blocking) == {"wait": 2}
        events = AsyncQueueEvents("q", connection=url, last_event_id="0-0")
        seen: list[str] = []

        async def collect() -> None:
            async for event in events:
                if event.name == "completed":
                    seen.append(event.job_id)
                    if len(seen) == 4:
                        return

        listening = asyncio.create_task(collect())

        def plain(job: object) -> str:  # a plain function: the Job it gets is on a sync twin
            return "done"

        async def process(job: AsyncJob) -> str:
            return "done"

        async with AsyncQueue("q", connection=url) as queue:
            await queue.add("c")
            await queue.add("d")
            workers = [Worker("q", process, connection=url), Worker("q", plain, connection=url)]
            runs = [asyncio.create_task(w.run_async()) for w in workers]
            await eventually(lambda: r.zcard("bull:q:completed") == 4, "4 jobs completed")
            for w in workers:
                await w.close()
            await asyncio.gather(*runs)
        await asyncio.wait_for(listening, 30)
        await events.close()
        assert len(set(seen)) == 4
        assert r.llen("bull:q:active") == 0


@pytest.mark.parametrize("how", ["failover", "kill"])
async def test_workers_follow_a_failover_during_a_drain(
    deployment: Deployment, how: str, caplog: pytest.LogCaptureFixture
) -> None:
    old = deployment.master()
    new = deployment.replica()
    old_r, new_r = old.client(), new.client()
    url = deployment.url
    queue = AsyncQueue("q", connection=url)
    # An events reader blocked on the old master's stream follows the failover too.
    events = AsyncQueueEvents("q", connection=url)
    heard: set[str] = set()
    events.on("completed", lambda event: heard.add(event.job_id))
    listening = asyncio.create_task(events.run())
    try:
        ids = await add_jobs(queue, 600, ms=20)
        async with Fleet(url) as fleet:
            # A job whose lock expires before its worker reaches the new master runs again
            # (at least once): for the kill, the locks outlast the failover even on a loaded
            # machine, so every job runs exactly once.
            lock = 15 if how == "kill" else 3
            settings = {"concurrency": 4, "lock_duration": lock, "stalled_interval": 1}
            fleet.start("async", **settings)
            fleet.start("plain", plain=True, **settings)
            await eventually(lambda: old_r.zcard("bull:q:completed") >= 100, "100 completed")
            started = time.monotonic()
            if how == "kill":
                # Replicated up to the kill: what asynchronous replication may lose at a crash
                # is the durability question, not this one (paused writes, replica caught up).
                old_r.execute_command("CLIENT", "PAUSE", 10_000, "WRITE")
                offset = old_r.info("replication")["master_repl_offset"]
                await eventually(
                    lambda: new_r.info("replication").get("slave_repl_offset") == offset,
                    "the replica caught up",
                )
                started = time.monotonic()
                old.kill()
            else:
                with deployment.sentinels[0].client() as s:
                    s.sentinel_failover(SERVICE)
            await eventually(lambda: deployment.master_port() == new.port, "the switch", 60)
            switched = time.monotonic() - started
            at_switch = new_r.zcard("bull:q:completed")
            await eventually(
                lambda: new_r.zcard("bull:q:completed") > at_switch, "a job done on the new master"
            )
            resumed = time.monotonic() - started
            later = await add_jobs(queue, 50)
            ids += later
            print(
                f"\nsentinel {how}: new master named after {switched:.2f}s, first job completed"
                f" on it {resumed:.2f}s after the {how}"
            )
            # A requested failover promotes the replica while the old master still takes
            # writes until the sentinels demote it (about a second): the jobs finished there
            # meanwhile are lost with it and run again on the new master (its stalled check
            # or its wait list). Completed once each all the same. A killed master, caught up,
            # loses nothing: every job ran once.
            await audit(
                queue,
                new_r,
                completed=ids,
                tags=["async", "plain"],
                caplog=caplog,
                fleet=fleet,
                at_least_once=how == "failover",
            )
            await eventually(lambda: set(later) <= heard, "the events of the new master")
            reruns = sorted(job_id for job_id, n in fleet.runs.items() if n > 1)
            print(f"jobs run twice (finished on the old master after the promotion): {len(reruns)}")
    finally:
        await events.close()
        await listening
        await queue.close()
        old_r.close()
        new_r.close()
