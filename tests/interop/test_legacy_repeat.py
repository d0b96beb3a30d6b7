"""Repeatable jobs written by older Node BullMQ (5.81.5 and 4.18.3, tests/interop/legacy):
corral lists them as those versions did, removes them as they did, migrates them into job
schedulers that Node BullMQ 6.7.0 runs with their data, and its workers run them on; and
``add(repeat=)`` makes the scheduler those versions would have named."""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import redis

from corral import AsyncJob, AsyncQueue, Queue, Worker
from corral.repeat import RepeatableJob
from tests.interop.conftest import Node
from tests.test_worker import drive

pytestmark = pytest.mark.interop

LEGACY = Path(__file__).parent / "legacy"
#: Far enough ahead that no run falls due during a test (2033-05-18).
END = 2_000_000_000_000


@pytest.fixture(scope="session")
def legacy_ready(node_ready: None) -> None:
    if not (LEGACY / "node_modules" / "bullmq").is_dir():
        pytest.fail(
            "older Node BullMQ is not installed: run `make test`, or "
            "`npm install --prefix tests/interop/legacy --no-package-lock`"
        )


@pytest.fixture
async def queue(redis_url: str) -> AsyncIterator[AsyncQueue]:
    q = AsyncQueue("lq", connection=redis_url)
    yield q
    await q.close()


async def old(node: Node, version: int, calls: list[list[Any]], queue: str = "lq") -> list[Any]:
    """Run ``calls`` on a Queue of BullMQ ``version`` (4 or 5); their results."""
    out = await asyncio.to_thread(
        node.run, "../legacy/repeat_calls.mjs", version, queue, json.dumps(calls)
    )
    results: list[Any] = out["results"]
    for result in results:
        assert not (isinstance(result, dict) and "error" in result), result
    return results


def as_bullmq5(entry: RepeatableJob) -> dict[str, Any]:
    """corral's record in BullMQ 5's ``getRepeatableJobs`` shape (``every`` as a string)."""
    return {
        "key": entry.key,
        "name": entry.name,
        "endDate": entry.end_date,
        "tz": entry.tz,
        "pattern": entry.pattern,
        "every": None if entry.every is None else str(entry.every),
        "next": entry.next,
    }


def as_bullmq4(entry: RepeatableJob) -> dict[str, Any]:
    """corral's record in BullMQ 4's shape: ``every`` is the key's last part, ``pattern``."""
    return {
        "key": entry.key,
        "name": entry.name,
        "id": entry.id,
        "endDate": entry.end_date,
        "tz": entry.tz,
        "pattern": entry.pattern if entry.every is None else str(entry.every),
        "next": entry.next,
    }


def drop_bullmq4_markers(r: redis.Redis, queue: str = "lq") -> None:
    """BullMQ 4 also pushes delay markers ``0:<ms>`` into the wait list, which no 6.x worker
    reads as such: its old wake-up scheme, not part of the repeatable data under test."""
    for item in r.lrange(f"bull:{queue}:wait", 0, -1):  # type: ignore[union-attr]
        if item.startswith("0:"):
            r.lrem(f"bull:{queue}:wait", 0, item)


#: What each version is asked to add: cron with a zone, every with a job id, an end date and a
#: limit, and a plain cron (BullMQ 5 also with a key of its own). The crons are yearly, so no
#: run falls due during a test.
ADDS: list[list[Any]] = [
    ["add", "cron", {"n": 1}, {"repeat": {"pattern": "0 3 1 2 *", "tz": "Europe/Paris"}}],
    [
        "add",
        "every",
        {"n": 2},
        {"repeat": {"every": 60_000, "limit": 5, "endDate": END}, "jobId": "ej", "attempts": 3},
    ],
    ["add", "plain", {"n": 3}, {"repeat": {"pattern": "0 0 1 1 *"}}],
]


async def test_listing_equals_bullmq5(node: Node, queue: AsyncQueue, legacy_ready: None) -> None:
    await old(
        node,
        5,
        [*ADDS, ["add", "keyed", None, {"repeat": {"every": 90_000, "key": "mine"}}]],
    )
    await queue.upsert_job_scheduler("sched", every=120, template=("s", {"n": 4}))
    for start, end, asc in ((0, -1, False), (0, 1, True), (1, 3, False), (2, -1, True)):
        [theirs] = await old(node, 5, [["getRepeatableJobs", start, end, asc]])
        ours = await queue.get_repeatable_jobs(start, end, asc=asc)
        assert [as_bullmq5(e) for e in ours] == theirs
    entries = {e.key: e for e in await queue.get_repeatable_jobs()}
    assert len(entries) == 5
    assert {k for k, e in entries.items() if not e.legacy} == {"sched"}
    assert entries["mine"].every == 90_000 and entries["mine"].name == "keyed"


async def test_listing_reads_bullmq4_keys(
    node: Node, queue: AsyncQueue, legacy_ready: None
) -> None:
    await old(node, 4, ADDS)
    [theirs] = await old(node, 4, [["getRepeatableJobs"]])
    ours = await queue.get_repeatable_jobs()
    assert [as_bullmq4(e) for e in ours] == theirs
    every = next(e for e in ours if e.name == "every")
    assert (every.id, every.every, every.pattern, every.end_date) == ("ej", 60_000, None, END)
    assert all(e.legacy for e in ours)
    # A 4.x entry has no hash: it is not a job scheduler (Node 6.7.0 throws on it here).
    assert await queue.get_job_schedulers() == []


def pending_runs(r: redis.Redis, queue: str = "lq") -> list[str]:
    return r.zrange(f"bull:{queue}:delayed", 0, -1)  # type: ignore[return-value]


@pytest.mark.parametrize("version", [4, 5])
async def test_remove_by_name_and_options(
    node: Node, queue: AsyncQueue, r: redis.Redis, version: int, legacy_ready: None
) -> None:
    await old(node, version, ADDS)
    runs = pending_runs(r)
    assert len(runs) == 3
    every = {"every": 60, "end_date": END, "limit": 99}  # limit is not part of the key
    assert not await queue.remove_repeatable("every", every)  # job id missing
    assert not await queue.remove_repeatable("every", {**every, "every": 61}, job_id="ej")
    assert await queue.remove_repeatable("every", every, job_id="ej")
    assert not await queue.remove_repeatable("every", every, job_id="ej")
    assert await queue.remove_repeatable("cron", {"pattern": "0 3 1 2 *", "tz": "Europe/Paris"})
    [theirs] = await old(node, version, [["getRepeatableJobs"]])
    assert [e["name"] for e in theirs] == ["plain"]
    # Their delayed runs went with them (a `removed` event each), the other stayed.
    left = pending_runs(r)
    assert len(left) == 1 and r.hget(f"bull:lq:{left[0]}", "name") == "plain"
    for job_id in set(runs) - set(left):
        assert not r.exists(f"bull:lq:{job_id}")
    removed = [f["jobId"] for _, f in r.xrange("bull:lq:events") if f["event"] == "removed"]  # type: ignore[union-attr]
    assert sorted(removed) == sorted(set(runs) - set(left))


@pytest.mark.parametrize("version", [4, 5])
async def test_remove_by_key(
    node: Node, queue: AsyncQueue, r: redis.Redis, version: int, legacy_ready: None
) -> None:
    await old(node, version, ADDS)
    entries = await queue.get_repeatable_jobs()
    target = next(e for e in entries if e.name == "every")
    assert await queue.remove_repeatable_by_key(target.key)
    assert not await queue.remove_repeatable_by_key(target.key)
    assert not await queue.remove_repeatable_by_key("no such key")
    [theirs] = await old(node, version, [["getRepeatableJobs"]])
    assert sorted(e["key"] for e in theirs) == sorted(e.key for e in entries if e is not target)
    assert not r.exists(f"bull:lq:repeat:{target.key}")
    assert [r.hget(f"bull:lq:{j}", "rjk") for j in pending_runs(r)].count(target.key) == 0
    assert len(pending_runs(r)) == 2
    # What old Node removes by key, corral's remove_repeatable_by_key removed likewise.
    if version == 5:
        [gone] = await old(node, 5, [["removeRepeatableByKey", target.key]])
        assert gone is False


@pytest.mark.parametrize("version", [4, 5])
async def test_migration_keeps_template_and_timing(
    node: Node, queue: AsyncQueue, r: redis.Redis, version: int, legacy_ready: None
) -> None:
    await old(node, version, ADDS)
    runs = pending_runs(r)
    made = await queue.migrate_repeatable_jobs()
    keys = {
        "every": hashlib.md5(f"every:ej:{END}::60000".encode()).hexdigest(),
        "cron": hashlib.md5(b"cron:::Europe/Paris:0 3 1 2 *").hexdigest(),
        "plain": hashlib.md5(b"plain::::0 0 1 1 *").hexdigest(),
    }  # the keys BullMQ 5 names these options by
    assert sorted(made) == sorted(keys.values())
    assert await queue.migrate_repeatable_jobs() == []  # once only
    entries = await queue.get_repeatable_jobs()
    assert sorted(e.key for e in entries) == sorted(made)
    assert not any(e.legacy for e in entries)
    every = await queue.get_job_scheduler(keys["every"])
    assert every is not None and (every.every, every.limit, every.end_date) == (60_000, 5, END)
    assert (every.template.name, every.template.data) == ("every", {"n": 2})
    assert every.template.opts == {"attempts": 3}
    assert every.iteration_count == 1
    cron = await queue.get_job_scheduler(keys["cron"])
    assert cron is not None and (cron.pattern, cron.tz) == ("0 3 1 2 *", "Europe/Paris")
    # Same run times; each pending run is now its scheduler's (a 4.x one was replaced).
    for entry in entries:
        assert r.hget(f"bull:lq:repeat:{entry.key}:{entry.next}", "rjk") == entry.key
    if version == 4:
        assert not any(r.exists(f"bull:lq:{job_id}") for job_id in runs)
    # Node BullMQ 6.7.0, which throws on a 4.x entry, lists them all.
    listed = await asyncio.to_thread(node.run, "queue_calls.mjs", "lq", '[["getJobSchedulers"]]')
    assert sorted(s["key"] for s in listed["results"][0]) == sorted(made)


@pytest.mark.parametrize("version", [4, 5])
async def test_node6_runs_a_migrated_repeatable_with_its_data(
    node: Node, queue: AsyncQueue, r: redis.Redis, version: int, legacy_ready: None
) -> None:
    """From an unmigrated 5.x entry Node BullMQ 6.7.0 makes runs with data {}, and from a 4.x
    one none at all; once migrated, its runs carry the job's data."""
    await old(node, version, [["add", "tick", {"n": 7}, {"repeat": {"every": 1000}}]])
    drop_bullmq4_markers(r)
    sid = hashlib.md5(b"tick::::1000").hexdigest()
    assert await queue.migrate_repeatable_jobs() == [sid]
    out = await asyncio.to_thread(node.run, "work_jobs.mjs", "lq", 2)
    runs = [(j["id"], j["data"]) for j in out["processed"]]
    assert [data for _, data in runs] == [{"n": 7}, {"n": 7}]
    assert all(job_id.startswith(f"repeat:{sid}:") for job_id, _ in runs)


@pytest.mark.parametrize("version", [4, 5])
async def test_corral_worker_runs_a_legacy_repeatable_on(
    node: Node, queue: AsyncQueue, r: redis.Redis, redis_url: str, version: int, legacy_ready: None
) -> None:
    await old(node, version, [["add", "tick", {"n": 7}, {"repeat": {"every": 1000}}]])
    drop_bullmq4_markers(r)
    seen: list[tuple[str, Any, int]] = []

    async def proc(job: AsyncJob) -> None:
        seen.append((job.id, job.data, job.opts["repeat"]["count"]))

    async def three() -> bool:
        return len(seen) >= 3

    await drive(Worker("lq", proc, connection=redis_url), three, timeout=30)
    assert [(data, count) for _, data, count in seen[:3]] == [
        ({"n": 7}, 1),
        ({"n": 7}, 2),
        ({"n": 7}, 3),
    ]
    sid = hashlib.md5(b"tick::::1000").hexdigest()
    assert all(job_id.startswith(f"repeat:{sid}:") for job_id, _, _ in seen[1:3])
    sched = await queue.get_job_scheduler(sid)
    assert sched is not None and sched.iteration_count >= 3
    assert [e.legacy for e in await queue.get_repeatable_jobs()] == [False]


async def test_worker_leaves_an_entry_that_moved_on(
    node: Node, queue: AsyncQueue, r: redis.Redis, redis_url: str, legacy_ready: None
) -> None:
    """A run taken after its entry moved on (an old worker made the next run already) is
    not that entry's current run: nothing is migrated, nothing more is made."""
    [job] = await old(node, 5, [["add", "tick", {"n": 7}, {"repeat": {"every": 60_000}}]])
    key = job["repeatJobKey"]
    r.zadd("bull:lq:repeat", {key: job["opts"]["prevMillis"] + 60_000})
    await (await queue.get_job(job["id"])).promote()  # type: ignore[union-attr]
    worker = Worker("lq", None, connection=redis_url)
    try:
        taken = await worker.get_next_job()
        assert taken is not None and taken.id == job["id"]
    finally:
        await worker.close()
    assert "ic" not in r.hgetall(f"bull:lq:repeat:{key}")  # type: ignore[operator]
    assert pending_runs(r) == []


async def test_add_repeat_names_the_scheduler_as_bullmq5(
    node: Node, queue: AsyncQueue, legacy_ready: None
) -> None:
    """corral's add(repeat=) and BullMQ 5's add({repeat}) give the entry the same key, so
    BullMQ 5 removes corral's by name and options, and Node 6.7.0 reads it as a scheduler."""
    await old(node, 5, [ADDS[1]], queue="nq")
    [[theirs]] = await old(node, 5, [["getRepeatableJobs"]], queue="nq")
    job = await queue.add(
        "every", {"n": 2}, repeat={"every": 60, "limit": 5, "end_date": END}, job_id="ej"
    )
    [ours] = await queue.get_repeatable_jobs()
    assert ours.key == theirs["key"] and job.id.startswith(f"repeat:{ours.key}:")
    assert not ours.legacy
    read = await asyncio.to_thread(
        node.run, "queue_calls.mjs", "lq", json.dumps([["getJobScheduler", ours.key]])
    )
    scheduler = read["results"][0]
    assert (scheduler["name"], scheduler["every"], scheduler["limit"]) == ("every", 60_000, 5)
    assert scheduler["template"]["data"] == {"n": 2}
    [removed] = await old(
        node, 5, [["removeRepeatable", "every", {"every": 60_000, "endDate": END}, "ej"]]
    )
    assert removed is True
    assert await queue.get_repeatable_jobs() == []


def test_sync_queue(node: Node, redis_url: str, legacy_ready: None) -> None:
    node.run("../legacy/repeat_calls.mjs", 5, "lq", json.dumps([ADDS[0]]))
    with Queue("lq", connection=redis_url) as queue:
        [entry] = queue.get_repeatable_jobs()
        assert entry.legacy and entry.pattern == "0 3 1 2 *"
        assert queue.migrate_repeatable_jobs() == [entry.key]
        assert queue.remove_repeatable("cron", {"pattern": "0 3 1 2 *", "tz": "Europe/Paris"})
        assert queue.get_repeatable_jobs() == []
