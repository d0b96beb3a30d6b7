"""Circuit breakers: the two scripts with an injected clock (every transition and every guard),
then workers: ``BreakerOpen`` escaping a processor and the ``breakers=`` job option delay a
job without burning an attempt, only the probe runs half-open, one breaker shared by two
worker processes, a probe whose process is killed; and ``corral.deadline``."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from corral import (
    AsyncJob,
    AsyncQueue,
    Breaker,
    BreakerOpen,
    CorralError,
    DeadlineExceeded,
    InvalidOptionError,
    Job,
    JobState,
    Worker,
    deadline,
)
from corral._sync._calls import run_script
from corral.breaker import CLAIM, RECORD
from corral.clock import now_ms
from tests.faults.harness import eventually
from tests.test_worker import drive, finished

ROOT = Path(__file__).resolve().parent.parent
EVENTS = ["bull:q:events", "bull:q:meta"]
#: failures, window, cooldown, probe lease (ms): the settings of the script tests.
SETTINGS = [3, 10_000, 5_000, 2_000]


class Down(Exception):
    pass


@pytest.fixture
async def queue(redis_url: str) -> Any:
    q = AsyncQueue("q", connection=redis_url)
    yield q
    await q.close()


@pytest.fixture
def payments(redis_url: str) -> Iterator[Breaker]:
    breaker = Breaker(
        "payments", failures=3, window=10, cooldown=5, probe_timeout=2, connection=redis_url
    )
    yield breaker
    breaker.close_sync()


def claim(
    r: redis.Redis, keys: list[str], now: int, token: str, settings: list[Any] = SETTINGS
) -> list[Any]:
    n = len([k for k in keys if ":x-breaker:" in k])
    reply: list[Any] = run_script(r, CLAIM, keys, [n, now, token, "7", *settings])
    return reply


def record(
    r: redis.Redis,
    keys: list[str],
    now: int,
    token: str,
    outcome: str,
    settings: list[Any] = SETTINGS,
) -> list[str]:
    n = len([k for k in keys if ":x-breaker:" in k])
    reply: list[str] = run_script(r, RECORD, keys, [n, now, token, "7", *settings, outcome])
    return reply


def open_at(r: redis.Redis, breaker: Breaker, now: int) -> None:
    """Open ``breaker`` with three failures at ``now`` (it goes half-open at now + 5 s)."""
    for _ in range(3):
        record(r, [breaker.key], now, "t", "failure")


# -- the scripts, with an injected clock ------------------------------------------------------


def test_failures_within_the_window_open_the_breaker(r: redis.Redis, payments: Breaker) -> None:
    key = [payments.key]
    assert claim(r, key, 0, "a") == [1, 0, "closed"]
    assert record(r, key, 0, "a", "failure") == [""]
    assert record(r, key, 4_000, "b", "success") == [""]  # a success changes nothing
    assert record(r, key, 4_000, "b", "failure") == [""]
    assert payments.state_sync(now_ms=5_000).recent_failures == 2
    assert record(r, key, 8_000, "c", "failure") == ["closed>open"]
    state = payments.state_sync(now_ms=8_000)
    assert (state.state, state.retry_at_ms, state.opens) == ("open", 13_000, 1)


def test_failures_older_than_the_window_do_not_count(r: redis.Redis, payments: Breaker) -> None:
    key = [payments.key]
    for now in (0, 6_000, 10_000):  # 10 s window: the first is out of it at 10 s
        assert record(r, key, now, "a", "failure") == [""]
    assert payments.state_sync(now_ms=10_000).recent_failures == 2
    assert record(r, key, 11_000, "a", "failure") == ["closed>open"]


def test_open_refuses_until_the_cooldown_is_over_then_gives_one_probe(
    r: redis.Redis, payments: Breaker
) -> None:
    open_at(r, payments, 1_000)
    key = [payments.key]
    assert claim(r, key, 5_999, "a") == [0, 6_000, "open"]
    assert claim(r, key, 6_000, "a") == [1, 0, "probe"]
    assert payments.state_sync(now_ms=6_001).probe_running
    # Exactly one probe: another caller is refused until the probe's lease (2 s) at most.
    assert claim(r, key, 6_500, "b") == [0, 8_000, "busy"]
    assert claim(r, key, 6_600, "a") == [1, 0, "held"]  # a resent claim keeps it
    assert record(r, key, 6_700, "b", "failure") == [""]  # not the probe's: ignored
    assert record(r, key, 6_800, "a", "success") == ["half_open>closed"]
    state = payments.state_sync(now_ms=6_900)
    assert (state.state, state.recent_failures) == ("closed", 0)
    assert claim(r, key, 6_900, "b") == [1, 0, "closed"]


def test_the_probe_failing_opens_it_for_another_cooldown(r: redis.Redis, payments: Breaker) -> None:
    open_at(r, payments, 0)
    key = [payments.key]
    assert claim(r, key, 5_000, "a") == [1, 0, "probe"]
    assert record(r, key, 5_500, "a", "failure") == ["half_open>open"]
    state = payments.state_sync(now_ms=5_500)
    assert (state.state, state.retry_at_ms, state.opens) == ("open", 10_500, 2)
    assert claim(r, key, 10_499, "b") == [0, 10_500, "open"]


def test_outcomes_while_open_change_nothing(r: redis.Redis, payments: Breaker) -> None:
    open_at(r, payments, 0)
    key = [payments.key]
    for outcome in ("failure", "failure", "failure", "success", "release"):
        assert record(r, key, 1_000, "late", outcome) == [""]
    state = payments.state_sync(now_ms=1_000)
    assert (state.retry_at_ms, state.opens) == (5_000, 1)


def test_a_probe_that_crashed_is_replaced_when_its_lease_passes(
    r: redis.Redis, payments: Breaker
) -> None:
    open_at(r, payments, 0)
    key = [payments.key]
    assert claim(r, key, 5_000, "crashed") == [1, 0, "probe"]
    assert claim(r, key, 6_999, "b") == [0, 7_000, "busy"]
    assert claim(r, key, 7_000, "b") == [1, 0, "probe_again"]
    # The crashed probe's late word counts for nothing; the new probe's does.
    assert record(r, key, 7_100, "crashed", "success") == [""]
    assert payments.state_sync(now_ms=7_100).state == "half_open"
    assert record(r, key, 7_200, "b", "success") == ["half_open>closed"]


def test_a_released_probe_lets_the_next_caller_probe(r: redis.Redis, payments: Breaker) -> None:
    open_at(r, payments, 0)
    key = [payments.key]
    assert claim(r, key, 5_000, "a") == [1, 0, "probe"]
    assert record(r, key, 5_100, "a", "release") == [""]
    assert not payments.state_sync(now_ms=5_100).probe_running
    assert claim(r, key, 5_200, "b") == [1, 0, "probe_next"]


def test_a_refusal_by_one_breaker_claims_no_probe_of_another(
    r: redis.Redis, payments: Breaker, redis_url: str
) -> None:
    llm = Breaker("llm", failures=3, window=10, cooldown=5, connection=redis_url)
    open_at(r, payments, 0)  # half-open from 5 s
    open_at(r, llm, 3_000)  # open until 8 s
    both = [payments.key, llm.key]
    assert claim(r, both, 6_000, "job") == [0, 8_000, "half_open", "open"]
    assert not payments.state_sync(now_ms=6_000).probe_running
    assert claim(r, [payments.key], 6_000, "other") == [1, 0, "probe"]
    llm.close_sync()


def test_the_stored_settings_serve_a_caller_that_gives_none(
    r: redis.Redis, payments: Breaker
) -> None:
    key = [payments.key]
    claim(r, key, 0, "a", [2, 10_000, 1_000, 500])  # a Breaker stores its settings
    none = ["", "", "", ""]  # a worker checking a job's breakers= has none
    assert record(r, key, 0, "a", "failure", none) == [""]
    assert record(r, key, 100, "a", "failure", none) == ["closed>open"]  # 2 failures
    assert payments.state_sync(now_ms=100).retry_at_ms == 1_100
    assert claim(r, key, 1_100, "b", none) == [1, 0, "probe"]
    assert claim(r, key, 1_599, "c", none) == [0, 1_600, "busy"]  # the 500 ms lease
    r.delete(payments.key)
    for i in range(4):  # nothing stored: the defaults (5 failures)
        assert record(r, key, i, "a", "failure", none) == [""]
    assert record(r, key, 5, "a", "failure", none) == ["closed>open"]


def test_transitions_are_events_on_the_queue_of_the_job(r: redis.Redis, payments: Breaker) -> None:
    keys = [payments.key, *EVENTS]
    for _ in range(3):
        record(r, keys, 1_000, "a", "failure")
    claim(r, keys, 6_000, "a")
    record(r, keys, 6_100, "a", "success")
    found = [f for _, f in r.xrange("bull:q:events")]
    assert found == [
        {"event": "breaker", "name": "payments", "state": "open", "from": "closed",
         "jobId": "7", "until": "6000"},
        {"event": "breaker", "name": "payments", "state": "half_open", "from": "open",
         "jobId": "7"},
        {"event": "breaker", "name": "payments", "state": "closed", "from": "half_open",
         "jobId": "7"},
    ]  # fmt: skip


def test_what_another_client_wrote_in_the_key_does_not_break_it(
    r: redis.Redis, payments: Breaker
) -> None:
    r.hset(
        payments.key,
        mapping={"state": "open", "until": "abc", "fails": "x,,1e400", "opens": "many"},
    )
    key = [payments.key]
    assert claim(r, key, 0, "a") == [1, 0, "probe"]  # an unreadable time: due now
    assert record(r, key, 1, "a", "failure") == ["half_open>open"]
    assert payments.state_sync(now_ms=1).opens == 1
    # Closed, with failure times and a threshold no Breaker wrote: ignored, not obeyed.
    r.delete(payments.key)
    r.hset(payments.key, "fails", "1e400,1e400,abc")
    assert record(r, key, 10, "a", "failure") == [""]  # 1 of 3
    assert payments.state_sync(now_ms=10).recent_failures == 1
    r.hset(payments.key, mapping={"fails": "", "failures": "0"})
    assert record(r, key, 20, "a", "failure", ["", "", "", ""]) == [""]  # 1 of 5, the default


def test_bad_settings_and_names_are_refused(redis_url: str) -> None:
    with pytest.raises(InvalidOptionError, match="failures must be an integer from 1"):
        Breaker("p", failures=0, connection=redis_url)
    with pytest.raises(InvalidOptionError, match="cooldown must be more than 0"):
        Breaker("p", cooldown=0, connection=redis_url)
    with pytest.raises(InvalidOptionError, match="must not contain ':'"):
        Breaker("a:b", connection=redis_url)
    with pytest.raises(InvalidOptionError, match="reserved"):
        Breaker("meta", connection=redis_url)
    with pytest.raises(InvalidOptionError, match="exceptions must hold exception types"):
        Breaker("p", exceptions=[int], connection=redis_url)  # type: ignore[list-item]


async def test_the_breakers_option_is_checked_and_stored(queue: AsyncQueue) -> None:
    job = await queue.add("charge", {}, breakers=["payments", "llm", "payments"])
    assert job.opts["x-breakers"] == ["payments", "llm"]
    with pytest.raises(InvalidOptionError, match="breakers must be a list"):
        await queue.add("charge", {}, breakers="payments")  # type: ignore[arg-type]
    with pytest.raises(InvalidOptionError, match="breaker name must not contain"):
        await queue.add("charge", {}, breakers=["a:b"])


# -- a breaker around a call -----------------------------------------------------------------


async def test_breaker_open_escaping_a_processor_delays_the_job_unburned(
    queue: AsyncQueue, redis_url: str
) -> None:
    breaker = Breaker("payments", failures=1, cooldown=0.3, connection=redis_url)
    up = asyncio.Event()
    calls: list[str] = []

    async def charge(job: AsyncJob) -> str:
        async with breaker:
            calls.append(job.id)
            if not up.is_set():
                raise Down("provider down")
            return "charged"

    first = await queue.add("charge", {}, attempts=20)
    worker = Worker("q", charge, connection=redis_url)

    async def open_and_delayed() -> bool:
        state = await queue.get_job_state(first.id)
        return state is JobState.DELAYED and (await breaker.state()).state == "open"

    task = asyncio.create_task(worker.run_async())
    try:
        await eventually(open_and_delayed, "the breaker open and the job delayed")
        second = await queue.add("charge", {}, attempts=1)
        # With attempts=1 a counted attempt would have failed it for good: it waits instead.
        await eventually(lambda: _is(queue, second.id, JobState.DELAYED), "the second job delayed")
        job = await queue.get_job(second.id)
        assert job is not None
        assert job.attempts_made == 0
        assert set(calls) == {first.id}  # the open breaker let the second's call not through
        up.set()
        await eventually(finished(queue, 2), "both jobs completed")
        assert (await breaker.state()).state == "closed"
    finally:
        await worker.close()
        await task
        await breaker.close()
    for job_id in (first.id, second.id):
        done = await queue.get_job(job_id)
        assert done is not None and done.returnvalue == "charged"
        # Only the calls the breaker let through counted: the refusals burned nothing.
        assert done.attempts_made == calls.count(job_id)
    assert calls.count(second.id) == 1


async def _is(queue: AsyncQueue, job_id: str, state: JobState) -> bool:
    return await queue.get_job_state(job_id) is state


async def test_a_thread_processor_uses_the_breaker_with_with(
    queue: AsyncQueue, redis_url: str
) -> None:
    breaker = Breaker("payments", failures=2, cooldown=60, connection=redis_url)

    def charge(job: Job) -> str:
        with breaker:
            raise Down("provider down")

    jobs = [await queue.add("charge", {"n": i}, attempts=5) for i in range(3)]
    worker = Worker("q", charge, connection=redis_url, concurrency=1)

    async def all_delayed_open() -> bool:
        counts = await queue.get_job_counts("delayed")
        return counts["delayed"] == 3 and (await breaker.state()).state == "open"

    await drive(worker, all_delayed_open)
    made = [(await queue.get_job(j.id)).attempts_made for j in jobs]  # type: ignore[union-attr]
    assert sum(made) == 2  # the two failures that opened it; the refusals burned nothing
    await breaker.close()


async def test_ignored_exceptions_count_as_successes(redis_url: str) -> None:
    breaker = Breaker("payments", failures=1, ignore=ValueError, connection=redis_url)
    with pytest.raises(ValueError):
        async with breaker:
            raise ValueError("a bad request")
    with pytest.raises(asyncio.CancelledError):
        async with breaker:
            raise asyncio.CancelledError
    assert (await breaker.state()).state == "closed"
    with pytest.raises(Down):
        async with breaker:
            raise Down
    with pytest.raises(BreakerOpen) as refused:
        async with breaker:
            pass
    assert (refused.value.name, refused.value.state) == ("payments", "open")
    assert isinstance(refused.value, CorralError)
    await breaker.close()


# -- jobs that name breakers ---------------------------------------------------------------


async def test_a_job_naming_an_open_breaker_waits_unrun_then_probes(
    queue: AsyncQueue, redis_url: str, r: redis.Redis
) -> None:
    payments = Breaker("payments", failures=1, cooldown=0.5, connection=redis_url)
    with pytest.raises(Down):
        async with payments:
            raise Down
    runs: list[str] = []

    async def charge(job: AsyncJob) -> str:
        runs.append(job.id)
        return "charged"

    job = await queue.add("charge", {}, attempts=1, breakers=["payments"])
    worker = Worker("q", charge, connection=redis_url)
    task = asyncio.create_task(worker.run_async())
    try:
        await eventually(lambda: _is(queue, job.id, JobState.DELAYED), "the job delayed")
        held = await queue.get_job(job.id)
        assert held is not None and held.attempts_made == 0 and runs == []
        await eventually(lambda: _is(queue, job.id, JobState.COMPLETED), "the probe job done")
    finally:
        await worker.close()
        await task
    assert runs == [job.id]
    assert (await payments.state()).state == "closed"  # the probe job's success closed it
    states = [(f["from"], f["state"], f.get("jobId")) for _, f in r.xrange("bull:q:events")
              if f["event"] == "breaker"]  # fmt: skip
    assert states == [("open", "half_open", job.id), ("half_open", "closed", job.id)]
    await payments.close()


async def test_failing_jobs_open_the_breakers_they_name_and_count_once(
    queue: AsyncQueue, redis_url: str
) -> None:
    payments = Breaker("payments", failures=3, cooldown=60, connection=redis_url)
    async with payments:  # stores its settings, which the worker's job check goes by
        pass
    runs: list[str] = []

    async def charge(job: AsyncJob) -> None:
        runs.append(job.id)
        async with payments:  # named by the job too: its failure counts once, not twice
            raise Down("provider down")

    jobs = [await queue.add("charge", {"n": i}, breakers=["payments"]) for i in range(5)]
    worker = Worker("q", charge, connection=redis_url, concurrency=1)

    async def settled() -> bool:
        counts = await queue.get_job_counts("failed", "delayed")
        return counts["failed"] == 3 and counts["delayed"] == 2

    await drive(worker, settled)
    assert len(runs) == 3  # three failures opened it; the other two never ran
    for j in jobs:
        fresh = await queue.get_job(j.id)
        assert fresh is not None
        assert fresh.attempts_made == (1 if j.id in runs else 0)
    await payments.close()


async def test_half_open_only_the_probe_job_runs(
    queue: AsyncQueue, redis_url: str, r: redis.Redis
) -> None:
    payments = Breaker("payments", failures=1, cooldown=0.2, probe_timeout=30, connection=redis_url)
    with pytest.raises(Down):
        async with payments:
            raise Down
    release = asyncio.Event()
    running: list[str] = []
    overlap: list[int] = []

    async def charge(job: AsyncJob) -> str:
        running.append(job.id)
        overlap.append(len(running))
        await release.wait()
        running.remove(job.id)
        return "charged"

    jobs = [await queue.add("charge", {"n": i}, breakers=["payments"]) for i in range(4)]
    worker = Worker("q", charge, connection=redis_url, concurrency=4)
    task = asyncio.create_task(worker.run_async())
    try:
        await eventually(lambda: bool(running), "the probe job started")
        probe = running[0]

        async def another_refused() -> bool:
            # A job fetched while the probe runs was delayed again ("busy"): the proof that
            # others did try.
            return any(
                f["event"] == "delayed" and f["jobId"] != probe
                for _, f in r.xrange("bull:q:events", min=_half_open_id(r))
            )

        await eventually(another_refused, "another job refused while the probe runs")
        assert running == [probe]
        release.set()
        await eventually(finished(queue, 4), "every job completed")
    finally:
        release.set()
        await worker.close()
        await task
    assert overlap[0] == 1
    for j in jobs:
        done = await queue.get_job(j.id)
        assert done is not None and done.attempts_made == 1
    await payments.close()


def _half_open_id(r: redis.Redis) -> str:
    for event_id, f in r.xrange("bull:q:events"):
        if f["event"] == "breaker" and f["state"] == "half_open":
            return str(event_id)
    return "+"


# -- one breaker, two worker processes ---------------------------------------------------------


class WorkerProcess:
    def __init__(self, url: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.fixtures.breaker_worker", url, "q"],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        assert self.proc.stdout.readline().strip() == "ready"
        self.errors: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.errors.append(line.rstrip())

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._reader.join(10)
        for pipe in (self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                pipe.close()


def calls(r: redis.Redis) -> list[tuple[str, str, str, int]]:
    """``(pid, job id, behaviour, epoch ms)`` of each call the breaker let through."""
    found = []
    for call in r.lrange("calls", 0, -1):
        pid, job_id, mode, at = call.split(":")  # type: ignore[union-attr]
        found.append((pid, job_id, mode, int(at)))
    return found


def timeline(r: redis.Redis, title: str, marks: list[tuple[int, str]]) -> str:
    """The breaker's transitions from the queue's events, and the test's ``marks`` (epoch ms,
    what the test did), from the first event on: for the docs and the closing note."""
    entries = [(int(i.split("-")[0]), f) for i, f in r.xrange("bull:q:events")]
    start = entries[0][0]
    lines: list[tuple[int, str]] = [(at, f"test: {what}") for at, what in marks]
    for at, f in entries:
        if f["event"] == "breaker":
            until = f" (half-open at +{int(f['until']) - start} ms)" if "until" in f else ""
            what = f"{f['from']:>9} -> {f['state']:<9} job {f['jobId']}{until}"
            lines.append((at, what))
    lines.sort(key=lambda line: line[0])
    text = "\n".join([title, *(f"  +{at - start:>5} ms  {what}" for at, what in lines)])
    out = os.environ.get("CORRAL_BREAKER_TIMELINE")
    if out:
        with open(out, "a", encoding="utf-8") as fh:
            fh.write(text + "\n")
    print(text)
    return text


async def test_two_worker_processes_share_one_breaker(
    queue: AsyncQueue, redis_url: str, r: redis.Redis
) -> None:
    from tests.fixtures.breaker_worker import COOLDOWN

    shared = Breaker("payments", connection=redis_url)
    r.set("downstream", "down")
    jobs = [await queue.add("charge", {"n": i}, attempts=10) for i in range(6)]
    marks = [(now_ms(), "6 jobs waiting, downstream down, 2 worker processes start")]
    workers = [WorkerProcess(redis_url), WorkerProcess(redis_url)]
    try:

        async def open_and_all_delayed() -> bool:
            counts = await queue.get_job_counts("delayed")
            return (await shared.state()).state == "open" and counts["delayed"] == 6

        await eventually(open_and_all_delayed, "breaker open, every job delayed")
        made = {j.id: (await queue.get_job(j.id)).attempts_made for j in jobs}  # type: ignore[union-attr]
        called = {c[1] for c in calls(r)}  # read after: a probe's call may have come between
        assert all(made[j] == 0 for j in made if j not in called)  # refused: nothing burned
        marks.append((now_ms(), "every job delayed; downstream back (its calls wait)"))
        r.set("downstream", "hold")  # the probe's call will wait for the test
        await eventually(lambda: any(c[2] == "hold" for c in calls(r)), "the probe's call")
        (probe_pid, probe_job, _, _) = next(c for c in calls(r) if c[2] == "hold")

        async def another_refused() -> bool:
            return any(
                f["event"] == "delayed" and f["jobId"] != probe_job
                for _, f in r.xrange("bull:q:events", min=_half_open_id(r))
            )

        await eventually(another_refused, "another job refused while the probe holds")
        assert [c[:3] for c in calls(r) if c[2] != "down"] == [(probe_pid, probe_job, "hold")]
        marks.append((now_ms(), f"probe job {probe_job} holds; another job was refused"))
        r.set("downstream", "up")
        r.rpush("release", "go")
        await eventually(finished(queue, 6), "every job completed")
        marks.append((now_ms(), "every job completed"))
        assert (await shared.state()).state == "closed"
        by_job: dict[str, int] = {}
        for _, job_id, mode, _ in calls(r):
            by_job[job_id] = by_job.get(job_id, 0) + (mode == "down")
        for j in jobs:
            done = await queue.get_job(j.id)
            assert done is not None and done.returnvalue == "charged"
            assert done.attempts_made == by_job.get(j.id, 0) + 1
        assert len({c[0] for c in calls(r)}) == 2  # both processes made calls
    finally:
        for w in workers:
            w.stop()
        await shared.close()
    first_probe = min(int(i.split("-")[0]) for i, f in r.xrange("bull:q:events")
                      if f["event"] == "breaker" and f["state"] == "half_open")  # fmt: skip
    closed_phase = [c for c in calls(r) if c[3] < first_probe]
    # Three failures open it; calls let through while it was still closed may fail after it
    # opened (one per other slot of the two workers' four), and none goes while it is open.
    assert 3 <= len(closed_phase) <= 6
    assert {c[2] for c in closed_phase} == {"down"}
    text = timeline(r, f"two worker processes, failures=3, cooldown={COOLDOWN:g} s:", marks)
    assert "closed -> open" in text and "half_open -> closed" in text
    logs = [line for w in workers for line in w.errors if line.startswith("corral.breaker")]
    assert sum("closed -> open" in line for line in logs) == 1  # one line per transition
    assert sum("half_open -> closed" in line for line in logs) == 1


async def test_a_probe_whose_process_is_killed_is_replaced(
    queue: AsyncQueue, redis_url: str, r: redis.Redis
) -> None:
    shared = Breaker("payments", connection=redis_url)
    r.set("downstream", "down")
    for i in range(3):
        await queue.add("charge", {"n": i}, attempts=10)
    marks = [(now_ms(), "3 jobs waiting, downstream down, 1 worker process starts")]
    first = WorkerProcess(redis_url)
    second: WorkerProcess | None = None
    try:
        await eventually(lambda: _count_is(queue, "delayed", 3), "breaker open, every job delayed")
        r.set("downstream", "hold")
        await eventually(lambda: any(c[2] == "hold" for c in calls(r)), "the probe's call")
        first.stop(signal.SIGKILL)  # the probe dies holding the half-open breaker
        marks.append((now_ms(), "the probe's process killed; downstream back"))
        r.set("downstream", "up")
        marks.append((now_ms(), "a second worker process starts"))
        second = WorkerProcess(redis_url)
        await eventually(finished(queue, 3), "every job completed by the second worker")
        marks.append((now_ms(), "every job completed"))
        assert (await shared.state()).state == "closed"
    finally:
        first.stop(signal.SIGKILL)
        if second is not None:
            second.stop()
        await shared.close()
    assert second is not None
    assert any("the last probe's lease passed" in line for line in second.errors)
    text = timeline(r, "a probe killed (SIGKILL) while half-open, probe_timeout=2 s:", marks)
    assert "half_open -> half_open" in text  # the probe replaced


async def _count_is(queue: AsyncQueue, state: str, n: int) -> bool:
    return (await queue.get_job_counts(state))[state] == n


# -- deadline ------------------------------------------------------------------------------------


async def test_an_async_deadline_cancels_the_block() -> None:
    with pytest.raises(DeadlineExceeded, match=r"deadline of 0\.05 s exceeded") as exc:
        async with deadline(0.05):
            await asyncio.sleep(30)
    assert isinstance(exc.value, TimeoutError) and isinstance(exc.value, CorralError)
    async with deadline(30) as d:  # a block that ends in time is left be
        await asyncio.sleep(0)
    assert not d.expired


async def test_a_cancel_from_outside_stays_a_cancel() -> None:
    started = asyncio.Event()

    async def body() -> None:
        async with deadline(30):
            started.set()
            await asyncio.sleep(30)

    task = asyncio.create_task(body())
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


def test_a_sync_deadline_interrupts_the_thread_even_through_except_exception() -> None:
    with pytest.raises(DeadlineExceeded), deadline(0.05):
        while True:
            try:
                sum(range(100))
            except Exception:
                continue
    with deadline(30) as d:
        time.sleep(0)
    assert not d.expired


def test_deadline_refuses_a_bad_limit() -> None:
    with pytest.raises(InvalidOptionError, match="seconds must be more than 0"):
        deadline(0)


async def test_a_deadline_inside_a_breaker_counts_as_its_failure(redis_url: str) -> None:
    breaker = Breaker("llm", failures=1, connection=redis_url)
    with pytest.raises(DeadlineExceeded):
        async with breaker, deadline(0.01):
            await asyncio.sleep(30)
    assert (await breaker.state()).state == "open"
    await breaker.close()
