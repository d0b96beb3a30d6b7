"""Job schedulers shared by corral and Node BullMQ 6.7.0: same keys, and either side's workers
advance the other side's schedulers."""

from __future__ import annotations

import asyncio
import json
from itertools import pairwise
from typing import Any

import pytest
import redis

from corral import AsyncJob, AsyncQueue, Worker
from tests.interop.conftest import Node
from tests.test_worker import drive

pytestmark = pytest.mark.interop

#: Fields whose values depend on the moment of the call.
TIMELY = {"timestamp", "delay", "jobId"}


def run_ms(job_id: str) -> int:
    return int(job_id.rsplit(":", 1)[1])


def iteration(r: redis.Redis, queue: str, job_id: str) -> dict[str, Any]:
    fields: dict[str, Any] = r.hgetall(f"bull:{queue}:{job_id}")  # type: ignore[assignment]
    fields["opts"] = json.loads(fields["opts"])
    return fields


def decoded(fields: dict[str, str]) -> dict[str, Any]:
    """A hash with its JSON fields (``data``, ``opts``) decoded: the key order of a JSON
    object written by a server's Lua (cjson) is that server's, like the order of the fields
    HGETALL returns, so neither is compared."""
    return {k: json.loads(v) if k in ("data", "opts") else v for k, v in fields.items()}


def comparable(fields: dict[str, Any]) -> dict[str, Any]:
    """An iteration hash without what depends on when and where it was written."""
    out = {k: v for k, v in fields.items() if k not in TIMELY}
    out["opts"] = {k: v for k, v in fields["opts"].items() if k not in TIMELY}
    return out


async def test_corral_writes_what_node_writes(node: Node, redis_url: str, r: redis.Redis) -> None:
    template = {"name": "tick", "data": {"a": 1}, "opts": {"attempts": 3, "removeOnComplete": 10}}
    cron = {"pattern": "0 0 1 1 *", "tz": "Europe/Paris", "limit": 4}
    n_every = await asyncio.to_thread(
        node.run, "upsert_scheduler.mjs", "nq", "ev", json.dumps({"every": 2000}),
        json.dumps(template),
    )  # fmt: skip
    n_cron = await asyncio.to_thread(
        node.run, "upsert_scheduler.mjs", "nq", "cr", json.dumps(cron), json.dumps({"name": "c"})
    )
    async with AsyncQueue("cq", connection=redis_url) as queue:
        c_every = await queue.upsert_job_scheduler(
            "ev", every=2, template=("tick", {"a": 1}, {"attempts": 3, "remove_on_complete": 10})
        )
        c_cron = await queue.upsert_job_scheduler(
            "cr", cron="0 0 1 1 *", tz="Europe/Paris", limit=4, template={"name": "c"}
        )
    assert c_every is not None and c_cron is not None

    # Scheduler hashes: the same fields; equal values but every's offset.
    for sid in ("ev", "cr"):
        node_hash = decoded(r.hgetall(f"bull:nq:repeat:{sid}"))  # type: ignore[arg-type]
        ours = decoded(r.hgetall(f"bull:cq:repeat:{sid}"))  # type: ignore[arg-type]
        assert set(ours) == set(node_hash)
        assert "offset" in ours
        ours.pop("offset")
        node_hash.pop("offset")
        assert ours == node_hash
    # The cron iteration is at the same tick on both sides, with the same prevMillis.
    assert n_cron["job"]["id"] == c_cron.id
    node_cron = iteration(r, "nq", n_cron["job"]["id"])
    corral_cron = iteration(r, "cq", c_cron.id)
    assert comparable(corral_cron) == comparable(node_cron)
    assert corral_cron["opts"]["prevMillis"] == node_cron["opts"]["prevMillis"]
    # The every iterations: same fields and opts, at their own "now".
    assert comparable(iteration(r, "cq", c_every.id)) == comparable(
        iteration(r, "nq", n_every["job"]["id"])
    )

    # Node reads corral's schedulers as it reads its own.
    calls = [["getJobScheduler", "ev"], ["getJobScheduler", "cr"], ["getJobSchedulersCount"]]
    seen = await asyncio.to_thread(node.run, "queue_calls.mjs", "cq", json.dumps(calls))
    ev, cr, count = seen["results"]
    assert count == 2
    assert ev["every"] == 2000 and ev["name"] == "tick" and ev["iterationCount"] == 1
    assert ev["template"] == {"data": {"a": 1}, "opts": {"attempts": 3, "removeOnComplete": 10}}
    assert ev["next"] == run_ms(c_every.id)
    assert (cr["pattern"], cr["tz"], cr["limit"], cr["next"]) == (
        "0 0 1 1 *", "Europe/Paris", 4, run_ms(c_cron.id)
    )  # fmt: skip
    # And corral reads Node's.
    async with AsyncQueue("nq", connection=redis_url) as queue:
        nev = await queue.get_job_scheduler("ev")
        assert nev is not None
        assert (nev.name, nev.every, nev.iteration_count) == ("tick", 2000, 1)
        assert nev.next_run == run_ms(n_every["job"]["id"])
        assert nev.template.data == {"a": 1}
        assert nev.template.opts == {"attempts": 3, "removeOnComplete": 10}


async def test_corral_workers_advance_a_node_scheduler(
    node: Node, redis_url: str, r: redis.Redis
) -> None:
    up = await asyncio.to_thread(
        node.run, "upsert_scheduler.mjs", "q", "ev", json.dumps({"every": 500}),
        json.dumps({"name": "tick", "data": {"from": "node"}}),
    )  # fmt: skip
    first = up["job"]["id"]
    seen: list[AsyncJob] = []

    async def process(job: AsyncJob) -> str:
        seen.append(job)
        return "corral"

    async def four() -> bool:
        return len(seen) >= 4

    await drive(Worker("q", process, connection=redis_url), four)
    ids = [job.id for job in seen]
    assert ids[0] == first and len(set(ids)) == len(ids)
    gaps = [b - a for a, b in pairwise(map(run_ms, ids))]
    assert all(gap > 0 and gap % 500 == 0 for gap in gaps)
    assert [job.opts["repeat"]["count"] for job in seen] == [1, 2, 3, 4]
    assert all(job.data == {"from": "node"} and job.name == "tick" for job in seen)

    # Node sees the scheduler moved on by corral, with one pending iteration.
    calls = [["getJobScheduler", "ev"], ["getDelayedCount"], ["getWaitingCount"]]
    result = await asyncio.to_thread(node.run, "queue_calls.mjs", "q", json.dumps(calls))
    sched, delayed, waiting = result["results"]
    assert sched["iterationCount"] == 5 and delayed + waiting == 1
    pending = f"repeat:ev:{sched['next']}"
    # Made by corral, field for field as a Node worker makes a next iteration.
    made = iteration(r, "q", pending)
    assert set(made) == {"name", "data", "opts", "timestamp", "delay", "priority", "rjk"}
    assert made["opts"]["delay"] == int(made["delay"]) == sched["next"] - int(made["timestamp"])
    assert set(made["opts"]) == {
        "repeatJobKey", "jobId", "repeat", "timestamp", "delay", "attempts"
    }  # fmt: skip
    assert made["opts"]["attempts"] == 0 and made["rjk"] == "ev"
    read = await asyncio.to_thread(node.run, "read_jobs.mjs", "q", pending)
    job = read["jobs"][pending]
    assert job["opts"]["repeat"] == {"count": 5, "every": 500}
    assert job["data"] == {"from": "node"}


async def test_corral_workers_advance_a_node_cron_scheduler(node: Node, redis_url: str) -> None:
    up = await asyncio.to_thread(
        node.run, "upsert_scheduler.mjs", "q", "cr",
        json.dumps({"pattern": "* * * * * *", "tz": "UTC"}), json.dumps({"name": "c"}),
    )  # fmt: skip
    seen: list[str] = []

    async def process(job: AsyncJob) -> None:
        seen.append(job.id)

    async def two() -> bool:
        return len(seen) >= 2

    await drive(Worker("q", process, connection=redis_url), two)
    assert seen[0] == up["job"]["id"]
    assert run_ms(seen[1]) - run_ms(seen[0]) in (1000, 2000)  # next tick (or the one after)


async def test_node_workers_advance_a_corral_scheduler(node: Node, redis_url: str) -> None:
    async with AsyncQueue("q", connection=redis_url) as queue:
        first = await queue.upsert_job_scheduler(
            "ev", every=0.3, template=("tick", {"from": "corral"}, {"attempts": 2})
        )
        assert first is not None
        worked = await asyncio.to_thread(node.run, "work_jobs.mjs", "q", 4)
        jobs = worked["processed"]
        ids = sorted((j["id"] for j in jobs), key=run_ms)
        assert ids[0] == first.id and len(set(ids)) == 4
        gaps = [run_ms(b) - run_ms(a) for a, b in pairwise(ids)]
        assert all(gap > 0 and gap % 300 == 0 for gap in gaps)
        assert all(j["data"] == {"from": "corral"} and j["name"] == "tick" for j in jobs)
        assert sorted(j["opts"]["repeat"]["count"] for j in jobs) == [1, 2, 3, 4]
        assert all(j["opts"]["attempts"] == 2 for j in jobs)

        sched = await queue.get_job_scheduler("ev")
        assert sched is not None and sched.iteration_count >= 5
        counts = await queue.get_job_counts("delayed", "waiting", "completed")
        assert counts["delayed"] + counts["waiting"] == 1 and counts["completed"] == 4


async def test_node_workers_advance_a_corral_cron_scheduler(node: Node, redis_url: str) -> None:
    async with AsyncQueue("q", connection=redis_url) as queue:
        first = await queue.upsert_job_scheduler("cr", cron="* * * * * *", tz="UTC")
        assert first is not None
        worked = await asyncio.to_thread(node.run, "work_jobs.mjs", "q", 2)
        ids = sorted((j["id"] for j in worked["processed"]), key=run_ms)
        assert ids[0] == first.id
        assert run_ms(ids[1]) - run_ms(ids[0]) in (1000, 2000)
        sched = await queue.get_job_scheduler("cr")
        assert sched is not None and sched.next_run is not None
        assert sched.next_run > run_ms(ids[1])


async def test_node_removes_a_corral_scheduler(node: Node, redis_url: str, r: redis.Redis) -> None:
    async with AsyncQueue("q", connection=redis_url) as queue:
        job = await queue.upsert_job_scheduler("cr", cron="0 0 1 1 *", tz="UTC")
        assert job is not None
        result = await asyncio.to_thread(
            node.run, "queue_calls.mjs", "q", json.dumps([["removeJobScheduler", "cr"]])
        )
        assert result["results"] == [True]
        assert await queue.count_job_schedulers() == 0
        assert r.exists(f"bull:q:{job.id}", "bull:q:repeat:cr") == 0
