"""``AsyncJob``: a job bound to its queue, whose methods act on it (BullMQ's ``Job``).

The blocking twin ``Job`` is generated from this file. Methods that need the job's lock take
``token`` (the worker's lock token; a job handed to a processor carries its own in
``job.token``).
"""

from __future__ import annotations

import traceback
from typing import TYPE_CHECKING, Any

from corral import _codec, _scripts
from corral.errors import script_error
from corral.job import JobRecord
from corral.options import retention_limits
from corral.retry import RetryPolicy

if TYPE_CHECKING:
    from corral._async._queue_base import AsyncQueueBase

#: BullMQ's default cap on stored stack traces per job.
DEFAULT_STACKTRACE_LIMIT = 10
_DEFAULT_POLICY = RetryPolicy()


class AsyncJob(JobRecord):
    """A job of an :class:`AsyncQueue`; see :class:`corral.job.JobRecord` for its fields."""

    queue: AsyncQueueBase

    def _token(self, token: str | None) -> str:
        return token if token is not None else (self.token or "0")

    # -- finishing an attempt (used by Worker; public for manual processing) ---------------

    async def move_to_completed(
        self,
        return_value: Any = None,
        token: str | None = None,
        *,
        fetch: _scripts.FetchNext = _scripts.NO_FETCH,
    ) -> list[_scripts.Fetched]:
        """Complete the job with ``return_value`` (JSON); with ``fetch``, take next jobs.

        Raises:
            TypeError: the return value is not JSON serializable (the job is untouched).
            JobError: the lock is lost or the job is not active (nothing was written).
        """
        encoded = _codec.dumps(return_value)
        fetched = await self._finish(
            "completed", encoded, "", self.opts.get("removeOnComplete"), 0, token, fetch
        )
        self.returnvalue = return_value
        return fetched

    async def move_to_failed(
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
        reason = str(error) or type(error).__name__
        limit = int(self.opts.get("stackTraceLimit", DEFAULT_STACKTRACE_LIMIT))
        stack = [*self.stacktrace, "".join(traceback.format_exception(error))]
        stacktrace = _codec.dumps(stack[-limit:] if limit > 0 else [])
        delay = policy.retry_delay(self, error)
        if delay is None:
            outcome, retention, delay = "failed", self.opts.get("removeOnFail"), 0
        else:
            outcome, retention = "retry", None
        fetched = await self._finish(outcome, reason, stacktrace, retention, delay, token, fetch)
        self.failed_reason = reason
        return fetched

    async def _finish(
        self,
        outcome: str,
        value: str,
        stacktrace: str,
        retention: Any,
        retry_delay: int,
        token: str | None,
        fetch: _scripts.FetchNext,
    ) -> list[_scripts.Fetched]:
        from corral.clock import now_ms

        keep, max_age = retention_limits(retention)
        reply = await self.queue._run(
            _scripts.MOVE_TO_FINISHED,
            [
                self.queue._job_prefix,
                self.id,
                self._token(token),
                now_ms(),
                outcome,
                value,
                stacktrace,
                keep,
                max_age,
                retry_delay,
                *fetch.args(),
            ],
        )
        code = int(reply[0])
        if code < 0:
            raise script_error(code, queue=self.queue.name, job_id=self.id)
        self.attempts_made = int(reply[1])
        return _scripts.parse_fetched(reply, 4)
