# Generated from corral/_async/job.py by scripts/unasync.py: do not edit.
"""``Job``: a job bound to its queue, whose methods act on it (BullMQ's ``Job``).

The blocking twin ``Job`` is generated from this file. Methods that need the job's lock take
``token`` (the worker's lock token; a job handed to a processor carries its own in
``job.token``).
"""

from __future__ import annotations

import dataclasses
import traceback
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from corral import _codec, _scripts, clock
from corral._sync import job_removal
from corral._sync.job_data import (
    JobDataMixin,
    TooLarge,
)
from corral._sync.job_flow import JobFlowMixin
from corral._sync.job_signal import JobSignalMixin
from corral._sync.job_stream import JobStreamMixin
from corral.bounds import MAX_NAME_LENGTH, MAX_TIMESTAMP_MS, check_int, check_text, names_a_job
from corral.errors import InvalidOptionError, failure_reason, script_error, storable_text
from corral.job import JobRecord, JobState
from corral.options import MAX_PRIORITY, Duration, duration_ms, retention_limits
from corral.retry import RetryPolicy, bounded_delay

if TYPE_CHECKING:
    from corral._sync._queue_base import QueueBase

#: BullMQ's default cap on stored stack traces per job.
DEFAULT_STACKTRACE_LIMIT = 10
_DEFAULT_POLICY = RetryPolicy()

# One script per state transition of a single job (see each file's header).
_CHANGE_DELAY = _scripts.load("change_delay")
_CHANGE_PRIORITY = _scripts.load("change_priority")
_PROMOTE_JOB = _scripts.load("promote_job")
_RETRY_JOB = _scripts.load("retry_job")
_GET_STATE = _scripts.load("get_state")
_MOVE_TO_DELAYED = _scripts.load("move_to_delayed")
_MOVE_TO_WAIT = _scripts.load("move_to_wait")


class Job(
    JobRecord, JobDataMixin, JobFlowMixin, JobStreamMixin, JobSignalMixin
):
    """A job of an :class:`Queue`; see :class:`corral.job.JobRecord` for its fields."""

    queue: QueueBase
    #: Set by the worker that runs the job, to emit its local ``progress`` event; called with
    #: the job (not a closure over it: a job referring to itself would live until a GC pass).
    _on_progress: Callable[[Any, Any], Any] | None = None
    #: Set by :meth:`discard`: this attempt is the last, whatever attempts are left.
    _discarded: bool = False

    def _token(self, token: str | None) -> str:
        if token is None:
            return self.token or "0"
        return check_text("token", token, max_length=MAX_NAME_LENGTH)

    # -- finishing an attempt (used by Worker; public for manual processing) ---------------

    def discard(self) -> None:
        """Make this attempt the last: if it fails, the job fails for good, attempts left or
        not (older BullMQ's ``Job.discard``; Node 6.7.0's ``Job`` has none, and raising
        :class:`~corral.errors.UnrecoverableError` does the same). Nothing is written: it
        holds for this job object, in this attempt (in a thread and in a child process of
        ``processes=N`` too)."""
        self._discarded = True

    def _retention(self, option: str) -> Any:
        """The job's own ``option`` (``False`` included: it keeps the job), else its worker's
        default (see QueueBase._retention_defaults), as BullMQ 6.7.0 chooses."""
        if option in self.opts:
            return self.opts[option]
        queue = getattr(self, "queue", None)
        return None if queue is None else queue._retention_defaults.get(option)

    def completion(self, return_value: Any = None, token: str | None = None) -> list[Any]:
        """The values that finish this attempt as completed (finish_jobs.lua's per-job
        ARGV); see :meth:`move_to_completed`.

        Raises:
            TypeError: the return value is not JSON serializable.
        """
        keep, max_age = retention_limits(self._retention("removeOnComplete"))
        value = _codec.dumps(return_value)
        return [self.id, self._token(token), "completed", value, "", keep, max_age, 0]

    def failure(
        self, error: BaseException, token: str | None = None, policy: RetryPolicy = _DEFAULT_POLICY
    ) -> list[Any]:
        """The values that finish this attempt as failed: retried (after its backoff) while
        attempts are left, else failed for good; see :meth:`move_to_failed`."""
        if not isinstance(error, BaseException):
            raise InvalidOptionError(f"error must be an exception, got {type(error).__name__}")
        reason = failure_reason(error)
        limit = int(self.opts.get("stackTraceLimit", DEFAULT_STACKTRACE_LIMIT))
        # An error from a child process brings the child's traceback: that is where it was.
        remote = getattr(error, "remote_traceback", None)
        trace = remote if isinstance(remote, str) else "".join(traceback.format_exception(error))
        # Without the traceback's last newline, as a JavaScript `err.stack` that Node stores.
        stack = [*self.stacktrace, storable_text(trace.rstrip("\n"))]
        stacktrace = _codec.dumps(stack[-limit:] if limit > 0 else [])
        delay = None if self._discarded else policy.retry_delay(self, error)
        if delay is not None:
            delay = bounded_delay(delay, clock.now_ms())
        if delay is None:
            outcome, retention, delay = "failed", self._retention("removeOnFail"), 0
        else:
            outcome, retention = "retry", None
        keep, max_age = retention_limits(retention)
        return [self.id, self._token(token), outcome, reason, stacktrace, keep, max_age, delay]

    def move_to_completed(
        self,
        return_value: Any = None,
        token: str | None = None,
        *,
        fetch: _scripts.FetchNext = _scripts.NO_FETCH,
    ) -> list[_scripts.Fetched]:
        """Complete the job with ``return_value`` (JSON); with ``fetch``, take next jobs.

        Raises:
            InvalidOptionError: the return value is not JSON serializable (the job is
                untouched).
            JobError: the lock is lost or the job is not active (nothing was written).
        """
        try:
            values = self.completion(return_value, token)
        except TypeError as exc:  # orjson's errors, a too deep nesting among them
            raise InvalidOptionError(f"return_value must be JSON-serializable: {exc}") from None
        fetched = self._finish(values, fetch)
        self.returnvalue = return_value
        return fetched

    def move_to_failed(
        self,
        error: BaseException,
        token: str | None = None,
        *,
        policy: RetryPolicy = _DEFAULT_POLICY,
        fetch: _scripts.FetchNext = _scripts.NO_FETCH,
    ) -> list[_scripts.Fetched]:
        """Fail this attempt with ``error``: retry (delayed by backoff) or fail for good.

        Raises:
            JobError: the lock is lost or the job is not active (nothing was written).
        """
        values = self.failure(error, token, policy)
        fetched = self._finish(values, fetch)
        self.failed_reason = values[3]
        return fetched

    def _finish(self, values: list[Any], fetch: _scripts.FetchNext) -> list[_scripts.Fetched]:
        job_id, token, outcome, value, stacktrace, keep, max_age, delay = values
        if not names_a_job(job_id):  # a queue's own key is no job (see _change)
            raise script_error(-1, queue=self.queue.name, job_id=job_id)
        reply = self.queue._run(
            _scripts.MOVE_TO_FINISHED,
            [
                self.queue._job_prefix,
                job_id,
                token,
                clock.now_ms(),
                outcome,
                value,
                stacktrace,
                keep,
                max_age,
                delay,
                *fetch.args(),
            ],
        )
        code = int(reply[0])
        if code < 0:
            raise script_error(code, queue=self.queue.name, job_id=self.id)
        self.attempts_made = int(reply[1])
        return _scripts.parse_fetched(reply, 4)

    # -- running the job's scripts --------------------------------------------------------------

    def _change(self, script: _scripts.Script, *args: Any) -> int:
        """Run one of the job's scripts; a negative answer is raised as its error."""
        if not names_a_job(self.id):
            # A queue's own key (wait, meta...) is no job: its script would meet a list or a
            # hash of another kind.
            raise script_error(-1, queue=self.queue.name, job_id=self.id)
        reply = self.queue._run(script, [self.queue._job_prefix, self.id, *args])
        if isinstance(reply, list):
            # {-10, limit}: a value over a limit the script read from the job.
            raise TooLarge(int(reply[1]))
        if int(reply) < 0:
            raise script_error(int(reply), queue=self.queue.name, job_id=self.id)
        return int(reply)

    # -- rescheduling --------------------------------------------------------------------------

    def change_delay(self, delay: Duration) -> None:
        """Reschedule a delayed job to run ``delay`` from now (BullMQ's ``changeDelay``).

        Args:
            delay: seconds or a ``timedelta``, counted from now (not from the job's timestamp).

        Raises:
            InvalidOptionError: ``delay`` is negative or not a duration.
            JobNotFoundError: the job does not exist any more.
            JobStateError: the job is not delayed.
        """
        delay_ms = duration_ms("delay", delay)
        now = clock.now_ms()
        if now + delay_ms > MAX_TIMESTAMP_MS:
            raise InvalidOptionError(
                f"delay must end before {MAX_TIMESTAMP_MS} (epoch ms, 2039-09-07), got {delay!r}"
            )
        self._change(_CHANGE_DELAY, now, delay_ms)
        self.delay = delay_ms

    def change_priority(self, priority: int, *, lifo: bool = False) -> None:
        """Set the job's priority (BullMQ's ``changePriority``); ``opts`` keeps the old one.

        A job in wait or prioritized is queued again under the new priority, behind the
        jobs already queued at it (at the front of wait with ``lifo`` when it becomes 0). In
        other states the priority applies when the job becomes ready.

        Args:
            priority: 0 (none, the highest) to 2,097,151; lower runs first.
            lifo: with priority 0, queue the job at the front of wait.

        Raises:
            InvalidOptionError: ``priority`` is out of range.
            JobNotFoundError: the job does not exist any more.
        """
        if (
            isinstance(priority, bool)
            or not isinstance(priority, int)
            or not 0 <= priority <= MAX_PRIORITY
        ):
            raise InvalidOptionError(
                f"priority must be an integer from 0 to {MAX_PRIORITY}, got {priority!r}"
            )
        self._change(_CHANGE_PRIORITY, priority, "1" if lifo else "0")
        self.priority = priority

    def promote(self) -> None:
        """Run a delayed job now: it moves to wait (or prioritized) with ``delay`` 0.

        Raises:
            JobNotFoundError: the job does not exist any more.
            JobStateError: the job is not delayed.
        """
        self._change(_PROMOTE_JOB)
        self.delay = 0

    def retry(
        self,
        state: str = "failed",
        *,
        reset_attempts_made: bool = False,
        reset_attempts_started: bool = False,
    ) -> None:
        """Queue a failed (or completed) job again (BullMQ's ``retry``).

        ``finishedOn``, ``processedOn``, ``failedReason`` and ``returnvalue`` are deleted; the
        attempt counters and stack traces are kept unless reset.

        Args:
            state: the state the job must be in, ``"failed"`` or ``"completed"``.
            reset_attempts_made: set ``attempts_made`` back to 0.
            reset_attempts_started: set ``attempts_started`` back to 0.

        Raises:
            InvalidOptionError: ``state`` is neither ``"failed"`` nor ``"completed"``.
            JobNotFoundError: the job does not exist any more.
            JobLockedError: a worker holds the job's lock.
            JobStateError: the job is not in ``state``.
        """
        if state not in ("failed", "completed"):
            raise InvalidOptionError(f"state must be 'failed' or 'completed', got {state!r}")
        self._change(
            _RETRY_JOB,
            state,
            "1" if reset_attempts_made else "0",
            "1" if reset_attempts_started else "0",
        )
        self.finished_on = self.processed_on = None
        self.failed_reason = None
        self.returnvalue = None
        if reset_attempts_made:
            self.attempts_made = 0
        if reset_attempts_started:
            self.attempts_started = 0

    # -- removal -------------------------------------------------------------------------------

    def remove(self, *, remove_children: bool = True) -> None:
        """Delete the job and its keys; with ``remove_children``, its flow children too.

        If the job or any child below it is being processed, nothing is removed. A tree of
        up to 500 jobs goes in one script call, all or nothing; a bigger one goes in chunks
        of bounded server time (:mod:`corral._sync.job_removal` says what stays atomic
        then). Each removed job gets a ``removed`` event on its own queue.

        Raises:
            JobNotFoundError: the job does not exist.
            JobLockedError: the job, or one of its children, is active (nothing was removed;
                a job that becomes active while a big tree is removed in chunks is kept, with
                the jobs above it, and the message says how many were removed).
            JobStateError: the job is the pending iteration of a job scheduler.
        """
        job_removal.remove_tree(self, remove_children=remove_children)

    # -- cancel --------------------------------------------------------------------------------

    def cancel(self, reason: str = "") -> JobState:
        """Cancel the job: see :meth:`Queue.cancel`, which this calls.

        Returns:
            ``JobState.FAILED`` when the job failed now, ``JobState.ACTIVE`` when its worker
            was asked to stop it.
        """
        # Imported here: the queue modules import this one.
        from corral._sync.queue_admin import cancel_job

        return cancel_job(self.queue, self.id, reason)

    # -- state ---------------------------------------------------------------------------------

    def get_state(self) -> JobState:
        """Where the job is now, read atomically; ``JobState.UNKNOWN`` when nowhere."""
        reply = self.queue._run(_GET_STATE, [self.queue._job_prefix, self.id])
        return JobState(_codec.text(reply))

    def is_completed(self) -> bool:
        """Whether the job is in completed."""
        return self.get_state() is JobState.COMPLETED

    def is_failed(self) -> bool:
        """Whether the job is in failed."""
        return self.get_state() is JobState.FAILED

    def is_delayed(self) -> bool:
        """Whether the job is in delayed."""
        return self.get_state() is JobState.DELAYED

    def is_active(self) -> bool:
        """Whether the job is in active."""
        return self.get_state() is JobState.ACTIVE

    def is_waiting(self) -> bool:
        """Whether the job is in wait (a prioritized job is not: see ``is_prioritized``)."""
        return self.get_state() is JobState.WAITING

    def is_prioritized(self) -> bool:
        """Whether the job is ready with a priority (in prioritized)."""
        return self.get_state() is JobState.PRIORITIZED

    def is_waiting_children(self) -> bool:
        """Whether the job is a flow parent waiting for its children."""
        return self.get_state() is JobState.WAITING_CHILDREN

    def refresh(self) -> None:
        """Read the job's hash again into this object (the lock token is kept).

        Raises:
            JobNotFoundError: the job does not exist any more.
        """
        client = self.queue.client()
        fields: dict[str, str] = client.hgetall(self.queue.keys.job(self.id))  # type: ignore[assignment]
        if not fields:
            raise script_error(-1, queue=self.queue.name, job_id=self.id)
        fresh = JobRecord.from_hash(self.queue_name, self.id, fields, token=self.token)
        for f in dataclasses.fields(JobRecord):
            setattr(self, f.name, getattr(fresh, f.name))

    # -- step jobs (worker side: they need the lock token) ------------------------------------

    def move_to_delayed(self, timestamp_ms: int, token: str | None = None) -> None:
        """Park the active job until ``timestamp_ms``; then raise ``DelayedError``.

        The attempt is not finished (``attempts_made`` is unchanged): the job comes back to a
        worker when due, as the next step of the same attempt.

        Args:
            timestamp_ms: when the job is due again, epoch ms.
            token: the lock token; ``job.token`` by default.

        Raises:
            JobNotFoundError, LockMissingError, LockMismatchError, NotActiveError: the job
                is gone, or not held with this token; nothing was written.
        """
        check_int("timestamp_ms", timestamp_ms, 0, MAX_TIMESTAMP_MS)
        self.delay = self._change(
            _MOVE_TO_DELAYED, self._token(token), clock.now_ms(), timestamp_ms
        )
        self.token = None

    def move_to_wait(self, token: str | None = None) -> int:
        """Hand the active job back to wait (or prioritized); then raise ``WaitingError``.

        Args:
            token: the lock token; ``job.token`` by default.

        Returns:
            The ms left on the queue's rate limit (0 when not limited), as BullMQ returns.

        Raises:
            JobNotFoundError, LockMissingError, LockMismatchError, NotActiveError: the job
                is gone, or not held with this token; nothing was written.
        """
        ttl = self._change(_MOVE_TO_WAIT, self._token(token))
        self.token = None
        return ttl

    def extend_lock(self, duration: Duration, token: str | None = None) -> None:
        """Renew the job's lock for ``duration`` from now, if ``token`` still holds it.

        Args:
            duration: seconds or a ``timedelta``.
            token: the lock token; ``job.token`` by default.

        Raises:
            LockMissingError: the lock is gone (expired, or the job finished).
            LockMismatchError: another token holds the lock.
        """
        ms = duration_ms("duration", duration)
        if ms == 0:
            raise InvalidOptionError("duration must be more than 0")
        held = self._token(token)
        lost = self.queue._run(
            _scripts.EXTEND_LOCKS, [self.queue._job_prefix, ms, self.id, held]
        )
        if lost:
            client = self.queue.client()
            holder = client.get(self.queue.keys.lock(self.id))
            raise script_error(-2 if holder is None else -6, queue=self.queue.name, job_id=self.id)

    # -- waiting for the outcome ---------------------------------------------------------------

    def wait_until_finished(self, timeout: float | None = None) -> Any:
        """Wait for the job to finish: its return value, or its failure raised.

        Works for jobs that finished before the call, and needs no ``QueueEvents``: it reads
        the queue's events stream itself.

        Args:
            timeout: seconds to wait at most (``None``: as long as it takes).

        Raises:
            JobFailedError: the job failed for good; ``failed_reason`` says why.
            JobNotFoundError: the job does not exist (removed after it finished?).
            TimeoutError: the job did not finish within ``timeout``.
        """
        from corral._sync.queue_events import wait_until_finished

        return wait_until_finished(self.queue, self.id, timeout)
