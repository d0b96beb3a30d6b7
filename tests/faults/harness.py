"""What the fault-injection tests share: servers of their own, workers that record what they
run, and the checks every fault test ends with.

Every test ends with :func:`audit`, which asserts the promises of docs/reliability.md:

- no job lost: every job added ends completed or failed, as the test expects;
- none stuck active: the active list is empty and no lock key is left;
- none completed twice: at most one ``completed`` event per job id in ``K:events`` (and, where
  the scenario allows it, the processor ran each job exactly once);
- every worker still alive consumes: a probe job added after the fault is processed by each;
- no traceback in the log of ``corral.*`` (a transient error is one line, not a stack).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
import signal
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Collection
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis

from corral import AsyncJob, AsyncQueue, Job, Worker
from tests.conftest import ServerProcess

#: Name of the jobs :func:`assert_consuming` adds; every processor here answers one with
#: ``{"worker": <its tag>}``.
PROBE = "probe"

ROOT = Path(__file__).resolve().parent.parent.parent


class FaultServer(ServerProcess):
    """A server of one test, with settings of its own (``extra`` server arguments: AOF on for
    the restart tests), that the test may kill, restart and reconfigure."""

    def kill(self) -> None:
        """SIGKILL: a crash, nothing flushed but what the server synced already."""
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait()
        self.process = None

    def client(self, **kwargs: Any) -> redis.Redis:
        return redis.Redis(port=self.port, decode_responses=True, **kwargs)


def error_count(r: redis.Redis, code: str) -> int:
    """How often the server replied with the error ``code`` (``BUSY``, ``OOM``...)."""
    stats = r.info("errorstats")
    return int(stats.get(f"errorstat_{code}", {}).get("count", 0))


async def eventually(
    check: Callable[[], bool | Awaitable[bool]], what: str, timeout: float = 30.0
) -> None:
    """Poll ``check`` until it is true; fail naming ``what`` after ``timeout`` seconds (a
    generous bound for a loaded machine, never a measurement)."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if inspect.isawaitable(result):
            result = await result
        if result:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


async def ttl_renewed(r: redis.Redis, key: str, times: int = 1, timeout: float = 30) -> None:
    """Wait until ``key`` has been set afresh ``times`` more times: its TTL goes up (a lock
    renewed; the throttle ``K:stalled-check``, set anew by each stalled check)."""
    deadline = time.monotonic() + timeout
    last = r.pttl(key)
    while times > 0:
        assert time.monotonic() < deadline, f"{key} not renewed {times} more times"
        await asyncio.sleep(0.01)
        now = r.pttl(key)
        if now > last:
            times -= 1
        last = now


async def stalled_checks(r: redis.Redis, n: int, queue: str = "q") -> None:
    """Wait until the queue's stalled check has run ``n`` more times."""
    await ttl_renewed(r, f"bull:{queue}:stalled-check", n)


def blocked_on_marker(r: redis.Redis) -> bool:
    """Whether a worker waits on the marker (its ``BZPOPMIN`` blocked in the server)."""
    return any(c["cmd"] == "bzpopmin" and "b" in c["flags"] for c in r.client_list())


def completed_events(r: redis.Redis, queue: str = "q") -> Counter[str]:
    """``completed`` events per job id in the queue's events stream."""
    return Counter(
        fields["jobId"]
        for _, fields in r.xrange(f"bull:{queue}:events")
        if fields.get("event") == "completed"
    )


def completed_at_least(r: redis.Redis, n: int, queue: str = "q") -> Callable[[], bool]:
    """A check for :func:`eventually`: ``n`` jobs of the queue are completed."""
    return lambda: int(r.zcard(f"bull:{queue}:completed")) >= n


def is_completed(r: redis.Redis, job_id: str, queue: str = "q") -> Callable[[], bool]:
    """A check for :func:`eventually`: the job is completed."""
    return lambda: r.zscore(f"bull:{queue}:completed", job_id) is not None


def events_of(r: redis.Redis, event: str, queue: str = "q") -> list[str]:
    return [f["jobId"] for _, f in r.xrange(f"bull:{queue}:events") if f.get("event") == event]


def where(r: redis.Redis, job_id: str, queue: str = "q") -> str:
    """The state a job is in, for failure messages."""
    base = f"bull:{queue}"
    for state in ("completed", "failed", "delayed", "prioritized", "waiting-children"):
        if r.zscore(f"{base}:{state}", job_id) is not None:
            return state
    for state in ("active", "wait", "paused"):
        if r.lpos(f"{base}:{state}", job_id) is not None:
            return state
    return "nowhere" if not r.exists(f"{base}:{job_id}") else "a hash in no list"


class Fleet:
    """In-process workers of one queue, each under a tag, recording the jobs they start.

    ``body`` is what a worker's processor does with a job that is not a probe; by default it
    sleeps ``job.data["ms"]`` milliseconds. ``plain=True`` makes a plain-function processor
    (run in a thread) instead of an ``async def`` one.
    """

    def __init__(self, url: str, queue: str = "q") -> None:
        self.url = url
        self.queue = queue
        #: How often each job's processor started, over every worker.
        self.runs: Counter[str] = Counter()
        self.lock_lost: list[str] = []
        self.stalled: list[str] = []
        self.workers: dict[str, Worker] = {}
        self.tasks: dict[str, asyncio.Task[None]] = {}

    def start(
        self,
        tag: str,
        body: Callable[[Any], Any] | None = None,
        *,
        plain: bool = False,
        **settings: Any,
    ) -> Worker:
        runs = self.runs

        def result(job_id: str) -> dict[str, str]:
            runs[job_id] += 1
            return {"worker": tag}

        if plain:

            def process_plain(job: Job) -> Any:
                answer = result(job.id)
                if job.name == PROBE:
                    return answer
                if body is not None:
                    return body(job)
                time.sleep(int((job.data or {}).get("ms", 0)) / 1000)
                return answer

            processor: Callable[[Any], Any] = process_plain
        else:

            async def process_async(job: AsyncJob) -> Any:
                answer = result(job.id)
                if job.name == PROBE:
                    return answer
                if body is not None:
                    return await body(job)
                await asyncio.sleep(int((job.data or {}).get("ms", 0)) / 1000)
                return answer

            processor = process_async
        worker = Worker(self.queue, processor, connection=self.url, name=tag, **settings)
        worker.on("lock_lost", self.lock_lost.append)
        worker.on("stalled", self.stalled.append)
        self.workers[tag] = worker
        self.tasks[tag] = asyncio.create_task(worker.run_async(), name=f"worker-{tag}")
        return worker

    def assert_running(self) -> None:
        for tag, task in self.tasks.items():
            if task.done():
                task.result()  # raises what ended it
                raise AssertionError(f"worker {tag} stopped on its own")

    async def close(self, tag: str, grace: float | None = 10.0) -> None:
        worker, task = self.workers.pop(tag), self.tasks.pop(tag)
        await worker.close(grace=grace)
        await task

    async def __aenter__(self) -> Fleet:
        return self

    async def __aexit__(self, *exc: object) -> None:
        # Closed also when the test failed, so that no worker outlives its test.
        errors: list[BaseException] = []
        for tag in list(self.workers):
            try:
                await asyncio.wait_for(self.close(tag), 30)
            except Exception as exc:
                errors.append(exc)
        if errors:
            raise errors[0]


async def assert_consuming(
    queue: AsyncQueue, r: redis.Redis, tags: Collection[str], timeout: float = 30.0
) -> list[str]:
    """Add probe jobs, one at a time, until each worker of ``tags`` has completed one; return
    their ids. Idle workers wait on the marker in turn (the server wakes the one blocked
    longest), so the probes go round; a worker that stopped consuming never gets one."""
    seen: set[str] = set()
    probes: list[str] = []
    deadline = time.monotonic() + timeout
    while set(tags) - seen:
        probe = (await queue.add(PROBE)).id
        probes.append(probe)
        await eventually(
            is_completed(r, probe, queue.name),
            f"probe {probe} (workers not seen yet: {sorted(set(tags) - seen)})",
            timeout=max(0.0, deadline - time.monotonic()),
        )
        value = r.hget(f"bull:{queue.name}:{probe}", "returnvalue")
        seen.add(orjson.loads(value or "{}").get("worker", "?"))
        assert time.monotonic() < deadline, f"workers not consuming: {sorted(set(tags) - seen)}"
    return probes


async def audit(
    queue: AsyncQueue,
    r: redis.Redis,
    *,
    completed: Collection[str],
    failed: Collection[str] = (),
    tags: Collection[str],
    caplog: pytest.LogCaptureFixture,
    runs: Counter[str] | None = None,
    fleet: Fleet | None = None,
    at_least_once: bool = False,
    timeout: float = 45.0,
) -> None:
    """The checks every fault test ends with (see the module docstring).

    Args:
        completed / failed: the jobs expected to end completed / failed for good.
        tags: the workers that must still be consuming.
        runs: processor starts per job; when given, each completed job ran exactly once.
        fleet: in-process workers: they must all be running (none ended on its own), and
            ``runs`` defaults to theirs; nobody may have reported a lost lock.
        at_least_once: a fault that may cost a job its lock (a worker cut off for longer than
            it): jobs may run twice and report ``lock_lost``, but are still completed once.
    """
    name = queue.name
    expected = set(completed) | set(failed)

    def finished() -> bool:
        done = set(r.zrange(f"bull:{name}:completed", 0, -1))
        done |= set(r.zrange(f"bull:{name}:failed", 0, -1))
        return expected <= done

    try:
        await eventually(finished, "every job to end", timeout)
    except AssertionError:
        states = Counter(where(r, j, name) for j in expected)
        raise AssertionError(f"jobs lost or unfinished: {dict(states)}") from None
    if fleet is not None:
        fleet.assert_running()
    probes = await assert_consuming(queue, r, tags)
    if fleet is not None:
        fleet.assert_running()
    # Nothing left active, no lock left behind.
    assert r.lrange(f"bull:{name}:active", 0, -1) == []
    assert list(r.scan_iter(f"bull:{name}:*:lock", count=1000)) == []
    # Every job where it belongs: nothing in between, nothing made twice.
    assert set(r.zrange(f"bull:{name}:completed", 0, -1)) == set(completed) | set(probes)
    assert set(r.zrange(f"bull:{name}:failed", 0, -1)) == set(failed)
    # Completed once: one event each.
    counts = completed_events(r, name)
    twice = {job_id: n for job_id, n in counts.items() if n > 1}
    assert not twice, f"completed more than once: {twice}"
    assert set(counts) == set(completed) | set(probes)
    if runs is None and fleet is not None:
        runs = fleet.runs
    if runs is not None:
        bad = {job_id: runs[job_id] for job_id in completed if runs[job_id] < 1}
        if not at_least_once:
            bad = {job_id: runs[job_id] for job_id in completed if runs[job_id] != 1}
        assert not bad, f"jobs not run exactly once: {bad}"
    if fleet is not None and not at_least_once:
        assert fleet.lock_lost == [], f"lock_lost reported for {fleet.lock_lost}"
    assert_no_traceback(caplog)


def assert_no_traceback(caplog: pytest.LogCaptureFixture) -> None:
    stacks = [
        f"{rec.name}: {rec.getMessage()}"
        for rec in caplog.records
        if rec.name.startswith("corral") and rec.exc_info
    ]
    assert not stacks, f"tracebacks logged: {stacks}"


def logged(caplog: pytest.LogCaptureFixture, text: str, level: int = logging.DEBUG) -> list[str]:
    """Messages of ``corral.*`` at ``level`` or above that contain ``text``."""
    return [
        rec.getMessage()
        for rec in caplog.records
        if rec.name.startswith("corral") and rec.levelno >= level and text in rec.getMessage()
    ]


async def add_jobs(queue: AsyncQueue, n: int, **data: Any) -> list[str]:
    """Add ``n`` jobs named ``job`` with ``data`` (``ms``: how long each runs)."""
    jobs = await queue.add_bulk([("job", {"i": i, **data}) for i in range(n)])
    return [job.id for job in jobs]
