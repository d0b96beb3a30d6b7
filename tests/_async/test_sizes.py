"""Size limits of what a job stores after it was added: progress (copied into the events
stream), log lines, and data under the job's ``size_limit``. A refused call writes nothing."""

from __future__ import annotations

import sys

import pytest
import redis

from corral import (
    AsyncJob,
    AsyncQueue,
    InvalidOptionError,
    JobNotFoundError,
    JobStateError,
    _scripts,
)
from corral._async import job_removal
from corral._async.job_data import DEFAULT_MAX_LOG_LINE_BYTES, DEFAULT_MAX_PROGRESS_BYTES
from tests._async.support import snapshot

KIB = 1024


async def a_job(queue: AsyncQueue, **opts: object) -> AsyncJob:
    return await queue.add("a", {"v": 1}, **opts)  # type: ignore[arg-type]


# -- progress --------------------------------------------------------------------------------


async def test_progress_is_bounded_by_default(queue: AsyncQueue, r: redis.Redis) -> None:
    assert DEFAULT_MAX_PROGRESS_BYTES == 64 * KIB
    job = await a_job(queue)
    fits = "x" * (64 * KIB - 2)  # JSON adds the two quotes
    await job.update_progress(fits)  # type: ignore[arg-type]
    before = snapshot(r)
    with pytest.raises(InvalidOptionError, match=r"65537 bytes of JSON, over max_progress_bytes"):
        await job.update_progress(fits + "x")  # type: ignore[arg-type]
    assert snapshot(r) == before


async def test_a_queue_sets_its_own_progress_limit(queue: AsyncQueue, r: redis.Redis) -> None:
    job = await a_job(queue)
    queue.max_progress_bytes = 2 * 1024 * KIB
    await job.update_progress({"blob": "x" * (1024 * KIB)})
    queue.max_progress_bytes = 10
    before = snapshot(r)
    with pytest.raises(InvalidOptionError, match="max_progress_bytes=10"):
        await job.update_progress({"step": 12345})
    assert snapshot(r) == before
    await job.update_progress(99)
    assert r.hget("bull:q:1", "progress") == "99"


@pytest.mark.parametrize("bad", [0, -1, True, 2**40, 1.5, "64k"])
async def test_the_limits_take_a_count_of_bytes(queue: AsyncQueue, bad: object) -> None:
    for name in ("max_progress_bytes", "max_log_line_bytes"):
        with pytest.raises(InvalidOptionError, match=name):
            setattr(queue, name, bad)
        assert getattr(queue, name) == 64 * KIB


async def test_the_script_refuses_progress_over_the_limit_too(
    queue: AsyncQueue, r: redis.Redis
) -> None:
    await a_job(queue)
    before = snapshot(r)
    reply = await queue._run(_scripts.load("update_progress"), [queue._job_prefix, "1", "12345", 4])
    assert reply == [-10, 4]
    assert snapshot(r) == before


async def test_one_hundred_big_updates_stay_bounded_in_the_stream(
    queue: AsyncQueue, r: redis.Redis
) -> None:
    job = await a_job(queue)
    for _ in range(100):
        with pytest.raises(InvalidOptionError):
            await job.update_progress({"blob": "x" * (1024 * KIB)})
    assert r.xlen("bull:q:events") == 2  # added, waiting: no 100 MB of progress events


# -- logs ------------------------------------------------------------------------------------


async def test_a_log_line_is_bounded(queue: AsyncQueue, r: redis.Redis) -> None:
    assert DEFAULT_MAX_LOG_LINE_BYTES == 64 * KIB
    job = await a_job(queue)
    assert await job.log("é" * (32 * KIB)) == 1  # 64 KiB of UTF-8
    before = snapshot(r)
    with pytest.raises(InvalidOptionError, match="65537 bytes, over the queue's max_log_line"):
        await job.log("é" * (32 * KIB) + "x")
    assert snapshot(r) == before
    queue.max_log_line_bytes = 3
    with pytest.raises(InvalidOptionError, match="max_log_line_bytes=3"):
        await job.log("four")
    assert await job.log("é") == 2
    with pytest.raises(InvalidOptionError, match="UTF-8"):
        await job.log("\ud800")
    assert snapshot(r)["bull:q:1:logs"] == before["bull:q:1:logs"] + ["é"]


async def test_the_script_refuses_a_line_over_the_limit_too(
    queue: AsyncQueue, r: redis.Redis
) -> None:
    await a_job(queue)
    before = snapshot(r)
    reply = await queue._run(_scripts.load("add_log"), [queue._job_prefix, "1", "12345", "", 4])
    assert reply == [-10, 4]
    assert snapshot(r) == before


async def test_a_huge_keep_logs_keeps_every_line(queue: AsyncQueue, r: redis.Redis) -> None:
    # What Node (or old data) may have stored: options refuse it at add, jobs may carry it.
    job = await a_job(queue)
    job.opts["kl"] = sys.maxsize
    assert await job.log("one") == 1
    assert await job.log("two") == 2
    # The script itself takes any count: it trims only a list longer than keepLogs.
    script = _scripts.load("add_log")
    reply = await queue._run(script, [queue._job_prefix, "1", "three", str(sys.maxsize)])
    assert reply == 3
    assert r.lrange("bull:q:1:logs", 0, -1) == ["one", "two", "three"]
    assert await queue._run(script, [queue._job_prefix, "1", "four", 2]) == 2
    assert r.lrange("bull:q:1:logs", 0, -1) == ["three", "four"]


@pytest.mark.parametrize("bad", [-1, True, "5", 2.5])
async def test_a_keep_logs_that_is_not_a_count_writes_nothing(
    queue: AsyncQueue, r: redis.Redis, bad: object
) -> None:
    job = await a_job(queue)
    job.opts["kl"] = bad
    before = snapshot(r)
    with pytest.raises(InvalidOptionError, match="keep_logs"):
        await job.log("line")
    assert snapshot(r) == before


@pytest.mark.parametrize("bad", ["abc", "-1", "1.5"])
async def test_the_script_checks_keep_logs_before_it_writes(
    queue: AsyncQueue, r: redis.Redis, bad: str
) -> None:
    await a_job(queue)
    before = snapshot(r)
    reply = await queue._run(_scripts.load("add_log"), [queue._job_prefix, "1", "line", bad])
    assert reply == -4
    assert snapshot(r) == before
    with pytest.raises(JobStateError):
        job = await queue.get_job("1")
        assert job is not None
        await job._change(_scripts.load("add_log"), "line", bad)


# -- update_data -------------------------------------------------------------------------------


async def test_update_data_keeps_to_the_size_limit(queue: AsyncQueue, r: redis.Redis) -> None:
    job = await a_job(queue, size_limit=20)
    await job.update_data({"v": "x" * 10})
    before = snapshot(r)
    with pytest.raises(InvalidOptionError, match="over size_limit=20"):
        await job.update_data({"v": "x" * 20})
    assert snapshot(r) == before
    assert job.data == {"v": "x" * 10}


async def test_the_stored_size_limit_applies_to_a_job_read_without_it(
    queue: AsyncQueue, r: redis.Redis
) -> None:
    await a_job(queue, size_limit=20)
    # A job object whose opts do not say it (built by hand, or read before an update).
    job = queue._bind("1", {"name": "a", "data": "{}"})
    before = snapshot(r)
    with pytest.raises(InvalidOptionError, match="size_limit=20 stored with job 1"):
        await job.update_data({"v": "x" * 20})
    assert snapshot(r) == before
    await job.update_data({"v": 1})
    assert r.hget("bull:q:1", "data") == '{"v":1}'


# -- a job object named after one of the queue's own keys ----------------------------------------


@pytest.mark.parametrize("job_id", ["wait", "meta", "metrics:failed"])
async def test_a_queue_key_is_no_job_for_the_job_methods(
    queue: AsyncQueue, r: redis.Redis, job_id: str
) -> None:
    await a_job(queue)
    r.hset("bull:q:metrics:failed", "count", 1)
    job = AsyncJob(queue_name="q", id=job_id, name="", data=None)
    job.queue = queue
    before = snapshot(r)
    for call in (
        lambda: job.remove(),
        lambda: job.update_data(1),
        lambda: job.update_progress(1),
        lambda: job.log("x"),
        lambda: job_removal.remove_unprocessed(job),
    ):
        with pytest.raises(JobNotFoundError):
            await call()
    assert snapshot(r) == before
