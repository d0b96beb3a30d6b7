"""corral's side of the rest of BullMQ 6.7.0's API, without Node (tests/interop/test_bullmq_api.py
holds each call against Node's behaviour): the scripts' ``drained`` and marker rules, the count
getters' bad input, ``meta.version``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
import redis

from corral import AsyncFlowProducer, AsyncJob, AsyncQueue, FlowJob, Worker, _scripts
from corral.clock import now_ms
from corral.errors import InvalidOptionError


@pytest.fixture
async def queue(redis_url: str) -> AsyncIterator[AsyncQueue]:
    q = AsyncQueue("q", connection=redis_url)
    yield q
    await q.close()


def names(r: redis.Redis) -> list[str]:
    return [fields["event"] for _, fields in r.xrange("bull:q:events", "-", "+")]


async def take(queue: AsyncQueue, count: int) -> list[AsyncJob]:
    """Move ``count`` jobs to active as a worker's fetch does, bound with their tokens."""
    reply = await queue._run(
        _scripts.MOVE_TO_ACTIVE, [queue._job_prefix, now_ms(), count, "tok", 0, 30_000, ""]
    )
    return [
        queue._bind(f.job_id, f.fields, token=f.token) for f in _scripts.parse_fetched(reply, 2)
    ]


async def test_drained_waits_for_the_last_active_job(queue: AsyncQueue, r: redis.Redis) -> None:
    await queue.add("a", {})
    await queue.add("b", {})
    first, second = await take(queue, 2)
    await first.move_to_completed(1)
    assert "drained" not in names(r)  # b still runs (BullMQ writes none then either)
    await second.move_to_failed(ValueError("no"))
    assert names(r)[-3:] == ["failed", "retries-exhausted", "drained"]


async def test_drained_is_not_written_while_a_delayed_job_waits(
    queue: AsyncQueue, r: redis.Redis
) -> None:
    await queue.add("later", {}, delay=3600)
    await queue.add("a", {})
    (job,) = await take(queue, 1)
    await job.move_to_completed(1, fetch=_scripts.FetchNext(1, "tok", 5, 30_000))
    assert "drained" not in names(r)


async def test_drained_after_a_batched_finish(queue: AsyncQueue, r: redis.Redis) -> None:
    await queue.add("a", {})
    await queue.add("b", {})
    first, second = await take(queue, 2)
    args = [queue._job_prefix, now_ms(), *_scripts.FetchNext(1, "tok", 5, 30_000).args()[:9], 2]
    args += first.completion(1) + second.completion(2)
    args.append("")
    await queue._run(_scripts.FINISH_JOBS, args)
    assert names(r)[-3:] == ["completed", "completed", "drained"]


async def test_a_batched_finish_of_nothing_writes_no_drained(
    queue: AsyncQueue, r: redis.Redis
) -> None:
    await queue.add("a", {})
    (job,) = await take(queue, 1)
    await job.move_to_completed(1)
    before = names(r)
    args = [queue._job_prefix, now_ms(), *_scripts.FetchNext(0, "", 0, 0).args()[:9], 1]
    args += job.completion(1)  # already completed: refused (-3), nothing finished
    args.append("")
    await queue._run(_scripts.FINISH_JOBS, args)
    assert names(r) == before


async def test_pause_deletes_the_marker_and_resume_writes_it(
    queue: AsyncQueue, r: redis.Redis
) -> None:
    await queue.add("a", {})
    await queue.add("later", {}, delay=3600)
    await queue.pause()
    assert r.exists("bull:q:marker") == 0
    await queue.resume()
    assert r.zrange("bull:q:marker", 0, -1) == ["0", "1"]


async def test_resume_wakes_workers_for_a_parked_job(queue: AsyncQueue, r: redis.Redis) -> None:
    # The parked job's due time was in the marker the pause deleted: "0" sends a worker to
    # fetch, and the fetch arms the marker at that time again.
    r.zadd("bull:q:x-parked", {"p1": now_ms() + 60_000})
    await queue.pause()
    await queue.resume()
    assert r.zrange("bull:q:marker", 0, -1) == ["0"]


async def test_meta_version_once_per_queue_object(queue: AsyncQueue, r: redis.Redis) -> None:
    await queue.add("a", {})
    assert r.hget("bull:q:meta", "version") == "bullmq:6.7.0"
    r.hset("bull:q:meta", "version", "bullmq:6.7.0-by-node")
    await queue.add("b", {})  # written once, as a Node Queue writes it once when it starts
    assert r.hget("bull:q:meta", "version") == "bullmq:6.7.0-by-node"


async def test_meta_version_by_schedulers_and_flows(redis_url: str, r: redis.Redis) -> None:
    queue = AsyncQueue("s", connection=redis_url)
    await queue.upsert_job_scheduler("tick", every=3600)
    assert r.hget("bull:s:meta", "version") == "bullmq:6.7.0"
    await queue.close()
    async with AsyncFlowProducer(connection=redis_url) as flows:
        await flows.add(FlowJob("p", "fp", None, children=[FlowJob("c", "fc", None)]))
    assert r.hget("bull:fp:meta", "version") == r.hget("bull:fc:meta", "version") == "bullmq:6.7.0"


async def test_count_getters_refuse_bad_names(queue: AsyncQueue) -> None:
    with pytest.raises(InvalidOptionError, match="unknown job state 'bogus'"):
        await queue.get_job_count_by_types("bogus")
    with pytest.raises(InvalidOptionError, match="a state name must be a str"):
        await queue.get_job_count_by_types(["wait"])  # type: ignore[arg-type]
    assert await queue.get_job_count_by_types() == 0
    assert await queue.get_workers_count() == 0


# -- one worker's pause and resume, its life events, its rate limit -----------------------------


async def wait_for(check: Callable[[], Awaitable[bool]], timeout: float = 15) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not await check():
        assert loop.time() < deadline, "timed out"
        await asyncio.sleep(0.01)


def recorder(worker: Worker, seen: list[str]) -> None:
    for event in ("ready", "closing", "closed", "paused", "resumed"):
        worker.on(event, lambda *args, e=event: seen.append(e))


async def test_pause_lets_running_jobs_finish_and_takes_no_more(
    queue: AsyncQueue, r: redis.Redis, redis_url: str
) -> None:
    gate = asyncio.Event()
    ran: list[str] = []

    async def process(job: AsyncJob) -> str:
        ran.append(job.name)
        if job.name == "slow":
            await gate.wait()
        return job.name

    worker = Worker("q", process, connection=redis_url, concurrency=2)
    seen: list[str] = []
    recorder(worker, seen)
    assert not worker.is_running() and not worker.is_paused()
    await queue.add("slow", {})
    task = asyncio.create_task(worker.run_async())

    async def slow_runs() -> bool:
        return ran == ["slow"]

    await wait_for(slow_runs)
    assert worker.is_running()
    pausing = asyncio.create_task(worker.pause())
    await wait_for(lambda: _true(worker.is_paused()))
    await queue.add("next", {})
    assert worker.is_running() and not pausing.done()  # "slow" still runs
    gate.set()
    await pausing
    assert seen == ["ready", "paused"]
    assert not worker.is_running() and worker.is_paused()
    assert r.hget("bull:q:1", "returnvalue") == '"slow"'
    assert await queue.get_job_counts("waiting") == {"waiting": 1}  # not taken while paused
    assert not await queue.is_paused()  # the queue itself is not paused
    await worker.pause()  # paused already: nothing more
    await worker.resume()
    assert worker.is_running() and not worker.is_paused()
    await wait_for(lambda: _count(queue, "completed", 2))
    await worker.resume()  # not paused: nothing
    await worker.close()
    await task
    assert seen == ["ready", "paused", "resumed", "closing", "closed"]
    assert ran == ["slow", "next"]


async def _true(value: bool) -> bool:
    return value


async def _count(queue: AsyncQueue, state: str, n: int) -> bool:
    return (await queue.get_job_counts(state))[state] >= n


async def test_pause_without_waiting_and_a_worker_that_starts_paused(
    queue: AsyncQueue, redis_url: str
) -> None:
    gate = asyncio.Event()

    async def process(job: AsyncJob) -> None:
        await gate.wait()

    worker = Worker("q", process, connection=redis_url)
    seen: list[str] = []
    recorder(worker, seen)
    await worker.pause()  # before the run: it starts paused
    assert worker.is_paused() and seen == ["paused"]
    await queue.add("a", {})
    task = asyncio.create_task(worker.run_async())
    await wait_for(lambda: _true("ready" in seen))
    assert await queue.get_job_counts("waiting", "active") == {"waiting": 1, "active": 0}
    await worker.resume()
    await wait_for(lambda: _count(queue, "active", 1))
    await worker.pause(do_not_wait_active=True)  # returns while "a" runs
    assert await queue.get_job_counts("active") == {"active": 1}
    assert worker.is_running()  # paused, but "a" still runs
    gate.set()
    await wait_for(lambda: _count(queue, "completed", 1))
    await worker.close()
    await task
    assert seen == ["paused", "ready", "resumed", "paused", "closing", "closed"]


async def test_close_of_a_worker_that_never_ran(redis_url: str) -> None:
    worker = Worker("q", lambda job: None, connection=redis_url)
    seen: list[str] = []
    recorder(worker, seen)
    await worker.close()
    assert seen == ["closing", "closed"]


async def test_worker_rate_limit_is_the_queues(r: redis.Redis, redis_url: str) -> None:
    worker = Worker("q", None, connection=redis_url)
    await worker.rate_limit(5)
    assert r.get("bull:q:limiter") == "9007199254740991"
    assert 0 < r.pttl("bull:q:limiter") <= 5000
    with pytest.raises(InvalidOptionError, match="duration"):
        await worker.rate_limit(0)
    await worker.close()


async def test_skip_lock_renewal_lets_a_long_jobs_lock_expire(
    queue: AsyncQueue, r: redis.Redis, redis_url: str
) -> None:
    gate = asyncio.Event()
    lost: list[str] = []

    async def process(job: AsyncJob) -> None:
        await gate.wait()

    worker = Worker("q", process, connection=redis_url, lock_duration=0.2, skip_lock_renewal=True)
    worker.on("lock_lost", lost.append)
    job = await queue.add("long", {})
    task = asyncio.create_task(worker.run_async())
    await wait_for(lambda: _count(queue, "active", 1))
    await wait_for(lambda: _true(not r.exists(f"bull:q:{job.id}:lock")))  # never renewed
    gate.set()
    await wait_for(lambda: _true(bool(lost)))
    await worker.close()
    await task
    assert await queue.get_job_counts("completed") == {"completed": 0}


async def test_skip_stalled_check_runs_none(
    queue: AsyncQueue, r: redis.Redis, redis_url: str
) -> None:
    worker = Worker("q", lambda job: None, connection=redis_url, skip_stalled_check=True)
    await queue.add("a", {})
    task = asyncio.create_task(worker.run_async())
    await wait_for(lambda: _count(queue, "completed", 1))
    await worker.close()
    await task
    assert r.exists("bull:q:stalled-check") == 0  # the check's throttle key: never written


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("remove_on_complete", "all", "remove_on_complete must be True, a count"),
        ("remove_on_fail", {"days": 1}, "remove_on_fail must be True, a count"),
        ("skip_stalled_check", "yes", "skip_stalled_check must be True or False"),
        ("skip_lock_renewal", 1, "skip_lock_renewal must be True or False"),
    ],
)
def test_worker_options_refuse_bad_values(option: str, value: object, message: str) -> None:
    with pytest.raises(InvalidOptionError, match=message):
        Worker("q", lambda job: None, connection="redis://localhost:1", **{option: value})  # type: ignore[arg-type]


# -- jobs and flows ----------------------------------------------------------------------------


async def test_discard_makes_the_next_failure_final(queue: AsyncQueue, r: redis.Redis) -> None:
    await queue.add("a", {}, attempts=5)
    await queue.add("b", {}, attempts=5)
    first, second = await take(queue, 2)
    first.discard()
    await first.move_to_failed(RuntimeError("no"))
    await second.move_to_failed(RuntimeError("no"))  # not discarded: retried
    assert r.zrange("bull:q:failed", 0, -1) == [first.id]
    assert r.lrange("bull:q:wait", 0, -1) == [second.id]


async def test_failed_children_by_pages(redis_url: str, r: redis.Redis) -> None:
    parent_queue = AsyncQueue("dp", connection=redis_url)
    r.hset("bull:dp:P", mapping={"name": "p", "data": "{}", "opts": "{}", "timestamp": "1"})
    r.zadd("bull:dp:P:unsuccessful", {f"bull:dc:f{i}": i for i in range(5)})
    parent = await parent_queue.get_job("P")
    assert parent is not None
    pages = []
    cursor = 0
    while True:
        page = await parent.get_dependencies(failed={"cursor": cursor, "count": 2})
        pages.append(page["failed"])
        cursor = page["next_failed_cursor"]
        if not cursor:
            break
    # Every page, to the end (Node 6.7.0 answers pages after the first empty, and no 0).
    assert pages == [["bull:dc:f0", "bull:dc:f1"], ["bull:dc:f2", "bull:dc:f3"], ["bull:dc:f4"]]
    assert await parent.get_dependencies(failed={}) == {
        "failed": [f"bull:dc:f{i}" for i in range(5)],
        "next_failed_cursor": 0,
    }
    for bad, message in [
        ({"cursor": -1}, r"failed\['cursor'\] must be an integer"),
        ({"count": 0}, r"failed\['count'\] must be an integer from 1"),
        ({"page": 1}, "failed must be a page"),
        ([0, 2], "failed must be a page"),
    ]:
        with pytest.raises(InvalidOptionError, match=message):
            await parent.get_dependencies(failed=bad)  # type: ignore[arg-type]
    await parent_queue.close()


@pytest.mark.parametrize(
    ("queues_options", "message"),
    [
        ([], "queues_options must be a dict"),
        ({"a:b": {}}, "queue name"),
        ({"q": {"connection": "x"}}, "takes only 'default_job_options'"),
        ({"q": {"default_job_options": 3}}, "must be a dict of job options"),
        ({"q": {"default_job_options": {"atempts": 3}}}, r"queues_options\['q'\]: .*atempts"),
    ],
)
async def test_queues_options_refuse_bad_values(
    redis_url: str, r: redis.Redis, queues_options: object, message: str
) -> None:
    async with AsyncFlowProducer(connection=redis_url) as flows:
        with pytest.raises(InvalidOptionError, match=message):
            await flows.add(FlowJob("p", "q", None), queues_options=queues_options)  # type: ignore[arg-type]
    assert r.keys("*") == []


async def test_a_worker_of_lanes_pauses_every_lane(redis_url: str) -> None:
    worker = Worker({"a": 1, "b": 1}, lambda job: None, connection=redis_url)
    seen: list[str] = []
    worker.on("paused", lambda: seen.append("paused"))
    await worker.pause()
    assert worker.is_paused() and seen == ["paused", "paused"]  # once per lane, as drained
    assert all(inner._slots.paused for inner in worker.workers)  # type: ignore[attr-defined]
    await worker.resume()
    assert not worker.is_paused()
    await worker.close()
