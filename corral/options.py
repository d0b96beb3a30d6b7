"""Job options: validation at the call site and encoding to BullMQ's ``opts`` JSON. Pure.

Durations are accepted as seconds (``float``) or ``timedelta`` and stored as integer ms, as
BullMQ stores them. Every check runs before anything is written, and each error names the
option and the value it refused.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from corral.errors import InvalidOptionError

#: A duration at the API: seconds as a number, or a ``timedelta``.
Duration = float | int | timedelta
#: removeOnComplete / removeOnFail: ``True`` (remove at once), a count to keep, or
#: ``{"age": seconds, "count": n}``.
Retention = bool | int | dict[str, int]

MAX_PRIORITY = 2_097_151
MAX_JOB_ID_LENGTH = 255
MAX_NAME_LENGTH = 1024


def duration_ms(option: str, value: Duration) -> int:
    """A non-negative finite duration in whole milliseconds."""
    seconds = value.total_seconds() if isinstance(value, timedelta) else value
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        raise InvalidOptionError(f"{option} must be seconds or a timedelta, got {value!r}")
    if not math.isfinite(seconds) or seconds < 0:
        raise InvalidOptionError(f"{option} must be a finite number >= 0, got {value!r}")
    return round(seconds * 1000)


def check_job_id(job_id: str) -> str:
    """Refuse ids BullMQ cannot tell from its own: with ``:``, all digits, or too long."""
    if not isinstance(job_id, str) or not job_id:
        raise InvalidOptionError(f"job_id must be a non-empty string, got {job_id!r}")
    if ":" in job_id:
        raise InvalidOptionError(f"job_id must not contain ':', got {job_id!r}")
    if job_id.isdigit():
        # Numeric ids are the ones K:id hands out; a custom one could collide with them.
        raise InvalidOptionError(f"job_id must not be all digits, got {job_id!r}")
    if len(job_id) > MAX_JOB_ID_LENGTH:
        raise InvalidOptionError(
            f"job_id must be at most {MAX_JOB_ID_LENGTH} characters, got {len(job_id)}"
        )
    return job_id


def check_name(kind: str, name: str, *, colon: bool = True) -> str:
    if not isinstance(name, str) or not name:
        raise InvalidOptionError(f"{kind} must be a non-empty string, got {name!r}")
    if len(name) > MAX_NAME_LENGTH:
        raise InvalidOptionError(
            f"{kind} must be at most {MAX_NAME_LENGTH} characters, got {len(name)}"
        )
    if not colon and ":" in name:
        raise InvalidOptionError(f"{kind} must not contain ':', got {name!r}")
    return name


def _retention(option: str, value: Retention) -> Retention:
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value >= 0:
        return value
    if isinstance(value, dict) and set(value) <= {"age", "count"} and value:
        for k, v in value.items():
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise InvalidOptionError(f"{option}[{k!r}] must be an integer >= 0, got {v!r}")
        return dict(value)
    raise InvalidOptionError(
        f"{option} must be True, a count >= 0 or {{'age': s, 'count': n}}, got {value!r}"
    )


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
class JobOptions:
    """Validated options of one job; ``to_opts()`` gives BullMQ's ``opts`` JSON object."""

    job_id: str | None = None
    delay_ms: int = 0
    priority: int = 0
    lifo: bool = False
    attempts: int | None = None
    remove_on_complete: Retention | None = None
    remove_on_fail: Retention | None = None
    timestamp: int | None = None

    @classmethod
    def build(
        cls,
        *,
        job_id: str | None = None,
        delay: Duration | None = None,
        priority: int | None = None,
        lifo: bool = False,
        attempts: int | None = None,
        remove_on_complete: Retention | None = None,
        remove_on_fail: Retention | None = None,
        timestamp: int | None = None,
    ) -> JobOptions:
        """Check every option; raise :class:`InvalidOptionError` naming the first bad one."""
        if priority is not None and (
            isinstance(priority, bool)
            or not isinstance(priority, int)
            or not 0 <= priority <= MAX_PRIORITY
        ):
            raise InvalidOptionError(
                f"priority must be an integer from 0 to {MAX_PRIORITY}, got {priority!r}"
            )
        if attempts is not None and (
            isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 1
        ):
            raise InvalidOptionError(f"attempts must be an integer >= 1, got {attempts!r}")
        if timestamp is not None and (
            isinstance(timestamp, bool) or not isinstance(timestamp, int) or timestamp < 0
        ):
            raise InvalidOptionError(f"timestamp must be epoch ms >= 0, got {timestamp!r}")
        return cls(
            job_id=None if job_id is None else check_job_id(job_id),
            delay_ms=0 if delay is None else duration_ms("delay", delay),
            priority=priority or 0,
            lifo=bool(lifo),
            attempts=attempts,
            remove_on_complete=None
            if remove_on_complete is None
            else _retention("remove_on_complete", remove_on_complete),
            remove_on_fail=None
            if remove_on_fail is None
            else _retention("remove_on_fail", remove_on_fail),
            timestamp=timestamp,
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
        if self.remove_on_complete is not None:
            opts["removeOnComplete"] = self.remove_on_complete
        if self.remove_on_fail is not None:
            opts["removeOnFail"] = self.remove_on_fail
        return opts
