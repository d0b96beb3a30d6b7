"""What a lease does with jobs its processor cannot settle by itself: undecodable hashes, a
processor that claims to have moved its job but did not, and finishes whose callers give up."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis

from corral import AsyncJob, AsyncQueue, DelayedError, Worker, _scripts
from corral._finisher import Finisher
from corral.clock import now_ms
from corral.errors import ConfigurationError
from tests.test_worker import drive, finished


@pytest.fixture
async def queue(redis_url: str) -> Any:
    q = AsyncQueue("q", connection=redis_url)
    yield q
    await q.close()


def corrupt(r: redis.Redis, job_id: str, field: str, raw: bytes) -> None:
    """Write a field as another client might, bytes for bytes."""
    r.hset(f"bull:q:{job_id}", field, raw)


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        (b'{"text": "caf\\u00e9 \\ud83d"}', "data"),  # a lone surrogate escape (Node writes it)
        (b'{"text": "\xff\xfe"}', "data"),  # bytes that are not UTF-8
        (b'{"attempts": 3', "opts"),  # cut short
    ],
)
async def test_a_job_that_cannot_be_decoded_fails_for_good_and_the_worker_goes_on(
    queue: AsyncQueue, r: redis.Redis, redis_url: str, raw: bytes, field: str
) -> None:
    done: list[str] = []

    async def process(job: AsyncJob) -> str:
        done.append(job.id)
        return "ok"

    bad = await queue.add("bad", {"text": "fine"}, attempts=3)
    corrupt(r, bad.id, field, raw)
    good = await queue.add("good", {"text": "fine"})
    await drive(Worker("q", process, connection=redis_url), finished(queue, 2))
    assert done == [good.id]
    assert r.zrange("bull:q:failed", 0, -1) == [bad.id]
    reason = r.hget(f"bull:q:{bad.id}", "failedReason")
    assert reason is not None and f"job {field} cannot be decoded" in reason
    assert r.hget(f"bull:q:{bad.id}", "atm") == "1"  # not retried: the bytes stay the same


async def test_a_processor_that_raises_delayed_error_without_moving_its_job_fails_it(
    queue: AsyncQueue, r: redis.Redis, redis_url: str
) -> None:
    async def process(job: AsyncJob) -> None:
        raise DelayedError()  # but never called job.move_to_delayed()

    job = await queue.add("step")
    await drive(Worker("q", process, connection=redis_url), finished(queue, 1))
    reason = r.hget(f"bull:q:{job.id}", "failedReason")
    assert reason is not None and "did not move the job" in reason
    assert r.llen("bull:q:active") == 0


async def test_a_finish_whose_caller_gives_up_still_lands_and_spares_the_others(
    queue: AsyncQueue, r: redis.Redis
) -> None:
    for name in "abc":
        await queue.add(name)
    lost: list[tuple[int, int]] = []
    seq = iter(range(1000))

    def fetch(n: int) -> _scripts.FetchNext:
        return _scripts.FetchNext(n, "wk", next(seq) * 10, 30_000)

    spec = fetch(3)
    reply = await queue._run(_scripts.MOVE_TO_ACTIVE, [queue._job_prefix, now_ms(), *spec.args()])
    jobs = [
        queue._bind(f.job_id, f.fields, token=f.token) for f in _scripts.parse_fetched(reply, 2)
    ]
    finisher = Finisher(queue, fetch, lambda first, count: lost.append((first, count)))
    calls = [
        asyncio.ensure_future(finisher.finish(j.completion("v"), wants_next=False)) for j in jobs
    ]
    await asyncio.sleep(0)  # each finish is queued for the batch
    calls[1].cancel()  # one caller stops waiting while its batch is on its way
    results = await asyncio.gather(calls[0], calls[2])
    assert [code for code, _ in results] == [1, 1]
    with pytest.raises(asyncio.CancelledError):
        await calls[1]
    # Its finish went out with the batch all the same.
    for _ in range(100):
        if r.zcard("bull:q:completed") == 3:
            break
        await asyncio.sleep(0.01)
    assert sorted(r.zrange("bull:q:completed", 0, -1)) == sorted(j.id for j in jobs)
    assert lost == []


async def test_a_wrong_password_stops_the_worker_with_one_line(redis_url: str) -> None:
    url = redis_url.replace("redis://", "redis://nobody:wrong@")
    worker = Worker("q", lambda job: None, connection=url)
    with pytest.raises(ConfigurationError, match=r"^worker q: .*(WRONGPASS|invalid)") as info:
        await asyncio.wait_for(worker.run_async(), 10)
    assert "\n" not in str(info.value)


async def test_a_missing_permission_found_while_running_stops_the_worker(
    queue: AsyncQueue, r: redis.Redis, redis_url: str
) -> None:
    # Allowed to connect and read INFO, refused the scripts a worker runs.
    r.acl_setuser(
        "no-scripts", enabled=True, passwords=["+pw"], keys="*", commands=["+@all", "-evalsha"]
    )
    try:
        url = redis_url.replace("redis://", "redis://no-scripts:pw@")
        worker = Worker("q", lambda job: None, connection=url)
        with pytest.raises(ConfigurationError, match=r"NOPERM|no permissions"):
            await asyncio.wait_for(worker.run_async(), 10)
    finally:
        r.acl_deluser("no-scripts")


async def test_a_step_that_fails_is_restarted_and_reported(
    queue: AsyncQueue, redis_url: str, monkeypatch: pytest.MonkeyPatch, caplog: Any
) -> None:
    from corral import _upkeep

    real = _upkeep.StallChecker.step
    failures = 0
    recovered = False

    async def flaky(self: _upkeep.StallChecker) -> float:
        nonlocal failures, recovered
        if failures < 2:
            failures += 1
            raise RuntimeError("a bug in the stall check")
        recovered = True
        return await real(self)

    monkeypatch.setattr(_upkeep.StallChecker, "step", flaky)
    errors: list[BaseException] = []
    worker = Worker("q", lambda job: "done", connection=redis_url, stalled_interval=0.05)
    worker.on("error", errors.append)
    await queue.add("a")
    job_done = finished(queue, 1)

    async def done() -> bool:
        return recovered and await job_done()

    await drive(worker, done)
    # Reported once, in full; the step ran again and the worker kept working.
    assert [str(e) for e in errors] == ["a bug in the stall check"]
    logged = [rec for rec in caplog.records if "restarting it" in rec.getMessage()]
    assert len(logged) == 1 and logged[0].exc_info is not None
