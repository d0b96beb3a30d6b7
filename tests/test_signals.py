"""job.wait_for_signal / queue.signal / job.step against a real server: a parked job frees its
worker's slot, sits in delayed (what BullMQ's tools read), wakes on its signal, times out with
SignalTimeout, and keeps its signals and steps across worker and server restarts."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from corral import (
    AsyncJob,
    AsyncQueue,
    DelayedError,
    InvalidOptionError,
    Job,
    JobFinishedError,
    JobNotFoundError,
    LockMismatchError,
    LockMissingError,
    NotActiveError,
    Queue,
    SignalTimeout,
    Worker,
)
from corral.bounds import MAX_TIMESTAMP_MS
from corral.clock import now_ms
from tests.conftest import ServerProcess, free_port, server_binary
from tests.test_cli_inspect import cli, one_line_error

#: Where a parked job sits in delayed (_lua/include/parked.lua): MAX_TIMESTAMP_MS as a score.
PARKED_SCORE = float(MAX_TIMESTAMP_MS * 4096)


async def until(check: Callable[[], Awaitable[bool]], what: str, timeout: float = 15) -> None:
    """Wait for ``check()`` to be true (polling a condition, not sleeping a fixed time)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not await check():
        assert asyncio.get_running_loop().time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.01)


class Running:
    """A worker run in a task; ``stop()`` closes it."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self.task = asyncio.create_task(worker.run_async())

    def busy(self) -> int:
        return len(self.worker._slots.leases)  # the jobs it holds now

    async def stop(self) -> None:
        await self.worker.close()
        await self.task


@pytest.fixture
async def queue(redis_url: str) -> AsyncIterator[AsyncQueue]:
    q = AsyncQueue("q", connection=redis_url)
    yield q
    await q.close()


def parked(r: redis.Redis, job_id: str, name: str = "approval") -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        # In delayed out of any worker's promotion (PARKED_SCORE), due in K:x-parked.
        return (
            r.zscore("bull:q:delayed", job_id) == PARKED_SCORE
            and r.zscore("bull:q:x-parked", job_id) is not None
            and r.hget(f"bull:q:{job_id}", "x-wait") == name
        )

    return check


def idle(worker: Running) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return worker.busy() == 0

    return check


def state(queue: AsyncQueue, job_id: str, wanted: str) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        job = await queue.get_job(job_id)
        return job is not None and str(await job.get_state()) == wanted

    return check


class Approval:
    """A processor with a step before its wait, counting what ran."""

    def __init__(self, timeout: float | None = 60) -> None:
        self.timeout = timeout
        self.drafts = 0
        self.runs = 0

    def make_draft(self) -> dict[str, Any]:
        self.drafts += 1
        return {"text": "draft", "n": self.drafts}

    async def run(self, job: AsyncJob) -> dict[str, Any]:
        self.runs += 1
        draft = await job.step("draft", self.make_draft)
        verdict = await job.wait_for_signal("approval", timeout=self.timeout)
        return {"draft": draft, "verdict": verdict}


async def test_park_then_signal_wakes_the_job_and_the_step_is_not_redone(
    queue: AsyncQueue, r: redis.Redis, redis_url: str
) -> None:
    process = Approval()
    job = await queue.add("agent", {"topic": "x"})
    worker = Running(Worker("q", process.run, connection=redis_url))
    try:
        await until(parked(r, job.id), "the job parked")
        # Parked: a delayed job to any BullMQ tool, its lock released, no attempt counted.
        assert str(await (await queue.get_job(job.id)).get_state()) == "delayed"  # type: ignore[union-attr]
        assert r.llen("bull:q:active") == 0 and not r.exists(f"bull:q:{job.id}:lock")
        assert r.hget(f"bull:q:{job.id}", "atm") in (None, "0")
        assert int(r.hget(f"bull:q:{job.id}", "x-wait-due") or 0) > 0
        assert await queue.signal(job.id, "approval", {"ok": True, "by": "ada"}) == "woken"
        result = await job.wait_until_finished(timeout=15)
    finally:
        await worker.stop()
    assert result == {"draft": {"text": "draft", "n": 1}, "verdict": {"ok": True, "by": "ada"}}
    assert (process.runs, process.drafts) == (2, 1)  # ran again, the draft was not redone
    fresh = await queue.get_job(job.id)
    assert fresh is not None and fresh.attempts_made == 1
    assert r.hget(f"bull:q:{job.id}", "x-wait") is None  # the wait is over
    assert await queue.get_signals(job.id) == {"approval": {"ok": True, "by": "ada"}}
    assert await fresh.get_steps() == {"draft": {"text": "draft", "n": 1}}


async def test_the_slot_is_free_while_the_job_is_parked(
    queue: AsyncQueue, r: redis.Redis, redis_url: str
) -> None:
    async def process(job: AsyncJob) -> str:
        if job.name == "agent":
            return str(await job.wait_for_signal("approval", timeout=60))
        return "quick"

    waiting = await queue.add("agent")
    worker = Running(Worker("q", process, connection=redis_url, concurrency=1))
    try:
        await until(parked(r, waiting.id), "the job parked")
        # The park is on the server before the processor has left: wait for the slot.
        await until(idle(worker), "the slot freed")
        # One slot, taken by nothing: another job runs while the first waits.
        other = await queue.add("quick")
        assert await other.wait_until_finished(timeout=15) == "quick"
        assert str(await waiting.get_state()) == "delayed"
        assert await queue.signal(waiting.id, "approval", "yes") == "woken"
        assert await waiting.wait_until_finished(timeout=15) == "yes"
    finally:
        await worker.stop()


async def test_a_signal_sent_before_the_wait_is_kept_and_returned_at_once(
    queue: AsyncQueue, r: redis.Redis, redis_url: str
) -> None:
    process = Approval()
    job = await queue.add("agent")
    assert await queue.signal(job.id, "approval", "early") == "kept"
    worker = Running(Worker("q", process.run, connection=redis_url))
    try:
        result = await job.wait_until_finished(timeout=15)
    finally:
        await worker.stop()
    assert result["verdict"] == "early"
    assert process.runs == 1  # never parked
    delayed = [f for _, f in r.xrange("bull:q:events") if f.get("event") == "delayed"]
    assert delayed == []


async def test_a_signal_replaces_an_earlier_one_of_the_same_name(queue: AsyncQueue) -> None:
    job = await queue.add("agent")
    assert await queue.signal(job.id, "approval", 1) == "kept"
    assert await queue.signal(job.id, "approval", 2) == "kept"
    assert await queue.get_signals(job.id) == {"approval": 2}


async def test_timeout_raises_signal_timeout_inside_the_processor(
    queue: AsyncQueue, r: redis.Redis, redis_url: str
) -> None:
    seen: list[BaseException] = []

    async def process(job: AsyncJob) -> str:
        try:
            await job.wait_for_signal("approval", timeout=0.05)
        except SignalTimeout as exc:
            seen.append(exc)
            return "gave up"
        return "approved"

    job = await queue.add("agent")
    worker = Running(Worker("q", process, connection=redis_url))
    try:
        assert await job.wait_until_finished(timeout=15) == "gave up"
    finally:
        await worker.stop()
    assert len(seen) == 1 and seen[0].name == "approval"  # type: ignore[attr-defined]
    assert "no signal 'approval'" in str(seen[0])


async def test_a_timed_out_job_fails_and_a_retry_waits_anew(
    queue: AsyncQueue, r: redis.Redis, redis_url: str
) -> None:
    process = Approval(timeout=0.05)
    once = await queue.add("agent", attempts=1)
    worker = Running(Worker("q", process.run, connection=redis_url))
    try:
        await until(state(queue, once.id, "failed"), "the job failed")
        failed = await queue.get_job(once.id)
        assert failed is not None and "no signal 'approval'" in (failed.failed_reason or "")
        assert failed.attempts_made == 1
        # With attempts left the retry runs the processor again, which parks again (the
        # timed-out wait was cleared): a signal now completes it.
        process.timeout = 60
        twice = await queue.add("agent", attempts=2)
        await until(parked(r, twice.id), "the first wait")
        await twice.promote()  # promoted by hand before its timeout: parked again
        await until(parked(r, twice.id), "parked again")
        r.hset(f"bull:q:{twice.id}", "x-wait-due", 1)  # its timeout passes
        await twice.promote()
        await until(parked(r, twice.id), "the retry's wait")
        again = await queue.get_job(twice.id)
        assert again is not None and again.attempts_made == 1  # the first attempt failed
        assert await queue.signal(twice.id, "approval", "ok") == "woken"
        result = await twice.wait_until_finished(timeout=15)
    finally:
        await worker.stop()
    assert result["verdict"] == "ok"


async def test_two_signals_one_after_the_other(
    queue: AsyncQueue, r: redis.Redis, redis_url: str
) -> None:
    async def process(job: AsyncJob) -> list[Any]:
        legal = await job.wait_for_signal("legal", timeout=60)
        boss = await job.wait_for_signal("boss", timeout=60)
        return [legal, boss]

    job = await queue.add("contract")
    worker = Running(Worker("q", process, connection=redis_url))
    try:
        await until(parked(r, job.id, "legal"), "waits for legal")
        assert await queue.signal(job.id, "boss", "b") == "kept"  # not the one it waits for
        assert str(await job.get_state()) == "delayed"
        assert await queue.signal(job.id, "legal", "l") == "woken"
        assert await job.wait_until_finished(timeout=15) == ["l", "b"]
        second = await queue.add("contract")
        await until(parked(r, second.id, "legal"), "second waits for legal")
        assert await queue.signal(second.id, "legal", 1) == "woken"
        await until(parked(r, second.id, "boss"), "second waits for boss")
        assert await queue.signal(second.id, "boss", 2) == "woken"
        assert await second.wait_until_finished(timeout=15) == [1, 2]
    finally:
        await worker.stop()


async def test_a_signal_for_a_finished_or_missing_job_is_refused(
    queue: AsyncQueue, r: redis.Redis, redis_url: str
) -> None:
    async def process(job: AsyncJob) -> None:
        if job.name == "bad":
            raise RuntimeError("no")

    done = await queue.add("ok")
    bad = await queue.add("bad")
    worker = Running(Worker("q", process, connection=redis_url))
    try:
        await until(state(queue, bad.id, "failed"), "failed")
        await until(state(queue, done.id, "completed"), "completed")
    finally:
        await worker.stop()
    with pytest.raises(JobFinishedError, match=f"job {done.id} in queue q has completed"):
        await queue.signal(done.id, "approval", 1)
    with pytest.raises(JobFinishedError, match="has failed"):
        await queue.signal(bad.id, "approval", 1)
    with pytest.raises(JobNotFoundError):
        await queue.signal("nope", "approval", 1)
    with pytest.raises(JobNotFoundError):
        await queue.signal("wait", "approval", 1)  # a queue key, not a job
    assert r.keys("bull:q:*:x-signals") == []  # nothing was written
    with pytest.raises(InvalidOptionError, match="JSON"):
        await queue.signal(done.id, "approval", {1, 2})
    with pytest.raises(InvalidOptionError, match="signal name"):
        await queue.signal(done.id, "", 1)


async def test_a_new_worker_runs_the_job_woken_after_the_first_one_went_away(
    queue: AsyncQueue, r: redis.Redis, redis_url: str
) -> None:
    process = Approval()
    job = await queue.add("agent")
    first = Running(Worker("q", process.run, connection=redis_url, name="first"))
    second: Running | None = None
    try:
        await until(parked(r, job.id), "parked")
        first.task.cancel()  # no close: the worker is just gone (the parked job holds nothing)
        with pytest.raises(asyncio.CancelledError):
            await first.task
        try:
            assert await queue.signal(job.id, "approval", "go") == "woken"
        except JobFinishedError:  # seen once under load: say how the parked job ended
            fields = r.hmget(f"bull:q:{job.id}", "failedReason", "atm", "x-wait")
            pytest.fail(f"the parked job finished after its worker was cancelled: {fields}")
        second = Running(Worker("q", process.run, connection=redis_url, name="second"))
        assert (await job.wait_until_finished(timeout=15))["verdict"] == "go"
    finally:
        if second is not None:
            await second.stop()
        await first.worker.close()
    assert r.hget(f"bull:q:{job.id}", "pb") == "second"
    assert process.drafts == 1


@pytest.fixture
def aof_server() -> Iterator[ServerProcess]:
    workdir = Path(tempfile.mkdtemp(prefix="corral-signals-"))
    srv = ServerProcess(
        server_binary(), free_port(), workdir, ["--appendonly", "yes", "--appendfsync", "always"]
    )
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()
        shutil.rmtree(workdir, ignore_errors=True)


async def test_signals_and_parked_jobs_survive_a_server_restart(
    aof_server: ServerProcess,
) -> None:
    process = Approval()
    r = redis.Redis.from_url(aof_server.url, decode_responses=True)
    async with AsyncQueue("q", connection=aof_server.url) as queue:
        waiting = await queue.add("agent")
        early = await queue.add("agent", delay=3600)  # not at its wait yet
        worker = Running(Worker("q", process.run, connection=aof_server.url))
        await until(parked(r, waiting.id), "parked")
        await worker.stop()
        assert await queue.signal(early.id, "approval", "early") == "kept"
    await asyncio.to_thread(aof_server.stop)
    await asyncio.to_thread(aof_server.start)
    async with AsyncQueue("q", connection=aof_server.url) as queue:
        assert await parked(r, waiting.id)()
        assert await queue.get_signals(early.id) == {"approval": "early"}
        assert await queue.signal(waiting.id, "approval", "late") == "woken"
        late, soon = await queue.get_job(waiting.id), await queue.get_job(early.id)
        assert late is not None and soon is not None
        await soon.promote()
        worker = Running(Worker("q", process.run, connection=aof_server.url))
        try:
            assert (await late.wait_until_finished(timeout=15))["verdict"] == "late"
            assert (await soon.wait_until_finished(timeout=15))["verdict"] == "early"
        finally:
            await worker.stop()
    r.close()
    assert process.drafts == 2  # one per job, not redone after the restart


async def test_steps_run_once_and_return_the_recorded_result(
    queue: AsyncQueue, r: redis.Redis, redis_url: str
) -> None:
    calls: list[str] = []

    async def fetch_async() -> tuple[int, str]:
        calls.append("async")
        return (1, "a")

    def fetch_plain() -> dict[str, int]:
        calls.append("plain")
        return {"n": 2}

    async def process(job: AsyncJob) -> list[Any]:
        first = await job.step("a", fetch_async)
        second = await job.step("b", fetch_plain)
        if job.attempts_made == 0:
            raise RuntimeError("flaky tool")  # the retry must not redo a and b
        return [first, second]

    job = await queue.add("steps", attempts=2, backoff=0)
    worker = Running(Worker("q", process, connection=redis_url))
    try:
        assert await job.wait_until_finished(timeout=15) == [[1, "a"], {"n": 2}]
    finally:
        await worker.stop()
    assert calls == ["async", "plain"]


async def test_a_step_result_that_is_not_json_is_refused_and_not_recorded(
    queue: AsyncQueue, r: redis.Redis
) -> None:
    job = await queue.add("steps")
    with pytest.raises(InvalidOptionError, match="step 'a' result must be JSON"):
        await job.step("a", lambda: {1, 2})
    assert not r.exists(f"bull:q:{job.id}:x-steps")
    assert await job.step("a", lambda: [1]) == [1]
    await job.remove()
    with pytest.raises(JobNotFoundError):
        await job.step("b", lambda: 1)
    assert not r.exists(f"bull:q:{job.id}:x-steps")  # no orphan key


async def test_signals_and_steps_are_removed_with_the_job(
    queue: AsyncQueue, r: redis.Redis
) -> None:
    job = await queue.add("agent")
    await queue.signal(job.id, "approval", 1)
    await job.step("draft", lambda: "d")
    assert r.exists(f"bull:q:{job.id}:x-signals", f"bull:q:{job.id}:x-steps") == 2
    await job.remove()
    assert r.exists(f"bull:q:{job.id}:x-signals", f"bull:q:{job.id}:x-steps") == 0


async def test_signals_and_steps_go_with_retention_clean_and_obliterate(
    queue: AsyncQueue, r: redis.Redis, redis_url: str
) -> None:
    async def process(job: AsyncJob) -> Any:
        await job.step("draft", lambda: "d")
        return await job.wait_for_signal("approval", timeout=60)

    def keys(job_id: str) -> int:
        return int(r.exists(f"bull:q:{job_id}:x-signals", f"bull:q:{job_id}:x-steps"))

    kept = await queue.add("agent", remove_on_complete=False)
    gone = await queue.add("agent", remove_on_complete=True)
    worker = Running(Worker("q", process, connection=redis_url))
    try:
        for job in (kept, gone):
            await until(parked(r, job.id), "parked")
            await queue.signal(job.id, "approval", "ok")
            assert await job.wait_until_finished(timeout=15) == "ok"
    finally:
        await worker.stop()
    assert (keys(kept.id), keys(gone.id)) == (2, 0)  # removeOnComplete took them with the job
    assert await queue.clean(0, 10, "completed") == [kept.id]
    assert keys(kept.id) == 0
    left = await queue.add("agent")
    await queue.signal(left.id, "approval", "early")
    await left.step("draft", lambda: "d")
    await queue.obliterate()
    assert keys(left.id) == 0 and r.keys("bull:q:*") == []


async def test_the_lock_guard_refuses_to_park_a_job_held_by_another_token(
    queue: AsyncQueue, r: redis.Redis, redis_url: str
) -> None:
    refused: list[BaseException] = []

    async def process(job: AsyncJob) -> str:
        lock = f"bull:q:{job.id}:lock"
        token = r.get(lock)
        for holder in ("someone-else", None):  # another worker's lock, then none
            if holder is None:
                r.delete(lock)
            else:
                r.set(lock, holder)
            try:
                await job.wait_for_signal("approval", timeout=60)
            except (LockMismatchError, LockMissingError) as exc:
                refused.append(exc)
            # Nothing moved: still active, not delayed, no wait recorded.
            assert r.lpos("bull:q:active", job.id) is not None
            assert r.zscore("bull:q:delayed", job.id) is None
            assert r.hget(f"bull:q:{job.id}", "x-wait") is None
        r.set(lock, token)  # type: ignore[arg-type]
        return "done"

    job = await queue.add("agent")
    worker = Running(Worker("q", process, connection=redis_url))
    try:
        assert await job.wait_until_finished(timeout=15) == "done"
    finally:
        await worker.stop()
    assert [type(e) for e in refused] == [LockMismatchError, LockMissingError]


async def test_the_active_guard_refuses_to_park_a_job_that_is_not_active(
    queue: AsyncQueue, r: redis.Redis
) -> None:
    job = await queue.add("agent")  # in wait; no token: the lock check is skipped
    with pytest.raises(NotActiveError):
        await job.wait_for_signal("approval", timeout=60)
    assert r.lrange("bull:q:wait", 0, -1) == [job.id]
    assert r.zscore("bull:q:delayed", job.id) is None
    assert r.hget(f"bull:q:{job.id}", "x-wait") is None


async def test_wait_for_signal_checks_its_arguments(queue: AsyncQueue) -> None:
    job = await queue.add("agent")
    with pytest.raises(InvalidOptionError, match="signal name"):
        await job.wait_for_signal("")
    with pytest.raises(InvalidOptionError, match="timeout"):
        await job.wait_for_signal("a", timeout=-1)
    with pytest.raises(InvalidOptionError, match="timeout must be at most"):
        await job.wait_for_signal("a", timeout=10**12)


async def test_a_parked_job_raises_delayed_error_and_clears_its_token(
    queue: AsyncQueue, r: redis.Redis, redis_url: str
) -> None:
    seen: list[BaseException] = []

    async def process(job: AsyncJob) -> None:
        try:
            await job.wait_for_signal("approval", timeout=60)
        except DelayedError as exc:
            seen.append(exc)
            assert job.token is None
            raise

    job = await queue.add("agent")
    worker = Running(Worker("q", process, connection=redis_url))
    try:
        await until(parked(r, job.id), "parked")
        await until(lambda: asyncio.sleep(0, bool(seen)), "the processor left")
    finally:
        await worker.stop()
    assert "waits for signal 'approval'" in str(seen[0])
    assert r.hget(f"bull:q:{job.id}", "failedReason") is None


async def test_a_plain_function_waits_and_steps_with_the_blocking_job(
    queue: AsyncQueue, redis_url: str, r: redis.Redis
) -> None:
    drafts: list[int] = []

    def process(job: Job) -> Any:
        draft = job.step("draft", lambda: drafts.append(1) or "d")
        return [draft, job.wait_for_signal("approval", timeout=60)]

    job = await queue.add("agent")
    worker = Running(Worker("q", process, connection=redis_url))
    try:
        await until(parked(r, job.id), "parked")
        # The park is on the server before the processor has left: wait for the slot.
        await until(idle(worker), "the slot freed")

        def signal_blocking() -> str:  # the blocking API, off the event loop
            with Queue("q", connection=redis_url) as blocking:
                return blocking.signal(job.id, "approval", "y")

        assert await asyncio.to_thread(signal_blocking) == "woken"
        assert await job.wait_until_finished(timeout=15) == ["d", "y"]
    finally:
        await worker.stop()
    assert drafts == [1]


def test_the_blocking_job_refuses_an_async_step(redis_url: str) -> None:
    async def later() -> int:
        return 1

    with Queue("q", connection=redis_url) as queue:
        job = queue.add("agent")
        with pytest.raises(InvalidOptionError, match="fn is async"):
            job.step("a", later)


def test_cli_signal_wakes_keeps_and_refuses_in_one_line(redis_url: str, r: redis.Redis) -> None:
    with Queue("q", connection=redis_url) as queue:
        job = queue.add("agent")
        result = cli(
            "signal", "q", job.id, "approval", "--data", '{"ok": true}', "--url", redis_url
        )
        assert (result.exit_code, result.stdout) == (
            0,
            f"signal 'approval' kept for job {job.id} (it is not parked waiting for it)\n",
        )
        assert queue.get_signals(job.id) == {"approval": {"ok": True}}
        # Parked by hand as park_job would: a delayed job waiting for "approval".
        r.lrem("bull:q:wait", 0, job.id)
        r.zadd("bull:q:delayed", {job.id: PARKED_SCORE})
        r.zadd("bull:q:x-parked", {job.id: MAX_TIMESTAMP_MS})
        r.hset(f"bull:q:{job.id}", "x-wait", "approval")
        result = cli("signal", "q", job.id, "approval", "--url", redis_url, "--json")
        assert result.exit_code == 0, result.output
        assert result.stdout.strip() == (
            f'{{"queue": "q", "job": "{job.id}", "signal": "approval", "outcome": "woken"}}'
        )
        # Due now, for a corral worker's next fetch; never in wait, where Node would take it.
        assert r.lrange("bull:q:wait", 0, -1) == []
        assert (r.zscore("bull:q:x-parked", job.id) or 0) <= now_ms()
        assert queue.get_signals(job.id) == {"approval": None}
        job.remove()
    missing = one_line_error(cli("signal", "q", "404", "approval", "--url", redis_url), 1)
    assert missing == "Error: job 404 does not exist in queue q"
    noqueue = one_line_error(cli("signal", "nope", "1", "a", "--url", redis_url), 1)
    assert "nope" in noqueue
    bad = one_line_error(cli("signal", "q", "1", "a", "--data", "{", "--url", redis_url), 2)
    assert bad.startswith("Error: --data is not valid JSON")
    usage = one_line_error(cli("signal", "q", "1", "--url", redis_url), 2)
    assert "Missing argument 'NAME'" in usage
