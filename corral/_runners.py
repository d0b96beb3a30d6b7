"""Where a processor runs, and how a lease stops it: on the event loop, in a thread, or in a
child process.

A lease hands each attempt a :class:`Control`. The runner attaches to it the two ways the
attempt can be interrupted where it runs:

- *warn* (the soft timeout): an async processor is cancelled (it may catch the
  ``CancelledError``, see ``job.soft_timed_out``, and finish); a plain function gets
  :class:`~corral.errors.JobTimeoutWarning` raised in its thread or child process;
- *stop* (the timeout, a remote cancel, close after its grace): the task is cancelled, the
  thread gets an exception it cannot catch with ``except Exception``, the child process is
  killed. A stop is repeated every second until the processor has ended, because Python code
  can swallow an exception, and a thread blocked in a C call sees it only when the call
  returns. The lease settles the job only once the processor has ended (for a child: once
  the process is dead), so a job never runs twice at once.

:func:`make_runner` picks the runner for a worker's options; the runner owns what it runs on
(a thread pool and a blocking client, or a pool of child processes) until :meth:`Runner.close`.
"""

from __future__ import annotations

import asyncio
import contextvars
import ctypes
import functools
import threading
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, Protocol

import redis
from redis.asyncio import Redis

from corral import _twins
from corral._async.job import AsyncJob
from corral._provenance import attach as attach_provenance
from corral._provenance import check as check_provenance
from corral._provenance import detach as detach_provenance
from corral._sync.job import Job
from corral._sync.queue import Queue
from corral._threads import DaemonThreadPool
from corral.errors import (
    ChildJobError,
    DelayedError,
    JobTimeoutError,
    JobTimeoutWarning,
    ProcessorImportError,
)

if TYPE_CHECKING:
    from corral._processes import ProcessPool
    from corral.worker_options import WorkerOptions

#: How often a stop is repeated while the processor has not ended (seconds).
RESTOP_S = 1.0


class Stop(BaseException):
    """Raised in a plain function's thread to stop it (a ``BaseException``, so that an
    ``except Exception`` in job code does not swallow it). The attempt fails with the
    error the lease recorded (a timeout, a cancel), never with this."""


def seconds_text(ms: int) -> str:
    """``2000`` -> ``"2 s"``, ``1500`` -> ``"1.5 s"``: durations in failure reasons."""
    return f"{ms / 1000:g} s"


class Control:
    """The interruptions of one attempt; the lease owns it, the runner attaches to it."""

    __slots__ = ("_stop", "_timers", "_warn", "cancels", "cut", "error", "final", "running")

    def __init__(self) -> None:
        #: What the attempt fails with when it ends by our hand: the soft warning's
        #: JobTimeoutWarning, then (overriding it) a timeout or a cancel.
        self.error: BaseException | None = None
        #: A hard stop was asked: the attempt fails with ``error`` however the processor ends.
        self.final = False
        #: Close cut it short: the job goes back to wait (unless ``final``).
        self.cut = False
        self.running = False
        #: How many times the runner cancelled the lease's own task (the lease uncancels).
        self.cancels = 0
        self._warn: Callable[[], None] | None = None
        self._stop: Callable[[], None] | None = None
        self._timers: list[asyncio.TimerHandle] = []

    def attach(self, warn: Callable[[], None], stop: Callable[[], None]) -> None:
        """The runner's ways to interrupt the processor, now that it starts."""
        self._warn, self._stop = warn, stop
        self.running = True
        if self.final or self.cut:  # stopped before it started
            self._repeat_stop()

    def detach(self) -> None:
        """The processor has ended: nothing interrupts it any more (and the runner's
        closures, which hold the job and its task, are let go at once)."""
        self.running = False
        self._warn = self._stop = None
        for timer in self._timers:
            timer.cancel()
        self._timers.clear()

    def arm(self, timeout_ms: int, soft_timeout_ms: int) -> None:
        """Warn after ``soft_timeout_ms`` and stop after ``timeout_ms`` (0: never)."""
        loop = asyncio.get_running_loop()
        if soft_timeout_ms:
            warning = JobTimeoutWarning(
                f"soft timeout: still running after {seconds_text(soft_timeout_ms)}"
            )
            self._timers.append(loop.call_later(soft_timeout_ms / 1000, self.warn, warning))
        if timeout_ms:
            error = JobTimeoutError(f"timed out after {seconds_text(timeout_ms)}")
            self._timers.append(loop.call_later(timeout_ms / 1000, self.stop, error))

    def warn(self, warning: BaseException) -> None:
        if self.final or not self.running:
            return
        self.error = warning
        if self._warn is not None:
            self._warn()

    def stop(self, error: BaseException | None) -> None:
        """Stop the processor: fail the attempt with ``error``, or (``None``) put the job
        back in wait (close cut it short). The first error given is the one kept."""
        if error is None:
            self.cut = True
        elif not self.final:
            self.final, self.error = True, error
        if self.running:
            self._repeat_stop()

    def _repeat_stop(self) -> None:
        if not self.running or self._stop is None:
            return
        self._stop()
        self._timers.append(asyncio.get_running_loop().call_later(RESTOP_S, self._repeat_stop))


class Runner(Protocol):
    """Runs the processor on one job; the lease awaits :meth:`run`."""

    #: Whether close can stop a running job (a plain function in a thread cannot: close
    #: waits for it and keeps its lock).
    stoppable_on_close: bool

    async def run(self, job: AsyncJob, fields: dict[str, str], control: Control) -> Any: ...

    async def start(self) -> None:
        """Get ready before the first job (start the child processes)."""

    def resize(self, concurrency: int) -> None:
        """The worker's concurrency changed (a thread pool grows with it)."""

    async def close(self) -> None:
        """Release what the runner runs on; no job runs any more."""


def make_runner(
    o: WorkerOptions,
    client: Redis,
    concurrency: int,
    emit: Callable[..., Coroutine[Any, Any, None]],
) -> Runner:
    """Where a worker's processor runs: on the loop, in threads, or in child processes.

    Args:
        o: the worker's options (processor, ``processes``, the jobs' size limits).
        client: the worker's client; a plain function's :class:`Job` gets a blocking twin.
        concurrency: the worker's, to size the thread pool.
        emit: the worker's ``emit(event, *args)``, for the jobs' ``progress`` events.
    """
    assert o.processor is not None

    async def on_progress(job: AsyncJob, progress: Any) -> None:
        await emit("progress", job, progress)

    if o.processes is not None:
        from corral._processes import ProcessPool  # only workers with processes= need it

        p = o.processes
        children = ProcessPool(
            p.spec, p.size, max_memory_mb=p.max_memory_mb, max_jobs_per_child=p.max_jobs_per_child
        )
        return ProcessRunner(children, on_progress)
    if o.is_async:
        return AsyncRunner(o.processor, on_progress)
    loop = asyncio.get_running_loop()

    def on_thread_progress(job: Job, progress: Any) -> None:
        # A sync processor runs in a thread: its progress events are emitted on the loop.
        asyncio.run_coroutine_threadsafe(emit("progress", job, progress), loop).result()

    sync_queue = Queue(
        o.queue_name,
        connection=_twins.sync_twin(client),
        prefix=o.prefix,
        max_progress_bytes=o.max_progress_bytes,
        max_log_line_bytes=o.max_log_line_bytes,
    )
    threads = DaemonThreadPool(max(32, concurrency))
    return ThreadRunner(o.processor, threads, sync_queue, on_thread_progress)


class AsyncRunner:
    """An ``async def`` processor, run in the lease's own task."""

    stoppable_on_close = True

    def __init__(self, processor: Callable[[Any], Any], on_progress: Any) -> None:
        self._processor = processor
        self._on_progress = on_progress

    async def start(self) -> None:
        pass

    def resize(self, concurrency: int) -> None:
        pass

    async def close(self) -> None:
        pass

    async def run(self, job: AsyncJob, fields: dict[str, str], control: Control) -> Any:
        task = asyncio.current_task()
        assert task is not None

        def cancel() -> None:
            control.cancels += 1
            task.cancel()

        def warn() -> None:
            job.soft_timed_out = True
            cancel()

        job._on_progress = self._on_progress
        scope = attach_provenance(job)  # raises (the job fails for good) when refused
        control.attach(warn, cancel)
        try:
            return await self._processor(job)
        finally:
            control.detach()
            detach_provenance(scope)


def _raise_in_thread(ident: int, exc_type: type[BaseException] | None) -> None:
    # PyThreadState_SetAsyncExc(thread id, exception type or NULL): raise in that thread at
    # its next bytecode; NULL (None) clears one still pending.
    exc = None if exc_type is None else ctypes.py_object(exc_type)
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(ident), exc)


class _ThreadCall:
    """One call of a plain function in a pool thread, which the loop can interrupt."""

    __slots__ = ("_ident", "_lock", "_sent", "_stopped")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ident: int | None = None
        self._stopped = False
        self._sent = False

    def __call__(self, processor: Callable[[Job], Any], job: Job) -> Any:
        with self._lock:
            if self._stopped:
                raise Stop
            self._ident = threading.get_ident()
        try:
            return processor(job)
        finally:
            with self._lock:
                ident, self._ident = self._ident, None
                if ident is not None and self._sent:
                    # A raise sent just as the function returned must not reach the next
                    # job this thread runs.
                    _raise_in_thread(ident, None)

    def raise_in(self, exc_type: type[BaseException]) -> None:
        with self._lock:
            if self._ident is None:
                self._stopped = self._stopped or exc_type is Stop
                return
            self._sent = True
            _raise_in_thread(self._ident, exc_type)


class ThreadRunner:
    """A plain function, run in a daemon thread with a :class:`Job` whose methods block (on
    ``queue``'s client). It owns ``pool`` and ``queue``'s client: :meth:`close` shuts them."""

    stoppable_on_close = False

    def __init__(
        self,
        processor: Callable[[Job], Any],
        pool: DaemonThreadPool,
        queue: Queue,
        on_progress: Callable[[Job, Any], None],
    ) -> None:
        self._processor = processor
        self._pool = pool
        self._queue = queue
        self._on_progress = on_progress

    async def start(self) -> None:
        pass

    def resize(self, concurrency: int) -> None:
        self._pool.max_workers = max(self._pool.max_workers, concurrency)

    async def close(self) -> None:
        self._pool.shutdown(wait=False)
        if isinstance(self._queue._connection, redis.Redis):
            _twins.close_sync(self._queue._connection)

    async def run(self, job: AsyncJob, fields: dict[str, str], control: Control) -> Any:
        sync_job = Job.from_hash(job.queue_name, job.id, {}, token=job.token)
        for name in job.__dataclass_fields__:
            setattr(sync_job, name, getattr(job, name))
        sync_job.queue = self._queue
        sync_job._on_progress = self._on_progress
        call = _ThreadCall()

        def warn() -> None:
            sync_job.soft_timed_out = job.soft_timed_out = True
            call.raise_in(JobTimeoutWarning)

        control.attach(warn, functools.partial(call.raise_in, Stop))
        loop = asyncio.get_running_loop()
        # The thread runs in a copy of the lease's context, as asyncio.to_thread does: what
        # the processor reads from contextvars (the attempt's span) is what the lease set;
        # and the job's provenance scope, set in the copy only.
        context = contextvars.copy_context()
        context.run(attach_provenance, sync_job)  # raises (the job fails for good) if refused
        try:
            return await loop.run_in_executor(
                self._pool, context.run, call, self._processor, sync_job
            )
        finally:
            control.detach()
            job._discarded = job._discarded or sync_job._discarded  # Job.discard in the thread


class ProcessRunner:
    """A function named ``module:function``, run in a pool of child processes; what the
    child asks of its job (progress, logs, data) is done here, on the real job. It owns
    ``pool``: :meth:`start` starts the children, :meth:`close` stops them."""

    stoppable_on_close = True

    def __init__(self, pool: ProcessPool, on_progress: Any) -> None:
        self._pool = pool
        self._on_progress = on_progress
        self._kills: set[asyncio.Task[None]] = set()
        #: Told when the pool can no longer start children (a replacement cannot import the
        #: processor): the worker stops, as on a configuration error.
        self.on_broken: Callable[[ProcessorImportError], None] = lambda error: None

    async def start(self) -> None:
        await self._pool.start()

    def resize(self, concurrency: int) -> None:
        pass  # the pool has its size (``processes``) whatever the concurrency

    async def close(self) -> None:
        await self._pool.close()

    async def run(self, job: AsyncJob, fields: dict[str, str], control: Control) -> Any:
        from corral._child_calls import ChildCalls  # only workers with processes= need them
        from corral._processes import ChildJobSpec

        job._on_progress = self._on_progress
        # Checked here, where the worker's key is; the child sets the scope from the job's
        # fields itself (corral._child_job).
        check_provenance(job)

        calls = ChildCalls(job)

        spec = ChildJobSpec(
            job.queue_name, job.id, fields, job.token, job.deadline, job.soft_deadline
        )
        run = self._pool.submit(spec, calls)

        def warn() -> None:
            job.soft_timed_out = True
            run.warn()

        def stop() -> None:
            # The child is killed; result() raises once it is dead, whatever the error says
            # (the lease fails the attempt with control.error, or puts the job back).
            task = asyncio.ensure_future(run.kill(control.error or Stop()))
            self._kills.add(task)
            task.add_done_callback(self._kills.discard)

        control.attach(warn, stop)
        try:
            return await run.result()
        except ChildJobError as exc:
            if calls.parked and exc.type_name == "corral.errors.DelayedError":
                raise DelayedError(str(exc)) from None  # parked by wait_for_signal
            raise
        except ProcessorImportError as exc:
            # No child ran it: the job goes back to wait for a worker that can run it.
            control.cut = True
            self.on_broken(exc)
            raise
        finally:
            control.detach()
