"""``Worker``: take jobs from a queue and run a processor on them (BullMQ's ``Worker``).

One asyncio loop drives everything. Each concurrency slot is a task that runs a job, finishes
it with ``move_to_finished`` and, in the same script call, takes the next job (fetch-next), so
a busy worker makes one round trip per job. When slots are free and nothing was fetched, the
worker blocks on ``BZPOPMIN K:marker`` on its own connection. ``async def`` processors run on
the loop and get an :class:`AsyncJob`; plain functions run in a thread pool and get a
:class:`Job` whose methods block. Beside the loop, a lock manager renews every held lock in
one call every ``lock_duration / 2``, and a stalled checker recovers jobs of dead workers.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import inspect
import logging
import random
import signal
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import redis
from redis.asyncio import Redis

from corral import _scripts, _twins, _upkeep, options
from corral._async._redis import check_server, open_client
from corral._async.job import AsyncJob
from corral._async.queue import AsyncQueue
from corral._async.queue_schedulers import schedule_next_iteration
from corral._finisher import Finisher
from corral._keys import DEFAULT_PREFIX
from corral._listeners import Callback, Listeners
from corral._sync.job import Job
from corral._sync.queue import Queue
from corral.clock import now_ms
from corral.errors import (
    DelayedError,
    InvalidOptionError,
    JobError,
    RateLimitError,
    WaitingChildrenError,
    WaitingError,
    script_error,
)
from corral.options import Duration
from corral.retry import BackoffStrategy, RetryPolicy

logger = logging.getLogger("corral.worker")

#: A processor: ``async def f(job: AsyncJob)`` or ``def f(job: Job)``; it returns JSON.
Processor = Callable[[Any], Any]

#: Events a worker emits, with the arguments its callbacks receive.
EVENTS = {
    "active": "(job)",
    "completed": "(job, result)",
    "failed": "(job, error): every failed attempt, retried or not",
    "progress": "(job, progress)",
    "stalled": "(job_id)",
    "drained": "()",
    "error": "(error)",
    "lock_lost": "(job_id)",
}

_NETWORK_ERRORS = _upkeep.NETWORK_ERRORS
#: Marks a finish that is not a completion (no return value to report).
_FAILED: Any = object()
#: Reconnect waits grow from 50 ms and stop growing at 1 s, so a returning server is used
#: within about a second and a dead one costs a log line a second, never a busy loop.
_RECONNECT_BASE_S = 0.05
_RECONNECT_MAX_S = 1.0


T = TypeVar("T")


def run_event_loop(main: Coroutine[Any, Any, T]) -> T:
    """Run ``main`` on a new event loop: uvloop's when it is installed (``corral[fast]``),
    else asyncio's. uvloop's loop and transports take about 15% off a busy worker's CPU."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(main)
    return uvloop.run(main)


class Worker:
    """Processes jobs of one queue.

    Args:
        queue_name: the queue to work on.
        processor: ``async def f(job)`` (gets an :class:`AsyncJob`) or ``def f(job)`` (runs in a
            thread, gets a :class:`Job`); what it returns (JSON) becomes the job's return
            value, what it raises fails the attempt. ``None`` for manual fetching with
            :meth:`get_next_job`.
        connection: a URL, a redis-py asyncio client (``decode_responses=True``) or ``None``.
        concurrency: how many jobs run at once; can be changed while running.
        name: stored on each job it takes (``processedBy``) and shown by ``get_workers``.
        lock_duration: seconds a job's lock lives without renewal.
        stalled_interval: seconds between stalled checks (shared by all workers of the queue).
        max_stalled_count: how often a job may be recovered from a stall before it fails.
        drain_delay: longest blocking wait for new jobs, in seconds.
        limiter: ``{"max": n, "duration": seconds}``: at most n jobs per duration, counted
            across every worker of the queue.
        backoff_strategies: custom backoff types: ``name -> f(attempts_made, delay_ms,
            error, job) -> ms``.
        retry_on / no_retry_on: exception types that are (only) / never retried.
        close_grace: on SIGTERM/SIGINT, seconds to let running jobs finish before they are
            cancelled and put back in wait.
        metrics_max_data_points: record BullMQ's per-minute completed/failed counts, keeping
            this many minutes (0: no metrics; BullMQ's ``metrics.maxDataPoints``).

    Example::

        def resize(job):
            return {"done": job.data["path"]}

        Worker("images", resize, concurrency=4).run()   # until SIGINT / SIGTERM
    """

    def __init__(
        self,
        queue_name: str,
        processor: Processor | None,
        *,
        connection: str | Redis | None = None,
        prefix: str = DEFAULT_PREFIX,
        concurrency: int = 1,
        name: str | None = None,
        lock_duration: Duration = 30.0,
        stalled_interval: Duration = 30.0,
        max_stalled_count: int = 1,
        drain_delay: Duration = 5.0,
        limiter: Mapping[str, Any] | None = None,
        backoff_strategies: Mapping[str, BackoffStrategy] | None = None,
        retry_on: type[BaseException] | Sequence[type[BaseException]] | None = None,
        no_retry_on: type[BaseException] | Sequence[type[BaseException]] = (),
        close_grace: Duration = 30.0,
        metrics_max_data_points: int = 0,
        strict: bool = False,
    ) -> None:
        options.check_name("queue name", queue_name, colon=False)
        if processor is not None and not callable(processor):
            raise InvalidOptionError(f"processor must be callable, got {processor!r}")
        self.queue_name = queue_name
        self.processor = processor
        self._concurrency = options.int_option("concurrency", concurrency, 1)
        self.name = name or ""
        self.prefix = prefix
        self._lock_ms = options.duration_ms("lock_duration", lock_duration)
        self._stalled_ms = options.duration_ms("stalled_interval", stalled_interval)
        self._max_stalled = options.int_option("max_stalled_count", max_stalled_count, 0)
        self._drain_delay = options.duration_ms("drain_delay", drain_delay) / 1000
        self._limit_max, self._limit_ms = options.limiter(limiter)
        self._policy = RetryPolicy(
            strategies=dict(backoff_strategies or {}),
            retry_on=None if retry_on is None else options.exception_types("retry_on", retry_on),
            no_retry_on=options.exception_types("no_retry_on", no_retry_on),
        )
        self.close_grace = options.duration_ms("close_grace", close_grace) / 1000
        self._metrics_points = options.int_option(
            "metrics_max_data_points", metrics_max_data_points, 0
        )
        self._connection = connection
        self._strict = strict
        self._is_async = processor is not None and inspect.iscoroutinefunction(processor)
        self._token_base = str(uuid.uuid4())
        self._token_seq = 0
        self._held: dict[str, str] = {}  # job id -> lock token
        self._slots: dict[asyncio.Task[None], AsyncJob] = {}
        self._listeners = Listeners("worker", EVENTS)
        self._slot_freed = asyncio.Event()
        self._closing = False
        self._running = False
        self._stopped = asyncio.Event()
        self._queue: AsyncQueue | None = None
        self._sync_queue: Queue | None = None
        self._blocking: Redis | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._block_task: asyncio.Task[Any] | None = None
        self._finisher: Finisher | None = None
        self._drained = True

    # -- settings and events -------------------------------------------------------------

    @property
    def concurrency(self) -> int:
        """How many jobs run at once. Setting it while running takes effect at once."""
        return self._concurrency

    @concurrency.setter
    def concurrency(self, value: int) -> None:
        self._concurrency = options.int_option("concurrency", value, 1)
        if self._executor is not None and value > self._executor._max_workers:
            old, self._executor = self._executor, self._new_executor()
            old.shutdown(wait=False)
        self._slot_freed.set()

    def _new_executor(self) -> ThreadPoolExecutor:
        # Threads are made on demand, so a roomy pool costs nothing until it is used.
        return ThreadPoolExecutor(
            max_workers=max(32, self._concurrency), thread_name_prefix="corral-job"
        )

    def on(self, event: str, callback: Callback | None = None) -> Any:
        """Call ``callback`` on ``event`` (see :data:`EVENTS`); usable as a decorator.

        Callbacks may be plain or ``async def``; an exception in one is logged, never fatal.
        """
        return self._listeners.on(event, callback)

    async def _emit(self, event: str, *args: Any) -> None:
        if event in self._listeners:  # most workers listen to nothing: skip the coroutine
            await self._listeners.emit(event, *args)

    # -- running -------------------------------------------------------------------------

    def run(self) -> None:
        """Run until SIGINT or SIGTERM, then close gracefully (a blocking call).

        The first signal stops fetching and gives running jobs ``close_grace`` seconds; a
        second one cancels them at once. Jobs cut short go back to wait.
        """
        run_event_loop(self._run_with_signals())

    async def _run_with_signals(self) -> None:
        loop = asyncio.get_running_loop()
        signals = 0

        closing: set[asyncio.Task[None]] = set()

        def on_signal() -> None:
            nonlocal signals
            signals += 1
            grace = self.close_grace if signals == 1 else 0.0
            task = loop.create_task(self.close(grace=grace))
            closing.add(task)
            task.add_done_callback(closing.discard)

        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, on_signal)
        await self.run_async()

    async def close(self, *, grace: float | None = None) -> None:
        """Stop fetching, wait up to ``grace`` seconds for running jobs (``None``: as long as
        they take), cancel the rest and put them back in wait, then release connections."""
        self._closing = True
        self._slot_freed.set()
        if self._block_task is not None:
            self._block_task.cancel()
        if self._slots:
            _, pending = await asyncio.wait(list(self._slots), timeout=grace)
            if pending:
                await self._cut_short(pending)
        if self._running:
            await self._stopped.wait()
        else:
            await self._release()

    async def _cut_short(self, tasks: set[asyncio.Task[None]]) -> None:
        for task in tasks:
            task.cancel()
        # Each slot puts its job back in wait as it unwinds (see _process).
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _put_back(self, job: AsyncJob, token: str | None) -> None:
        """Return a job cut short by close() to wait at once, rather than after a stall."""
        self._held.pop(job.id, None)
        try:
            await job.move_to_wait(token)
            logger.info("worker %s: job %s cut short, back in wait", self.queue_name, job.id)
        except (JobError, *_NETWORK_ERRORS) as exc:
            logger.warning("worker %s: job %s not put back: %s", self.queue_name, job.id, exc)

    async def _open(self) -> AsyncQueue:
        if self._queue is None:
            # A connection for every slot, and a few for the lock manager and stall checks.
            client = open_client(self._connection, max_connections=self._concurrency + 8)
            await check_server(client, strict=self._strict, owned=client is not self._connection)
            self._queue = AsyncQueue(self.queue_name, connection=client, prefix=self.prefix)
        return self._queue

    async def run_async(self) -> None:
        """Process jobs until :meth:`close` is called."""
        if self.processor is None:
            raise InvalidOptionError("this worker has no processor: use get_next_job()")
        self._stopped.clear()
        self._running = True
        try:
            queue = await self._open()
            self._finisher = Finisher(queue, self._fetch)
            client = await queue.client()
            # The blocking connection reads longer than BZPOPMIN waits, and carries BullMQ's
            # client name so that Queue.get_workers() (and Node's getWorkers) list this worker.
            self._blocking = _twins.blocking_twin(
                client, read_timeout=self._drain_delay + 10, client_name=self._client_name
            )
            if not self._is_async:
                self._executor = self._new_executor()
                self._sync_queue = Queue(
                    self.queue_name, connection=_twins.sync_twin(client), prefix=self.prefix
                )
            helpers = [
                asyncio.create_task(
                    _upkeep.renew_locks(queue, self._held, self._lock_ms, self._emit)
                ),
                asyncio.create_task(_upkeep.check_stalled(queue, self._stalled_ms, self._emit)),
            ]
            try:
                await self._fetch_loop()
                if self._slots:
                    await asyncio.gather(*self._slots, return_exceptions=True)
            finally:
                for task in helpers:
                    task.cancel()
                await asyncio.gather(*helpers, return_exceptions=True)
        finally:
            await self._release()
            self._running = False
            self._stopped.set()

    @property
    def _client_name(self) -> str:
        encoded = base64.b64encode(self.queue_name.encode()).decode()
        base = f"{self.prefix}:{encoded}"
        return f"{base}:w:{self.name}" if self.name else base

    async def _release(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=False)
            self._executor = None
        if self._blocking is not None:
            await _twins.close_async(self._blocking)
            self._blocking = None
        if self._sync_queue is not None:
            if isinstance(self._sync_queue._connection, redis.Redis):
                _twins.close_sync(self._sync_queue._connection)
            self._sync_queue = None
        if self._queue is not None:
            self._queue._close_caller()
            client = self._queue._client
            if client is not None and client is not self._connection:
                await client.aclose()
            self._queue = None

    def _fetch(self, count: int) -> _scripts.FetchNext:
        first = self._token_seq
        self._token_seq += count
        return _scripts.FetchNext(
            count,
            self._token_base,
            first,
            self._lock_ms,
            self.name,
            self._max_stalled,
            self._limit_max,
            self._limit_ms,
            self._metrics_points,
        )

    async def _fetch_loop(self) -> None:
        failures = 0
        while not self._closing:
            free = self._concurrency - len(self._slots)
            if free <= 0:
                self._slot_freed.clear()
                await self._slot_freed.wait()
                continue
            try:
                jobs, wake = await self._move_to_active(free)
                if jobs:
                    self._drained = False
                    for job in jobs:
                        await self._start_slot(job)
                else:
                    if not self._drained and not self._slots:
                        self._drained = True
                        await self._emit("drained")
                    await self._wait_for_work(wake)
                if failures:
                    logger.warning("worker %s: connection restored", self.queue_name)
                failures = 0
            except _NETWORK_ERRORS as exc:
                failures += 1
                delay = min(_RECONNECT_MAX_S, _RECONNECT_BASE_S * 2**failures)
                delay *= random.uniform(0.5, 1.0)
                logger.warning(
                    "worker %s: connection error (%s); retry %d in %.2fs",
                    self.queue_name,
                    exc,
                    failures,
                    delay,
                )
                await self._emit("error", exc)
                await asyncio.sleep(delay)

    async def _wait_for_work(self, wake: int) -> None:
        """Block until work may be there: a marker, the next delayed job, or ``drain_delay``.

        ``wake`` is the fetch's hint: < 0 means rate limited for ``-wake`` ms, > 0 is when the
        next delayed job is due (epoch ms).
        """
        if wake < 0:
            # Rate limited: sleep it out; new jobs cannot be taken before then anyway.
            await self._sleep_unless_closing(-wake / 1000)
            return
        deadline = now_ms() + self._drain_delay * 1000
        if wake:
            deadline = min(deadline, wake)
        while not self._closing:
            popped = await self._block_on_marker(max(0.001, (deadline - now_ms()) / 1000))
            if popped is None:
                return  # timed out: time to look again
            due = int(float(popped[2]))
            if due <= now_ms():
                return  # work now ("0" marker), or a delayed job that is due
            # A marker for a delayed job that is not due yet (the fetch re-arms it for every
            # worker): keep blocking until then, so an idle worker never spins on it.
            deadline = min(deadline, due)

    async def _block_on_marker(self, timeout: float) -> Any:
        assert self._blocking is not None
        self._block_task = asyncio.ensure_future(
            self._blocking.bzpopmin(self.keys_marker, timeout=timeout)
        )
        try:
            return await self._block_task
        except asyncio.CancelledError:
            if not self._closing:
                raise
            return None
        finally:
            self._block_task = None

    async def _sleep_unless_closing(self, seconds: float) -> None:
        self._slot_freed.clear()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._slot_freed.wait(), seconds)

    @property
    def keys_marker(self) -> str:
        return f"{self.prefix}:{self.queue_name}:marker"

    async def _move_to_active(self, count: int) -> tuple[list[AsyncJob], int]:
        queue = await self._open()
        reply = await queue._run(
            _scripts.MOVE_TO_ACTIVE, [queue._job_prefix, now_ms(), *self._fetch(count).args()]
        )
        return self._bind_all(_scripts.parse_fetched(reply, 2)), int(reply[0])

    def _bind_all(self, fetched: list[_scripts.Fetched]) -> list[AsyncJob]:
        assert self._queue is not None
        jobs = []
        for f in fetched:
            self._held[f.job_id] = f.token
            jobs.append(self._queue._bind(f.job_id, f.fields, token=f.token))
        return jobs

    # -- manual fetching -----------------------------------------------------------------

    async def get_next_job(self) -> AsyncJob | None:
        """Take one job without a processor (manual processing); ``None`` when none is ready.

        Finish it with ``job.move_to_completed(value)`` or ``job.move_to_failed(error)``, and
        renew its lock with ``job.extend_lock(seconds)`` if it runs long.
        """
        jobs, _ = await self._move_to_active(1)
        for job in jobs:
            self._held.pop(job.id, None)  # the caller holds it, not the lock manager
            if job.repeat_job_key:
                await schedule_next_iteration(job.queue, job)
        return jobs[0] if jobs else None

    # -- one slot ------------------------------------------------------------------------

    async def _start_slot(self, job: AsyncJob) -> None:
        task = asyncio.create_task(self._slot(job))
        self._slots[task] = job
        task.add_done_callback(self._slot_done)

    def _slot_done(self, task: asyncio.Task[None]) -> None:
        self._slots.pop(task, None)
        self._slot_freed.set()
        if not task.cancelled() and task.exception() is not None:
            logger.error("worker slot crashed", exc_info=task.exception())

    async def _slot(self, job: AsyncJob | None) -> None:
        current = asyncio.current_task()
        while job is not None:
            if current is not None:
                self._slots[current] = job
            job = await self._process(job)

    async def _call_processor(self, job: AsyncJob) -> Any:
        assert self.processor is not None
        if self._is_async:
            job._on_progress = self._progress
            return await self.processor(job)
        assert self._sync_queue is not None
        loop = asyncio.get_running_loop()
        sync_job = Job.from_hash(job.queue_name, job.id, {}, token=job.token)
        for field in job.__dataclass_fields__:
            setattr(sync_job, field, getattr(job, field))
        sync_job.queue = self._sync_queue
        sync_job._on_progress = functools.partial(self._progress_from_thread, loop)
        return await loop.run_in_executor(self._executor, self.processor, sync_job)

    async def _progress(self, job: AsyncJob, progress: Any) -> None:
        await self._emit("progress", job, progress)

    def _progress_from_thread(
        self, loop: asyncio.AbstractEventLoop, job: Job, progress: Any
    ) -> None:
        # A sync processor runs in a thread: its progress events are emitted on the loop.
        asyncio.run_coroutine_threadsafe(self._emit("progress", job, progress), loop).result()

    async def _process(self, job: AsyncJob) -> AsyncJob | None:
        """Run one job and finish it; return the next job fetched in the same call."""
        await self._emit("active", job)
        want = 0 if self._closing or len(self._slots) > self._concurrency else 1
        token = job.token
        try:
            try:
                if job.repeat_job_key:  # a scheduler's iteration: create the next one now
                    await schedule_next_iteration(job.queue, job)
                result = await self._call_processor(job)
                job.completion(result)  # refuses a return value JSON cannot carry
            except TypeError as exc:
                if "JSON" not in str(exc) and "serializ" not in str(exc):
                    raise
                raise TypeError(f"return value is not JSON serializable: {exc}") from None
        except asyncio.CancelledError:
            if self._closing:
                await self._put_back(job, token)
            raise
        except (DelayedError, WaitingError, WaitingChildrenError):
            self._held.pop(job.id, None)  # the processor moved the job itself
            return None
        except RateLimitError:
            self._held.pop(job.id, None)
            await self._safely(job, job.move_to_wait(token))
            return None
        except Exception as exc:
            await self._emit("failed", job, exc)
            return await self._finish(job, job.failure(exc, token, self._policy), want)
        return await self._finish(job, job.completion(result, token), want, result=result)

    async def _finish(
        self, job: AsyncJob, values: list[Any], want: int, *, result: Any = _FAILED
    ) -> AsyncJob | None:
        """Finish ``job`` through the batching finisher; return the slot's next job."""
        self._held.pop(job.id, None)
        assert self._finisher is not None
        try:
            code, fetched = await self._finisher.finish(values, wants_next=want > 0)
        except _NETWORK_ERRORS as exc:
            # The job stays active with its lock: when that expires, the stalled check puts
            # it back in wait, so nothing is lost. The fetch loop reconnects.
            logger.warning("worker %s: could not finish job %s: %s", self.queue_name, job.id, exc)
            await self._emit("error", exc)
            return None
        if code < 0:
            err = script_error(code, queue=self.queue_name, job_id=job.id)
            logger.warning("worker %s: job %s not finished: %s", self.queue_name, job.id, err)
            await self._emit("lock_lost", job.id)
        else:
            job.attempts_made = code
            if result is not _FAILED:
                job.returnvalue = result
                await self._emit("completed", job, result)
        return self._bind_all([fetched])[0] if fetched is not None else None

    async def _safely(self, job: AsyncJob, step: Awaitable[Any]) -> Any:
        """Run a finishing step; a lost lock or a dropped connection is reported, not raised.

        Nothing is lost either way: a job whose finish did not land keeps its place in active
        until its lock expires and the stalled checker gives it back to wait.
        """
        try:
            return await step
        except JobError as exc:
            logger.warning("worker %s: job %s not finished: %s", self.queue_name, job.id, exc)
            await self._emit("lock_lost", job.id)
        except _NETWORK_ERRORS as exc:
            logger.warning("worker %s: could not finish job %s: %s", self.queue_name, job.id, exc)
            await self._emit("error", exc)
        return None
