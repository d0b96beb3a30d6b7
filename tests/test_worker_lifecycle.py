"""The worker's runtime: stalls, lost locks, closing, limits, events, manual fetching."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import redis

from corral import (
    AsyncJob,
    AsyncQueue,
    DelayedError,
    Job,
    LockMismatchError,
    RateLimitError,
    Worker,
    _scripts,
)
from corral.clock import now_ms
from corral.options import Backoff
from tests.conftest import ServerProcess, free_port, server_binary
from tests.test_worker import drive, finished

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
async def queue(redis_url: str) -> Any:
    q = AsyncQueue("q", connection=redis_url)
    yield q
    await q.close()


def start_hanging_worker(url: str) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.fixtures.stall_worker", url, "q"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    assert line.startswith("started:"), line
    return proc, line.split(":", 1)[1]


def kill9(proc: subprocess.Popen[str]) -> None:
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert proc.stdout is not None
    proc.stdout.close()


@pytest.mark.timeout(60)
async def test_killed_worker_job_is_recovered_and_completed(
    queue: AsyncQueue, r: redis.Redis, redis_url: str
) -> None:
    await queue.add("long", {"n": 1})
    proc, job_id = await asyncio.to_thread(start_hanging_worker, redis_url)
    kill9(proc)
    assert r.lrange("bull:q:active", 0, -1) == [job_id]

    stalled: list[str] = []

    async def finish(job: AsyncJob) -> str:
        return "recovered"

    worker = Worker("q", finish, connection=redis_url, lock_duration=0.6, stalled_interval=0.3)
    worker.on("stalled", stalled.append)
    await drive(worker, finished(queue, 1), timeout=30)
    job = await queue.get_job(job_id)
    assert job is not None
    assert (job.returnvalue, job.stalled_counter, job.attempts_made) == ("recovered", 1, 1)
    assert stalled == [job_id]
    kinds = [f["event"] for _, f in r.xrange("bull:q:events") if f.get("jobId") == job_id]
    assert kinds[-4:] == ["waiting", "stalled", "active", "completed"]


@pytest.mark.timeout(60)
async def test_max_stalled_count_zero_fails_the_job(
    queue: AsyncQueue, r: redis.Redis, redis_url: str
) -> None:
    await queue.add("long")
    proc, job_id = await asyncio.to_thread(start_hanging_worker, redis_url)
    kill9(proc)
    ran: list[str] = []

    async def never(job: AsyncJob) -> None:
        ran.append(job.id)

    worker = Worker(
        "q",
        never,
        connection=redis_url,
        lock_duration=0.6,
        stalled_interval=0.3,
        max_stalled_count=0,
    )
    await drive(worker, finished(queue, 1), timeout=30)
    assert ran == []
    h = r.hgetall(f"bull:q:{job_id}")
    assert h["failedReason"] == "job stalled more than allowable limit"
    assert h["stc"] == "1"
    events = [f for _, f in r.xrange("bull:q:events") if f.get("jobId") == job_id]
    assert events[-2]["event"] == "failed" and events[-1]["event"] == "retries-exhausted"


async def test_expired_lock_taken_over_cannot_complete(
    queue: AsyncQueue, r: redis.Redis, redis_url: str
) -> None:
    await queue.add("x")
    first = Worker("q", None, connection=redis_url, lock_duration=0.2)
    second = Worker("q", None, connection=redis_url, lock_duration=30)
    job_a = await first.get_next_job()
    assert job_a is not None and job_a.token
    await asyncio.sleep(0.3)  # the lock expires: nobody renews it
    for _ in range(2):  # the two passes of the stalled check
        r.delete("bull:q:stalled-check")
        await queue._run(_scripts.CHECK_STALLED, [queue._job_prefix, now_ms(), 1000])
    job_b = await second.get_next_job()
    assert job_b is not None and job_b.id == job_a.id and job_b.token != job_a.token

    with pytest.raises(LockMismatchError):
        await job_a.move_to_completed("stale result")
    assert r.hget("bull:q:1", "returnvalue") is None
    await job_b.move_to_completed("fresh result")
    assert r.hget("bull:q:1", "returnvalue") == '"fresh result"'
    assert r.hget("bull:q:1", "stc") == "1"
    await first.close()
    await second.close()


async def test_close_with_grace_puts_cut_short_jobs_back_in_wait(
    queue: AsyncQueue, r: redis.Redis, redis_url: str
) -> None:
    started = asyncio.Event()

    async def slow(job: AsyncJob) -> None:
        started.set()
        await asyncio.sleep(60)

    await queue.add("slow")
    worker = Worker("q", slow, connection=redis_url)
    task = asyncio.create_task(worker.run_async())
    await asyncio.wait_for(started.wait(), 10)
    await worker.close(grace=0.1)
    await task
    assert r.lrange("bull:q:wait", 0, -1) == ["1"]
    assert r.llen("bull:q:active") == 0
    assert r.exists("bull:q:1:lock") == 0
    assert r.hget("bull:q:1", "atm") is None  # not counted as an attempt
    last = r.xrevrange("bull:q:events", count=1)[0][1]
    assert last == {"event": "waiting", "jobId": "1", "prev": "active"}


async def test_concurrency_can_change_while_running(queue: AsyncQueue, redis_url: str) -> None:
    running = 0
    peak: list[int] = []
    worker: Worker

    async def process(job: AsyncJob) -> None:
        nonlocal running
        running += 1
        peak.append(running)
        if job.name == "switch":
            worker.concurrency = 4
        await asyncio.sleep(0.05)
        running -= 1

    await queue.add("switch")
    for _ in range(16):
        await queue.add("work")
    worker = Worker("q", process, connection=redis_url, concurrency=1)
    await drive(worker, finished(queue, 17))
    assert peak[0] == 1
    assert max(peak) == 4


async def test_plain_processor_gets_a_blocking_job(
    queue: AsyncQueue, r: redis.Redis, redis_url: str
) -> None:
    kinds: list[str] = []
    progress: list[Any] = []

    def process(job: Job) -> str:
        kinds.append(type(job).__name__)
        job.update_progress(50)
        job.log("half way")
        return threading.current_thread().name

    await queue.add("x")
    worker = Worker("q", process, connection=redis_url)
    worker.on("progress", lambda job, value: progress.append((type(job).__name__, value)))
    await drive(worker, finished(queue, 1))
    assert kinds == ["Job"]
    assert progress == [("Job", 50)]
    assert r.hget("bull:q:1", "progress") == "50"
    assert r.lrange("bull:q:1:logs", 0, -1) == ["half way"]


async def test_async_processor_gets_an_async_job(
    queue: AsyncQueue, r: redis.Redis, redis_url: str
) -> None:
    async def process(job: AsyncJob) -> None:
        assert isinstance(job, AsyncJob)
        await job.update_progress({"step": 2})

    await queue.add("x")
    await drive(Worker("q", process, connection=redis_url), finished(queue, 1))
    assert r.hget("bull:q:1", "progress") == '{"step":2}'


async def test_events_reach_callbacks(queue: AsyncQueue, redis_url: str) -> None:
    seen: list[tuple[Any, ...]] = []

    async def process(job: AsyncJob) -> str:
        if job.name == "bad":
            raise ValueError("nope")
        await job.update_progress(42)
        return "ok"

    worker = Worker("q", process, connection=redis_url)
    worker.on("active", lambda job: seen.append(("active", job.id)))
    worker.on("completed", lambda job, result: seen.append(("completed", job.id, result)))

    @worker.on("failed")
    async def failed(job: AsyncJob, error: BaseException) -> None:
        seen.append(("failed", job.id, str(error)))

    worker.on("drained", lambda: seen.append(("drained",)))
    worker.on("progress", lambda job, progress: seen.append(("progress", job.id, progress)))
    await queue.add("good")
    await queue.add("bad")
    await drive(worker, finished(queue, 2))
    await asyncio.sleep(0.1)
    assert seen[:5] == [
        ("active", "1"),
        ("progress", "1", 42),
        ("completed", "1", "ok"),
        ("active", "2"),
        ("failed", "2", "nope"),
    ]
    with pytest.raises(ValueError, match="unknown worker event 'finished'"):
        worker.on("finished", print)


async def test_manual_fetching(queue: AsyncQueue, r: redis.Redis, redis_url: str) -> None:
    await queue.add("a", attempts=2)
    await queue.add("b")
    worker = Worker("q", None, connection=redis_url, name="manual")
    job = await worker.get_next_job()
    assert job is not None and job.name == "a" and job.processed_by == "manual"
    await job.extend_lock(60)
    assert r.pttl("bull:q:1:lock") > 30_000
    await job.move_to_failed(RuntimeError("first try"))
    assert r.lrange("bull:q:wait", 0, -1) == ["1", "2"]  # retried at once: no backoff
    nxt = await worker.get_next_job()
    assert nxt is not None and nxt.name == "b"
    await nxt.move_to_completed({"done": True})
    assert r.hget("bull:q:2", "returnvalue") == '{"done":true}'
    assert await worker.get_next_job() is not None  # job 1 again
    assert await worker.get_next_job() is None
    with pytest.raises(Exception, match="has no processor"):
        await worker.run_async()
    await worker.close()


async def test_exponential_backoff_matches_bullmq(queue: AsyncQueue, r: redis.Redis) -> None:
    """Node BullMQ 6.7.0 delays attempt n+1 by delay * 2 ** (n - 1) after n failed attempts
    (seen: 1000, 2000, 4000 ms for a 1 s base). With a 3 s base, the retry after the 7th
    failed attempt waits 2 ** 6 * 3 s = 192 s."""
    worker = Worker("q", None, connection=(await queue.client()))
    await queue.add("x", attempts=10, backoff=Backoff.exponential(3))
    delays = []
    try:
        for _ in range(7):
            job = await worker.get_next_job()
            assert job is not None
            before = now_ms()
            await job.move_to_failed(RuntimeError("again"))
            delays.append(int(r.hget("bull:q:1", "delay")))
            score = r.zscore("bull:q:delayed", "1")
            assert score is not None
            assert before + delays[-1] <= score // 4096 <= now_ms() + delays[-1]
            await job.promote()
    finally:
        await worker.close()  # or its connection outlives the test's event loop
    assert delays == [3000, 6000, 12000, 24000, 48000, 96000, 192000]


async def test_jittered_backoff_stays_in_range(queue: AsyncQueue, r: redis.Redis) -> None:
    worker = Worker("q", None, connection=(await queue.client()))
    await queue.add("x", attempts=100, backoff=Backoff.fixed(10, jitter=0.3))
    try:
        for _ in range(20):
            job = await worker.get_next_job()
            assert job is not None
            await job.move_to_failed(RuntimeError("again"))
            assert 7000 <= int(r.hget("bull:q:1", "delay")) <= 10000
            await job.promote()
    finally:
        await worker.close()


async def test_retry_filters_and_custom_strategy(
    queue: AsyncQueue, r: redis.Redis, redis_url: str
) -> None:
    q = AsyncQueue("q", connection=redis_url, backoff_types=["linear"])
    await q.add("timeout", {"kind": "timeout"}, attempts=3, backoff={"type": "linear", "delay": 1})
    await q.add("value", {"kind": "value"}, attempts=3)
    await q.add("key", {"kind": "key"}, attempts=3)

    async def process(job: AsyncJob) -> None:
        raise {"timeout": TimeoutError, "value": ValueError, "key": KeyError}[job.data["kind"]]("x")

    worker = Worker(
        "q",
        process,
        connection=redis_url,
        retry_on=(TimeoutError, KeyError),
        no_retry_on=KeyError,
        backoff_strategies={"linear": lambda made, delay, err, job: 60_000 + made * delay},
    )
    await drive(worker, finished(q, 2))
    assert r.zrange("bull:q:failed", 0, -1) == ["2", "3"]  # not in retry_on; no_retry_on
    assert r.hget("bull:q:1", "delay") == "61000"  # custom strategy: 60 s + 1 * 1000 ms
    assert r.zscore("bull:q:delayed", "1") is not None
    await q.close()


async def test_limiter_spreads_jobs_over_windows(
    queue: AsyncQueue, r: redis.Redis, redis_url: str
) -> None:
    started: list[int] = []

    async def process(job: AsyncJob) -> None:
        started.append(now_ms())

    for _ in range(6):
        await queue.add("x")
    worker = Worker(
        "q", process, connection=redis_url, concurrency=6, limiter={"max": 2, "duration": 0.4}
    )
    await drive(worker, finished(queue, 6))
    started.sort()
    # Never more than 2 jobs start within one 400 ms window.
    for i in range(len(started) - 2):
        assert started[i + 2] - started[i] >= 300, started


async def test_global_concurrency_holds_across_workers(queue: AsyncQueue, redis_url: str) -> None:
    running = 0
    peak = 0

    async def process(job: AsyncJob) -> None:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.03)
        running -= 1

    client = await queue.client()
    await client.hset("bull:q:meta", "concurrency", 1)
    for _ in range(8):
        await queue.add("x")
    a = Worker("q", process, connection=redis_url, concurrency=4)
    b = Worker("q", process, connection=redis_url, concurrency=4)
    other = asyncio.create_task(b.run_async())
    await drive(a, finished(queue, 8))
    await b.close()
    await other
    assert peak == 1


async def test_rate_limit_error_puts_the_job_back(
    queue: AsyncQueue, r: redis.Redis, redis_url: str
) -> None:
    calls: list[int] = []

    async def process(job: AsyncJob) -> str:
        calls.append(job.attempts_made)
        if len(calls) == 1:
            client = await job.queue.client()
            await client.set("bull:q:limiter", 9007199254740991, px=300)  # Queue.rate_limit
            raise RateLimitError()
        return "later"

    await queue.add("x", attempts=1)
    await drive(Worker("q", process, connection=redis_url), finished(queue, 1))
    assert calls == [0, 0]  # the rate-limited run did not count as an attempt
    h = r.hgetall("bull:q:1")
    assert (h["returnvalue"], h["atm"], h["ats"]) == ('"later"', "1", "2")


async def test_step_job_with_delayed_error(queue: AsyncQueue, redis_url: str) -> None:
    steps: list[str] = []

    async def process(job: AsyncJob) -> str:
        step = (job.data or {}).get("step", "one")
        steps.append(step)
        if step == "one":
            await job.update_data({"step": "two"})
            await job.move_to_delayed(now_ms() + 100)
            raise DelayedError()
        return "both steps"

    await queue.add("steps")
    await drive(Worker("q", process, connection=redis_url), finished(queue, 1))
    assert steps == ["one", "two"]
    job = await queue.get_job("1")
    assert job is not None and (job.returnvalue, job.attempts_made) == ("both steps", 1)


@pytest.mark.timeout(90)
async def test_worker_survives_a_server_restart(caplog: pytest.LogCaptureFixture) -> None:
    """Server down for 10 s while the worker waits: it retries with bounded backoff, logs the
    outage once, and processes new jobs once the server is back on the same port."""
    import tempfile

    srv = ServerProcess(
        server_binary(), free_port(), Path(tempfile.mkdtemp(prefix="corral-restart-"))
    )
    srv.start()
    done: list[str] = []

    async def process(job: AsyncJob) -> None:
        done.append(job.name)

    worker = Worker("r", process, connection=srv.url, drain_delay=1)
    task = asyncio.create_task(worker.run_async())
    try:
        async with AsyncQueue("r", connection=srv.url) as q:
            await q.add("before")
            while done != ["before"]:
                await asyncio.sleep(0.05)
        caplog.set_level(logging.WARNING, logger="corral.worker")
        await asyncio.to_thread(srv.stop)
        await asyncio.sleep(10)
        await asyncio.to_thread(srv.start)
        back = time.monotonic()
        async with AsyncQueue("r", connection=srv.url) as q:
            await q.add("after")
            while done != ["before", "after"]:
                assert time.monotonic() - back < 10, "worker did not resume"
                assert not task.done()
                await asyncio.sleep(0.05)
    finally:
        await worker.close()
        await task
        srv.stop()
    lines = [rec.getMessage() for rec in caplog.records if rec.name == "corral.worker"]
    # One outage, one line when it starts and one when it ends: not one per retry. The line
    # names the part that saw it first: usually the fetch, but on a loaded machine the cancel
    # listener's reconnect can come first (a flake-hunt run saw it). A part that only notices
    # the cut once the server is back (the cancel listener's connection, typically) says so
    # once too, and is back at its first retry.
    starts = [m for m in lines if "retrying until the server is back" in m]
    parts = [m.split(": ")[1] for m in starts]  # "worker r: fetch: ConnectionError..."
    assert parts and len(parts) == len(set(parts)), lines
    assert set(parts) <= {"fetch", "cancel"}, lines
    assert len([m for m in lines if "server back after" in m]) == len(starts), lines
    assert not [rec for rec in caplog.records if rec.exc_info], (
        "a transient error logged a traceback"
    )


async def test_running_workers_are_listed(queue: AsyncQueue, redis_url: str) -> None:
    named = Worker("q", lambda job: None, connection=redis_url, name="billing-1")
    anonymous = Worker("q", lambda job: None, connection=redis_url)
    tasks = [asyncio.create_task(w.run_async()) for w in (named, anonymous)]

    async def listed(expected: list[str], *, running: bool) -> list[str]:
        """The names listed, once they are ``expected`` (or the last seen at the deadline).
        Each worker connects its named connection when it starts, and the
        server drops a closed connection from CLIENT LIST only once it has read its end."""
        deadline = asyncio.get_running_loop().time() + 20
        while True:
            seen = sorted(w.get("worker_name", "") for w in await queue.get_workers())
            if seen == expected or asyncio.get_running_loop().time() > deadline:
                return seen
            assert not (running and any(t.done() for t in tasks)), "a worker stopped on its own"
            await asyncio.sleep(0.02)

    try:
        assert await listed(["", "billing-1"], running=True) == ["", "billing-1"]
    finally:
        for w in (named, anonymous):
            await w.close()
        await asyncio.gather(*tasks)
    assert await listed([], running=False) == []


async def test_a_worker_busy_from_its_start_is_listed(queue: AsyncQueue, redis_url: str) -> None:
    """A worker started on a full queue never waits for work: it is listed all the same."""
    await queue.add_bulk([("slow", {}) for _ in range(3)])
    release = asyncio.Event()

    async def slow(job: AsyncJob) -> None:
        await release.wait()

    worker = Worker("q", slow, connection=redis_url, name="busy-1", concurrency=3)
    task = asyncio.create_task(worker.run_async())
    try:
        deadline = asyncio.get_running_loop().time() + 20
        seen: list[str] = []
        # Listed once all three run (its slots full: it fetches no more, so never waits).
        while asyncio.get_running_loop().time() < deadline:
            active = (await queue.get_job_counts("active"))["active"]
            seen = [w.get("worker_name", "") for w in await queue.get_workers()]
            if active == 3 and seen:
                break
            await asyncio.sleep(0.02)
        assert seen == ["busy-1"]
    finally:
        release.set()
        await worker.close()
        await task


async def test_cancelling_a_workers_task_after_a_job_ends_it(
    queue: AsyncQueue, redis_url: str, r: redis.Redis
) -> None:
    """redis-py can swallow a cancel passed on to the marker's blocking read: the read then
    returned at its timeout as if nothing happened and the fetch blocked again, so the
    cancelled task never ended (seen within six tries when cancelled just after a job)."""
    for _ in range(12):
        r.delete("bull:q:completed")
        job = await queue.add("quick")
        worker = Worker("q", lambda job: None, connection=redis_url)
        task = asyncio.create_task(worker.run_async())
        try:
            deadline = asyncio.get_running_loop().time() + 20
            while r.zscore("bull:q:completed", job.id) is None:  # done: the worker fetches again
                assert asyncio.get_running_loop().time() < deadline, "the job never ran"
                await asyncio.sleep(0.001)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await asyncio.wait_for(task, 15)  # a hang is the failure: 15 s is no timing
        finally:
            await worker.close()


async def test_idle_worker_does_not_spin_on_a_delayed_job(
    queue: AsyncQueue, r: redis.Redis, redis_url: str
) -> None:
    """A job due later re-arms the marker at every fetch; an idle worker must block until it
    is due rather than pop and fetch again at once."""

    async def process(job: AsyncJob) -> None:
        pass

    await queue.add("later", delay=3600)
    worker = Worker("q", process, connection=redis_url)
    task = asyncio.create_task(worker.run_async())
    await asyncio.sleep(0.3)  # started and settled into its wait
    r.config_resetstat()
    await asyncio.sleep(1.0)
    stats = r.info("commandstats")
    fetches = stats.get("cmdstat_evalsha", {}).get("calls", 0)
    blocks = stats.get("cmdstat_bzpopmin", {}).get("calls", 0)
    await worker.close()
    await task
    # A spinning worker makes thousands of each per second; a waiting one, none or a few.
    assert fetches <= 3 and blocks <= 3, (fetches, blocks)
