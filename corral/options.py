"""Job options: validation at the call site and encoding to BullMQ's ``opts`` JSON. Pure.

Durations are accepted as seconds (``float``) or ``timedelta`` and stored as integer ms, as
BullMQ stores them. Every check runs before anything is written, and each error names the
option and the value it refused.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypedDict

from corral._breaker_state import BREAKERS_KEY, breaker_names
from corral._parents import FAILURE_POLICIES, ParentOptions, check_parent
from corral.bounds import (
    MAX_COUNT,
    MAX_DURATION_MS,
    MAX_JOB_ID_LENGTH,
    MAX_NAME_LENGTH,
    MAX_TIMESTAMP_MS,
    check_int,
    check_job_id,
    check_text,
)
from corral.dedup import NO_DEDUP_ARGS, Dedup, DedupSpec, check_dedup, check_idempotency
from corral.errors import InvalidOptionError

if TYPE_CHECKING:
    from corral.repeat import RepeatOptions

__all__ = [
    "FAILURE_POLICIES",
    "MAX_JOB_ID_LENGTH",
    "MAX_NAME_LENGTH",
    "ParentOptions",
    "check_job_id",
    "check_parent",
]

#: A duration at the API: seconds as a number, or a ``timedelta``.
Duration = float | int | timedelta
#: removeOnComplete / removeOnFail: ``True`` (remove at once), a count to keep, or
#: ``{"age": seconds, "count": n}``.
Retention = bool | int | dict[str, int]

MAX_PRIORITY = 2_097_151
#: Largest ``size_limit``: Redis' own cap on a string (512 MiB).
MAX_SIZE_LIMIT = 512 * 1024 * 1024


def duration_ms(option: str, value: Duration) -> int:
    """A finite duration from 0 to ten years (:data:`~corral.bounds.MAX_DURATION_MS`), in
    whole milliseconds."""
    seconds = value.total_seconds() if isinstance(value, timedelta) else value
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        raise InvalidOptionError(f"{option} must be seconds or a timedelta, got {value!r}")
    if not math.isfinite(seconds) or seconds < 0:
        raise InvalidOptionError(f"{option} must be a finite number >= 0, got {value!r}")
    if seconds > MAX_DURATION_MS / 1000:
        raise InvalidOptionError(
            f"{option} must be at most {MAX_DURATION_MS // 1000:,} s (ten years), got {value!r}"
        )
    return round(seconds * 1000)


def positive_ms(option: str, value: Duration) -> int:
    """A duration that must be more than 0 (a timeout, a lock), in whole milliseconds."""
    ms = duration_ms(option, value)
    if ms <= 0:
        raise InvalidOptionError(f"{option} must be more than 0, got {value!r}")
    return ms


#: Where ``opts`` JSON keeps a job's timeouts (ms): keys BullMQ never reads, so a Node worker
#: runs such a job as any other.
TIMEOUT_KEY = "x-timeout"
SOFT_TIMEOUT_KEY = "x-soft-timeout"
#: Where ``opts`` JSON names a job's dead-letter queue (corral/_lua/include/dead_letter.lua
#: reads it): a key BullMQ never reads, so a Node worker runs such a job as any other.
DEAD_LETTER_KEY = "x-dlq"


def check_dead_letter_queue(value: Any, queue_name: str | None = None) -> str:
    """A ``dead_letter_queue`` option: a queue name (no ``:``), not the queue's own."""
    name = check_text("dead_letter_queue", value, colon=False)
    if name == queue_name:
        raise InvalidOptionError(
            f"dead_letter_queue must be another queue than {queue_name!r}: a job that failed "
            "for good would be added back to the queue it failed in"
        )
    return name


def timeouts(timeout: Duration | None, soft_timeout: Duration | None) -> tuple[int, int]:
    """``timeout`` and ``soft_timeout`` in ms (0: none); the soft one must come first."""
    hard = 0 if timeout is None else positive_ms("timeout", timeout)
    soft = 0 if soft_timeout is None else positive_ms("soft_timeout", soft_timeout)
    if hard and soft >= hard:
        raise InvalidOptionError(
            f"soft_timeout must be less than timeout, got {soft_timeout!r} >= {timeout!r}"
        )
    return hard, soft


def check_name(kind: str, name: str, *, colon: bool = True) -> str:
    """A name (queue, job...): non-empty text of at most 1024 characters."""
    return check_text(kind, name, colon=colon)


def check_prefix(prefix: str) -> str:
    """A key prefix: printable ASCII without spaces, as it is part of the workers' client
    names (``CLIENT SETNAME``, which refuses anything else)."""
    return check_text("prefix", prefix, word=True)


def _retention(option: str, value: Retention) -> Retention:
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and 0 <= value <= MAX_COUNT:
        return value
    if isinstance(value, dict) and set(value) <= {"age", "count"} and value:
        for k, v in value.items():
            # age is seconds: at most ten years, as every duration.
            high = MAX_DURATION_MS // 1000 if k == "age" else MAX_COUNT
            check_int(f"{option}[{k!r}]", v, 0, high)
        return dict(value)
    raise InvalidOptionError(
        f"{option} must be True, a count from 0 to {MAX_COUNT} or {{'age': s, 'count': n}}, "
        f"got {value!r}"
    )


#: The check of a removeOnComplete / removeOnFail value, for a worker's defaults too.
check_retention = _retention


def retention_limits(value: Any) -> tuple[int, int]:
    """``(keep count, max age ms)`` for the finish script; -1 means no limit."""
    if value is True:
        return 0, -1
    if value is None or value is False:
        return -1, -1
    if isinstance(value, int):
        return value, -1
    if isinstance(value, dict):
        count = value.get("count")
        age = value.get("age")
        return (
            -1 if count is None else int(count),
            -1 if age is None else int(age) * 1000,
        )
    return -1, -1


@dataclass(frozen=True, slots=True)
class Backoff:
    """How long to wait before retrying: BullMQ's ``opts.backoff``.

    Args:
        type: ``"fixed"``, ``"exponential"`` (``delay * 2 ** (attempts_made - 1)``), or the
            name of a custom strategy registered on the worker (declare it on the queue with
            ``backoff_types=``).
        delay: the base delay, seconds or a ``timedelta``.
        jitter: 0..1; the delay is drawn from ``[(1 - jitter) * d, d]``.
        max_delay: a cap on the computed delay (a corral addition, ignored by Node workers).
    """

    type: str
    delay: Duration = 0
    jitter: float = 0.0
    max_delay: Duration | None = None

    @classmethod
    def fixed(cls, delay: Duration, *, jitter: float = 0.0) -> Backoff:
        return cls("fixed", delay, jitter)

    @classmethod
    def exponential(
        cls, delay: Duration, *, jitter: float = 0.0, max_delay: Duration | None = None
    ) -> Backoff:
        return cls("exponential", delay, jitter, max_delay)


BUILTIN_BACKOFF_TYPES = frozenset({"fixed", "exponential"})


def encode_backoff(value: Any, custom_types: Collection[str] = ()) -> dict[str, Any]:
    """Validate a ``backoff`` option and give BullMQ's JSON object (delays in ms)."""
    if isinstance(value, (int, float, timedelta)) and not isinstance(value, bool):
        return {"type": "fixed", "delay": duration_ms("backoff", value)}
    if isinstance(value, dict):
        unknown = set(value) - {"type", "delay", "jitter", "max_delay"}
        if unknown or "type" not in value:
            raise InvalidOptionError(
                f"backoff must have 'type' and optional 'delay', 'jitter', 'max_delay', "
                f"got {value!r}"
            )
        value = Backoff(**value)
    if not isinstance(value, Backoff):
        raise InvalidOptionError(
            f"backoff must be seconds, a Backoff or a dict with 'type', got {value!r}"
        )
    if value.type not in BUILTIN_BACKOFF_TYPES and value.type not in custom_types:
        raise InvalidOptionError(
            f"unknown backoff type {value.type!r}: use 'fixed' or 'exponential', or declare "
            "custom strategies with Queue(..., backoff_types=[...])"
        )
    jitter = value.jitter
    if isinstance(jitter, bool) or not isinstance(jitter, (int, float)) or not 0 <= jitter <= 1:
        raise InvalidOptionError(f"backoff jitter must be a number from 0 to 1, got {jitter!r}")
    out: dict[str, Any] = {"type": value.type, "delay": duration_ms("backoff delay", value.delay)}
    if jitter:
        out["jitter"] = jitter
    if value.max_delay is not None:
        out["maxDelay"] = duration_ms("backoff max_delay", value.max_delay)
    return out


def int_option(option: str, value: Any, low: int, high: int = MAX_COUNT) -> int:
    """An integer option from ``low`` to ``high`` (:data:`~corral.bounds.MAX_COUNT`)."""
    return check_int(option, value, low, high)


def _failure_policy(o: Mapping[str, Any]) -> str | None:
    chosen = [
        name for name in FAILURE_POLICIES if o.get(name) is not None and _bool_option(name, o[name])
    ]
    if len(chosen) > 1:
        raise InvalidOptionError(
            f"at most one failure policy may be True, got {' and '.join(chosen)}"
        )
    return FAILURE_POLICIES[chosen[0]] if chosen else None


class JobOptionsDict(TypedDict, total=False):
    """The keyword options of ``add`` (and of ``default_job_options`` on a queue)."""

    job_id: str
    delay: Duration
    priority: int
    lifo: bool
    attempts: int
    backoff: Duration | Backoff | dict[str, Any]
    remove_on_complete: Retention
    remove_on_fail: Retention
    keep_logs: int
    stacktrace_limit: int
    size_limit: int
    timestamp: int
    parent: ParentOptions
    fail_parent_on_failure: bool
    continue_parent_on_failure: bool
    ignore_dependency_on_failure: bool
    remove_dependency_on_failure: bool
    deduplication: Dedup | dict[str, Any]
    idempotency_key: str
    idempotency_window: Duration
    timeout: Duration
    soft_timeout: Duration
    dead_letter_queue: str
    breakers: Collection[str]
    #: ``add`` only: make a job scheduler (corral.repeat, docs/schedulers.md).
    repeat: RepeatOptions


OPTION_NAMES = frozenset(JobOptionsDict.__annotations__)


@dataclass(frozen=True, slots=True)
class JobOptions:
    """Validated options of one job; ``to_opts()`` gives BullMQ's ``opts`` JSON object."""

    job_id: str | None = None
    delay_ms: int = 0
    priority: int = 0
    lifo: bool = False
    attempts: int | None = None
    backoff: dict[str, Any] | None = None
    remove_on_complete: Retention | None = None
    remove_on_fail: Retention | None = None
    keep_logs: int | None = None
    stacktrace_limit: int | None = None
    size_limit: int | None = None
    timestamp: int | None = None
    parent: dict[str, str] | None = None
    #: BullMQ's short name of the child failure policy (``"fpof"``...), or ``None``.
    failure_policy: str | None = None
    dedup: DedupSpec | None = None
    idempotency_key: str = ""
    idempotency_window_ms: int = 0
    #: The attempt's time limit and its soft warning, in ms (0: none).
    timeout_ms: int = 0
    soft_timeout_ms: int = 0
    #: The queue (same prefix) a copy goes to when the job fails for good, or ``None``.
    dead_letter_queue: str | None = None
    breakers: tuple[str, ...] = ()

    @classmethod
    def build(
        cls,
        options: Mapping[str, Any],
        *,
        defaults: Mapping[str, Any] | None = None,
        backoff_types: Collection[str] = (),
    ) -> JobOptions:
        """Check every option; raise :class:`InvalidOptionError` naming the first bad one.

        ``defaults`` (a queue's ``default_job_options``) apply where ``options`` is silent.
        """
        for given in (defaults or {}, options):
            unknown = sorted(set(given) - OPTION_NAMES)
            if unknown:
                hint = difflib.get_close_matches(unknown[0], OPTION_NAMES, n=1)
                also = f" (did you mean {hint[0]!r}?)" if hint else ""
                raise InvalidOptionError(f"unknown job option {unknown[0]!r}{also}")
        if "repeat" in options or "repeat" in (defaults or {}):
            raise InvalidOptionError(
                "repeat makes a job scheduler: it is an option of add() alone, not of "
                "add_bulk, flows, default_job_options or a scheduler's template"
            )
        for per_job in ("job_id", "parent", "deduplication", "idempotency_key", "timestamp"):
            if per_job in (defaults or {}):
                raise InvalidOptionError(
                    f"default_job_options cannot hold {per_job!r}: it belongs to one job"
                )
        o: dict[str, Any] = {**(defaults or {}), **options}
        get = o.get
        idem_key, idem_ms = check_idempotency(
            get("idempotency_key"), get("idempotency_window"), duration_ms
        )
        timeout_ms, soft_timeout_ms = timeouts(get("timeout"), get("soft_timeout"))
        return cls(
            job_id=None if get("job_id") is None else check_job_id(o["job_id"]),
            delay_ms=0 if get("delay") is None else duration_ms("delay", o["delay"]),
            priority=0
            if get("priority") is None
            else int_option("priority", o["priority"], 0, MAX_PRIORITY),
            lifo=_bool_option("lifo", get("lifo", False)),
            attempts=None if get("attempts") is None else int_option("attempts", o["attempts"], 1),
            backoff=None if get("backoff") is None else encode_backoff(o["backoff"], backoff_types),
            remove_on_complete=None
            if get("remove_on_complete") is None
            else _retention("remove_on_complete", o["remove_on_complete"]),
            remove_on_fail=None
            if get("remove_on_fail") is None
            else _retention("remove_on_fail", o["remove_on_fail"]),
            keep_logs=None
            if get("keep_logs") is None
            else int_option("keep_logs", o["keep_logs"], 0),
            stacktrace_limit=None
            if get("stacktrace_limit") is None
            else int_option("stacktrace_limit", o["stacktrace_limit"], 0),
            size_limit=None
            if get("size_limit") is None
            else int_option("size_limit", o["size_limit"], 1, MAX_SIZE_LIMIT),
            timestamp=None
            if get("timestamp") is None
            else int_option("timestamp (epoch ms)", o["timestamp"], 0, MAX_TIMESTAMP_MS),
            parent=None if get("parent") is None else check_parent(o["parent"]),
            failure_policy=_failure_policy(o),
            dedup=None
            if get("deduplication") is None
            else check_dedup(o["deduplication"], duration_ms),
            idempotency_key=idem_key,
            idempotency_window_ms=idem_ms,
            timeout_ms=timeout_ms,
            soft_timeout_ms=soft_timeout_ms,
            dead_letter_queue=None
            if get("dead_letter_queue") is None
            else check_dead_letter_queue(o["dead_letter_queue"]),
            breakers=breaker_names(get("breakers")),
        )

    @property
    def parent_key(self) -> str:
        """The parent's full key (``"bull:pq:<id>"``), or ``""`` without a parent."""
        return f"{self.parent['queue']}:{self.parent['id']}" if self.parent else ""

    def parent_field(self) -> dict[str, Any] | None:
        """The child's ``parent`` hash field: ``{"id", "queueKey"}`` plus its policy flag."""
        if not self.parent:
            return None
        field: dict[str, Any] = {"id": self.parent["id"], "queueKey": self.parent["queue"]}
        if self.failure_policy:
            field[self.failure_policy] = True
        return field

    def check_size(self, encoded_data: str) -> None:
        """Refuse data over ``size_limit`` bytes of JSON."""
        if self.size_limit is not None:
            size = len(encoded_data.encode())
            if size > self.size_limit:
                raise InvalidOptionError(
                    f"data is {size} bytes of JSON, over size_limit={self.size_limit}"
                )

    def to_opts(self, timestamp: int) -> dict[str, Any]:
        """BullMQ's ``opts``: ``attempts`` always, the other options only when given."""
        opts: dict[str, Any] = {"attempts": self.attempts or 0}
        if self.delay_ms:
            opts["delay"] = self.delay_ms
        if self.priority:
            opts["priority"] = self.priority
        if self.lifo:
            opts["lifo"] = True
        if self.job_id is not None:
            opts["jobId"] = self.job_id
        if self.timestamp is not None:
            opts["timestamp"] = timestamp
        if self.backoff is not None:
            opts["backoff"] = self.backoff
        if self.remove_on_complete is not None:
            opts["removeOnComplete"] = self.remove_on_complete
        if self.remove_on_fail is not None:
            opts["removeOnFail"] = self.remove_on_fail
        if self.keep_logs is not None:
            opts["kl"] = self.keep_logs  # BullMQ stores keepLogs under its short name
        if self.stacktrace_limit is not None:
            opts["stackTraceLimit"] = self.stacktrace_limit
        if self.size_limit is not None:
            opts["sizeLimit"] = self.size_limit
        if self.parent is not None:
            opts["parent"] = dict(self.parent)
        if self.failure_policy:
            opts[self.failure_policy] = True
        if self.dedup is not None:
            opts["de"] = self.dedup.to_opts()  # BullMQ's short name of deduplication
        if self.timeout_ms:
            opts[TIMEOUT_KEY] = self.timeout_ms
        if self.soft_timeout_ms:
            opts[SOFT_TIMEOUT_KEY] = self.soft_timeout_ms
        if self.dead_letter_queue is not None:
            opts[DEAD_LETTER_KEY] = self.dead_letter_queue
        if self.breakers:
            opts[BREAKERS_KEY] = list(self.breakers)
        return opts

    def dedup_args(self) -> list[Any]:
        """ARGV[13..19] of add_job.lua: deduplication, then the idempotency key and window."""
        dedup = NO_DEDUP_ARGS if self.dedup is None else self.dedup.script_args()
        return [*dedup, self.idempotency_key, self.idempotency_window_ms]


def _bool_option(option: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise InvalidOptionError(f"{option} must be True or False, got {value!r}")
    return value


def exception_types(option: str, value: Any) -> tuple[type[BaseException], ...]:
    """One exception type or several, as a tuple for ``isinstance``."""
    if isinstance(value, type):
        types: tuple[Any, ...] = (value,)
    elif isinstance(value, Collection) and not isinstance(value, (str, bytes, Mapping)):
        types = tuple(value)
    else:
        raise InvalidOptionError(
            f"{option} must be an exception type or several, got {type(value).__name__}"
        )
    for t in types:
        if not (isinstance(t, type) and issubclass(t, BaseException)):
            raise InvalidOptionError(f"{option} must hold exception types, got {t!r}")
    return types


def limiter(value: Mapping[str, Any] | None) -> tuple[int, int]:
    """A worker's ``limiter`` (``{"max": n, "duration": seconds}``) as ``(max, ms)``."""
    if value is None:
        return 0, 0
    if not isinstance(value, Mapping) or set(value) != {"max", "duration"}:
        raise InvalidOptionError(
            f"limiter must be {{'max': n, 'duration': seconds}}, got {value!r}"
        )
    duration = duration_ms("limiter duration", value["duration"])
    if duration <= 0:
        raise InvalidOptionError(f"limiter duration must be > 0, got {value['duration']!r}")
    return int_option("limiter max", value["max"], 1), duration
