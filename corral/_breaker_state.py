"""Circuit breakers without I/O: names, settings, the ``breakers=`` job option, and reading a
breaker's hash (its fields are listed in ``_lua/include/breaker.lua``). Pure."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from corral.bounds import MAX_DURATION_MS, check_text
from corral.errors import InvalidOptionError

#: Where ``opts`` JSON names the breakers a job needs: a key BullMQ never reads, so a Node
#: worker runs such a job as any other (without checking them).
BREAKERS_KEY = "x-breakers"

#: Most breakers one job may name, and most ``failures`` a breaker may count: the claim and
#: the record scripts run over all of them (and keep that many failure times) at once.
MAX_JOB_BREAKERS = 16
MAX_FAILURES = 1000

#: Names refused for a breaker: ``bull:x-breaker:meta`` (or ``:id``) would look like a key
#: of a queue named ``x-breaker`` to whatever finds queues by their keys (the dashboard).
RESERVED_NAMES = frozenset({"meta", "id"})

BreakerStateName = Literal["closed", "open", "half_open"]


def check_breaker_name(name: Any) -> str:
    """A breaker's name: non-empty text without ``:`` (it ends the breaker's key)."""
    checked = check_text("breaker name", name, colon=False)
    if checked in RESERVED_NAMES:
        raise InvalidOptionError(
            f"breaker name {checked!r} is reserved (its key would look like a queue's)"
        )
    return checked


def breaker_names(value: Any) -> tuple[str, ...]:
    """The ``breakers=`` job option: breaker names (``None``: none), without repeats."""
    if value is None:
        return ()
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple, set, frozenset)):
        raise InvalidOptionError(
            f"breakers must be a list of breaker names, got {type(value).__name__}"
        )
    names = tuple(dict.fromkeys(check_breaker_name(name) for name in value))
    if len(names) > MAX_JOB_BREAKERS:
        raise InvalidOptionError(
            f"breakers may name at most {MAX_JOB_BREAKERS} breakers, got {len(names)}"
        )
    return names


def stored_breakers(opts: Mapping[str, Any]) -> tuple[str, ...]:
    """The breakers a job's stored ``opts`` name; what is not a list of usable names (another
    client wrote it) names none, and the job runs unchecked."""
    value = opts.get(BREAKERS_KEY)
    if not value:
        return ()
    try:
        return breaker_names(value)
    except InvalidOptionError:
        return ()


def check_count(option: str, value: Any, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidOptionError(f"{option} must be an integer from {low} to {high}, got {value!r}")
    return value


def check_seconds(option: str, value: Any) -> int:
    """A breaker's duration (seconds, more than 0) in ms."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidOptionError(f"{option} must be seconds, got {value!r}")
    if not 0 < value <= MAX_DURATION_MS / 1000:  # also refuses NaN
        raise InvalidOptionError(
            f"{option} must be more than 0 and at most ten years, got {value!r}"
        )
    return max(1, round(value * 1000))


@dataclass(frozen=True, slots=True)
class BreakerState:
    """What a breaker's key says at ``now``.

    Attributes:
        name: the breaker's name.
        state: ``"closed"``, ``"open"`` (calls are refused until ``retry_at_ms``) or
            ``"half_open"`` (the cooldown is over: one probe may run, or runs).
        recent_failures: failures counted within the window (closed only).
        retry_at_ms: open: when it goes half-open (epoch ms); else ``None``.
        probe_running: half-open: a probe holds it (its lease has not passed).
        opens: how many times it opened, ever.
        changed_at_ms: when it last changed state (epoch ms), ``None`` if never.
    """

    name: str
    state: BreakerStateName
    recent_failures: int = 0
    retry_at_ms: int | None = None
    probe_running: bool = False
    opens: int = 0
    changed_at_ms: int | None = None


def _whole(value: Any) -> int | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    if not 0 <= number <= 2**53:  # also NaN
        return None
    return int(number)


def read_state(name: str, fields: Mapping[str, str], now_ms: int, window_ms: int) -> BreakerState:
    """The breaker's state at ``now_ms`` from its hash (empty: a breaker never used: closed).

    ``window_ms`` is the window to count recent failures in when the hash stores none.
    """
    state = fields.get("state")
    opens = _whole(fields.get("opens")) or 0
    changed = _whole(fields.get("changed"))
    until = _whole(fields.get("until")) or 0
    if state == "open" and now_ms < until:
        return BreakerState(name, "open", retry_at_ms=until, opens=opens, changed_at_ms=changed)
    if state in ("open", "half_open"):
        probing = (
            state == "half_open"
            and bool(fields.get("probe"))
            and now_ms < (_whole(fields.get("probe_until")) or 0)
        )
        return BreakerState(
            name, "half_open", probe_running=probing, opens=opens, changed_at_ms=changed
        )
    window = _whole(fields.get("window")) or window_ms
    times = (_whole(t) for t in (fields.get("fails") or "").split(","))
    recent = sum(1 for t in times if t is not None and t > now_ms - window)
    return BreakerState(name, "closed", recent_failures=recent, opens=opens, changed_at_ms=changed)
