"""The rest of BullMQ 6.7.0's API, each call held against what Node BullMQ does on the same data.

The data differences first (``meta.version``, ``getRateLimitTtl``'s -2/-1, stack traces,
``drained``, the marker on pause), then the counts (``getJobCountByTypes``,
``getWorkersCount``), then one worker's pause and resume. Each test sets up the same state on
two queues (or one), lets Node act on one and corral on the other, and compares what they
wrote or answered.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import orjson
import pytest
import redis

from corral import AsyncFlowProducer, AsyncJob, AsyncQueue, FlowJob, Worker, _scripts
from corral._async._queue_base import META_VERSION
from corral._version import __version__
from corral.clock import now_ms
from tests.interop.conftest import Node
from tests.test_worker import drive, finished

pytestmark = pytest.mark.interop


def names(r: redis.Redis, queue: str) -> list[str]:
    """The event names of a queue's stream, oldest first."""
    return [fields["event"] for _, fields in r.xrange(f"bull:{queue}:events", "-", "+")]


async def drive_until(done: Any, timeout: float = 15) -> None:
    """Wait until ``done()`` is true (polled), or fail."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not await done():
        assert loop.time() < deadline, "timed out"
        await asyncio.sleep(0.02)


def calls(node: Node, queue: str, *call: list[Any]) -> list[Any]:
    """Node Queue method calls on ``queue``, in order; their results."""
    return list(node.run("queue_calls.mjs", queue, json.dumps(list(call)))["results"])


# -- data differences --------------------------------------------------------------------------


async def test_meta_version_is_written_at_the_first_add_and_node_reads_it(
    node: Node, r: redis.Redis, redis_url: str
) -> None:
    queue = AsyncQueue("mv", connection=redis_url)
    assert await queue.get_job_counts() and not r.exists("bull:mv:meta")  # reads write nothing
    await queue.add("a", {})
    assert r.hgetall("bull:mv:meta") == {
        "opts.maxLenEvents": "10000",
        "version": "bullmq:6.7.0",
        "x-version": f"corral:{__version__}",
    }
    assert ("bullmq:6.7.0", f"corral:{__version__}") == META_VERSION
    seen = node.run("api_meta.mjs", "mv")
    assert seen["version"] == "bullmq:6.7.0"
    assert seen["meta"]["maxLenEvents"] == 10000
    # A Node Queue writes the same value when it starts; corral's field stays beside it.
    calls(node, "mv", ["count"])
    assert r.hget("bull:mv:meta", "version") == "bullmq:6.7.0"
    assert r.hget("bull:mv:meta", "x-version") == f"corral:{__version__}"
    # Node's workers take corral's jobs as their own.
    done = node.run("work_jobs.mjs", "mv", 1)
    assert [job["name"] for job in done["processed"]] == ["a"]
    await queue.close()


async def test_a_refused_add_writes_no_meta(r: redis.Redis, redis_url: str) -> None:
    queue = AsyncQueue("mv", connection=redis_url)
    with pytest.raises(Exception, match="parent"):
        await queue.add("a", {}, parent={"id": "gone", "queue": "bull:other"})
    assert r.keys("*") == []
    await queue.close()


async def test_rate_limit_ttl_answers_as_node_does(
    node: Node, r: redis.Redis, redis_url: str
) -> None:
    queue = AsyncQueue("rl", connection=redis_url)
    asks: list[int | None] = [None, 2, 3, 5]

    async def both() -> tuple[list[Any], list[int]]:
        ours = [await queue.get_rate_limit_ttl(n) for n in asks]
        theirs = calls(
            node,
            "rl",
            *(["getRateLimitTtl"] if n is None else ["getRateLimitTtl", n] for n in asks),
        )
        return theirs, ours

    theirs, ours = await both()  # no limiter key
    assert theirs == ours == [-2, 0, 0, 0]
    r.set("bull:rl:limiter", 3)  # a counter without expiry
    theirs, ours = await both()
    assert theirs == ours == [-1, 0, 0, 0]
    r.set("bull:rl:limiter", 3, px=60_000)  # a window with 3 jobs taken
    theirs, ours = await both()
    assert theirs[0] > 0 and ours[0] > 0 and theirs[2] > 0 and ours[2] > 0
    assert theirs[3] == ours[3] == 0  # 3 < 5: not limited for a limiter of 5
    await queue.close()


async def test_stack_trace_entries_end_without_a_newline_as_nodes(
    node: Node, r: redis.Redis, redis_url: str
) -> None:
    queue = AsyncQueue("st", connection=redis_url)
    await queue.add("bad", {})

    async def process(job: AsyncJob) -> None:
        raise ValueError("card declined")

    await drive(Worker("st", process, connection=redis_url), finished(queue, 1))
    ours = orjson.loads(r.hget("bull:st:1", "stacktrace") or "[]")
    await queue.add("bad", {})
    node.run("work_jobs.mjs", "st", 1, env={"WORK_FAIL": "all"})
    theirs = orjson.loads(r.hget("bull:st:2", "stacktrace") or "[]")
    assert len(ours) == len(theirs) == 1
    assert ours[0].endswith("ValueError: card declined")
    assert not theirs[0].endswith("\n")
    await queue.close()


async def run_corral(redis_url: str, queue: AsyncQueue, count: int) -> None:
    async def process(job: AsyncJob) -> str:
        if job.name == "bad":
            raise RuntimeError("bad job")
        return "ok"

    await drive(
        Worker(queue.name, process, connection=redis_url, concurrency=10), finished(queue, count)
    )


@pytest.mark.parametrize("delayed", [False, True], ids=["empty-after", "a-delayed-job-left"])
async def test_drained_after_the_finish_that_empties_the_queue_as_node(
    node: Node, r: redis.Redis, redis_url: str, delayed: bool
) -> None:
    for side in ("node", "corral"):
        queue = AsyncQueue(f"dr-{side}", connection=redis_url)
        if delayed:
            await queue.add("later", {}, delay=3600)
        for name in ("a", "b", "bad"):
            await queue.add(name, {})
        if side == "node":
            node.run("work_jobs.mjs", queue.name, 3, env={"WORK_FAIL": "bad"})
        else:
            await run_corral(redis_url, queue, 3)
        await queue.close()
    theirs, ours = names(r, "dr-node"), names(r, "dr-corral")
    if delayed:  # BullMQ writes none while a delayed job waits
        assert "drained" not in theirs and "drained" not in ours
    else:  # once, after the last finish (not after each finish while others run)
        assert theirs.count("drained") == ours.count("drained") == 1
        assert theirs[-1] == ours[-1] == "drained"


async def test_a_fetch_that_finds_nothing_writes_no_drained(r: redis.Redis, redis_url: str) -> None:
    queue = AsyncQueue("dr0", connection=redis_url)
    await queue.add("later", {}, delay=3600)
    worker = Worker("dr0", None, connection=redis_url)
    assert await worker.get_next_job() is None
    await worker.close()
    assert "drained" not in names(r, "dr0")  # as Node's worker starting on an empty queue
    await queue.close()


async def test_pause_deletes_the_marker_as_node(node: Node, r: redis.Redis, redis_url: str) -> None:
    for side in ("node", "corral"):
        queue = AsyncQueue(f"pm-{side}", connection=redis_url)
        await queue.add("now", {})
        await queue.add("later", {}, delay=3600)
        assert [m for m in r.zrange(f"bull:{queue.name}:marker", 0, -1)] == ["0", "1"]
        if side == "node":
            calls(node, queue.name, ["pause"])
        else:
            await queue.pause()
        assert r.exists(f"bull:{queue.name}:marker") == 0, side
        await queue.add("while paused", {})
        assert r.exists(f"bull:{queue.name}:marker") == 0, side  # a paused add writes none
        if side == "node":
            calls(node, queue.name, ["resume"])
        else:
            await queue.resume()
        assert "0" in r.zrange(f"bull:{queue.name}:marker", 0, -1), side
        await queue.close()


# -- counts ------------------------------------------------------------------------------------


async def test_job_count_by_types_as_node(node: Node, r: redis.Redis, redis_url: str) -> None:
    queue = AsyncQueue("ct", connection=redis_url)
    await queue.add("a", {})
    await queue.add("b", {})
    await queue.add("p", {}, priority=2)
    await queue.add("d", {}, delay=3600)
    await queue.upsert_job_scheduler("s1", every=3600)
    r.lpush("bull:ct:paused", "legacy")  # a list an older BullMQ filled
    asks: list[list[str]] = [
        [],
        ["wait"],
        ["waiting"],
        ["wait", "waiting"],
        ["delayed", "delayed"],
        ["paused"],
        ["prioritized", "completed", "failed", "active", "waiting-children"],
        ["repeat"],
        ["repeat", "wait"],
    ]
    theirs = calls(node, "ct", *(["getJobCountByTypes", *types] for types in asks))
    ours = [await queue.get_job_count_by_types(*types) for types in asks]
    assert ours == theirs
    assert ours[0] == 5  # a, b, p, d, and the scheduler's first iteration (waiting)
    await queue.close()


async def test_workers_count_counts_node_and_corral_workers(
    node: Node, r: redis.Redis, redis_url: str
) -> None:
    queue = AsyncQueue("wc", connection=redis_url)
    assert await queue.get_workers_count() == 0 == calls(node, "wc", ["getWorkersCount"])[0]
    proc = node.start("work_until.mjs", "wc", "local", 1)
    try:

        def counted(n: int) -> Any:
            async def check() -> bool:
                return await queue.get_workers_count() == n

            return check

        worker = Worker("wc", lambda job: None, connection=redis_url, name="py")
        task = asyncio.create_task(worker.run_async())
        await drive_until(counted(2))
        assert calls(node, "wc", ["getWorkersCount"])[0] == 2
        await worker.close()
        await task
        await drive_until(counted(1))  # corral's worker closed: its connection goes
        assert calls(node, "wc", ["getWorkersCount"])[0] == 1
    finally:
        proc.kill()
        proc.communicate()
    await queue.close()


# -- one worker's pause and resume -------------------------------------------------------------


async def corral_pause_run(redis_url: str, name: str) -> dict[str, Any]:
    """api_worker_pause.mjs's steps, with a corral worker."""
    queue = AsyncQueue(name, connection=redis_url)
    started = asyncio.Event()

    async def process(job: AsyncJob) -> str:
        if job.name == "slow":
            started.set()
            await asyncio.sleep(0.3)  # the job's own work, as Node's runs 300 ms
        return job.name

    worker = Worker(name, process, connection=redis_url, concurrency=2)
    events: list[str] = []
    for event in ("ready", "closing", "closed", "paused", "resumed"):
        worker.on(event, lambda *args, e=event: events.append(e))
    states: list[list[Any]] = []

    def state(step: str) -> None:
        states.append([step, worker.is_running(), worker.is_paused()])

    state("before run")
    running = asyncio.create_task(worker.run_async())
    await asyncio.wait_for(started.wait(), 15)
    state("running")
    pausing = asyncio.create_task(worker.pause())
    await asyncio.sleep(0)  # one turn of the loop: pause() begins, as Node's acts at its call
    state("pausing")
    await queue.add("next", {})
    await pausing
    state("paused")
    out = {
        "waitingWhilePaused": (await queue.get_job_counts("waiting"))["waiting"],
        "queuePaused": await queue.is_paused(),
    }
    await worker.resume()
    state("resumed")

    async def both_completed() -> bool:
        return (await queue.get_job_counts("completed"))["completed"] >= 2

    await drive_until(both_completed)
    await worker.close()
    await running
    state("closed")
    await queue.close()
    return {"events": events, "states": states, **out}


async def test_one_worker_pauses_and_resumes_as_node(node: Node, redis_url: str) -> None:
    for name in ("wp-node", "wp-corral"):
        queue = AsyncQueue(name, connection=redis_url)
        await queue.add("slow", {})
        await queue.close()
    theirs = node.run("api_worker_pause.mjs", "wp-node")
    ours = await corral_pause_run(redis_url, "wp-corral")
    assert (ours["events"], ours["states"]) == (theirs["events"], theirs["states"])
    assert theirs["events"] == ["ready", "paused", "resumed", "closing", "closed"]
    assert ours["queuePaused"] is theirs["queuePaused"] is False
    # corral takes nothing once pause() is called; Node's marker read, already on its way,
    # may still take "next" on a loaded machine (seen), so only corral's count is exact.
    assert ours["waitingWhilePaused"] == 1 and theirs["waitingWhilePaused"] in (0, 1)


async def test_a_paused_corral_worker_leaves_the_jobs_to_node(
    node: Node, r: redis.Redis, redis_url: str
) -> None:
    queue = AsyncQueue("wq", connection=redis_url)
    worker = Worker("wq", lambda job: "corral", connection=redis_url)
    await worker.pause()  # starts paused: only this worker, not the queue
    task = asyncio.create_task(worker.run_async())
    for i in range(5):
        await queue.add(f"j{i}", {"i": i})
    done = node.run("work_jobs.mjs", "wq", 5)
    assert len(done["processed"]) == 5
    assert r.hget("bull:wq:meta", "paused") is None
    await worker.close()
    await task
    await queue.close()


# -- worker options ----------------------------------------------------------------------------

RETENTION_JOBS: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("plain", {}, {}),
    ("keep", {}, {"remove_on_complete": False}),
    ("count", {}, {"remove_on_complete": 5}),
    ("bad", {"fail_attempts": 1}, {}),
    ("badkeep", {"fail_attempts": 1}, {"remove_on_fail": False}),
]


async def test_worker_retention_defaults_apply_as_nodes(
    node: Node, r: redis.Redis, redis_url: str
) -> None:
    for side in ("node", "corral"):
        queue = AsyncQueue(f"rd-{side}", connection=redis_url)
        for name, data, opts in RETENTION_JOBS:
            await queue.add(name, data, **opts)
        await queue.close()
    proc = node.start(
        "work_until.mjs",
        "rd-node",
        "local",
        len(RETENTION_JOBS),
        json.dumps({"removeOnComplete": {"count": 0}, "removeOnFail": {"count": 0}}),
    )
    node.result(proc)

    async def process(job: AsyncJob) -> str:
        if job.data.get("fail_attempts"):
            raise RuntimeError("no")
        return "ok"

    queue = AsyncQueue("rd-corral", connection=redis_url)
    worker = Worker(
        "rd-corral",
        process,
        connection=redis_url,
        remove_on_complete={"count": 0},
        remove_on_fail={"count": 0},
    )

    async def all_finished() -> bool:
        return not await queue.get_job_count_by_types("waiting", "active")

    await drive(worker, all_finished)
    await queue.close()

    def kept(side: str) -> dict[str, list[str]]:
        return {
            state: r.zrange(f"bull:rd-{side}:{state}", 0, -1) for state in ("completed", "failed")
        }

    assert kept("corral") == kept("node") == {"completed": ["2", "3"], "failed": ["5"]}
    assert r.exists("bull:rd-corral:1", "bull:rd-corral:4") == 0


# -- jobs and flows ----------------------------------------------------------------------------


async def take(queue: AsyncQueue, count: int = 1) -> list[AsyncJob]:
    """Move up to ``count`` jobs to active as a worker's fetch does, bound with their tokens."""
    reply = await queue._run(
        _scripts.MOVE_TO_ACTIVE, [queue._job_prefix, now_ms(), count, "tok", 0, 30_000, ""]
    )
    fetched = _scripts.parse_fetched(reply, 2)
    return [queue._bind(f.job_id, f.fields, token=f.token) for f in fetched]


@pytest.mark.parametrize("kind", ["async", "thread"])
async def test_a_discarded_job_fails_for_good_and_node_reads_it_so(
    node: Node, redis_url: str, kind: str
) -> None:
    queue = AsyncQueue("disc", connection=redis_url)
    job = await queue.add("once", {}, attempts=3)

    async def process_async(job: AsyncJob) -> None:
        job.discard()
        raise RuntimeError("gone for good")

    def process_thread(job: Any) -> None:
        job.discard()
        raise RuntimeError("gone for good")

    process = process_async if kind == "async" else process_thread
    await drive(Worker("disc", process, connection=redis_url), finished(queue, 1))
    seen = node.run("read_jobs.mjs", "disc", job.id)["jobs"][job.id]
    assert (seen["state"], seen["attemptsMade"], seen["failedReason"]) == (
        "failed",
        1,
        "gone for good",
    )
    await queue.close()


async def test_dependency_pages_read_as_nodes(node: Node, redis_url: str) -> None:
    # Enough children (over 128) that the set is no longer a small encoding: SCAN pages it.
    children = [
        FlowJob(f"c{i}", "dc", None, {"job_id": f"c{i}", "ignore_dependency_on_failure": i < 3})
        for i in range(300)
    ]
    async with AsyncFlowProducer(connection=redis_url) as flows:
        await flows.add(FlowJob("p", "dp", None, {"job_id": "P"}, children=children))
    child_queue = AsyncQueue("dc", connection=redis_url)
    for _ in range(160):
        (job,) = await take(child_queue)
        if int(job.id[1:]) < 3:
            await job.move_to_failed(RuntimeError(f"{job.id} failed"))
        else:
            # A value over 64 bytes: the hash leaves its small encoding, which SCAN reads whole.
            await job.move_to_completed({"v": job.id, "pad": "x" * 80})
    await child_queue.close()
    parent_queue = AsyncQueue("dp", connection=redis_url)
    parent = await parent_queue.get_job("P")
    assert parent is not None

    reads: list[dict[str, Any]] = [
        {},
        {"pages": "processed", "count": 50},
        {"pages": "unprocessed", "count": 50},
        {"pages": "ignored", "count": 2},
        {"failed": {"cursor": 0, "count": 10}},
    ]
    theirs = node.run("api_dependencies.mjs", "dp", "P", json.dumps(reads))["reads"]
    whole = await parent.get_dependencies()
    assert {**theirs[0], "unprocessed": sorted(theirs[0]["unprocessed"])} == whole
    assert len(whole["processed"]) == 157 and len(whole["ignored"]) == 3

    async def all_pages(kind: str, count: int) -> tuple[Any, int]:
        cursor, pages = 0, 0
        found: Any = [] if kind == "unprocessed" else {}
        while True:
            page = await parent.get_dependencies(**{kind: {"cursor": cursor, "count": count}})  # type: ignore[arg-type]
            assert set(page) == {kind, f"next_{kind}_cursor"}
            got = page[kind]  # type: ignore[literal-required]
            found = found + got if isinstance(found, list) else {**found, **got}
            cursor, pages = page[f"next_{kind}_cursor"], pages + 1  # type: ignore[literal-required]
            if not cursor:
                return found, pages

    processed, pages = await all_pages("processed", 50)
    assert processed == theirs[1]["all"] == whole["processed"] and pages > 1
    unprocessed, pages = await all_pages("unprocessed", 50)
    assert sorted(unprocessed) == sorted(theirs[2]["all"]) == whole["unprocessed"] and pages > 1
    ignored, _ = await all_pages("ignored", 2)
    assert ignored == theirs[3]["all"] == whole["ignored"]
    first = await parent.get_dependencies(failed={"cursor": 0, "count": 10})
    assert first["failed"] == theirs[4]["failed"] == []
    await parent_queue.close()


async def test_queues_options_give_a_flows_jobs_their_defaults_as_node(
    node: Node, r: redis.Redis, redis_url: str
) -> None:
    def tree(side: str, camel: bool) -> dict[str, Any]:
        key = "queueName" if camel else "queue_name"
        attempts = {"attempts": 2}
        return {
            "name": "p",
            key: f"qo-{side}-p",
            "opts": {"jobId" if camel else "job_id": "P"},
            "children": [
                {"name": "c1", key: f"qo-{side}-c", "opts": {"jobId" if camel else "job_id": "c1"}},
                {
                    "name": "c2",
                    key: f"qo-{side}-c",
                    "opts": {"jobId" if camel else "job_id": "c2", **attempts},
                },
            ],
        }

    node.run(
        "api_flow_opts.mjs",
        json.dumps(tree("node", camel=True)),
        json.dumps(
            {
                "qo-node-c": {
                    "defaultJobOptions": {"attempts": 4, "removeOnComplete": True, "backoff": 1000}
                }
            }
        ),
    )
    async with AsyncFlowProducer(connection=redis_url) as flows:
        await flows.add(
            tree("corral", camel=False),  # type: ignore[arg-type]
            queues_options={
                "qo-corral-c": {
                    "default_job_options": {"attempts": 4, "remove_on_complete": True, "backoff": 1}
                }
            },
        )

    def opts(side: str, key: str) -> dict[str, Any]:
        found = json.loads(r.hget(f"bull:qo-{side}-{key}", "opts") or "{}")
        found.pop("parent", None)
        return dict(found)

    for key in ("p:P", "c:c1", "c:c2"):
        assert opts("corral", key) == opts("node", key), key
    assert opts("corral", "c:c2")["attempts"] == 2  # the job's own option wins
