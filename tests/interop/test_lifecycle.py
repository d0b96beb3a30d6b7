"""The job lifecycle shared by corral and Node BullMQ 6.7.0 on the same queues.

Order (priority, lifo), delays, retries with backoff across both kinds of worker, stall
recovery after a SIGKILL, pause/resume, counts and listings, removeOnComplete/removeOnFail.

The Node worker (``node/work_until.mjs``) and :func:`traced` below are the same processor in
two languages: each attempt RPUSHes ``{"queue", "id", "attempt", "by"}`` to the list ``trace``,
logs a line to the job, sleeps ``data.sleep_ms``, fails while ``attempt <= data.fail_attempts``
with ``attempt <n> of <id> failed on <by>``, and returns ``{"by", "attempt"}``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from corral import AsyncJob, AsyncQueue, Worker
from corral.options import Backoff
from tests.interop.conftest import Node
from tests.test_worker import drive, finished

pytestmark = pytest.mark.interop

ROOT = Path(__file__).resolve().parents[2]

#: Short lock and stall settings, for the stall tests (Node takes milliseconds).
NODE_FAST_STALLS = json.dumps({"stalledInterval": 300, "lockDuration": 600})


# -- helpers -----------------------------------------------------------------------------------


async def traced(job: AsyncJob) -> dict[str, Any]:
    """corral's twin of work_until.mjs's processor (see the module docstring)."""
    attempt = job.attempts_made + 1
    data = job.data if isinstance(job.data, dict) else {}
    client = await job.queue.client()
    entry = {"queue": job.queue_name, "id": job.id, "attempt": attempt, "by": "corral"}
    await client.rpush("trace", json.dumps(entry))
    await job.log(f"corral attempt {attempt}")
    if data.get("sleep_ms"):
        await asyncio.sleep(data["sleep_ms"] / 1000)
    if attempt <= int(data.get("fail_attempts", 0)):
        raise RuntimeError(f"attempt {attempt} of {job.id} failed on corral")
    return {"by": "corral", "attempt": attempt}


def trace(r: redis.Redis) -> list[dict[str, Any]]:
    return [json.loads(x) for x in r.lrange("trace", 0, -1)]


def by_attempt(r: redis.Redis, queue: str = "q") -> dict[str, dict[int, list[str]]]:
    """job id -> attempt -> who ran it (a list, so that a doubly run attempt shows)."""
    seen: dict[str, dict[int, list[str]]] = {}
    for e in trace(r):
        if e["queue"] == queue:
            seen.setdefault(e["id"], {}).setdefault(e["attempt"], []).append(e["by"])
    return seen


def event_kinds(r: redis.Redis, job_id: str, queue: str = "q") -> list[str]:
    return [f["event"] for _, f in r.xrange(f"bull:{queue}:events") if f.get("jobId") == job_id]


@contextlib.asynccontextmanager
async def running(worker: Worker) -> AsyncIterator[Worker]:
    """Run ``worker`` in the background for the block, then close it."""
    task = asyncio.create_task(worker.run_async())
    try:
        yield worker
    finally:
        await worker.close()
        await task


async def wait_until(check: Callable[[], Awaitable[bool]], timeout: float = 20) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not await check():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.02)


def stop(proc: subprocess.Popen[str]) -> None:
    """Make sure a child process we started is gone (SIGKILL by its pid) and reaped."""
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    for pipe in (proc.stdout, proc.stderr):
        if pipe is not None:
            pipe.close()


@contextlib.contextmanager
def started(proc: subprocess.Popen[str]) -> Iterator[subprocess.Popen[str]]:
    try:
        yield proc
    finally:
        stop(proc)


async def node_run(node: Node, script: str, *args: object) -> Any:
    return await asyncio.to_thread(node.run, script, *args)


async def node_start(node: Node, script: str, *args: object) -> subprocess.Popen[str]:
    return await asyncio.to_thread(node.start, script, *args)


async def node_result(proc: subprocess.Popen[str]) -> Any:
    return await asyncio.to_thread(Node.result, proc)


async def node_calls(node: Node, queue: str, *calls: list[Any]) -> list[Any]:
    return (await node_run(node, "queue_calls.mjs", queue, json.dumps(list(calls))))["results"]


async def node_add(node: Node, queue: str, jobs: list[dict[str, Any]]) -> list[str]:
    return (await node_run(node, "add_list.mjs", queue, json.dumps(jobs)))["ids"]


# -- 1. priority and lifo order ----------------------------------------------------------------

#: (name, options) in the order added; corral spells them in Python, Node in camelCase.
MIX: list[tuple[str, dict[str, Any]]] = [
    ("a1", {}),
    ("p3a", {"priority": 3}),
    ("l1", {"lifo": True}),
    ("p1a", {"priority": 1}),
    ("a2", {}),
    ("pmax", {"priority": 2_097_151}),
    ("p1b", {"priority": 1}),
    ("l2", {"lifo": True}),
    ("p3b", {"priority": 3}),
    ("a3", {}),
]
#: BullMQ's order: wait first (lifo jobs at its head, the newest first, then the others FIFO),
#: then prioritized by priority, FIFO within one priority.
MIX_ORDER = ["l2", "l1", "a1", "a2", "a3", "p1a", "p1b", "p3a", "p3b", "pmax"]


async def test_node_worker_takes_corral_jobs_in_priority_and_lifo_order(
    node: Node, redis_url: str
) -> None:
    async with AsyncQueue("q", connection=redis_url) as queue:
        names = {(await queue.add(name, {}, **opts)).id: name for name, opts in MIX}
    out = await node_run(node, "work_until.mjs", "q", "local", len(MIX), '{"concurrency": 1}')
    assert [names[job_id] for _, job_id, _ in out["order"]] == MIX_ORDER
    assert len(out["completed"]) == len(MIX)


async def test_corral_worker_takes_node_jobs_in_priority_and_lifo_order(
    node: Node, redis_url: str
) -> None:
    ids = await node_add(node, "q", [{"name": name, "opts": opts} for name, opts in MIX])
    names = dict(zip(ids, (name for name, _ in MIX), strict=True))
    order: list[str] = []

    async def process(job: AsyncJob) -> None:
        order.append(names[job.id])

    async with AsyncQueue("q", connection=redis_url) as queue:
        await drive(Worker("q", process, connection=redis_url), finished(queue, len(MIX)))
    assert order == MIX_ORDER


# -- 2. delays ---------------------------------------------------------------------------------


def assert_ran_after_its_delay(r: redis.Redis, job_id: str, delay_ms: int) -> None:
    h = r.hgetall(f"bull:q:{job_id}")
    assert json.loads(h["opts"])["delay"] == delay_ms
    assert int(h["processedOn"]) >= int(h["timestamp"]) + delay_ms
    assert h["delay"] == "0"  # reset when promoted
    kinds = event_kinds(r, job_id)
    assert kinds[:2] == ["added", "delayed"]
    assert kinds[2:] == ["waiting", "active", "completed"]
    waiting = [f for _, f in r.xrange("bull:q:events") if f.get("jobId") == job_id][2]
    assert waiting["prev"] == "delayed"


async def test_node_worker_runs_a_corral_delayed_job_when_due(
    node: Node, r: redis.Redis, redis_url: str
) -> None:
    with started(await node_start(node, "work_until.mjs", "q", "local", 2)) as proc:
        async with AsyncQueue("q", connection=redis_url) as queue:
            late = await queue.add("late", {}, delay=0.5)
            now = await queue.add("now", {})
        out = await node_result(proc)
    assert [job_id for _, job_id, _ in out["order"]] == [now.id, late.id]
    assert_ran_after_its_delay(r, late.id, 500)


async def test_corral_worker_runs_a_node_delayed_job_when_due(
    node: Node, r: redis.Redis, redis_url: str
) -> None:
    order: list[str] = []

    async def process(job: AsyncJob) -> None:
        order.append(job.id)

    async with (
        AsyncQueue("q", connection=redis_url) as queue,
        running(Worker("q", process, connection=redis_url)),
    ):
        late, now = await node_add(
            node, "q", [{"name": "late", "opts": {"delay": 500}}, {"name": "now"}]
        )
        await wait_until(finished(queue, 2))
    assert order == [now, late]
    assert_ran_after_its_delay(r, late, 500)


# -- 3. retries with backoff, shared by a Node and a corral worker -----------------------------


async def test_retries_with_backoff_are_shared_by_node_and_corral_workers(
    node: Node, r: redis.Redis, redis_url: str
) -> None:
    flaky = {"fail_attempts": 2, "sleep_ms": 20}
    doomed = {"fail_attempts": 99, "sleep_ms": 20}
    with started(
        await node_start(node, "work_until.mjs", "q", "queue", 22, '{"concurrency": 2}')
    ) as proc:
        async with AsyncQueue("q", connection=redis_url) as queue:
            worker = Worker("q", traced, connection=redis_url, concurrency=2)
            async with running(worker):
                opts: dict[str, Any] = {"attempts": 3, "backoff": Backoff.fixed(0.1)}
                good = [(await queue.add(f"c{i}", flaky, **opts)).id for i in range(10)]
                bad = [(await queue.add("c-doomed", doomed, **opts)).id]
                node_opts = {"attempts": 3, "backoff": {"type": "fixed", "delay": 100}}
                ids = await node_add(
                    node,
                    "q",
                    [{"name": f"n{i}", "data": flaky, "opts": node_opts} for i in range(10)]
                    + [{"name": "n-doomed", "data": doomed, "opts": node_opts}],
                )
                good += ids[:10]
                bad += ids[10:]
                await wait_until(finished(queue, 22), timeout=30)
            await node_result(proc)

            runs = by_attempt(r)
            assert set(runs) == {*good, *bad}
            for job_id, attempts in runs.items():
                # Every attempt ran exactly once, whichever worker took it.
                assert {n: len(who) for n, who in attempts.items()} == {1: 1, 2: 1, 3: 1}, job_id
            assert {e["by"] for e in trace(r)} == {"node", "corral"}

            for job_id in good:
                job = await queue.get_job(job_id)
                assert job is not None
                last = runs[job_id][3][0]
                assert (job.attempts_made, job.returnvalue) == (3, {"by": last, "attempt": 3})
                assert len(job.stacktrace) == 2
                # Both retries went through delayed (backoff > 0), then back to wait.
                assert event_kinds(r, job_id).count("delayed") == 2
            assert await queue.get_job_counts("completed", "failed", "delayed") == {
                "completed": 20,
                "failed": 2,
                "delayed": 0,
            }
            for job_id in bad:
                job = await queue.get_job(job_id)
                assert job is not None
                reason = f"attempt 3 of {job_id} failed on {runs[job_id][3][0]}"
                assert (job.attempts_made, job.failed_reason) == (3, reason)

    seen = (await node_run(node, "read_jobs.mjs", "q", *bad))["jobs"]
    for job_id in bad:
        reason = f"attempt 3 of {job_id} failed on {runs[job_id][3][0]}"
        assert seen[job_id]["state"] == "failed"
        assert (seen[job_id]["failedReason"], seen[job_id]["attemptsMade"]) == (reason, 3)
        assert len(seen[job_id]["stacktrace"]) == 3


# -- 4. stall recovery across languages --------------------------------------------------------
# Both kinds of worker share the throttle key K:stalled-check, whose PX is the stalledInterval
# of whichever worker set it last: every worker here uses 300 ms, so none blocks the others.


def start_corral_hanging_worker(url: str) -> subprocess.Popen[str]:
    """tests/fixtures/stall_worker.py (lock 0.6 s, stalled interval 0.3 s) on queue q."""
    return subprocess.Popen(
        [sys.executable, "-m", "tests.fixtures.stall_worker", url, "q"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )


async def read_line(proc: subprocess.Popen[str], timeout: float = 30) -> str:
    """The next stdout line of ``proc``; on a timeout, stop(proc) ends the blocked read."""
    assert proc.stdout is not None
    return (await asyncio.wait_for(asyncio.to_thread(proc.stdout.readline), timeout)).strip()


async def test_node_worker_recovers_a_job_stalled_by_a_killed_corral_worker(
    node: Node, r: redis.Redis, redis_url: str
) -> None:
    async with AsyncQueue("q", connection=redis_url) as queue:
        await queue.add("long", {"n": 1})
    with started(start_corral_hanging_worker(redis_url)) as proc:
        line = await read_line(proc)
        assert line.startswith("started:"), line
        job_id = line.split(":", 1)[1]
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    assert r.lrange("bull:q:active", 0, -1) == [job_id]

    out = await node_run(node, "work_until.mjs", "q", "local", 1, NODE_FAST_STALLS)
    assert [(c["id"], c["stalledCounter"]) for c in out["completed"]] == [(job_id, 1)]
    assert out["completed"][0]["returnvalue"] == {"by": "node", "attempt": 1}
    h = r.hgetall(f"bull:q:{job_id}")
    assert (h["stc"], h["atm"], h["ats"]) == ("1", "1", "2")
    assert r.zrange("bull:q:completed", 0, -1) == [job_id]
    assert event_kinds(r, job_id)[-4:] == ["waiting", "stalled", "active", "completed"]


async def test_corral_worker_recovers_a_job_stalled_by_a_killed_node_worker(
    node: Node, r: redis.Redis, redis_url: str
) -> None:
    async with AsyncQueue("q", connection=redis_url) as queue:
        await queue.add("long", {"n": 1})
        with started(await node_start(node, "hang_worker.mjs", "q", NODE_FAST_STALLS)) as proc:
            job_id = json.loads(await read_line(proc))["jobId"]
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
        assert r.lrange("bull:q:active", 0, -1) == [job_id]

        stalled: list[str] = []
        worker = Worker("q", traced, connection=redis_url, lock_duration=0.6, stalled_interval=0.3)
        worker.on("stalled", stalled.append)
        await drive(worker, finished(queue, 1), timeout=30)
        job = await queue.get_job(job_id)
    assert job is not None
    assert (job.stalled_counter, job.attempts_made, job.attempts_started) == (1, 1, 2)
    assert job.returnvalue == {"by": "corral", "attempt": 1}
    assert stalled == [job_id]
    assert event_kinds(r, job_id)[-4:] == ["waiting", "stalled", "active", "completed"]
    seen = (await node_run(node, "read_jobs.mjs", "q", job_id))["jobs"][job_id]
    assert (seen["state"], seen["stalledCounter"]) == ("completed", 1)


# -- 5. pause and resume from either side ------------------------------------------------------


PAUSE_EVENTS = ("paused", "resumed")


def queue_events(r: redis.Redis) -> list[str]:
    """The pause and resume events of q, in order."""
    return [f["event"] for _, f in r.xrange("bull:q:events") if f["event"] in PAUSE_EVENTS]


async def test_node_pauses_corral_worker_waits_corral_resumes(
    node: Node, r: redis.Redis, redis_url: str
) -> None:
    async with (
        AsyncQueue("q", connection=redis_url) as queue,
        running(Worker("q", traced, connection=redis_url)),
    ):
        assert await node_calls(node, "q", ["pause"], ["isPaused"]) == [None, True]
        assert await queue.is_paused() is True
        ids = [(await queue.add(f"j{i}", {})).id for i in range(3)]
        await asyncio.sleep(0.5)  # a negative check: the running worker takes nothing
        assert await queue.get_job_counts("waiting", "active", "completed") == {
            "waiting": 3,
            "active": 0,
            "completed": 0,
        }
        assert trace(r) == []

        await queue.resume()
        assert await node_calls(node, "q", ["isPaused"]) == [False]
        await wait_until(finished(queue, 3))
    assert queue_events(r) == ["paused", "resumed"]
    assert sorted(e["id"] for e in trace(r)) == sorted(ids)
    assert {e["by"] for e in trace(r)} == {"corral"}


async def test_corral_pauses_node_worker_waits_node_resumes(
    node: Node, r: redis.Redis, redis_url: str
) -> None:
    async with AsyncQueue("q", connection=redis_url) as queue:
        await queue.pause()
        assert await node_calls(node, "q", ["isPaused"]) == [True]
        with started(await node_start(node, "work_until.mjs", "q", "local", 3)) as proc:
            ids = await node_add(node, "q", [{"name": f"j{i}"} for i in range(3)])
            await asyncio.sleep(0.5)  # a negative check: the running worker takes nothing
            assert await queue.get_job_counts("waiting", "active", "completed") == {
                "waiting": 3,
                "active": 0,
                "completed": 0,
            }
            assert trace(r) == []

            assert await node_calls(node, "q", ["resume"], ["isPaused"]) == [None, False]
            out = await node_result(proc)
        assert await queue.is_paused() is False
    assert queue_events(r) == ["paused", "resumed"]
    assert sorted(c["id"] for c in out["completed"]) == sorted(ids)
    assert r.hexists("bull:q:meta", "paused") == 0


# -- 6. counts and listings agree --------------------------------------------------------------


async def build_mixed_queue(node: Node, redis_url: str) -> None:
    """q with 4 completed, 3 failed, 1 active, 6 waiting, 6 prioritized and 4 delayed jobs."""
    async with AsyncQueue("q", connection=redis_url) as queue:
        for i in range(8):
            await queue.add(f"done-{i}", {})
        manual = Worker("q", None, connection=redis_url)
        taken = [await manual.get_next_job() for _ in range(8)]
        for i, job in enumerate(taken):
            assert job is not None
            if i < 4:
                await job.move_to_completed({"i": i})
            elif i < 7:
                await job.move_to_failed(RuntimeError(f"boom {i}"))
            # the last one stays active (its lock lives 30 s)
        await manual.close()
        for name, opts in [
            ("w1", {}),
            ("p5a", {"priority": 5}),
            ("w2", {}),
            ("w3", {"lifo": True}),
            ("p1", {"priority": 1}),
            ("p5b", {"priority": 5}),
            ("d45", {"delay": 45}),
            ("w4", {}),
            ("p2", {"priority": 2}),
        ]:
            await queue.add(name, {}, **opts)
    await node_add(
        node,
        "q",
        [
            {"name": "w5"},
            {"name": "d60", "opts": {"delay": 60_000}},
            {"name": "w6", "opts": {"lifo": True}},
            {"name": "p3", "opts": {"priority": 3}},
            {"name": "d30", "opts": {"delay": 30_000}},
            {"name": "p1n", "opts": {"priority": 1}},
            {"name": "d90p", "opts": {"delay": 90_000, "priority": 2}},
        ],
    )


#: (types, start, end, asc) of one state each.
SINGLE_STATE_LISTINGS: list[tuple[list[str], int, int, bool]] = [
    (["waiting"], 0, -1, False),
    (["waiting"], 0, -1, True),
    (["waiting"], 1, 3, True),
    (["waiting"], 2, 4, False),
    (["prioritized"], 0, -1, True),
    (["prioritized"], 0, 2, False),
    (["delayed"], 0, -1, True),
    (["delayed"], 1, 2, False),
    (["completed"], 0, -1, False),
    (["completed"], 1, 2, True),
    (["failed"], 0, 1, False),
    (["active"], 0, -1, True),
    (["waiting"], -2, -1, True),
    (["completed"], -2, -1, False),
    (["wait"], 0, -1, True),
]

#: (types, start, end, asc) over several states at once, whole.
MULTI_STATE_LISTINGS: list[tuple[list[str], int, int, bool]] = [
    (["waiting", "prioritized", "delayed"], 0, -1, True),
    (["waiting", "prioritized", "delayed"], 0, -1, False),
    (["completed", "failed"], 0, -1, False),
    (["delayed", "waiting", "active"], 0, -1, True),
]

#: (types, start, end, asc) over several states at once, paginated.
MULTI_STATE_PAGES: list[tuple[list[str], int, int, bool]] = [
    (["waiting", "prioritized", "delayed"], 0, 3, True),
    (["waiting", "prioritized", "delayed"], 4, 9, True),
    (["completed", "failed"], 0, 4, False),
    (["delayed", "waiting"], 2, 5, False),
]


async def corral_listings(
    redis_url: str, listings: list[tuple[list[str], int, int, bool]]
) -> list[list[str]]:
    async with AsyncQueue("q", connection=redis_url) as queue:
        return [
            [job.id for job in await queue.get_jobs(types, start, end, asc=asc)]
            for types, start, end, asc in listings
        ]


async def test_counts_and_single_state_listings_agree(node: Node, redis_url: str) -> None:
    await build_mixed_queue(node, redis_url)
    node_counts, node_some, *node_lists = await node_calls(
        node,
        "q",
        ["getJobCounts"],
        ["getJobCounts", "waiting", "delayed", "prioritized", "active"],
        *(["getJobs", *listing] for listing in SINGLE_STATE_LISTINGS),
    )
    async with AsyncQueue("q", connection=redis_url) as queue:
        counts = await queue.get_job_counts()
        some = await queue.get_job_counts("waiting", "delayed", "prioritized", "active")
    assert counts == {
        "active": 1,
        "completed": 4,
        "delayed": 4,
        "failed": 3,
        "prioritized": 6,
        "waiting": 6,
        "waiting-children": 0,
    }
    assert node_counts == counts
    assert node_some == some
    assert list(node_counts) == list(counts)
    mine = await corral_listings(redis_url, SINGLE_STATE_LISTINGS)
    for listing, theirs, ours in zip(SINGLE_STATE_LISTINGS, node_lists, mine, strict=True):
        assert ours == theirs, listing
        assert ours, listing  # each listing selects something


async def test_counts_of_paused_and_wait_like_node(node: Node, redis_url: str) -> None:
    await build_mixed_queue(node, redis_url)
    theirs = await node_calls(
        node, "q", ["getJobCounts", "paused", "waiting"], ["getJobCounts", "wait"]
    )
    async with AsyncQueue("q", connection=redis_url) as queue:
        ours = [
            await queue.get_job_counts("paused", "waiting"),
            await queue.get_job_counts("wait"),
        ]
    assert theirs == [{"paused": 0, "waiting": 6}, {"wait": 6}]
    assert ours == theirs


async def test_multi_state_listings_agree(node: Node, redis_url: str) -> None:
    await build_mixed_queue(node, redis_url)
    listings = MULTI_STATE_LISTINGS + [
        ([t], s, e, a) for ts, s, e, a in MULTI_STATE_PAGES for t in ts
    ]
    node_all, *node_lists = await node_calls(
        node, "q", ["getJobs"], *(["getJobs", *listing] for listing in listings)
    )
    mine = await corral_listings(redis_url, listings)
    for listing, theirs, ours in zip(listings, node_lists, mine, strict=True):
        assert ours == theirs, listing
    async with AsyncQueue("q", connection=redis_url) as queue:
        assert [job.id for job in await queue.get_jobs()] == node_all  # every state
    # What Node does with bounds over several states: each state is cut by [start, end] on
    # its own and the cuts are concatenated (the page test below expects the same of corral).
    pages = await node_calls(node, "q", *(["getJobs", *page] for page in MULTI_STATE_PAGES))
    per_state = iter(node_lists[len(MULTI_STATE_LISTINGS) :])
    for (types, *_), page in zip(MULTI_STATE_PAGES, pages, strict=True):
        assert page == [job_id for _ in types for job_id in next(per_state)]


async def test_multi_state_pages_are_slices_of_nodes_listing(node: Node, redis_url: str) -> None:
    """Over several states corral pages differently from Node, on purpose: Node cuts
    [start, end] from each state and concatenates the cuts (a page of 0..3 over three states
    can hold 12 jobs); corral cuts [start, end] once from the concatenation, so pages never
    overlap or skip. Both read the same order: corral's page is that slice of Node's full
    listing of the same states."""
    await build_mixed_queue(node, redis_url)
    full = await node_calls(
        node, "q", *(["getJobs", types, 0, -1, asc] for types, _, _, asc in MULTI_STATE_PAGES)
    )
    mine = await corral_listings(redis_url, MULTI_STATE_PAGES)
    for (types, start, end, _), everything, ours in zip(MULTI_STATE_PAGES, full, mine, strict=True):
        stop = None if end == -1 else end + 1
        assert ours == everything[start:stop], (types, start, end)


# -- 7. removeOnComplete / removeOnFail --------------------------------------------------------

#: queue -> (options of its jobs in corral's spelling, in Node's, how many jobs, the ids kept).
#: Jobs run one at a time per queue, in id order. ``rc-age`` runs its first job, waits past the
#: age of 1 s, then runs two more: the first one goes, the two recent ones stay.
RETENTION: dict[str, tuple[dict[str, Any], dict[str, Any], int, list[str]]] = {
    "rc-true": ({"remove_on_complete": True}, {"removeOnComplete": True}, 3, []),
    "rc-count": ({"remove_on_complete": 2}, {"removeOnComplete": 2}, 5, ["4", "5"]),
    "rc-agecount": (
        {"remove_on_complete": {"age": 3600, "count": 2}},
        {"removeOnComplete": {"age": 3600, "count": 2}},
        4,
        ["3", "4"],
    ),
    "rc-age": (
        {"remove_on_complete": {"age": 1, "count": 10}},
        {"removeOnComplete": {"age": 1, "count": 10}},
        3,
        ["2", "3"],
    ),
    "rf": ({"remove_on_fail": 2}, {"removeOnFail": 2}, 4, ["3", "4"]),
}
TOTAL_RETAINED_JOBS = sum(n for _, _, n, _ in RETENTION.values())


def job_data(queue: str) -> dict[str, Any]:
    return {"fail_attempts": 99} if queue == "rf" else {}


def assert_retention_applied(r: redis.Redis) -> None:
    for queue, (_, _, n, kept) in RETENTION.items():
        finished_set = "failed" if queue == "rf" else "completed"
        assert r.zrange(f"bull:{queue}:{finished_set}", 0, -1) == kept, queue
        for job_id in map(str, range(1, n + 1)):
            expected = 1 if job_id in kept else 0
            assert r.exists(f"bull:{queue}:{job_id}") == expected, (queue, job_id)
            assert r.exists(f"bull:{queue}:{job_id}:logs") == expected, (queue, job_id)
        assert len(by_attempt(r, queue)) == n, queue  # every job did run


async def completed_once(r: redis.Redis, queue: str) -> bool:
    return bool(r.zcard(f"bull:{queue}:completed"))


async def test_node_worker_applies_retention_of_corral_jobs(
    node: Node, r: redis.Redis, redis_url: str
) -> None:
    queues = ",".join(RETENTION)
    with started(
        await node_start(node, "work_until.mjs", queues, "local", TOTAL_RETAINED_JOBS)
    ) as proc:
        added: dict[str, list[str]] = {}
        for queue_name, (opts, _, n, _) in RETENTION.items():
            async with AsyncQueue(queue_name, connection=redis_url) as queue:
                first = 1 if queue_name == "rc-age" else n
                for i in range(first):
                    job = await queue.add(f"{queue_name}-{i}", job_data(queue_name), **opts)
                    added.setdefault(queue_name, []).append(job.id)
        await wait_until(lambda: completed_once(r, "rc-age"))
        await asyncio.sleep(1.2)  # past rc-age's age of 1 s
        async with AsyncQueue("rc-age", connection=redis_url) as queue:
            for i in (1, 2):
                await queue.add(f"rc-age-{i}", {}, **RETENTION["rc-age"][0])
        out = await node_result(proc)
    assert len(out["completed"]) + len(out["failed"]) == TOTAL_RETAINED_JOBS
    assert_retention_applied(r)


async def test_corral_worker_applies_retention_of_node_jobs(
    node: Node, r: redis.Redis, redis_url: str
) -> None:
    done: list[str] = []
    workers = []
    for queue_name in RETENTION:
        worker = Worker(queue_name, traced, connection=redis_url)
        worker.on("completed", lambda job, result: done.append(job.id))
        worker.on("failed", lambda job, error: done.append(job.id))
        workers.append(worker)

    async def all_done() -> bool:
        # "failed" fires before the job is moved: wait for the moves too.
        busy = sum(r.llen(f"bull:{q}:active") + r.llen(f"bull:{q}:wait") for q in RETENTION)
        return len(done) >= TOTAL_RETAINED_JOBS and busy == 0

    async with contextlib.AsyncExitStack() as stack:
        for worker in workers:
            await stack.enter_async_context(running(worker))
        await node_add(
            node,
            "q",
            [
                {"queue": q, "name": f"{q}-{i}", "data": job_data(q), "opts": node_opts}
                for q, (_, node_opts, n, _) in RETENTION.items()
                for i in range(1 if q == "rc-age" else n)
            ],
        )
        await wait_until(lambda: completed_once(r, "rc-age"))
        await asyncio.sleep(1.2)  # past rc-age's age of 1 s
        node_opts = RETENTION["rc-age"][1]
        await node_add(
            node,
            "rc-age",
            [{"name": f"rc-age-{i}", "opts": node_opts} for i in (1, 2)],
        )
        await wait_until(all_done)
    assert_retention_applied(r)
