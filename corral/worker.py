"""``Worker``: take jobs from a queue and run a processor on them (BullMQ's ``Worker``).

One asyncio loop drives everything. Each job a fetch hands over is owned by a
:class:`~corral._lease.Lease` until the server has confirmed how it ended: the lease runs the
processor, finishes the job and, in the same script call, takes the slot's next job
(fetch-next), so a busy worker makes one round trip per job. When slots are free and nothing
was fetched, the worker blocks on ``BZPOPMIN K:marker`` on its own connection. ``async def``
processors run on the loop and get an :class:`AsyncJob`; plain functions run in threads and get
a :class:`Job` whose methods block. A supervisor runs the fetching, the lock renewal (every
lease's lock in one call every ``lock_duration / 2``) and the stalled check, waits out
transient server errors, and stops the worker only on a configuration error.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import logging
import signal
import threading
import uuid
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import Any, TypeVar

import redis
from redis.asyncio import Redis

from corral import _scripts, _twins, _upkeep, options
from corral._async._redis import check_server, open_client_off_loop
from corral._async.job import AsyncJob
from corral._async.job_data import DEFAULT_MAX_LOG_LINE_BYTES, DEFAULT_MAX_PROGRESS_BYTES
from corral._async.queue import AsyncQueue
from corral._async.queue_schedulers import schedule_next_iteration
from corral._burst import RunLimits, RunSummary, StopReason
from corral._cancels import CancelListener
from corral._finisher import Finisher
from corral._keys import DEFAULT_PREFIX
from corral._lease import Lease, LeaseContext
from corral._listeners import Callback, Listeners
from corral._runners import AsyncRunner, ProcessRunner, Runner, ThreadRunner
from corral._supervisor import Outage, Supervisor
from corral._sync.job import Job
from corral._sync.queue import Queue
from corral._threads import DaemonThreadPool
from corral.clock import now_ms
from corral.errors import ConfigurationError, InvalidOptionError, server_error_kind
from corral.options import Duration
from corral.retry import BackoffStrategy
from corral.worker_options import WorkerOptions

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
    "error": "(error): the first server error of an outage, or a failure of the worker itself",
    "lock_lost": "(job_id)",
}

#: A worker's calls are short scripts: when the client sets no socket timeout, a reply this
#: late (at most; less with short locks) means a dead or half-open connection, which is then
#: dropped and the call retried, so a lost peer never hangs fetching or renewal for minutes.
DEFAULT_REPLY_TIMEOUT_S = 10.0


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
        lock_duration: seconds a job's lock lives without renewal (> 0).
        stalled_interval: the longest time between stalled checks, in seconds (> 0); a check
            also runs when the earliest lock of the queue expires.
        max_stalled_count: how often a job may be recovered from a stall before it fails.
        drain_delay: longest blocking wait for new jobs, in seconds (> 0).
        limiter: ``{"max": n, "duration": seconds}``: at most n jobs per duration, counted
            across every worker of the queue.
        backoff_strategies: custom backoff types: ``name -> f(attempts_made, delay_ms,
            error, job) -> ms``.
        retry_on / no_retry_on: exception types that are (only) / never retried.
        close_grace: on SIGTERM/SIGINT, seconds to let running jobs finish before async ones
            are cancelled and put back in wait (a plain function cannot be stopped: its job is
            kept until its thread ends; a second signal exits at once).
        metrics_max_data_points: record BullMQ's per-minute completed/failed counts, keeping
            this many minutes (0: no metrics; BullMQ's ``metrics.maxDataPoints``).
        timeout / soft_timeout: seconds an attempt may run (for jobs without a ``timeout``
            of their own): at ``soft_timeout`` the processor is warned, at ``timeout`` it is
            stopped and the attempt fails with "timed out after N s" (see
            docs/timeouts-cancel.md).
        processes: run the processor in this many child processes (it must be importable:
            ``"package.module:function"`` or a module-level function); ``concurrency``
            defaults to it. See docs/processes.md.
        max_memory_mb / max_jobs_per_child: with ``processes``: kill a child that uses more
            memory (the attempt fails with "memory limit"), and replace a child after this
            many jobs.
        max_progress_bytes / max_log_line_bytes: the largest progress and log line the jobs'
            ``update_progress`` and ``log`` store (64 KiB each by default; see ``Queue``).

    Example::

        def resize(job):
            return {"done": job.data["path"]}

        Worker("images", resize, concurrency=4).run()   # until SIGINT / SIGTERM
    """

    def __init__(
        self,
        queue_name: str,
        processor: Processor | str | None,
        *,
        connection: str | Redis | None = None,
        prefix: str = DEFAULT_PREFIX,
        concurrency: int | None = None,
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
        max_progress_bytes: int = DEFAULT_MAX_PROGRESS_BYTES,
        max_log_line_bytes: int = DEFAULT_MAX_LOG_LINE_BYTES,
        timeout: Duration | None = None,
        soft_timeout: Duration | None = None,
        processes: int | None = None,
        max_memory_mb: int | None = None,
        max_jobs_per_child: int | None = None,
        strict: bool = False,
    ) -> None:
        o = self._o = WorkerOptions.build(
            queue_name,
            processor,
            connection=connection,
            prefix=prefix,
            concurrency=concurrency,
            name=name,
            lock_duration=lock_duration,
            stalled_interval=stalled_interval,
            max_stalled_count=max_stalled_count,
            drain_delay=drain_delay,
            limiter=limiter,
            backoff_strategies=backoff_strategies,
            retry_on=retry_on,
            no_retry_on=no_retry_on,
            close_grace=close_grace,
            metrics_max_data_points=metrics_max_data_points,
            max_progress_bytes=max_progress_bytes,
            max_log_line_bytes=max_log_line_bytes,
            timeout=timeout,
            soft_timeout=soft_timeout,
            processes=processes,
            max_memory_mb=max_memory_mb,
            max_jobs_per_child=max_jobs_per_child,
            strict=strict,
        )
        self.queue_name = queue_name
        self.processor = o.processor
        self.name = o.name
        self.prefix = o.prefix
        self.close_grace = o.close_grace
        self._concurrency = o.concurrency
        self._token_base = str(uuid.uuid4())
        self._token_seq = 0
        #: Every job this worker holds, by lock token: the leases are the only per-job state.
        self._leases: dict[str, Lease] = {}
        self._slots: set[asyncio.Task[None]] = set()
        #: ``(first_seq, count)`` of lock tokens handed out by fetches whose reply was lost.
        self._lost_fetches: list[tuple[int, int]] = []
        self._listeners = Listeners("worker", EVENTS)
        self._slot_freed = asyncio.Event()
        self._closing = False
        self._running = False
        self._stopped = asyncio.Event()
        self._outage = Outage(f"worker {queue_name}")
        self._supervisor: Supervisor | None = None
        self._queue: AsyncQueue | None = None
        self._sync_queue: Queue | None = None
        self._blocking: Redis | None = None
        self._pool: DaemonThreadPool | None = None
        self._block_task: asyncio.Task[Any] | None = None
        self._ctx: LeaseContext | None = None
        self._drained = True
        self._limits = RunLimits()
        self._stop_reason: StopReason = "closed"
        self._process_pool: Any = None
        self._cancels: CancelListener | None = None
        self._background: set[asyncio.Task[Any]] = set()

    # -- settings and events -------------------------------------------------------------

    @property
    def concurrency(self) -> int:
        """How many jobs run at once. Setting it while running takes effect at once."""
        return self._concurrency

    @concurrency.setter
    def concurrency(self, value: int) -> None:
        self._concurrency = options.int_option("concurrency", value, 1)
        if self._pool is not None:
            self._pool.max_workers = max(self._pool.max_workers, value)
        self._slot_freed.set()

    def on(self, event: str, callback: Callback | None = None) -> Any:
        """Call ``callback`` on ``event`` (see :data:`EVENTS`); usable as a decorator.

        Callbacks may be plain or ``async def``; an exception in one is logged, never fatal.
        """
        return self._listeners.on(event, callback)

    async def _emit(self, event: str, *args: Any) -> None:
        if event in self._listeners:  # most workers listen to nothing: skip the coroutine
            await self._listeners.emit(event, *args)

    # -- running -------------------------------------------------------------------------

    def run(
        self,
        *,
        burst: bool = False,
        burst_wait: Duration = 0,
        max_jobs: int | None = None,
        max_time: Duration | None = None,
    ) -> RunSummary:
        """Run until SIGINT or SIGTERM, then close gracefully (a blocking call).

        ``burst=True`` ends the run once nothing is waiting or running and no delayed job is
        due within ``burst_wait`` seconds; ``max_jobs`` ends it after taking that many jobs,
        ``max_time`` after that many seconds (then it closes as on a signal). Returns what
        the run did (:class:`RunSummary`: completed, failed for good, retried, and why it
        stopped).

        The first signal stops fetching and gives running jobs ``close_grace`` seconds; then
        async jobs are cancelled and put back in wait, and jobs of plain functions are waited
        for (their threads cannot be stopped; their locks are kept meanwhile). A second
        signal exits at once: jobs still running return to wait when their locks expire.

        Raises:
            ConfigurationError: the server refused the worker's settings (a wrong password,
                a missing permission); the message is one line.
        """
        limits = RunLimits.build(
            burst=burst, burst_wait=burst_wait, max_jobs=max_jobs, max_time=max_time
        )
        return run_event_loop(self._run_with_signals(limits))

    async def _run_with_signals(self, limits: RunLimits) -> RunSummary:
        loop = asyncio.get_running_loop()
        signals = 0
        closing: set[asyncio.Task[None]] = set()

        def on_signal() -> None:
            nonlocal signals
            signals += 1
            if signals == 1:
                logger.info(
                    "worker %s: stopping: no new jobs; waiting up to %.0fs for %d running",
                    self.queue_name,
                    self.close_grace,
                    len(self._leases),
                )
                task = loop.create_task(self.close(grace=self.close_grace))
                closing.add(task)
                task.add_done_callback(closing.discard)
            else:
                self._exit_now()

        # Signals reach only the main thread: a serverless runtime may call its handler (and
        # so run()) in another one, where the run ends by its bounds or close() instead.
        signals_here = threading.current_thread() is threading.main_thread()
        handled = (signal.SIGINT, signal.SIGTERM) if signals_here else ()
        for sig in handled:
            loop.add_signal_handler(sig, on_signal)
        try:
            return await self._run(limits)
        finally:
            for sig in handled:
                loop.remove_signal_handler(sig)

    async def close(self, *, grace: float | None = None) -> None:
        """Stop fetching at once, wait up to ``grace`` seconds for running jobs (``None``: as
        long as they take), then cancel async ones and put them back in wait; a plain
        function's job is kept (and its lock renewed) until its thread ends. Returns when
        every job is settled and the connections are released."""
        self._closing = True
        self._slot_freed.set()
        if self._block_task is not None:
            self._block_task.cancel()
        if not self._running:
            await self._release()
            return
        if self._slots:
            _, pending = await asyncio.wait(list(self._slots), timeout=grace)
            if pending:
                for lease in list(self._leases.values()):
                    lease.cut_short()
        await self._stopped.wait()

    def _exit_now(self) -> None:
        """Stop waiting for anything: async jobs are cancelled and put back, threads that
        still run are left (their jobs return to wait when their locks expire)."""
        self._closing = True
        self._slot_freed.set()
        if self._block_task is not None:
            self._block_task.cancel()
        for lease in list(self._leases.values()):
            lease.abandon()

    async def _open(self) -> AsyncQueue | None:
        """The worker's queue, connected and checked; waits for a server that is away (a
        worker often starts before its Redis), or ``None`` when closed meanwhile."""
        while self._queue is None:
            # A connection for every slot, and a few for the lock manager and stall checks.
            client = await open_client_off_loop(
                self._o.connection, max_connections=self._concurrency + 8
            )
            owned = client is not self._o.connection
            try:
                await check_server(client, strict=self._o.strict, owned=owned)
            except Exception as exc:
                kind = server_error_kind(exc)
                if kind == "configuration":
                    raise ConfigurationError(f"worker {self.queue_name}: {exc}") from None
                if kind != "transient":
                    raise
                await self._wait_for_server(exc)
                if self._closing:
                    return None
                continue
            self._outage.succeeded()
            self._queue = AsyncQueue(
                self.queue_name,
                connection=client,
                prefix=self.prefix,
                max_progress_bytes=self._o.max_progress_bytes,
                max_log_line_bytes=self._o.max_log_line_bytes,
            )
            self._queue._reply_timeout = self._reply_timeout(client)
        return self._queue

    async def _wait_for_server(self, exc: Exception) -> None:
        delay = self._outage.failed("connect", exc)
        self._slot_freed.clear()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._slot_freed.wait(), delay)

    def _reply_timeout(self, client: Redis) -> float:
        timeout = client.connection_pool.connection_kwargs.get("socket_timeout")
        # Renewals go out every lock / 2, with half the lock left: one stuck on a dead
        # connection times out after a quarter, which leaves a quarter to send it again.
        return float(timeout or min(DEFAULT_REPLY_TIMEOUT_S, max(1.0, self._o.lock_ms / 4000)))

    async def run_async(
        self,
        *,
        burst: bool = False,
        burst_wait: Duration = 0,
        max_jobs: int | None = None,
        max_time: Duration | None = None,
    ) -> RunSummary:
        """Process jobs until :meth:`close` is called, or a bound of the run is reached
        (the arguments are :meth:`run`'s).

        Raises:
            ConfigurationError: the server refused the worker's settings (see :meth:`run`).
            ProcessorImportError: a child process could not import the processor.
        """
        limits = RunLimits.build(
            burst=burst, burst_wait=burst_wait, max_jobs=max_jobs, max_time=max_time
        )
        return await self._run(limits)

    async def _run(self, limits: RunLimits) -> RunSummary:
        if self.processor is None:
            raise InvalidOptionError("this worker has no processor: use get_next_job()")
        self._stopped.clear()
        self._running = True
        self._limits = limits
        self._stop_reason = "closed"
        supervisor = self._supervisor = Supervisor(self._outage, self._emit)
        try:
            queue = await self._open()
            if queue is not None:
                await self._work(queue, supervisor)
        finally:
            supervisor.stop()
            await supervisor.join()
            await self._release()
            self._running = False
            self._stopped.set()
        if supervisor.fatal is not None:
            raise supervisor.fatal
        return limits.summary(self._stop_reason)

    def _end_run(self, reason: StopReason) -> None:
        """A bound of the run was reached: stop fetching; running jobs finish."""
        if not self._closing:
            logger.info("worker %s: run over (%s)", self.queue_name, reason)
            self._stop_reason = reason
            self._closing = True
            self._slot_freed.set()

    async def _work(self, queue: AsyncQueue, supervisor: Supervisor) -> None:
        client = await queue.client()
        # The marker's connection reads for BZPOPMIN's wait plus the reply timeout (a half-open
        # one is given up as on the wire); its BullMQ client name lists it in get_workers().
        read = self._o.drain_delay + (queue._reply_timeout or DEFAULT_REPLY_TIMEOUT_S)
        self._blocking = _twins.blocking_twin(
            client, read_timeout=read, client_name=self._client_name
        )
        runner = await self._runner(client)
        self._ctx = LeaseContext(
            queue=queue,
            finisher=Finisher(queue, self._fetch, self._fetch_lost),
            outage=self._outage,
            policy=self._o.policy,
            lock_s=self._o.lock_ms / 1000,
            runner=runner,
            want_next=self._want_next,
            emit=self._emit,
            timeout_ms=self._o.timeout_ms,
            soft_timeout_ms=self._o.soft_timeout_ms,
            tally=self._limits.tally,
        )
        supervisor.on_fatal(self._exit_now)
        renewer = _upkeep.LockRenewer(queue, self._leases.values, self._o.lock_ms)
        checker = _upkeep.StallChecker(queue, self._o.stalled_ms, self._emit)
        # Its own connection: a subscribed connection can do nothing else.
        listen = _twins.blocking_twin(client, read_timeout=read, client_name="")
        self._cancels = CancelListener(queue, listen, self._leases.values)
        supervisor.start("cancel", self._cancels.step)
        supervisor.start("renew", renewer.step)
        supervisor.start("stalled", checker.step)
        supervisor.start("fetch", self._fetch_step)
        budget = self._limits.time_left()
        timer = None
        if budget is not None:
            loop = asyncio.get_running_loop()
            timer = loop.call_later(max(0.0, budget), self._out_of_time)
        try:
            await supervisor.join_one("fetch")
        finally:
            if timer is not None:
                timer.cancel()
        while self._slots:  # every lease settles (a slot may start its next job meanwhile)
            await asyncio.gather(*self._slots, return_exceptions=True)
        if self._lost_fetches and supervisor.fatal is None:
            with contextlib.suppress(Exception):
                await self._release_lost_fetches()

    async def _runner(self, client: Redis) -> Runner:
        """Where the processor runs: on the loop, in threads, or in child processes."""
        assert self.processor is not None
        loop = asyncio.get_running_loop()
        if self._o.processes is not None:
            from corral._processes import ProcessPool  # only workers with processes= need it

            p = self._o.processes
            pool = self._process_pool = ProcessPool(
                p.spec,
                p.size,
                max_memory_mb=p.max_memory_mb,
                max_jobs_per_child=p.max_jobs_per_child,
            )
            await pool.start()
            return ProcessRunner(pool, self._progress)
        if self._o.is_async:
            return AsyncRunner(self.processor, self._progress)
        self._pool = DaemonThreadPool(max(32, self._concurrency))
        self._sync_queue = Queue(
            self.queue_name,
            connection=_twins.sync_twin(client),
            prefix=self.prefix,
            max_progress_bytes=self._o.max_progress_bytes,
            max_log_line_bytes=self._o.max_log_line_bytes,
        )
        on_progress = functools.partial(self._progress_from_thread, loop)
        return ThreadRunner(self.processor, self._pool, self._sync_queue, on_progress)

    def _out_of_time(self) -> None:
        """``max_time`` is over: close as a signal does (running jobs get ``close_grace``)."""
        if self._closing:
            return
        self._stop_reason = "max_time"
        logger.info("worker %s: run over (max_time)", self.queue_name)
        task = asyncio.ensure_future(self.close(grace=self.close_grace))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    @property
    def _client_name(self) -> str:
        encoded = base64.b64encode(self.queue_name.encode()).decode()
        base = f"{self.prefix}:{encoded}"
        return f"{base}:w:{self.name}" if self.name else base

    async def _release(self) -> None:
        if self._cancels is not None:
            await self._cancels.close()
            await _twins.close_async(self._cancels._client)
            self._cancels = None
        if self._process_pool is not None:
            await self._process_pool.close()
            self._process_pool = None
        if self._pool is not None:
            self._pool.shutdown(wait=False)
            self._pool = None
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
            if client is not None and client is not self._o.connection:
                await client.aclose()
            self._queue = None

    # -- fetching ------------------------------------------------------------------------

    def _fetch(self, count: int) -> _scripts.FetchNext:
        first = self._token_seq
        self._token_seq += count
        return _scripts.FetchNext(
            count,
            self._token_base,
            first,
            self._o.lock_ms,
            self.name,
            self._o.max_stalled,
            self._o.limit_max,
            self._o.limit_ms,
            self._o.metrics_points,
        )

    def _fetch_lost(self, first_seq: int, count: int) -> None:
        """A fetch may have handed out jobs that nobody runs: give them back at the next
        chance (they were never started, so they do not count as stalled)."""
        self._lost_fetches.append((first_seq, count))
        self._slot_freed.set()

    async def _release_lost_fetches(self) -> None:
        assert self._queue is not None
        lost, self._lost_fetches = self._lost_fetches, []
        args: list[Any] = [self._queue._job_prefix, self._token_base]
        for first, count in lost:
            args += (first, count)
        try:
            released = await self._queue._run(_scripts.RELEASE_FETCHED, args)
        except BaseException:
            self._lost_fetches += lost  # not done: try again at the next step
            raise
        for job_id in released:
            logger.info(
                "worker %s: job %s given back to wait (fetched, not started)",
                self.queue_name,
                job_id,
            )

    def _want_next(self) -> bool:
        # Asked by a finishing lease, itself still counted among the leases.
        return (
            not self._closing
            and len(self._leases) <= self._concurrency
            and self._limits.room(1) > 0
        )

    async def _fetch_step(self) -> float:
        """One round of fetching: take jobs for the free slots, or wait for work."""
        if self._closing:
            return -1
        if self._lost_fetches:
            await self._release_lost_fetches()
        free = self._limits.room(self._concurrency - len(self._leases))
        if free <= 0:
            if not self._leases and not self._limits.room(1):
                self._end_run("max_jobs")
                return -1
            self._slot_freed.clear()
            await self._slot_freed.wait()
            return 0
        fetched, wake = await self._move_to_active(free)
        self._outage.succeeded()
        if self._closing and fetched:
            # Close began while the fetch was on its way: these jobs go back, not run.
            for f in fetched:
                self._fetch_lost(int(f.token.rpartition(":")[2]), 1)
            await self._release_lost_fetches()
            return -1
        if fetched:
            self._drained = False
            for f in fetched:
                self._start(f)
            return 0
        if not self._drained and not self._leases:
            self._drained = True
            await self._emit("drained")
        if self._limits.burst and wake >= 0:
            due_in = wake - now_ms() if wake else None
            if self._leases and (due_in is None or due_in > self._o.drain_delay * 1000):
                # Running jobs may add work (a retry, a child): look again when one ends.
                await self._sleep_unless_closing(self._o.drain_delay)
                return 0
            if not self._leases and (due_in is None or due_in > self._limits.burst_wait_ms):
                self._end_run("drained")
                return -1
        await self._wait_for_work(wake)
        return 0

    async def _wait_for_work(self, wake: int) -> None:
        """Block until work may be there: a marker, the next delayed job, or ``drain_delay``.

        ``wake`` is the fetch's hint: < 0 means rate limited for ``-wake`` ms, > 0 is when the
        next delayed job is due (epoch ms).
        """
        if wake < 0:
            # Rate limited: sleep it out; new jobs cannot be taken before then anyway.
            await self._sleep_unless_closing(-wake / 1000)
            return
        deadline = now_ms() + self._o.drain_delay * 1000
        if wake:
            deadline = min(deadline, wake)
        while not self._closing and not self._lost_fetches:
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

    async def _move_to_active(self, count: int) -> tuple[list[_scripts.Fetched], int]:
        queue = await self._open()
        assert queue is not None
        fetch = self._fetch(count)
        try:
            reply = await queue._run(
                _scripts.MOVE_TO_ACTIVE, [queue._job_prefix, now_ms(), *fetch.args()]
            )
        except BaseException:
            self._fetch_lost(fetch.first_seq, fetch.count)
            raise
        return _scripts.parse_fetched(reply, 2), int(reply[0])

    # -- manual fetching -----------------------------------------------------------------

    async def get_next_job(self) -> AsyncJob | None:
        """Take one job without a processor (manual processing); ``None`` when none is ready.

        Finish it with ``job.move_to_completed(value)`` or ``job.move_to_failed(error)``, and
        renew its lock with ``job.extend_lock(seconds)`` if it runs long.
        """
        fetched, _ = await self._move_to_active(1)
        if not fetched:
            return None
        assert self._queue is not None
        job = self._queue._bind(fetched[0].job_id, fetched[0].fields, token=fetched[0].token)
        if job.repeat_job_key:
            await schedule_next_iteration(job.queue, job)
        return job

    # -- the slots -----------------------------------------------------------------------

    def _start(self, fetched: _scripts.Fetched) -> None:
        task = asyncio.create_task(self._slot(self._lease(fetched)))
        self._slots.add(task)
        task.add_done_callback(self._slot_done)

    def _lease(self, fetched: _scripts.Fetched) -> Lease:
        # Counted at once, before its task runs: the fetch loop sizes fetches by the leases.
        assert self._ctx is not None
        lease = self._leases[fetched.token] = Lease(fetched, self._ctx)
        self._limits.taken += 1
        return lease

    def _slot_done(self, task: asyncio.Task[None]) -> None:
        self._slots.discard(task)
        self._slot_freed.set()
        if not task.cancelled() and task.exception() is not None:
            logger.error("worker slot crashed", exc_info=task.exception())

    async def _slot(self, lease: Lease | None) -> None:
        """Run the slot's jobs one after the other: each finish hands over the next."""
        while lease is not None:
            try:
                fetched = await lease.run()
            finally:
                del self._leases[lease.token]
                self._slot_freed.set()
            lease = None
            if fetched is None:
                break
            if self._closing or len(self._leases) >= self._concurrency or not self._limits.room(1):
                # Taken while close began, concurrency dropped or the run's max_jobs was
                # reached: back to wait, unstarted.
                self._fetch_lost(int(fetched.token.rpartition(":")[2]), 1)
                if self._closing:
                    await self._give_back_now()
                break
            lease = self._lease(fetched)

    async def _give_back_now(self) -> None:
        # The fetch loop has ended: give the jobs back here, retrying a transient error for
        # as long as a lock lasts (after that the stalled check gives them back anyway).
        for _ in range(max(1, round(self._o.lock_ms / 250))):
            try:
                await self._release_lost_fetches()
                return
            except Exception as exc:
                if server_error_kind(exc) != "transient":
                    return
                await asyncio.sleep(self._outage.failed("give back", exc))

    async def _progress(self, job: AsyncJob, progress: Any) -> None:
        await self._emit("progress", job, progress)

    def _progress_from_thread(
        self, loop: asyncio.AbstractEventLoop, job: Job, progress: Any
    ) -> None:
        # A sync processor runs in a thread: its progress events are emitted on the loop.
        asyncio.run_coroutine_threadsafe(self._emit("progress", job, progress), loop).result()
