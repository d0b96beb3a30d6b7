"""Deduplication options (BullMQ's ``opts.deduplication``) and corral's idempotency windows.
Pure: validation and encoding only.

- ``Dedup(id)``: while a job with this id is unfinished, adds with the same id add nothing.
- ``Dedup(id, ttl=s)``: throttle: the id blocks adds for ``ttl`` seconds, finished or not;
  ``extend=True`` restarts the ttl at each blocked add.
- ``Dedup(id, ttl=s, extend=True, replace=True)`` with a ``delay``: debounce: a new add
  replaces the job still waiting for its delay, so only the last of a burst runs.
- ``Dedup(id, keep_last_if_active=True)``: at most one running and one waiting job per id:
  an add while the job runs is kept (the latest one) and runs after it.

The idempotency window is corral's: ``idempotency_key`` / ``idempotency_window`` remember the
first job's id and, once it finished, its result, for the whole window, in a key of their own
(``K:x-idem:<key>``) that no job retention removes.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from corral.bounds import check_text
from corral.errors import InvalidOptionError

#: Duration at the API: seconds as a number, or a ``timedelta``.
Seconds = float | int | timedelta

#: How long an idempotency key is remembered when no window is given: one day.
DEFAULT_IDEMPOTENCY_WINDOW_MS = 24 * 3600 * 1000


@dataclass(frozen=True, slots=True)
class Dedup:
    """BullMQ's deduplication options; see the module docstring for the modes."""

    id: str
    ttl: Seconds | None = None
    extend: bool = False
    replace: bool = False
    keep_last_if_active: bool = False


@dataclass(frozen=True, slots=True)
class DedupSpec:
    """Validated deduplication: what add_job.lua needs, and BullMQ's ``opts.de``."""

    id: str
    ttl_ms: int = 0
    extend: bool = False
    replace: bool = False
    keep_last_if_active: bool = False

    def to_opts(self) -> dict[str, Any]:
        """BullMQ's ``opts.de``: the keys that were given."""
        de: dict[str, Any] = {"id": self.id}
        if self.ttl_ms:
            de["ttl"] = self.ttl_ms
        if self.extend:
            de["extend"] = True
        if self.replace:
            de["replace"] = True
        if self.keep_last_if_active:
            de["keepLastIfActive"] = True
        return de

    def script_args(self) -> list[Any]:
        flag = {True: "1", False: "0"}
        return [
            self.id,
            self.ttl_ms,
            flag[self.extend],
            flag[self.replace],
            flag[self.keep_last_if_active],
        ]


NO_DEDUP_ARGS: list[Any] = ["", 0, "0", "0", "0"]


def check_dedup(value: Any, to_ms: Any) -> DedupSpec:
    """A ``deduplication`` option (a :class:`Dedup` or a dict of its fields), validated."""
    if isinstance(value, dict):
        unknown = set(value) - {"id", "ttl", "extend", "replace", "keep_last_if_active"}
        if unknown or "id" not in value:
            raise InvalidOptionError(
                "deduplication must have 'id' and optional 'ttl', 'extend', 'replace', "
                f"'keep_last_if_active', got {value!r}"
            )
        value = Dedup(**value)
    if not isinstance(value, Dedup):
        raise InvalidOptionError(f"deduplication must be a Dedup or a dict, got {value!r}")
    check_text("deduplication id", value.id)
    for flag in ("extend", "replace", "keep_last_if_active"):
        if not isinstance(getattr(value, flag), bool):
            raise InvalidOptionError(
                f"deduplication {flag} must be True or False, got {getattr(value, flag)!r}"
            )
    ttl_ms = 0 if value.ttl is None else to_ms("deduplication ttl", value.ttl)
    if value.ttl is not None and ttl_ms <= 0:
        raise InvalidOptionError(f"deduplication ttl must be more than 0, got {value.ttl!r}")
    if value.extend and not ttl_ms:
        raise InvalidOptionError("deduplication extend needs a ttl to extend")
    return DedupSpec(value.id, ttl_ms, value.extend, value.replace, value.keep_last_if_active)


def check_idempotency(key: Any, window: Any, to_ms: Any) -> tuple[str, int]:
    """``(key, window ms)`` for add_job.lua; ``("", 0)`` when no key is given."""
    if key is None:
        if window is not None:
            raise InvalidOptionError("idempotency_window needs an idempotency_key")
        return "", 0
    check_text("idempotency_key", key, max_length=512)
    window_ms = (
        DEFAULT_IDEMPOTENCY_WINDOW_MS if window is None else to_ms("idempotency_window", window)
    )
    if window_ms <= 0:
        raise InvalidOptionError(f"idempotency_window must be more than 0, got {window!r}")
    return key, window_ms
