"""A lease: the one owner of a fetched job, from the fetch until the server confirmed its end.

Once a script hands a job to a worker, its :class:`Lease` holds the lock token, keeps the
lock renewed (the worker's renewer asks every lease whether it still needs it), runs the
processor, and sends the finish. Whatever happens in between ends in a settled job:

- the processor returns: completed; it raises anything, ``BaseException`` included
  (``SystemExit``, ``KeyboardInterrupt`` from a plain function, a ``CancelledError`` that
  close did not cause): failed with a reason that says what, retried per the job's options;
- the job's data cannot be decoded (Node wrote a lone surrogate, say): failed for good, with
  a reason that says so, and the worker goes on;
- close cuts it short: an async processor is cancelled (a child process killed) and the job
  put back in wait; a plain function in a thread cannot be stopped, so its lease keeps the
  lock until its thread ends;
- its ``timeout`` passes, or someone cancels it (``queue.cancel``): the processor is stopped
  where it runs (see ``_runners``) and, once it has ended, the attempt fails with
  :class:`JobTimeoutError` (retried per the job's options) or :class:`JobCancelledError`
  (never retried); a job fetched with a cancel request (``x-cancel``) fails without running;
- a transport error on the finish: the finish is sent again with the same token (the token
  check makes a repeat harmless), while the lock can still be valid; a resend refused because
  the first send did land is recognised as the success it was.

A lease never imports the worker: it is handed what it needs in a :class:`LeaseContext`.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from corral import _scripts
from corral._async.job import AsyncJob
from corral._async.queue import AsyncQueue
from corral._async.queue_schedulers import schedule_next_iteration
from corral._finisher import Finisher
from corral._runners import Control, Runner
from corral._supervisor import Outage
from corral._telemetry import AttemptSpan, Hooks
from corral.breaker import JobBreakers, job_breakers
from corral.clock import monotonic
from corral.errors import (
    BreakerOpen,
    ConfigurationError,
    DelayedError,
    JobCancelledError,
    JobError,
    JobTimeoutWarning,
    RateLimitError,
    UnrecoverableError,
    WaitingChildrenError,
    WaitingError,
    script_error,
    server_error_kind,
)
from corral.retry import RetryPolicy

logger = logging.getLogger("corral.worker")


class ProcessorCancelled(Exception):
    """The processor let a ``CancelledError`` escape that the worker did not cause (it awaited
    something that someone else cancelled): the attempt fails with this."""


class LeaseState(enum.Enum):
    HELD = "held"  # fetched, processor not started yet
    RUNNING = "running"  # the processor runs
    FINISHING = "finishing"  # the finish (or put-back) is on its way to the server
    SETTLED = "settled"  # the server confirmed it, or the lease gave the job up


@dataclass(slots=True)
class LeaseContext:
    """What the leases of one worker share; the worker builds it once."""

    queue: AsyncQueue
    finisher: Finisher
    outage: Outage
    policy: RetryPolicy
    lock_s: float
    #: Runs the processor on the job: on the loop, in a thread or in a child process.
    runner: Runner
    #: Whether a finishing lease should take the slot's next job (not while closing).
    want_next: Callable[[], bool]
    #: The worker's event sink: ``emit(event, *args)``.
    emit: Callable[..., Awaitable[None]]
    #: The worker's ``timeout`` and ``soft_timeout`` (ms, 0: none), for jobs without their own.
    timeout_ms: int = 0
    soft_timeout_ms: int = 0
    #: Told each outcome the server confirmed: "completed", "failed" (for good) or "retry".
    tally: Callable[[str], None] = lambda outcome: None
    #: Told a finish the server refused for the worker's settings (an ACL without a command
    #: the finish needs): the worker stops, as when another of its loops meets one.
    refused: Callable[[ConfigurationError], None] = lambda error: None
    #: The worker's OpenTelemetry hooks (``telemetry=``), ``None`` when off.
    telemetry: Hooks | None = None


class Lease:
    """One fetched job. The worker creates it, awaits :meth:`run`, and renews while
    :attr:`renewing`; close calls :meth:`cut_short` and, on a second signal, :meth:`abandon`."""

    __slots__ = (
        "_abandoned",
        "_attempt",
        "_cancelled",
        "_control",
        "_ctx",
        "_cut",
        "_fields",
        "_gate",
        "_task",
        "_waiting_logged",
        "job",
        "job_id",
        "renewed_at",
        "state",
        "token",
    )

    def __init__(self, fetched: _scripts.Fetched, ctx: LeaseContext) -> None:
        self.job_id = fetched.job_id
        self.token = fetched.token
        self.state = LeaseState.HELD
        #: When the lock was last known valid for ``lock_s`` more (monotonic seconds): the
        #: fetch that set it, then each renewal the server confirmed.
        self.renewed_at = monotonic()
        self.job: AsyncJob | None = None
        self._fields = fetched.fields
        self._ctx = ctx
        self._cut = False
        self._abandoned = False
        self._waiting_logged = False
        self._task: asyncio.Task[Any] | None = None
        self._control = Control()
        #: A cancel request that came before the processor started.
        self._cancelled: JobCancelledError | None = None
        self._attempt: AttemptSpan | None = None  # the attempt's span, with telemetry on
        self._gate: JobBreakers | None = None  # the circuit breakers the job names
        reason = fetched.fields.get("x-cancel")
        if reason is not None:  # cancelled while it was active elsewhere, or before a retry
            self._cancelled = cancelled_error(reason)

    # -- asked by the renewer and by close --------------------------------------------------

    @property
    def renewing(self) -> bool:
        """Whether the lock must be kept: until the server has confirmed the job's end."""
        return self.state is not LeaseState.SETTLED and not self._abandoned

    def renewed(self, at: float) -> None:
        self.renewed_at = max(self.renewed_at, at)

    async def lock_lost(self) -> None:
        """The renewer found the lock gone (expired, or the job was moved by someone else).
        The processor runs on (BullMQ does the same); its finish will be refused."""
        if self.state is not LeaseState.RUNNING and self.state is not LeaseState.HELD:
            return  # a finish in flight deletes the lock: that is not a loss
        logger.warning("worker %s: lost the lock of job %s", self._ctx.queue.name, self.job_id)
        await self._ctx.emit("lock_lost", self.job_id)

    def cut_short(self) -> None:
        """Close's grace is over: cancel an async processor (the job goes back to wait); a
        plain function cannot be stopped, so its lease keeps the lock until the thread ends.
        A job not started yet is put back without starting."""
        if self.state is LeaseState.HELD:
            self._cut = True  # run() sees it before starting the processor
            return
        if self.state is not LeaseState.RUNNING or self._task is None:
            return
        if not self._ctx.runner.stoppable_on_close:
            if not self._waiting_logged:
                self._waiting_logged = True
                logger.warning(
                    "worker %s: job %s still runs in its thread after the grace period; "
                    "waiting for it to end (its lock is kept, so no other worker takes it)",
                    self._ctx.queue.name,
                    self.job_id,
                )
            return
        self._cut = True
        self._control.stop(None)

    def cancel(self, reason: str) -> None:
        """Someone cancelled the job (``queue.cancel``): stop the processor; the attempt fails
        for good once it has ended. Not started yet: it fails without running."""
        error = cancelled_error(reason)
        if self.state is LeaseState.HELD:
            self._cancelled = self._cancelled or error
        elif self.state is LeaseState.RUNNING:
            logger.info(
                "worker %s: job %s cancelled: stopping it", self._ctx.queue.name, self.job_id
            )
            self._control.stop(error)

    def abandon(self) -> None:
        """A second signal: stop waiting for a thread that does not end. Its job keeps its
        lock until that expires; then the stalled check gives it to another worker."""
        if self.state is LeaseState.HELD or self._ctx.runner.stoppable_on_close:
            self.cut_short()
            return
        if self.state is not LeaseState.RUNNING or self._task is None:
            return
        self._abandoned = True
        logger.warning(
            "worker %s: giving up on job %s (its thread still runs); it returns to wait "
            "when its lock expires",
            self._ctx.queue.name,
            self.job_id,
        )
        self._task.cancel()

    # -- the life of the job -----------------------------------------------------------------

    async def run(self) -> _scripts.Fetched | None:
        """Process the job and settle it; return the next job the finish took for the slot."""
        self._task = asyncio.current_task()
        try:
            try:
                job = self._ctx.queue._bind(self.job_id, self._fields, token=self.token)
            except (ValueError, TypeError) as exc:
                return await self._undecodable(exc)
            self.job = job
            if self._cancelled is not None:
                self.state = LeaseState.RUNNING
                values = await self._failed(job, self._cancelled)
                return await self._finish(job, values, completed=False)
            if self._cut:  # close cut it short before it started
                await self._put_back(job)
                return None
            if self._ctx.telemetry is None:
                return await self._process(job)
            return await self._traced(job)
        finally:
            self.state = LeaseState.SETTLED

    async def _traced(self, job: AsyncJob) -> _scripts.Fetched | None:
        """:meth:`_process` in the attempt's span, the current one while the processor runs."""
        assert self._ctx.telemetry is not None
        with self._ctx.telemetry.processing(job) as attempt:
            self._attempt = attempt
            return await self._process(job)

    def _arm(self, job: AsyncJob) -> None:
        """Start the job's clocks: its own ``timeout``/``soft_timeout``, else the worker's."""
        ctx, own_hard, own_soft = self._ctx, job.timeout, job.soft_timeout
        hard = round(own_hard * 1000) if own_hard else ctx.timeout_ms
        soft = round(own_soft * 1000) if own_soft else ctx.soft_timeout_ms
        if hard and soft >= hard:
            soft = 0  # the job's own timeout is shorter than the worker's soft one
        now = time.time()
        job.deadline = now + hard / 1000 if hard else None
        job.soft_deadline = now + soft / 1000 if soft else None
        self._control.arm(hard, soft)

    async def _process(self, job: AsyncJob) -> _scripts.Fetched | None:
        ctx = self._ctx
        control = self._control
        self.state = LeaseState.RUNNING
        result: Any = None
        try:
            await ctx.emit("active", job)
            if job.repeat_job_key:  # a scheduler's iteration: create the next one now
                await self._retrying("schedule", lambda: schedule_next_iteration(job.queue, job))
            self._gate = await self._retrying("breakers", lambda: job_breakers(job, self.token))
            self._arm(job)
            try:
                result = await ctx.runner.run(job, self._fields, control)
            finally:
                control.detach()
                for _ in range(control.cancels if self._task is not None else 0):
                    _uncancel(self._task)  # the runner's cancels are handled here
            if control.final and control.error is not None:
                raise control.error  # it returned as it was stopped: the stop decides
            values = job.completion(result, self.token)  # refuses a value JSON cannot carry
        except asyncio.CancelledError:
            if control.final and control.error is not None:
                values = await self._failed(job, control.error)
            elif self._cut or self._abandoned:
                if not control.cancels:
                    _uncancel(self._task)
                if not self._abandoned:
                    await self._put_back(job)
                return None
            elif isinstance(control.error, JobTimeoutWarning):
                values = await self._failed(job, control.error)  # the soft timeout's cancel
            else:
                error: BaseException = ProcessorCancelled(
                    "the processor raised CancelledError (it awaited something that was "
                    "cancelled); the worker did not cancel it"
                )
                values = await self._failed(job, error)
        except BreakerOpen as exc:  # a downstream is down: the job waits for it, unburned
            await self._put_back(job, until_ms=exc.retry_at_ms)
            return None
        except (DelayedError, WaitingError, WaitingChildrenError) as exc:
            return await self._moved_by_processor(job, exc)
        except RateLimitError:
            await self._put_back(job, quiet=True)
            return None
        except TypeError as exc:
            if "JSON" in str(exc) or "serializ" in str(exc):
                exc = TypeError(f"return value is not JSON serializable: {exc}")
            values = await self._failed(job, exc)
        except BaseException as exc:  # SystemExit, KeyboardInterrupt: the job's, not ours
            raised: BaseException = exc
            if control.final and control.error is not None:
                raised = control.error  # whatever it raised on its way out, it was stopped
            elif control.cut and self._ctx.runner.stoppable_on_close:
                await self._put_back(job)  # a child process killed by close
                return None
            elif isinstance(exc, JobTimeoutWarning) and control.error is not None:
                raised = control.error  # the bare class raised in its thread: the message
            values = await self._failed(job, raised)
        else:
            return await self._finish(job, values, completed=True, result=result)
        return await self._finish(job, values, completed=False)

    async def _failed(self, job: AsyncJob, error: BaseException) -> list[Any]:
        await self._ctx.emit("failed", job, error)
        if self._attempt is not None:
            self._attempt.failed(error)
        return job.failure(error, self.token, self._ctx.policy)

    async def _undecodable(self, exc: Exception) -> _scripts.Fetched | None:
        """The job hash holds a field Python cannot decode (JSON with a lone surrogate, a
        number that is not one): fail the job for good, naming the field; the same bytes
        would fail every retry."""
        bad, safe = [], {}
        for name, value in self._fields.items():
            try:  # the record's own decoding, one field at a time
                AsyncJob.from_hash(self._ctx.queue.name, self.job_id, {name: value})
            except (ValueError, TypeError):
                bad.append(name)
            else:
                safe[name] = value
        what = ", ".join(bad) or "hash"
        reason = f"job {what} cannot be decoded: {exc}"
        logger.warning("worker %s: job %s: %s", self._ctx.queue.name, self.job_id, reason)
        job = self._ctx.queue._bind(self.job_id, safe, token=self.token)
        self.job = job
        values = await self._failed(job, UnrecoverableError(reason))
        return await self._finish(job, values, completed=False)

    # -- talking to the server -----------------------------------------------------------------

    def _lock_expired(self) -> bool:
        return monotonic() > self.renewed_at + self._ctx.lock_s

    async def _retrying(self, what: str, call: Callable[[], Awaitable[Any]]) -> Any:
        """Run ``call``; after a transient error run it again, while the lock is valid.

        Raises:
            TimeoutError: the lock expired before the call got through.
        """
        outage = self._ctx.outage
        while True:
            try:
                result = await call()
            except Exception as exc:
                if server_error_kind(exc) != "transient":
                    raise
                if self._lock_expired():
                    raise TimeoutError(
                        f"{what} of job {self.job_id} not confirmed before its lock expired"
                    ) from exc
                await asyncio.sleep(outage.failed(what, exc))
            else:
                outage.succeeded()
                return result

    async def _finish(
        self, job: AsyncJob, values: list[Any], *, completed: bool, result: Any = None
    ) -> _scripts.Fetched | None:
        ctx = self._ctx
        self.state = LeaseState.FINISHING
        want = ctx.want_next()
        sends = 0
        if self._gate is not None:  # the job's outcome is its breakers' (a cancel: nobody's)
            await self._gate.settle(completed, self._cancelled or self._control.error)

        async def send() -> tuple[int, _scripts.Fetched | None]:
            nonlocal sends
            sends += 1
            # A resend takes no next job: the fetch loop does that once the server is back.
            return await ctx.finisher.finish(values, wants_next=want and sends == 1)

        code: int
        fetched: _scripts.Fetched | None
        try:
            code, fetched = await self._retrying("finish", send)
            if code < 0 and sends > 1:
                # A read on another connection than the finish, after the server may have
                # come back: its transient errors are waited out like the finish's own.
                code = await self._retrying("finish", lambda: self._landed(code))
        except Exception as exc:
            self._not_finished(exc)
            return None
        if code < 0:
            err = script_error(code, queue=ctx.queue.name, job_id=job.id)
            logger.warning("worker %s: job %s not finished: %s", ctx.queue.name, job.id, err)
            await ctx.emit("lock_lost", job.id)
        else:
            ctx.tally(values[2])
            if self._attempt is not None:
                self._attempt.settled(values[2])
            job.attempts_made = code
            if completed:
                job.returnvalue = result
                await ctx.emit("completed", job, result)
        return fetched

    async def _landed(self, code: int) -> int:
        """A resent finish was refused: tell whether the first send did land (then the job's
        attempts made, else ``code``). It did when the job ended an attempt after our fetch
        and was not recovered from a stall since (only the holder of the lock ends attempts,
        and a stall recovery counts ``stc``); a job already gone was removed by its
        retention."""
        client = await self._ctx.queue.client()
        key = self._ctx.queue.keys.job(self.job_id)
        name, stc, atm = (_text(v) for v in await client.hmget(key, "name", "stc", "atm"))
        before = self._fields
        if name is None:
            return int(before.get("atm") or 0) + 1
        made = int(atm or 0)
        if int(stc or 0) == int(before.get("stc") or 0) and made > int(before.get("atm") or 0):
            return made
        return code

    def _not_finished(self, exc: BaseException) -> None:
        # Left active with a lock that nobody renews: the stalled check gives it back to wait
        # once the lock expires, so it is not lost (it runs again: at least once).
        if server_error_kind(exc) == "configuration":
            name = self._ctx.queue.name
            self._ctx.refused(ConfigurationError(f"worker {name}: job {self.job_id}: {exc}"))
        logger.warning(
            "worker %s: job %s: %s; the stalled check will give it back",
            self._ctx.queue.name,
            self.job_id,
            exc,
            exc_info=server_error_kind(exc) == "other",
        )

    async def _put_back(self, job: AsyncJob, *, quiet: bool = False, until_ms: int = 0) -> None:
        """Return the job to wait unfinished (close cut it short, or a rate limit), or to
        delayed until ``until_ms`` (a circuit breaker is open): its attempt does not count."""
        self.state = LeaseState.FINISHING
        if self._gate is not None:
            await self._gate.settle(None)
        try:
            if until_ms:
                await self._retrying("delay", lambda: job.move_to_delayed(until_ms, self.token))
            else:
                await self._retrying("put back", lambda: job.move_to_wait(self.token))
        except JobError as exc:
            logger.warning("worker %s: job %s not put back: %s", job.queue_name, job.id, exc)
            await self._ctx.emit("lock_lost", job.id)
        except Exception as exc:
            self._not_finished(exc)
        else:
            if not quiet and not until_ms:
                logger.info("worker %s: job %s cut short, back in wait", job.queue_name, job.id)
        return None

    async def _moved_by_processor(
        self, job: AsyncJob, exc: BaseException
    ) -> _scripts.Fetched | None:
        """The processor says it moved the job itself (delayed, wait, waiting-children). If it
        did not (its lock is still ours), the job would be stuck active: fail it instead."""
        if job.token is None:
            return None  # moved with this job object: the move cleared its token
        client = await self._ctx.queue.client()
        key = self._ctx.queue.keys.lock(self.job_id)
        try:
            holder = await self._retrying("check", lambda: client.get(key))
        except Exception as err:
            self._not_finished(err)
            return None
        if holder != self.token:
            return None
        error = UnrecoverableError(
            f"the processor raised {type(exc).__name__} but did not move the job "
            "(call job.move_to_delayed(), move_to_wait() or move_to_waiting_children() first)"
        )
        values = await self._failed(job, error)
        return await self._finish(job, values, completed=False)


def cancelled_error(reason: str) -> JobCancelledError:
    """The failure of a cancelled job; its text is the one cancel_job.lua stores."""
    return JobCancelledError(f"cancelled: {reason}" if reason else "cancelled")


def _text(value: str | bytes | None) -> str | None:
    return value.decode() if isinstance(value, bytes) else value


def _uncancel(task: asyncio.Task[Any] | None) -> None:
    # The lease handles the cancellation it asked for; on 3.11+ say so, or later waits of the
    # task (asyncio.timeout) would think it is still being cancelled.
    if task is not None and sys.version_info >= (3, 11):
        task.uncancel()
