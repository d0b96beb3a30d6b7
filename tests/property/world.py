"""A queue with a job in every state, built through the public API, for the calls that act
on existing jobs.

Queue ``q`` (prefix ``bull``) holds: ``w1`` and ``w2`` waiting, ``d1`` delayed by an hour,
``p1`` prioritized, ``c1`` completed, ``f1`` failed, ``a1`` active (taken by a manual worker,
lock held for an hour), a flow parent ``parent`` waiting for child ``child``, ``logged``
with three log lines, ``dd`` holding deduplication id ``dup``, and the scheduler ``sched``
(every minute) with its pending iteration.
"""

from __future__ import annotations

import redis

from corral import AsyncFlowProducer, AsyncQueue, FlowJob, Worker
from corral.dedup import Dedup
from tests.property.support import Snapshot, snapshot

#: Every job id the world creates, by the state it is left in.
JOB_IDS = {
    "waiting": ["w1", "w2", "logged", "dd", "child"],
    "delayed": ["d1"],
    "prioritized": ["p1"],
    "completed": ["c1"],
    "failed": ["f1"],
    "active": ["a1"],
    "waiting-children": ["parent"],
}
ALL_IDS = [job_id for ids in JOB_IDS.values() for job_id in ids]


async def _take(worker: Worker, queue: AsyncQueue, job_id: str) -> object:
    """Take ``job_id`` through the worker: only it is waiting when this runs."""
    await queue.add("run", {"id": job_id}, job_id=job_id)
    job = await worker.get_next_job()
    assert job is not None and job.id == job_id, f"took {job and job.id} for {job_id}"
    return job


async def build(url: str) -> None:
    """Write the world on an empty server."""
    async with AsyncQueue("q", connection=url) as queue:
        worker = Worker("q", None, connection=url, lock_duration=3600)
        try:
            done = await _take(worker, queue, "c1")
            await done.move_to_completed({"ok": True})  # type: ignore[attr-defined]
            bad = await _take(worker, queue, "f1")
            await bad.move_to_failed(RuntimeError("boom"))  # type: ignore[attr-defined]
            await _take(worker, queue, "a1")
        finally:
            await worker.close()
        await queue.add("wait", {"n": 1}, job_id="w1")
        await queue.add("wait", {"n": 2}, job_id="w2")
        await queue.add("later", {"n": 3}, job_id="d1", delay=3600)
        await queue.add("urgent", {"n": 4}, job_id="p1", priority=5)
        logged = await queue.add("logged", None, job_id="logged", keep_logs=10)
        for line in ("one", "two", "three"):
            await logged.log(line)
        await queue.add("dedup", None, job_id="dd", deduplication=Dedup("dup"))
        await queue.upsert_job_scheduler("sched", every=60, template=("tick", {"n": 5}))
    async with AsyncFlowProducer(connection=url) as flows:
        await flows.add(
            FlowJob(
                "parent",
                "q",
                {"p": 1},
                {"job_id": "parent"},
                children=[FlowJob("child", "q", {"c": 1}, {"job_id": "child"})],
            )
        )


def restore(raw: redis.Redis, saved: Snapshot) -> None:
    """Put the server back to ``saved`` (a snapshot) in one round trip: far cheaper than
    building the world again for every example of a test that changes it."""
    pipe = raw.pipeline(transaction=False)
    pipe.flushall()
    for name, key in saved.items():
        if key.dump is not None:
            pipe.restore(name, max(key.pttl, 0), key.dump, replace=True)
    pipe.execute()


#: The world as built once in this test session (the session has one server).
_SAVED: dict[str, Snapshot] = {}


async def saved_world(raw: redis.Redis, url: str) -> None:
    """Restore the world, building it on the first call of the session."""
    if url not in _SAVED:
        raw.flushall()
        await build(url)
        _SAVED[url] = snapshot(raw)
    restore(raw, _SAVED[url])
