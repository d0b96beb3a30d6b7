# Generated from corral/_async/job_signal.py by scripts/unasync.py: do not edit.
"""Waiting for a signal and recorded steps of :class:`Job` (a mixin, kept apart so that
``job.py`` stays under its size): what lets a processor wait minutes or days for an approval
without holding its worker.

``wait_for_signal`` parks the job in delayed until its timeout (``park_job.lua``) and leaves
the processor with :class:`DelayedError`, so the worker frees the slot without counting an
attempt; ``queue.signal`` (``signal_job.lua``) stores the payload and puts the job back in
wait, and the processor runs again from the start. What it did before the wait is not done
twice when it is wrapped in :meth:`JobSignalMixin.step`, which records each step's JSON
result on the job (``<job>:x-steps``) and returns it on the next runs.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from corral import _codec, _scripts, clock
from corral.bounds import MAX_NAME_LENGTH, MAX_TIMESTAMP_MS, check_text, names_a_job
from corral.errors import DelayedError, InvalidOptionError, SignalTimeout, script_error
from corral.options import Duration, duration_ms
from corral.retry import RETRY_MARGIN_MS

if TYPE_CHECKING:
    from corral._sync._queue_base import QueueBase

#: Largest step result ``step`` records, in bytes of JSON: a draft, a tool's answer or a list
#: of ids fits; a file belongs in object storage, with its URL recorded here.
MAX_STEP_BYTES = 16 * 1024 * 1024
#: When a wait without a ``timeout`` ends: as late as a delayed job's score holds exactly
#: (a day before 2039-09-07, as a bounded retry), which is "never" for a human approval.
NO_TIMEOUT_DUE_MS = MAX_TIMESTAMP_MS - RETRY_MARGIN_MS

_PARK_JOB = _scripts.load("park_job")
_RECORD_STEP = _scripts.load("record_step")


def check_payload(what: str, value: Any, limit: int, option: str) -> str:
    """``value`` as JSON text, refused when JSON cannot carry it or it is over ``limit``
    bytes (``option`` names the limit in the message)."""
    try:
        encoded = _codec.dumps(value)
    except TypeError as exc:  # orjson's errors: a set, bytes, NaN, too deep a nesting
        raise InvalidOptionError(f"{what} must be JSON-serializable: {exc}") from None
    size = len(encoded.encode())
    if size > limit:
        raise InvalidOptionError(f"{what} is {size} bytes of JSON, over {option}={limit}")
    return encoded


class JobSignalMixin:
    """Signal and step methods of :class:`Job`."""

    if TYPE_CHECKING:
        queue: QueueBase
        id: str
        token: str | None
        delay: int

        def _token(self, token: str | None) -> str: ...

    def _check_job(self) -> None:
        if not names_a_job(self.id):  # a queue's own key (wait, meta...) is no job
            raise script_error(-1, queue=self.queue.name, job_id=self.id)

    def wait_for_signal(self, name: str, *, timeout: Duration | None = None) -> Any:
        """Return the payload of the job's signal ``name``, or park the job until it comes.

        Call it inside a processor. When the signal is there (sent before the wait, or this
        is the run the signal woke), its payload is returned at once. Else the job moves,
        atomically, from active to delayed (parked, where no Node worker takes it), its lock
        is released, and this raises :class:`DelayedError`: let it propagate, and the worker
        frees the slot without counting an attempt. ``queue.signal(job.id, name, payload)``
        makes it due and a corral worker runs the processor again from the start, where this call
        now returns the payload: wrap the work done before the wait in :meth:`step`.

        Args:
            name: the signal's name (several per job: each wait names one).
            timeout: how long to wait (seconds or a ``timedelta``), counted from the first
                wait; ``None``: no end (until 2039). A job run again before its timeout
                without the signal (promoted by hand) is parked again until the same time.

        Returns:
            The signal's payload (any JSON value).

        Raises:
            DelayedError: the job was parked; the processor must let it propagate.
            SignalTimeout: the job came back at its timeout without the signal; the attempt
                fails with it (retried per ``attempts``, and a retry waits anew).
            InvalidOptionError: ``name`` or ``timeout`` is refused.
            JobNotFoundError, LockMissingError, LockMismatchError, NotActiveError: the job is
                gone, or not held with the job's lock token; nothing was written.
        """
        name = check_text("signal name", name, max_length=MAX_NAME_LENGTH)
        self._check_job()
        now = clock.now_ms()
        if timeout is None:
            due = NO_TIMEOUT_DUE_MS
        else:
            due = now + duration_ms("timeout", timeout)
            if due > NO_TIMEOUT_DUE_MS:
                raise InvalidOptionError(
                    f"timeout must end before {NO_TIMEOUT_DUE_MS} (epoch ms, 2039-09-06): "
                    f"got {timeout!r}; pass timeout=None to wait without an end"
                )
        token = self._token(None)
        reply = self.queue._run(
            _PARK_JOB, [self.queue._job_prefix, self.id, token, now, name, due]
        )
        code = int(reply[0])
        if code < 0:
            raise script_error(code, queue=self.queue.name, job_id=self.id)
        if code == 1:
            return _codec.loads(reply[1])
        if code == 2:
            raise SignalTimeout(name, int(reply[1]), job_id=self.id)
        parked_until = int(reply[1])
        self.delay = max(0, parked_until - now)
        self.token = None  # the lock is released: the worker's lease sees the job moved
        raise DelayedError(f"job {self.id} waits for signal {name!r} (parked in delayed)")

    def step(self, name: str, fn: Callable[[], Any]) -> Any:
        """Run ``fn()`` once for this job and return its result, recorded on the job; on the
        next runs of the processor (after a wait for a signal, a retry, a stall) return the
        recorded result without calling ``fn``.

        Args:
            name: the step's name, unique within the job.
            fn: a function of no arguments (use ``functools.partial`` or a lambda to pass
                some), plain or with :class:`Job`; its result must be JSON.

        Returns:
            The step's result as JSON gives it back (a tuple comes back as a list), the same
            on the first run and on the next ones.

        Raises:
            InvalidOptionError: ``name`` is refused, the result is not JSON or is over
                :data:`MAX_STEP_BYTES`, or (blocking ``Job``) ``fn`` is async. Nothing was
                recorded: the next run calls ``fn`` again.
            JobNotFoundError: the job does not exist any more.
        """
        name = check_text("step name", name, max_length=MAX_NAME_LENGTH)
        self._check_job()
        client = self.queue.client()
        steps_key = self.queue.keys.steps(self.id)
        recorded = client.hget(steps_key, name)
        if recorded is not None:
            return _codec.loads(recorded)
        result = fn()
        if inspect.isawaitable(result):
            result = _settled(result)
        if inspect.iscoroutine(result):  # only in the blocking twin, which has no loop to run it
            result.close()
            raise InvalidOptionError(
                f"step {name!r}: fn is async; the blocking Job runs plain functions"
            )
        encoded = check_payload(f"step {name!r} result", result, MAX_STEP_BYTES, "MAX_STEP_BYTES")
        reply = self.queue._run(
            _RECORD_STEP, [self.queue._job_prefix, self.id, name, encoded]
        )
        if int(reply[0]) < 0:
            raise script_error(int(reply[0]), queue=self.queue.name, job_id=self.id)
        return _codec.loads(reply[1])

    def get_steps(self) -> dict[str, Any]:
        """The job's recorded steps: name -> result."""
        client = self.queue.client()
        raw: dict[str, str] = client.hgetall(self.queue.keys.steps(self.id))  # type: ignore[assignment]
        return {_codec.text(k): _codec.loads(v) for k, v in raw.items()}


def _settled(result: Any) -> Any:
    # The blocking twin turns this into a plain return: the coroutine is refused by step.
    return result
