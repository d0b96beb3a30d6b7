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

This module holds the public ``Worker`` and the life of a run (open, wire up, close, release).
The slots and the fetch loop are in ``_slots``, the lock tokens of fetches in
``_fetch_tokens``, the connections in ``_connections``, where the processor runs in
``_runners``, and the signal handling of :meth:`Worker.run` in ``_signals``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from corral import _telemetry, _upkeep, options
from corral._async._redis import Connectable
from corral._async.job_data import DEFAULT_MAX_LOG_LINE_BYTES, DEFAULT_MAX_PROGRESS_BYTES
from corral._async.queue import AsyncQueue
from corral._burst import RunLimits, RunSummary
from corral._cancels import CancelListener
from corral._connections import DEFAULT_REPLY_TIMEOUT_S as DEFAULT_REPLY_TIMEOUT_S
from corral._connections import WorkerConnections
from corral._finisher import Finisher
from corral._keys import DEFAULT_PREFIX
from corral._lease import LeaseContext
from corral._listeners import Callback, Listeners
from corral._runners import ProcessRunner, Runner, make_runner
from corral._shards import check_shard_count_of, check_shards
from corral._signals import run_event_loop as run_event_loop
from corral._signals import with_signals
from corral._slots import Slots
from corral._supervisor import Outage, Supervisor
from corral._worker_control import CONTROL_EVENTS, WorkerControl
from corral.errors import InvalidOptionError
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
    **CONTROL_EVENTS,
}


class Worker(WorkerControl):
    """Processes jobs of one queue.

    Args:
        queue_name: the queue to work on, or lanes ``{"interactive": 8, "background": 4}``:
            slots reserved per queue, lent to the others with ``borrow=True`` (docs/lanes.md).
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
        retry_on: exception types that are retried (only those).
        no_retry_on: exception types that are never retried.
        close_grace: on SIGTERM/SIGINT, seconds to let running jobs finish before async ones
            are cancelled and put back in wait (a plain function cannot be stopped: its job is
            kept until its thread ends; a second signal exits at once).
        metrics_max_data_points: record BullMQ's per-minute completed/failed counts, keeping
            this many minutes (0: no metrics; BullMQ's ``metrics.maxDataPoints``).
        timeout: seconds an attempt may run (for jobs without a ``timeout`` of their own):
            then it is stopped and the attempt fails with "timed out after N s" (see
            docs/timeouts-cancel.md).
        soft_timeout: seconds after which the processor is warned (likewise).
        processes: run the processor in this many child processes (it must be importable:
            ``"package.module:function"`` or a module-level function); ``concurrency``
            defaults to it. See docs/processes.md.
        max_memory_mb: with ``processes``: kill a child that uses more memory (the attempt
            fails with "memory limit").
        max_jobs_per_child: with ``processes``: replace a child after this many jobs.
        max_progress_bytes: the largest progress the jobs' ``update_progress`` stores (64 KiB
            by default; see ``Queue``).
        max_log_line_bytes: the largest line the jobs' ``log`` stores (64 KiB by default).
        shards: work the ``shards`` plain queues of a sharded queue (``ShardedQueue``, with
            the same count) as one: ``concurrency`` is shared by all of them, a free slot goes
            to the shards in turn, and no busy shard starves another (see docs/scaling.md).
            Not with ``limiter`` or ``processes``.
        dead_letter_queue: where a job this worker fails for good (no attempts left,
            unrecoverable, cancelled, timed out, stalled too often, undecodable) is copied with
            its whole history, when the job's own options name no dead-letter queue (see
            docs/observability.md, "Dead-letter queues"). Any worker of the queue also copies
            the copies a dead worker left pending, at start and then every
            ``stalled_interval``.
        telemetry: a :class:`corral.otel.Telemetry` (or ``True`` for one on the global
            providers): a CONSUMER span per attempt, the current span while the processor
            runs, continuing the trace the job carries, and job metrics (see
            docs/observability.md, "OpenTelemetry"). Off by default.
        remove_on_complete: the retention (as ``Queue.add``'s) of completed jobs whose own
            options set none (BullMQ's worker ``removeOnComplete``).
        remove_on_fail: likewise for failed jobs (``removeOnFail``).
        skip_stalled_check: run no stalled checks (other workers, or none, recover this one's
            stalled jobs).
        skip_lock_renewal: renew no locks.

    Example::

        def resize(job):
            return {"done": job.data["path"]}

        Worker("images", resize, concurrency=4).run()   # until SIGINT / SIGTERM
    """

    def __new__(cls, *args: Any, shards: int = 1, **kwargs: Any) -> Worker:
        # Worker({queue: slots}, ...) is one inner worker per lane (corral._lanes), and
        # Worker(..., shards=N) one per shard (corral._sharded_worker).
        if cls is Worker and isinstance(args[0] if args else kwargs.get("queue_name"), Mapping):
            from corral._lanes import LanesWorker

            return super().__new__(LanesWorker)
        if cls is Worker and check_shards(shards) > 1:
            from corral._sharded_worker import ShardedWorker

            return super().__new__(ShardedWorker)
        return super().__new__(cls)

    def __init__(
        self,
        queue_name: str | Mapping[str, int],
        processor: Processor | str | None,
        *,
        connection: Connectable = None,
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
        shards: int = 1,
        dead_letter_queue: str | None = None,
        telemetry: _telemetry.Hooks | bool | None = None,
        remove_on_complete: options.Retention | None = None,
        remove_on_fail: options.Retention | None = None,
        skip_stalled_check: bool = False,
        skip_lock_renewal: bool = False,
    ) -> None:
        if check_shards(shards) != 1:
            raise InvalidOptionError("shards= needs the class Worker itself, not a subclass")
        if not isinstance(queue_name, str):
            raise InvalidOptionError("lanes need the class Worker itself, not a subclass")
        self._telemetry = _telemetry.resolve(telemetry)
        check_shard_count_of(queue_name, 1)
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
            dead_letter_queue=dead_letter_queue,
            remove_on_complete=remove_on_complete,
            remove_on_fail=remove_on_fail,
            skip_stalled_check=skip_stalled_check,
            skip_lock_renewal=skip_lock_renewal,
        )
        self.queue_name = queue_name
        self.processor = o.processor
        self.name = o.name
        self.prefix = o.prefix
        self.close_grace = o.close_grace
        self._listeners = Listeners("worker", EVENTS)
        self._outage = Outage(f"worker {queue_name}")
        #: The leases, the fetch loop and the run's bounds: the per-job work is all there.
        self._slots = Slots(o, self._outage, self._emit)
        self._token_base = self._slots.tokens.base  # bench/chaos_agent.py records it
        self._conns = WorkerConnections(o, self._outage, self._slots.freed)
        self._running = False
        self._stopped = asyncio.Event()
        self._supervisor: Supervisor | None = None
        self._queue: AsyncQueue | None = None
        self._runner: Runner | None = None
        self._cancels: CancelListener | None = None
        self._background: set[asyncio.Task[Any]] = set()
        self._dead_letters: _upkeep.DeadLetterSweeper | None = None
        #: Run on the queue once it is connected, before any job is taken (a sharded worker
        #: checks the shard's recorded count there).
        self._on_open: Callable[[AsyncQueue], Awaitable[None]] | None = None

    # -- events (concurrency, pause and resume: _worker_control) --------------------------

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
        return run_event_loop(with_signals(functools.partial(self._run, limits), self._signalled))

    def _signalled(self, count: int) -> None:
        if count > 1:
            self._exit_now()
            return
        logger.info(
            "worker %s: stopping: no new jobs; waiting up to %.0fs for %d running",
            self.queue_name,
            self.close_grace,
            len(self._slots.leases),
        )
        self._close_soon()

    async def close(self, *, grace: float | None = None) -> None:
        """Stop fetching at once, wait up to ``grace`` seconds for running jobs (``None``: as
        long as they take), then cancel async ones and put them back in wait; a plain
        function's job is kept (and its lock renewed) until its thread ends. Returns when
        every job is settled and the connections are released."""
        first = not self._slots.closing
        self._slots.stop_fetching()
        if first:
            await self._emit("closing", "closing worker")
        if not self._running:
            await self._release()
            await self._emit("closed")
            return
        if self._slots.tasks:
            _, pending = await asyncio.wait(list(self._slots.tasks), timeout=grace)
            if pending:
                for lease in list(self._slots.leases.values()):
                    lease.cut_short()
        await self._stopped.wait()

    def _exit_now(self) -> None:
        """Stop waiting for anything: async jobs are cancelled and put back, threads that
        still run are left (their jobs return to wait when their locks expire)."""
        self._slots.stop_fetching()
        for lease in list(self._slots.leases.values()):
            lease.abandon()

    async def _open(self) -> AsyncQueue | None:
        """The worker's queue, connected and checked; waits for a server that is away (a
        worker often starts before its Redis), or ``None`` when closed meanwhile."""
        while self._queue is None:
            # A connection for every slot, and a few for the lock manager and stall checks.
            queue = await self._conns.connect(self._slots.concurrency + 8)
            if queue is not None and self._on_open is not None:
                try:
                    await queue.client()  # bound now (as _work does), so release closes it
                    await self._on_open(queue)
                except BaseException:
                    await self._conns.release(queue)
                    raise
            if queue is not None:
                queue._retention_defaults = self._o.retention_defaults
            self._queue = queue
            if self._queue is None and self._slots.closing:
                return None
        return self._queue

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
        self._slots.reset(limits)
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
            await self._emit("closed")
        if supervisor.fatal is not None:
            raise supervisor.fatal
        return limits.summary(self._slots.stop_reason)

    async def _work(self, queue: AsyncQueue, supervisor: Supervisor) -> None:
        slots = self._slots
        client = await queue.client()
        blocking, listen = self._conns.open_blocking(queue, client)
        # The marker's connection carries the name that get_workers() (and bull-board, and
        # `corral stats`) count: open it now, or a worker started on a full queue would be
        # counted only at its first wait for work. A failure is the fetch loop's to meet.
        with contextlib.suppress(Exception):
            await blocking.ping()
        await self._emit("ready")
        runner = self._runner = make_runner(self._o, client, slots.concurrency, self._emit)
        await runner.start()
        ctx = LeaseContext(
            queue=queue,
            finisher=Finisher(queue, slots.tokens.fetch, slots.tokens.fetch_lost),
            outage=self._outage,
            policy=self._o.policy,
            lock_s=self._o.lock_ms / 1000,
            runner=runner,
            want_next=slots.want_next,
            emit=self._emit,
            timeout_ms=self._o.timeout_ms,
            soft_timeout_ms=self._o.soft_timeout_ms,
            tally=functools.partial(_tally, slots.limits.tally, supervisor),
            refused=supervisor.fail,
            telemetry=self._telemetry,
        )
        slots.arm(queue, blocking, ctx)
        supervisor.on_fatal(self._exit_now)
        if isinstance(runner, ProcessRunner):
            runner.on_broken = supervisor.fail
        renewer = _upkeep.LockRenewer(queue, slots.leases.values, self._o.lock_ms)
        checker = _upkeep.StallChecker(queue, self._o.stalled_ms, self._emit)
        dead_letters = self._dead_letters = _upkeep.DeadLetterSweeper(queue, self._o.stalled_ms)
        self._cancels = CancelListener(queue, listen, slots.leases.values)
        supervisor.start("cancel", self._cancels.step)
        if not self._o.skip_lock_renewal:
            supervisor.start("renew", renewer.step)
        if not self._o.skip_stalled_check:
            supervisor.start("stalled", checker.step)
        supervisor.start("dead-letters", dead_letters.step)
        supervisor.start("fetch", slots.fetch_step)
        budget = slots.limits.time_left()
        timer = None
        if budget is not None:
            loop = asyncio.get_running_loop()
            timer = loop.call_later(max(0.0, budget), self._out_of_time)
        try:
            await supervisor.join_one("fetch")
        finally:
            if timer is not None:
                timer.cancel()
        await slots.settle()
        if supervisor.fatal is None:
            # The jobs that failed for good last are copied now rather than at the next start.
            with contextlib.suppress(Exception):
                await dead_letters.copy()
        if slots.lost and supervisor.fatal is None:
            with contextlib.suppress(Exception):
                await slots.tokens.release(queue)

    def _out_of_time(self) -> None:
        """``max_time`` is over: close as a signal does (running jobs get ``close_grace``)."""
        if self._slots.closing:
            return
        self._slots.stop_reason = "max_time"
        logger.info("worker %s: run over (max_time)", self.queue_name)
        self._close_soon()

    def _close_soon(self) -> None:
        task = asyncio.ensure_future(self.close(grace=self.close_grace))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _release(self) -> None:
        if self._dead_letters is not None:
            await self._dead_letters.close()
            self._dead_letters = None
        if self._cancels is not None:
            await self._cancels.close()
            self._cancels = None
        if self._runner is not None:
            await self._runner.close()
            self._runner = None
        await self._conns.release(self._queue)
        self._queue = None

    @property
    def keys_marker(self) -> str:
        return f"{self.prefix}:{self.queue_name}:marker"


def _tally(count: Callable[[str], None], supervisor: Supervisor, outcome: str) -> None:
    """Count an outcome the server confirmed; a final failure may have left a dead letter:
    wake the copy (off the finish's path: the finish call is already answered)."""
    count(outcome)
    if outcome == "failed":
        supervisor.wake("dead-letters")
