"""corral's pytest plugin: a real server for an app's tests, a clean queue per test, and helpers
that run the app's jobs for real and check how they ended (docs/testing.md).

Installing corral registers this module as the pytest plugin ``corral.testing`` (entry point
``pytest11``), and it is inert: it only adds fixtures named ``corral_*`` (no hook, no option,
nothing imported or started at collection), so a suite that requests none of them runs exactly
as without it. ``pytest -p corral.testing`` loads it explicitly (needed when
``PYTEST_DISABLE_PLUGIN_AUTOLOAD`` is set), ``-p no:corral.testing`` removes it.

There is no "eager" mode: jobs are added to a real Valkey/Redis and run by a real
:class:`~corral.Worker`, with their retries, backoffs, flows and events, as in production.

Example::

    from corral.testing import assert_completed, drain

    def test_welcome_email(corral_queue):
        job = corral_queue.add("welcome", {"to": "ada@example.com"})
        drain(corral_queue, send_email)
        assert_completed(job, returnvalue={"sent": True})
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import types
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from corral import server as _server
from corral._async.job import AsyncJob
from corral._async.queue import AsyncQueue
from corral._burst import RunSummary
from corral._sync.job import Job
from corral._sync.queue import Queue
from corral.errors import InvalidOptionError, JobNotFoundError
from corral.job import JobRecord, JobState
from corral.worker import Processor, Worker

__all__ = [
    "assert_completed",
    "assert_completed_async",
    "assert_failed",
    "assert_failed_async",
    "corral_queue",
    "corral_server",
    "drain",
    "drain_async",
    "run_until_idle",
    "run_until_idle_async",
    "unique_queue_name",
]

#: Default bound, in seconds, of :func:`run_until_idle` and :func:`drain`.
DEFAULT_TIMEOUT = 30.0
#: ``close_grace`` of the workers :func:`drain` makes: a test that runs out of time should
#: fail soon, not wait the production default (30 s) for a job that hangs.
DRAIN_CLOSE_GRACE = 1.0
# Queue names may not hold ":"; node ids hold "::" and "[...]".
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")
_MISSING: Any = object()
# The helpers set ``__tracebackhide__``: pytest then leaves their frames out of a failure's
# traceback, which ends at the test's own line and the helper's message.


# -- fixtures -------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def corral_server() -> Iterator[str]:
    """The URL of the server the tests use, for the whole session.

    ``CORRAL_REDIS_URL`` when it is set (a server someone else runs: it is never flushed or
    stopped). Else an embedded Valkey (``corral.server``) started in a fresh temporary data
    directory, and ``CORRAL_REDIS_URL`` is set to it for the session, so that the code under
    test that opens ``Queue("emails")`` without a connection reaches it too (rather than
    starting a server in the project's ``.corral/``). That server, and only that one, is
    stopped and its directory removed when the session ends.
    """
    configured = os.environ.get("CORRAL_REDIS_URL")
    if configured:
        yield configured
        return
    data_dir = Path(tempfile.mkdtemp(prefix="corral-pytest-"))
    try:
        url = _server.ensure_server(data_dir)
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("CORRAL_REDIS_URL", url)
            yield url
    finally:
        _server.stop(data_dir)
        shutil.rmtree(data_dir, ignore_errors=True)


@pytest.fixture
def corral_queue(corral_server: str, request: pytest.FixtureRequest) -> Iterator[Queue]:
    """A sync :class:`~corral.Queue` of its own for this test (:func:`unique_queue_name`), on
    :func:`corral_server`; obliterated (every key of it removed) and closed after the test."""
    queue = Queue(unique_queue_name(request.node.name), connection=corral_server)
    try:
        yield queue
    finally:
        try:
            queue.obliterate(force=True)
        finally:
            queue.close()


async def _async_queue(
    corral_server: str, request: pytest.FixtureRequest
) -> AsyncIterator[AsyncQueue]:
    """An :class:`~corral.AsyncQueue` of its own for this test, on the test's event loop
    (needs pytest-asyncio); obliterated and closed after the test."""
    queue = AsyncQueue(unique_queue_name(request.node.name), connection=corral_server)
    try:
        yield queue
    finally:
        try:
            await queue.obliterate(force=True)
        finally:
            await queue.close()


def _no_pytest_asyncio() -> None:
    """An :class:`~corral.AsyncQueue` fixture: it needs pytest-asyncio, which is not loaded."""
    raise pytest.UsageError("corral_async_queue needs pytest-asyncio: pip install pytest-asyncio")


def pytest_configure(config: pytest.Config) -> None:
    """Add ``corral_async_queue``: an async fixture of pytest-asyncio when it is loaded.

    Done here rather than at import: importing pytest_asyncio while pytest is still loading
    the ``-p`` plugins would make its own later ``-p asyncio`` warn that it is already imported
    (an error under ``filterwarnings = error``); by now every plugin is loaded.
    """
    loaded = {getattr(p, "__name__", None) for p in config.pluginmanager.get_plugins()}
    if "pytest_asyncio.plugin" in loaded:
        import pytest_asyncio

        fixture = pytest_asyncio.fixture(_async_queue, name="corral_async_queue")
    else:
        fixture = pytest.fixture(_no_pytest_asyncio, name="corral_async_queue")
    holder = types.ModuleType("corral.testing.async")  # pytest reads fixtures off modules
    holder.corral_async_queue = fixture  # type: ignore[attr-defined]
    config.pluginmanager.register(holder, holder.__name__)


def unique_queue_name(hint: str = "test") -> str:
    """A queue name no other test uses: ``hint`` made safe (no ``:``), and a random suffix."""
    safe = _UNSAFE.sub("-", hint).strip("-")[:60] or "test"
    return f"{safe}-{uuid.uuid4().hex[:10]}"


# -- running jobs ---------------------------------------------------------------------------


def run_until_idle(
    worker: Worker, *, timeout: float = DEFAULT_TIMEOUT, burst_wait: float = 0
) -> RunSummary:
    """Run ``worker`` until its queue is idle, then close it; a blocking call.

    Idle: nothing waiting, nothing running, and no delayed job due within ``burst_wait``
    seconds (the worker's burst mode, :meth:`Worker.run` with ``burst=True``). A job retried
    with a backoff goes to delayed: give ``burst_wait`` at least its backoff to see the retry
    run. Jobs the processor adds (children, follow-ups) run too.

    Returns:
        What the run did (:class:`~corral.RunSummary`: completed, failed, retried).

    Raises:
        AssertionError: the queue was not idle after ``timeout`` seconds (the worker is closed,
            as on a signal, before this is raised).
    """
    __tracebackhide__ = True
    summary = worker.run(burst=True, burst_wait=burst_wait, max_time=timeout)
    return _idle_or_raise(worker, summary, timeout)


async def run_until_idle_async(
    worker: Worker, *, timeout: float = DEFAULT_TIMEOUT, burst_wait: float = 0
) -> RunSummary:
    """:func:`run_until_idle` for async tests: runs the worker on the test's event loop."""
    __tracebackhide__ = True
    summary = await worker.run_async(burst=True, burst_wait=burst_wait, max_time=timeout)
    return _idle_or_raise(worker, summary, timeout)


def _idle_or_raise(worker: Worker, summary: RunSummary, timeout: float) -> RunSummary:
    __tracebackhide__ = True
    if summary.stopped == "max_time":
        raise AssertionError(
            f"queue {worker.queue_name} was not idle after {timeout} s "
            f"({summary.completed} completed, {summary.failed} failed, {summary.retried} "
            "retried meanwhile): a job still running, waiting or due (raise timeout=, or "
            "look for a job that never ends)"
        )
    return summary


def drain(
    queue: Queue | AsyncQueue,
    processor: Processor | str,
    *,
    timeout: float = DEFAULT_TIMEOUT,
    burst_wait: float = 0,
    **worker_options: Any,
) -> RunSummary:
    """Run ``processor`` on ``queue``'s jobs until the queue is idle (:func:`run_until_idle`).

    The worker is made for you: ``Worker(queue.name, processor, connection=..., prefix=...,
    **worker_options)`` on the queue's own connection (give ``connection=`` in
    ``worker_options`` when the queue was made with a client rather than a URL), with a
    ``close_grace`` of :data:`DRAIN_CLOSE_GRACE` unless you give one.
    """
    __tracebackhide__ = True
    return run_until_idle(
        _drain_worker(queue, processor, worker_options), timeout=timeout, burst_wait=burst_wait
    )


async def drain_async(
    queue: Queue | AsyncQueue,
    processor: Processor | str,
    *,
    timeout: float = DEFAULT_TIMEOUT,
    burst_wait: float = 0,
    **worker_options: Any,
) -> RunSummary:
    """:func:`drain` for async tests: the worker runs on the test's event loop."""
    __tracebackhide__ = True
    worker = _drain_worker(queue, processor, worker_options)
    return await run_until_idle_async(worker, timeout=timeout, burst_wait=burst_wait)


def _drain_worker(
    queue: Queue | AsyncQueue, processor: Processor | str, options: dict[str, Any]
) -> Worker:
    if "connection" not in options:
        connection = queue._connection
        if not (connection is None or isinstance(connection, str)):
            raise InvalidOptionError(
                f"queue {queue.name} was made with a client, which a worker cannot share: "
                "give drain() connection= (a URL or a redis-py asyncio client)"
            )
        options["connection"] = connection
    options.setdefault("prefix", queue.prefix)
    options.setdefault("close_grace", DRAIN_CLOSE_GRACE)
    return Worker(queue.name, processor, **options)


# -- assertions -----------------------------------------------------------------------------


def assert_completed(job: Job, returnvalue: Any = _MISSING) -> Any:
    """Assert that ``job`` (read again from the server) completed, and with ``returnvalue``
    when given; return its return value.

    Raises:
        AssertionError: it did not complete (the message says where it is, and why it failed
            if it did), or returned something else.
    """
    __tracebackhide__ = True
    return _check_completed(_fresh(job), job.get_state(), returnvalue)


async def assert_completed_async(job: AsyncJob, returnvalue: Any = _MISSING) -> Any:
    """:func:`assert_completed` for an :class:`~corral.AsyncJob`."""
    __tracebackhide__ = True
    return _check_completed(await _fresh_async(job), await job.get_state(), returnvalue)


def assert_failed(job: Job, reason: str | re.Pattern[str] | None = None) -> str:
    """Assert that ``job`` (read again from the server) failed for good; return its reason.

    Args:
        reason: a text the failed reason must contain, or a compiled pattern it must match
            (``re.search``).

    Raises:
        AssertionError: it did not fail (it completed, is still waiting, or is being
            retried), or failed for another reason.
    """
    __tracebackhide__ = True
    return _check_failed(_fresh(job), job.get_state(), reason)


async def assert_failed_async(job: AsyncJob, reason: str | re.Pattern[str] | None = None) -> str:
    """:func:`assert_failed` for an :class:`~corral.AsyncJob`."""
    __tracebackhide__ = True
    return _check_failed(await _fresh_async(job), await job.get_state(), reason)


def _fresh(job: Job) -> Job:
    __tracebackhide__ = True
    _check_job(job, Job, "assert_completed_async / assert_failed_async")
    try:
        job.refresh()
    except JobNotFoundError:
        raise AssertionError(_gone(job)) from None
    return job


async def _fresh_async(job: AsyncJob) -> AsyncJob:
    __tracebackhide__ = True
    _check_job(job, AsyncJob, "assert_completed / assert_failed")
    try:
        await job.refresh()
    except JobNotFoundError:
        raise AssertionError(_gone(job)) from None
    return job


def _check_job(job: object, kind: type, other: str) -> None:
    if not isinstance(job, kind):
        hint = f" (use {other} for a {type(job).__name__})" if isinstance(job, JobRecord) else ""
        raise TypeError(f"expected a {kind.__name__}, got {type(job).__name__}{hint}")


def _gone(job: JobRecord) -> str:
    return (
        f"job {job.id} ({job.name}) does not exist in queue {job.queue_name} any more "
        "(removed: removeOnComplete, removeOnFail, clean?)"
    )


def _label(job: JobRecord) -> str:
    return f"job {job.id} ({job.name}) of queue {job.queue_name}"


def _where(job: JobRecord, state: JobState) -> str:
    """Why a job is not where the assertion expected it."""
    if state is JobState.FAILED:
        last = job.stacktrace[-1].strip().splitlines()[-1:] if job.stacktrace else []
        tail = f"; last error: {last[0]}" if last and last[0] != job.failed_reason else ""
        return f"failed: {job.failed_reason!r}{tail}"
    if state is JobState.COMPLETED:
        return f"completed, returning {job.returnvalue!r}"
    if state is JobState.DELAYED and job.attempts_made:
        return (
            f"delayed, to be retried after {job.attempts_made} failed attempt(s): "
            f"{job.failed_reason!r} (give run_until_idle/drain burst_wait= to run the retry)"
        )
    if state in (JobState.WAITING, JobState.PRIORITIZED, JobState.DELAYED):
        return f"{state.value}: it has not run (run a worker: run_until_idle or drain)"
    return str(state.value)


def _check_completed(job: JobRecord, state: JobState, returnvalue: Any) -> Any:
    __tracebackhide__ = True
    if state is not JobState.COMPLETED:
        raise AssertionError(f"{_label(job)} did not complete: it is {_where(job, state)}")
    if returnvalue is not _MISSING and job.returnvalue != returnvalue:
        raise AssertionError(
            f"{_label(job)} completed with {job.returnvalue!r}, expected {returnvalue!r}"
        )
    return job.returnvalue


def _check_failed(job: JobRecord, state: JobState, reason: str | re.Pattern[str] | None) -> str:
    __tracebackhide__ = True
    if state is not JobState.FAILED:
        raise AssertionError(f"{_label(job)} did not fail: it is {_where(job, state)}")
    got = job.failed_reason or ""
    if isinstance(reason, re.Pattern):
        if reason.search(got) is None:
            raise AssertionError(
                f"{_label(job)} failed with {got!r}, which does not match {reason.pattern!r}"
            )
    elif reason is not None and reason not in got:
        raise AssertionError(
            f"{_label(job)} failed with {got!r}, which does not contain {reason!r}"
        )
    return got
