"""The exception tree of corral, and the table that maps Lua error codes to it.

::

    CorralError
    ├── ConfigurationError        bad settings found at first use (server too old, policy)
    │   └── CrossSlotError        on Redis Cluster, keys that must share a hash slot do not
    ├── ServerNotAvailable        no URL configured and no server binary to start
    ├── ClosedError               (also RuntimeError) a queue, flow producer... used after close()
    ├── InvalidOptionError        (also ValueError) an option or argument was refused
    ├── JobError                  carries .queue and .job_id
    │   ├── JobNotFoundError      the job hash does not exist (code -1)
    │   │   └── ParentNotFoundError  the parent named by ``parent=`` does not exist (code -7)
    │   ├── LockMissingError      the job's lock is gone (code -2)
    │   ├── NotActiveError        the job is not in the active list (code -3)
    │   ├── JobStateError         the job is not in a state that allows this (code -4)
    │   ├── JobLockedError        the job is active (locked) and cannot be changed (code -5)
    │   ├── JobFailedError        wait_until_finished: the job failed (.failed_reason)
    │   ├── JobFinishedError      (also JobStateError) cancel: the job already ended (code -9)
    │   └── LockMismatchError     the lock is held by another token (code -6)
    ├── QueueBusyError            the queue has active jobs (obliterate without force)
    ├── ServerReplyError          (also redis ResponseError) the server refused a call for a
    │                             reason no retry fixes: a key of another type, a script error
    ├── BulkAddError              add_bulk stopped part-way: carries .jobs added and .index
    ├── NotDurableError           durable add: fewer replicas than asked acknowledged (.jobs)
    ├── FlowAddError              a flow written in chunks stopped part-way (.written, .flow_id)
    ├── RateLimitError            raised by job code after ``rate_limit``: retry later
    ├── DelayedError              raised by job code after ``move_to_delayed``
    ├── WaitingError              raised by job code after ``move_to_wait``
    ├── WaitingChildrenError      raised by job code after ``move_to_waiting_children``
    ├── BreakerOpen               a circuit breaker refused the call (.name, .retry_at_ms)
    ├── DeadlineExceeded          (also TimeoutError) a ``corral.deadline`` block ran out
    ├── JobTimeoutError           an attempt ran past its ``timeout`` (retried per attempts)
    │   └── SignalTimeout         ``wait_for_signal``: no signal came before its ``timeout``
    ├── JobTimeoutWarning         raised in sync job code at its ``soft_timeout``
    ├── ProcessorImportError      (also ConfigurationError) ``module:function`` cannot be imported
    ├── ChildProcessDied          the child process running an attempt died (.how)
    ├── MemoryLimitError          a child process went over ``max_memory_mb``
    ├── ChildJobError             a processor in a child process raised (.type_name)
    └── UnrecoverableError        raised by job code: fail now, never retry
        └── JobCancelledError     the job was cancelled (``cancel()``): failed, never retried

redis-py's own errors (``ConnectionError``, ``TimeoutError``...) pass through unchanged;
:func:`server_error_kind` tells which of them are worth waiting out.
"""

from __future__ import annotations

import ssl
import traceback
from typing import Any, Literal

from redis import exceptions as redis_errors


class CorralError(Exception):
    """Root of every error corral raises on purpose."""


class ConfigurationError(CorralError):
    """The server or the settings cannot be used as they are."""


class ClosedError(CorralError, RuntimeError):
    """A queue, flow producer or events reader was used after its ``close()``: it does not
    open a connection again behind the caller's back. Make a new one."""


class CrossSlotError(ConfigurationError):
    """On Redis Cluster, keys that one script or transaction needs are not in one hash slot
    (a queue's prefix and name without a hash tag, a flow across slots)."""


class ServerNotAvailable(CorralError):
    """No Redis URL is configured and no server binary can be started."""


class InvalidOptionError(CorralError, ValueError):
    """An option or argument was refused before anything was written."""


class ProcessorImportError(ConfigurationError):
    """A processor given as ``"package.module:function"`` cannot be imported (the message
    names the module and the import error), or a callable given with ``processes=`` cannot
    be imported by name in a child process (a lambda, a closure)."""


class ServerReplyError(CorralError, redis_errors.ResponseError):
    """The server refused a call, for a reason waiting will not fix: a key holds another type
    than the queue's layout says (``WRONGTYPE``: data written by something else), or a script
    failed. Also a redis-py ``ResponseError``, which is what it wraps (``__cause__``)."""


class UnrecoverableError(CorralError):
    """Raise from a processor to fail the job at once, skipping remaining attempts."""


class JobCancelledError(UnrecoverableError):
    """The job was cancelled with ``queue.cancel()`` / ``job.cancel()``: it fails for good with
    ``failedReason`` "cancelled: <reason>". A processor running it is stopped."""


class JobTimeoutError(CorralError):
    """An attempt ran past its ``timeout``: the processor was stopped and the attempt fails
    with ``failedReason`` "timed out after N s"; it is retried per ``attempts``."""


class SignalTimeout(JobTimeoutError):
    """Raised inside a processor by ``job.wait_for_signal(name, timeout=...)`` when the job
    came back from its wait without the signal: the attempt fails with it (retried per
    ``attempts``, and a retry waits anew). ``name`` is the signal's, ``due_ms`` when the wait
    ended (epoch ms)."""

    def __init__(self, name: str, due_ms: int, *, job_id: str | None = None) -> None:
        super().__init__(f"no signal {name!r} before the wait's timeout")
        self.name = name
        self.due_ms = due_ms
        self.job_id = job_id


class JobTimeoutWarning(CorralError):
    """The job's ``soft_timeout`` passed: raised inside a plain function (in its thread or
    child process) so that it can clean up before the hard ``timeout``. Async processors are
    cancelled instead; ``job.soft_timed_out`` tells either kind."""


class ChildProcessDied(CorralError):
    """The child process running the attempt died (a segfault, ``os._exit``, killed by a
    signal or the out-of-memory killer); ``how`` says how. The pool replaces the child."""

    def __init__(self, how: str) -> None:
        super().__init__(f"the child process running the job {how}")
        self.how = how


class MemoryLimitError(CorralError):
    """A child process used more memory than the worker's ``max_memory_mb``: it was killed
    and the attempt fails (retried per ``attempts``)."""


class ChildJobError(CorralError):
    """A processor running in a child process raised: ``type_name`` is the qualified name of
    what it raised, ``remote_traceback`` the traceback text from the child (the job's
    stacktrace gets that one). ``str()`` is the child's message, as ``failedReason``."""

    def __init__(self, message: str, *, type_name: str, remote_traceback: str) -> None:
        super().__init__(message)
        self.type_name = type_name
        self.remote_traceback = remote_traceback


class QueueBusyError(CorralError):
    """The queue has active jobs, so it cannot be obliterated without ``force=True``."""


class RateLimitError(CorralError):
    """Raise from a processor after ``rate_limit()``: the job goes back to wait, unfailed."""


class DelayedError(CorralError):
    """Raise from a processor after ``job.move_to_delayed()``: the worker leaves the job be."""


class WaitingError(CorralError):
    """Raise from a processor after ``job.move_to_wait()``: the worker leaves the job be."""


class WaitingChildrenError(CorralError):
    """Raise from a processor after ``job.move_to_waiting_children()`` returned ``True``: the
    worker leaves the job be, and it runs again once its children are done."""


class BreakerOpen(CorralError):
    """A circuit breaker (:class:`corral.Breaker`) refused the call: its downstream failed
    too often lately. ``name`` is the breaker's, ``state`` ``"open"`` (its cooldown runs) or
    ``"busy"`` (half-open, and another caller's probe runs), ``retry_at_ms`` when to try
    again (epoch ms). A worker that sees it escape a processor delays the job until then,
    and the attempt does not count."""

    def __init__(self, name: str, *, state: str, retry_at_ms: int) -> None:
        super().__init__(f"circuit breaker {name!r} is {state}: retry at {retry_at_ms} (epoch ms)")
        self.name = name
        self.state = state
        self.retry_at_ms = retry_at_ms

    def __reduce__(self) -> Any:
        return _breaker_open, (self.name, self.state, self.retry_at_ms)


def _breaker_open(name: str, state: str, retry_at_ms: int) -> BreakerOpen:
    return BreakerOpen(name, state=state, retry_at_ms=retry_at_ms)


class DeadlineExceeded(CorralError, TimeoutError):
    """A ``corral.deadline(seconds)`` block ran past its deadline and was stopped."""


class JobError(CorralError):
    """An operation on one job was refused by the server."""

    def __init__(self, message: str, *, queue: str | None = None, job_id: str | None = None):
        super().__init__(message)
        self.queue = queue
        self.job_id = job_id


class JobNotFoundError(JobError):
    """The job does not exist."""


class ParentNotFoundError(JobNotFoundError):
    """The parent named by a job's ``parent`` option does not exist; nothing was added.

    ``.queue`` and ``.job_id`` name the parent.
    """


class LockMissingError(JobError):
    """The job's lock is missing: it expired or the job was moved by someone else."""


class NotActiveError(JobError):
    """The job is not in the active state."""


class JobFailedError(JobError):
    """The job failed; ``failed_reason`` is what its processor raised (BullMQ's failedReason)."""

    def __init__(self, failed_reason: str, *, queue: str | None = None, job_id: str | None = None):
        super().__init__(failed_reason, queue=queue, job_id=job_id)
        self.failed_reason = failed_reason


class JobStateError(JobError):
    """The job is not in a state that allows the operation."""


class JobFinishedError(JobStateError):
    """The job already completed or failed, so it cannot be cancelled."""


class JobLockedError(JobError):
    """The job is active (locked by a worker) and cannot be changed or removed."""


class LockMismatchError(JobError):
    """The job's lock belongs to another worker."""


#: Negative return codes of the Lua scripts, each mapped to the error it means.
SCRIPT_ERRORS: dict[int, tuple[type[JobError], str]] = {
    -1: (JobNotFoundError, "job {job_id} does not exist in queue {queue}"),
    -2: (LockMissingError, "lock of job {job_id} in queue {queue} is missing"),
    -3: (NotActiveError, "job {job_id} in queue {queue} is not active"),
    -4: (JobStateError, "job {job_id} in queue {queue} is not in a state that allows this"),
    -5: (JobLockedError, "job {job_id} in queue {queue} is active (locked by a worker)"),
    -6: (LockMismatchError, "lock of job {job_id} in queue {queue} is held by another worker"),
    -7: (ParentNotFoundError, "parent job {job_id} does not exist in queue {queue}"),
    -8: (
        JobStateError,
        "job {job_id} in queue {queue} is the pending iteration of a job scheduler: "
        "remove the scheduler instead",
    ),
    -9: (JobFinishedError, "job {job_id} in queue {queue} has already finished"),
}


def script_error(code: int, *, queue: str, job_id: str) -> JobError:
    """Build the exception for a negative script return ``code``."""
    cls, template = SCRIPT_ERRORS.get(code, (JobError, "script error {code} on job {job_id}"))
    return cls(template.format(code=code, queue=queue, job_id=job_id), queue=queue, job_id=job_id)


#: What a server error means for whoever hit it: wait it out and try again, stop (the settings
#: are wrong and no retry helps), or neither known (a bug or bad data: report it).
ErrorKind = Literal["transient", "configuration", "other"]

#: Error replies redis-py leaves as plain ``ResponseError`` whose first word says the server
#: cannot serve right now: a script of another client runs too long (BUSY), a blocked call was
#: ended by a failover or CLIENT UNBLOCK (UNBLOCKED), too few replicas acknowledge writes.
_TRANSIENT_REPLIES = ("BUSY", "UNBLOCKED", "NOREPLICAS", "MASTERDOWN", "TRYAGAIN", "LOADING")
#: Replies that mean the settings are wrong: no retry will change them.
_CONFIGURATION_REPLIES = ("NOAUTH", "WRONGPASS", "NOPERM", "ERR unknown command", "MOVED", "ASK")
#: How a server words a command of a script that the ACL refused (Valkey and Redis 7.x; Redis
#: 6.2): the ACL lacks a command or a key that the script needs.
_SCRIPT_ACL_REFUSALS = ("ACL failure in script", "The user executing the script can't run")


#: Reasons (``ssl.SSLError.reason``) of a TLS error that mean the settings of one side do not
#: fit the other's: a certificate refused either way, no protocol version or cipher in common,
#: TLS spoken to a plain port, a key that does not belong to its certificate.
_TLS_CONFIGURATION_REASONS = (
    "CERTIFICATE",
    "UNKNOWN_CA",
    "WRONG_VERSION_NUMBER",
    "PROTOCOL_VERSION",
    "UNSUPPORTED_PROTOCOL",
    "HANDSHAKE_FAILURE",
    "NO_SHARED_CIPHER",
    "NO_PROTOCOLS_AVAILABLE",
    "KEY_VALUES_MISMATCH",
    "PEM_LIB",
)


def tls_failure(exc: BaseException) -> ssl.SSLError | None:
    """The TLS error under ``exc`` (redis-py raises a ``ConnectionError`` whose context it is)
    when it means the TLS settings are wrong, else ``None`` (an EOF or a reset in the middle
    of a handshake is an outage, not a setting)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, ssl.SSLCertVerificationError):
            return current
        if isinstance(current, ssl.SSLError) and any(
            word in (current.reason or "") for word in _TLS_CONFIGURATION_REASONS
        ):
            return current
        current = current.__cause__ or current.__context__
    return None


def failure_reason(error: BaseException) -> str:
    """The ``failedReason`` a job gets for ``error``: its message, as in BullMQ (the type's
    name when it has none). A ``BaseException`` that is not an ``Exception`` is named with
    its type: the message of ``SystemExit(3)`` is "3", which does not say the code exited.

    Whatever the processor raised, this gives text that can be stored: a message whose
    ``__str__`` raises is named by its type, and lone surrogates are escaped (``\\ud800``);
    a failure that cannot be recorded would leave its job active until its lock expired.
    """
    try:
        if not isinstance(error, Exception):
            text = traceback.format_exception_only(error)[-1].strip()
        else:
            text = str(error) or type(error).__name__
    except Exception:  # its __str__ raised
        text = f"{type(error).__name__} (its message cannot be read)"
    return storable_text(text)


def storable_text(text: str) -> str:
    """``text`` with lone surrogates escaped, so that it encodes as UTF-8 (and as JSON)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def server_error_kind(exc: BaseException) -> ErrorKind:
    """Classify an error raised by a call to the server.

    Transient: the connection dropped or timed out, or the server answered that it cannot
    serve for now (BUSY, LOADING, READONLY, MASTERDOWN, TRYAGAIN, CLUSTERDOWN, UNBLOCKED,
    OOM under ``noeviction``, NOSCRIPT after a restart or ``SCRIPT FLUSH``). Configuration:
    wrong password, missing permission (ACL), an unknown command, a cluster node reached
    without a cluster client, a command of a script refused by the ACL, a TLS handshake
    refused for its settings (a certificate, see :func:`tls_failure`). Anything else is
    "other".
    """
    if tls_failure(exc) is not None:  # before OSError: an SSLError is one
        return "configuration"
    if isinstance(
        exc,
        (
            redis_errors.AuthenticationError,
            redis_errors.AuthorizationError,
            redis_errors.NoPermissionError,
            redis_errors.ModuleError,
            redis_errors.MovedError,
            redis_errors.AskError,
        ),
    ):
        return "configuration"
    if isinstance(
        exc,
        (
            redis_errors.ConnectionError,  # also BusyLoadingError (LOADING)
            redis_errors.TimeoutError,
            redis_errors.ReadOnlyError,
            redis_errors.OutOfMemoryError,
            redis_errors.NoScriptError,
            redis_errors.TryAgainError,
            redis_errors.ClusterDownError,  # also MasterDownError
            OSError,
        ),
    ):
        return "transient"
    if isinstance(exc, redis_errors.ResponseError):
        message = str(exc)
        if message.startswith(_TRANSIENT_REPLIES):
            return "transient"
        if message.startswith(_CONFIGURATION_REPLIES) or "unknown command" in message:
            return "configuration"
        if any(words in message for words in _SCRIPT_ACL_REFUSALS):
            return "configuration"
    return "other"


class BulkAddError(CorralError):
    """``add_bulk`` stopped part-way: a bulk too big for one call goes in several, and one of
    them failed for good after earlier ones were written (the error is ``__cause__``).

    ``.jobs`` are the jobs of the items that were added, in order (``add_bulk``'s answer for
    them), and ``.index`` is the index of the first item not added (``len(jobs)``): no item
    from there on was written, so ``add_bulk(items[exc.index:])`` adds the rest, each once.
    When the cause is a lost connection the call at ``.index`` may have been written all the
    same (as with ``add``): items with a ``job_id`` can be sent again safely (a duplicate id
    writes nothing); others are best checked for first.
    """

    def __init__(self, message: str, *, jobs: list[Any], index: int) -> None:
        super().__init__(message)
        self.jobs = jobs
        self.index = index


class NotDurableError(CorralError):
    """A durable add (``durable=True``) was written to the master, but fewer replicas than
    asked acknowledged it within the timeout: a failover before they catch up could lose it.

    ``.jobs`` are the jobs added (they exist on the master and will run), ``.acknowledged`` is
    how many replicas had them, ``.needed`` how many were asked for. Adding the same items
    again with their ``job_id`` is safe (a duplicate id writes nothing).
    """

    def __init__(self, message: str, *, jobs: list[Any], acknowledged: int, needed: int) -> None:
        super().__init__(message)
        self.jobs = jobs
        self.acknowledged = acknowledged
        self.needed = needed


class FlowAddError(CorralError):
    """A flow too big for one transaction is written in chunks, and one of them failed for good
    (a non-transient error, or resends exhausted) after earlier ones were written; the error
    is ``__cause__``.

    ``.flow_id`` names the flow (see ``FlowProducer.get_unfinished_flows``), ``.written`` lists
    the paths of the nodes created (``"root"``, ``"root.children[3]"``; ``"flow <i>: "`` before
    them for ``add_bulk``), and ``.unsure`` those of the chunk that failed: when the cause is a
    lost connection it may have been written all the same. No node after them was written.
    ``.released`` tells whether the parents written were then released to run with the
    children they got; ``False`` when the server could not be reached for that either (they
    wait until ``FlowProducer.release_unfinished_flow`` is called).
    """

    def __init__(
        self,
        message: str,
        *,
        flow_id: str,
        written: list[str],
        unsure: list[str],
        released: bool,
    ) -> None:
        super().__init__(message)
        self.flow_id = flow_id
        self.written = written
        self.unsure = unsure
        self.released = released
