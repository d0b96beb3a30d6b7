"""``Worker``: take jobs from a queue and run a processor on them (BullMQ's ``Worker``).

One asyncio loop drives everything. Each concurrency slot is a task that runs a job, finishes
it with ``move_to_finished`` and, in the same script call, takes the next job (fetch-next), so
a busy worker makes one round trip per job. When slots are free and nothing was fetched, the
worker blocks on ``BZPOPMIN K:marker`` on its own connection. ``async def`` processors run on
the loop; plain functions run in a thread pool. A lock manager renews every held lock in one
call every ``lock_duration / 2``.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import random
import signal
import traceback
import uuid
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from corral import _codec, _scripts, backoff, options
from corral._async._redis import blocking_client_like, check_server, open_client, run_script
from corral._keys import DEFAULT_PREFIX, QueueKeys
from corral.clock import now_ms
from corral.errors import InvalidOptionError, JobError, UnrecoverableError, script_error
from corral._async.job import AsyncJob as Job
from corral.options import Duration, retention_limits

logger = logging.getLogger("corral.worker")

#: A processor: ``async def f(job)`` or ``def f(job)``; its return value must be JSON.
Processor = Callable[[Job], Awaitable[Any] | Any]

#: BullMQ's default cap on stored stack traces per job.
DEFAULT_STACKTRACE_LIMIT = 10
_RECONNECT_MAX_S = 10.0


def _seconds(option: str, value: Duration) -> float:
    return options.duration_ms(option, value) / 1000


class Worker:
    """Processes jobs of one queue.

    Args:
        queue_name: the queue to work on.
        processor: ``async def`` or plain function taking a :class:`Job`; what it returns
            (JSON) becomes the job's return value, what it raises fails the attempt.
        connection: a URL, a redis-py asyncio client (``decode_responses=True``) or ``None``.
        concurrency: how many jobs run at once.
        name: stored on each job it takes (``processedBy``).
        lock_duration: seconds a job's lock lives without renewal.
        drain_delay: longest blocking wait for new jobs, in seconds.

    Example::

        def resize(job):
            return {"done": job.data["path"]}

        Worker("images", resize, concurrency=4).run()   # until SIGINT / SIGTERM
    """

    def __init__(
        self,
        queue_name: str,
        processor: Processor,
        *,
        connection: str | Redis | None = None,
        prefix: str = DEFAULT_PREFIX,
        concurrency: int = 1,
        name: str | None = None,
        lock_duration: Duration = 30.0,
        drain_delay: Duration = 5.0,
        strict: bool = False,
    ) -> None:
        options.check_name("queue name", queue_name, colon=False)
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise InvalidOptionError(f"concurrency must be an integer >= 1, got {concurrency!r}")
        if not callable(processor):
            raise InvalidOptionError(f"processor must be callable, got {processor!r}")
        self.queue_name = queue_name
        self.processor = processor
        self.concurrency = concurrency
        self.name = name or ""
        self.keys = QueueKeys(queue_name, prefix)
        self._script_keys = self.keys.script_keys()
        self._job_prefix = self.keys.base + ":"
        self._lock_ms = options.duration_ms("lock_duration", lock_duration)
        self._drain_delay = _seconds("drain_delay", drain_delay)
        self._connection = connection
        self._strict = strict
        self._is_async = inspect.iscoroutinefunction(processor)
        self._token_base = str(uuid.uuid4())
        self._token_seq = 0
        self._held: dict[str, str] = {}  # job id -> lock token
        self._slots: set[asyncio.Task[None]] = set()
        self._slot_freed = asyncio.Event()
        self._closing = False
        self._stopped = asyncio.Event()
        self._client: Redis | None = None
        self._blocking: Redis | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._block_task: asyncio.Task[Any] | None = None

    # -- running -------------------------------------------------------------------------

    def run(self) -> None:
        """Run until SIGINT or SIGTERM, then close gracefully (blocking call)."""
        asyncio.run(self._run_with_signals())

    async def _run_with_signals(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self.request_close)
        await self.run_async()

    def request_close(self) -> None:
        """Stop fetching new jobs; ``run_async`` returns once running jobs are done."""
        self._closing = True
        self._slot_freed.set()
        if self._block_task is not None:
            self._block_task.cancel()

    async def close(self) -> None:
        """Stop fetching, wait for running jobs, and release connections."""
        self.request_close()
        await self._stopped.wait()

    async def run_async(self) -> None:
        """Process jobs until :meth:`close` (or :meth:`request_close`) is called."""
        self._stopped.clear()
        try:
            client = open_client(self._connection)
            await check_server(client, strict=self._strict, owned=client is not self._connection)
            self._client = client
            self._blocking = blocking_client_like(client, read_timeout=self._drain_delay + 10)
            if not self._is_async:
                self._executor = ThreadPoolExecutor(
                    max_workers=self.concurrency, thread_name_prefix="corral-job"
                )
            locks = asyncio.create_task(self._lock_manager())
            try:
                await self._fetch_loop()
                if self._slots:
                    await asyncio.gather(*self._slots, return_exceptions=True)
            finally:
                locks.cancel()
                await asyncio.gather(locks, return_exceptions=True)
        finally:
            await self._release()
            self._stopped.set()

    async def _release(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=False)
            self._executor = None
        if self._blocking is not None:
            await self._blocking.aclose()
            self._blocking = None
        if self._client is not None and self._client is not self._connection:
            await self._client.aclose()
        self._client = None

    async def _fetch_loop(self) -> None:
        failures = 0
        while not self._closing:
            free = self.concurrency - len(self._slots)
            if free <= 0:
                self._slot_freed.clear()
                await self._slot_freed.wait()
                continue
            try:
                jobs, next_delayed = await self._move_to_active(free)
                if jobs:
                    for job in jobs:
                        self._start_slot(job)
                else:
                    await self._wait_for_work(next_delayed)
                failures = 0
            except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
                failures += 1
                delay = min(_RECONNECT_MAX_S, 0.1 * 2**failures) * random.uniform(0.5, 1.0)
                logger.warning(
                    "worker %s: connection error (%s); retry %d in %.2fs",
                    self.queue_name,
                    exc,
                    failures,
                    delay,
                )
                await asyncio.sleep(delay)

    async def _wait_for_work(self, next_delayed: int) -> None:
        timeout = self._drain_delay
        if next_delayed:
            timeout = min(timeout, max(0.001, (next_delayed - now_ms()) / 1000))
        assert self._blocking is not None
        self._block_task = asyncio.ensure_future(
            self._blocking.bzpopmin(self.keys.marker, timeout=timeout)
        )
        try:
            await self._block_task
        except asyncio.CancelledError:
            if not self._closing:
                raise
        finally:
            self._block_task = None

    def _next_tokens(self, count: int) -> int:
        first = self._token_seq
        self._token_seq += count
        return first

    async def _move_to_active(self, count: int) -> tuple[list[Job], int]:
        assert self._client is not None
        reply = await run_script(
            self._client,
            _scripts.MOVE_TO_ACTIVE,
            self._script_keys,
            [
                self._job_prefix,
                now_ms(),
                count,
                self._token_base,
                self._next_tokens(count),
                self._lock_ms,
                self.name,
            ],
        )
        return self._jobs(_scripts.parse_fetched(reply, 2)), int(reply[0])

    def _jobs(self, fetched: list[_scripts.Fetched]) -> list[Job]:
        jobs = []
        for f in fetched:
            self._held[f.job_id] = f.token
            jobs.append(Job.from_hash(self.queue_name, f.job_id, f.fields, token=f.token))
        return jobs

    # -- one slot ------------------------------------------------------------------------

    def _start_slot(self, job: Job) -> None:
        task = asyncio.create_task(self._slot(job))
        self._slots.add(task)
        task.add_done_callback(self._slot_done)

    def _slot_done(self, task: asyncio.Task[None]) -> None:
        self._slots.discard(task)
        self._slot_freed.set()
        if not task.cancelled() and task.exception() is not None:
            logger.error("worker slot crashed", exc_info=task.exception())

    async def _slot(self, job: Job | None) -> None:
        while job is not None:
            job = await self._process(job)

    async def _process(self, job: Job) -> Job | None:
        """Run one job and finish it; return the next job fetched in the same call."""
        try:
            if self._is_async:
                result = await self.processor(job)
            else:
                loop = asyncio.get_running_loop()
                result = await loop.run_in_executor(self._executor, self.processor, job)
            try:
                encoded = _codec.dumps(result)
            except TypeError as exc:
                raise TypeError(f"return value is not JSON serializable: {exc}") from None
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            return await self._finish_failed(job, exc)
        return await self._finish(job, "completed", encoded, "", job.opts.get("removeOnComplete"))

    async def _finish_failed(self, job: Job, exc: BaseException) -> Job | None:
        reason = str(exc) or type(exc).__name__
        limit = job.opts.get("stackTraceLimit", DEFAULT_STACKTRACE_LIMIT)
        stack = [*job.stacktrace, "".join(traceback.format_exception(exc))]
        stacktrace = _codec.dumps(stack[-limit:] if limit else [])
        final = isinstance(exc, UnrecoverableError) or job.attempts_made + 1 >= job.max_attempts
        if final:
            return await self._finish(
                job, "failed", reason, stacktrace, job.opts.get("removeOnFail")
            )
        delay = backoff.retry_delay_ms(job.opts.get("backoff"), job.attempts_made + 1)
        return await self._finish(job, "retry", reason, stacktrace, None, retry_delay=delay)

    async def _finish(
        self,
        job: Job,
        outcome: str,
        value: str,
        stacktrace: str,
        retention: Any,
        *,
        retry_delay: int = 0,
    ) -> Job | None:
        assert self._client is not None
        keep, max_age = retention_limits(retention)
        want = 0 if self._closing else 1
        token = self._held.pop(job.id, job.token or "0")
        try:
            reply = await run_script(
                self._client,
                _scripts.MOVE_TO_FINISHED,
                self._script_keys,
                [
                    self._job_prefix,
                    job.id,
                    token,
                    now_ms(),
                    outcome,
                    value,
                    stacktrace,
                    keep,
                    max_age,
                    retry_delay,
                    want,
                    self._token_base,
                    self._next_tokens(want),
                    self._lock_ms,
                    self.name,
                ],
            )
        except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
            # The job stays active with its lock; it expires and the job is recovered as
            # stalled, so nothing is lost. The fetch loop handles reconnecting.
            logger.warning("worker %s: could not finish job %s: %s", self.queue_name, job.id, exc)
            return None
        code = int(reply[0])
        if code < 0:
            err: JobError = script_error(code, queue=self.queue_name, job_id=job.id)
            logger.warning("worker %s: job %s not finished: %s", self.queue_name, job.id, err)
            return None
        nxt = self._jobs(_scripts.parse_fetched(reply, 4))
        return nxt[0] if nxt else None

    # -- locks ---------------------------------------------------------------------------

    async def _lock_manager(self) -> None:
        interval = self._lock_ms / 2000
        while True:
            await asyncio.sleep(interval)
            held = list(self._held.items())
            if not held or self._client is None:
                continue
            args: list[Any] = [self._job_prefix, self._lock_ms]
            for job_id, token in held:
                args += [job_id, token]
            try:
                lost = await run_script(
                    self._client, _scripts.EXTEND_LOCKS, self._script_keys, args
                )
            except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
                logger.warning("worker %s: lock renewal failed: %s", self.queue_name, exc)
                continue
            for raw in lost:
                job_id = _codec.text(raw)
                # The job's result will be refused by the token check; stop renewing it.
                self._held.pop(job_id, None)
                logger.warning("worker %s: lost the lock of job %s", self.queue_name, job_id)
