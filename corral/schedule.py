"""When a job scheduler runs: ``every`` intervals and cron patterns, as BullMQ 6.x reads them.

Pure: :class:`Schedule` validates a scheduler's timing and computes its first and next run
times in epoch ms; :class:`JobScheduler` is a scheduler as read back from its hash. The I/O
lives in ``_async/queue_schedulers.py``.

BullMQ's rules, as observed from Node BullMQ 6.7.0:

- ``every``: the first run is now (or ``start_date`` when that is later). Each next run is the
  previous one plus ``every``; when the worker took the previous run late, the runs missed
  meanwhile are skipped, not made up: the next run is the first ``previous + k * every``
  after now. No iteration is created once ``end_date`` has passed, which lets the last run
  fall up to ``every`` after it.
- cron (``pattern``): runs are the pattern's ticks after now, no earlier than ``start_date``,
  none after ``end_date``; ``immediately`` adds a first run now. Patterns have 5 fields, or 6
  with seconds *first* (cron-parser's order, not croniter's default). Without ``tz`` they
  are read in the process's local time zone, as cron-parser does in Node.
- ``limit``: at most that many runs, counted in each iteration's ``opts.repeat.count``.
"""

from __future__ import annotations

import zoneinfo
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from croniter import CroniterError, croniter

from corral import _codec
from corral.bounds import MAX_TIMESTAMP_MS, check_int, check_text
from corral.errors import InvalidOptionError
from corral.options import Duration, duration_ms

#: A date at the API: an aware (or local naive) ``datetime``, or epoch milliseconds.
DateLike = datetime | int

#: Fields of a scheduler hash that say when it runs, in the order Node BullMQ writes them.
TIMING_FIELDS = ("tz", "limit", "pattern", "startDate", "endDate", "every")

#: Longest time zone name (the IANA ones are under 40 characters) and cron pattern.
MAX_TZ_LENGTH = 255
MAX_CRON_LENGTH = 255

#: Named patterns croniter and cron-parser both understand.
CRON_ALIASES = frozenset(
    {"@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly"}
)


def date_ms(option: str, value: DateLike) -> int:
    """A date as epoch ms; a naive ``datetime`` is local time, as ``datetime.timestamp()``."""
    if isinstance(value, datetime):
        try:
            ms = round(value.timestamp() * 1000)
        except (ValueError, OverflowError, OSError):  # year 1 in local time, and the like
            ms = -1
        if not 0 <= ms <= MAX_TIMESTAMP_MS:
            raise InvalidOptionError(
                f"{option} must be from 1970 to 2039-09-07 (epoch ms {MAX_TIMESTAMP_MS}), "
                f"got {value!r}"
            )
        return ms
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_TIMESTAMP_MS:
        raise InvalidOptionError(
            f"{option} must be a datetime or epoch ms from 0 to {MAX_TIMESTAMP_MS}, got {value!r}"
        )
    return value


def every_ms(value: Duration) -> int:
    """``every`` (seconds or a ``timedelta``) as whole ms, refusing what is not > 0."""
    ms = duration_ms("every", value)
    if ms < 1:
        raise InvalidOptionError(f"every must be at least 1 ms, got {value!r}")
    return ms


def check_tz(tz: str) -> zoneinfo.ZoneInfo:
    """The IANA time zone named ``tz``."""
    check_text("tz", tz, max_length=MAX_TZ_LENGTH)
    try:
        return zoneinfo.ZoneInfo(tz)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):
        # OSError: a name the file system refuses (too long, odd characters).
        raise InvalidOptionError(f"unknown time zone {tz!r}") from None


def check_cron(pattern: str) -> str:
    """A cron pattern of 5 fields, or 6 with seconds first, or an alias such as ``@daily``."""
    if not isinstance(pattern, str) or not pattern.strip():
        raise InvalidOptionError(f"cron must be a cron pattern string, got {pattern!r}")
    fields = pattern.split()
    if not (len(fields) in (5, 6) or (len(fields) == 1 and fields[0].lower() in CRON_ALIASES)):
        raise InvalidOptionError(
            f"invalid cron pattern {pattern!r}: expected 5 fields, or 6 with seconds first"
        )
    if len(pattern) > MAX_CRON_LENGTH:
        raise InvalidOptionError(
            f"invalid cron pattern {pattern[:40]!r}...: longer than {MAX_CRON_LENGTH} characters"
        )
    if not croniter.is_valid(pattern, second_at_beginning=True):
        reason = _out_of_range(fields)
        raise InvalidOptionError(
            f"invalid cron pattern {pattern!r}" + (f": {reason}" if reason else "")
        )
    try:
        # A pattern can be well formed and still name no date ("0 0 30 2 *"): croniter finds
        # that out only when it looks for the next tick, which a worker would do later.
        croniter(pattern, datetime(2026, 1, 1), second_at_beginning=True).get_next(datetime)
    except CroniterError:
        raise InvalidOptionError(f"cron pattern {pattern!r} never fires (no such date)") from None
    return pattern


#: The fields of a 5-field pattern (a 6-field one has seconds first), with their ranges.
_CRON_FIELDS = (
    ("minute", 0, 59),
    ("hour", 0, 23),
    ("day of month", 1, 31),
    ("month", 1, 12),
    ("day of week", 0, 7),
)


def _out_of_range(fields: list[str]) -> str | None:
    """Why croniter refused the pattern, when it is a number outside its field's range: the
    first such number, as "minute 61 is out of range 0-59"; else ``None``."""
    named = (("second", 0, 59), *_CRON_FIELDS) if len(fields) == 6 else _CRON_FIELDS
    if len(fields) != len(named):
        return None
    for text, (name, low, high) in zip(fields, named, strict=True):
        for part in text.split(","):
            values = part.split("/", 1)[0]
            for value in values.split("-"):
                if value.isdigit() and not low <= int(value) <= high:
                    return f"{name} {value} is out of range {low}-{high}"
    return None


def cron_next(pattern: str, tz: str | None, after_ms: int) -> int:
    """The first tick of ``pattern`` strictly after ``after_ms`` (epoch ms).

    Without ``tz`` the pattern is read in local time (naive datetimes, which
    ``datetime.timestamp()`` maps back through the local zone's DST rules).
    """
    seconds = after_ms / 1000
    if tz:
        start = datetime.fromtimestamp(seconds, check_tz(tz))
        nxt = croniter(pattern, start, second_at_beginning=True).get_next(datetime)
    else:
        start = datetime.fromtimestamp(seconds)
        nxt = croniter(pattern, start, second_at_beginning=True).get_next(datetime)
    return round(nxt.timestamp() * 1000)


@dataclass(frozen=True, slots=True)
class Schedule:
    """When a scheduler runs; times and ``every`` in epoch ms, as stored in its hash."""

    every: int | None = None
    pattern: str | None = None
    tz: str | None = None
    start_date: int | None = None
    end_date: int | None = None
    limit: int | None = None
    immediately: bool = False

    @classmethod
    def build(
        cls,
        *,
        every: Duration | None = None,
        cron: str | None = None,
        tz: str | None = None,
        limit: int | None = None,
        start_date: DateLike | None = None,
        end_date: DateLike | None = None,
        immediately: bool = False,
    ) -> Schedule:
        """Validate the API's arguments.

        Raises:
            InvalidOptionError: naming the first argument refused.
        """
        if (every is None) == (cron is None):
            raise InvalidOptionError("give exactly one of every= (seconds) or cron= (a pattern)")
        if tz is not None:
            check_tz(tz)
        if limit is not None:
            check_int("limit", limit, 1)
        start = None if start_date is None else date_ms("start_date", start_date)
        end = None if end_date is None else date_ms("end_date", end_date)
        if start is not None and end is not None and start > end:
            raise InvalidOptionError(f"start_date ({start} ms) is after end_date ({end} ms)")
        if not isinstance(immediately, bool):
            raise InvalidOptionError(f"immediately must be True or False, got {immediately!r}")
        return cls(
            every=None if every is None else every_ms(every),
            pattern=None if cron is None else check_cron(cron),
            tz=tz,
            start_date=start,
            end_date=end,
            limit=limit,
            immediately=immediately,
        )

    @classmethod
    def from_fields(cls, fields: Mapping[str, str]) -> Schedule:
        """Read a scheduler hash (written by corral or Node), without validating it."""

        def num(name: str) -> int | None:
            raw = fields.get(name)
            return int(float(raw)) if raw not in (None, "") else None

        return cls(
            every=num("every"),
            pattern=fields.get("pattern") or None,
            tz=fields.get("tz") or None,
            start_date=num("startDate"),
            end_date=num("endDate"),
            limit=num("limit"),
        )

    def fields(self) -> dict[str, str]:
        """The timing fields of the scheduler hash, in the order Node BullMQ writes them."""
        values = (self.tz, self.limit, self.pattern, self.start_date, self.end_date, self.every)
        return {
            name: str(value)
            for name, value in zip(TIMING_FIELDS, values, strict=True)
            if value is not None
        }

    def _cron_from(self, after_ms: int) -> int:
        assert self.pattern is not None
        if self.start_date is not None:
            # A tick exactly at start_date counts: search from the ms before it.
            after_ms = max(after_ms, self.start_date - 1)
        return cron_next(self.pattern, self.tz, after_ms)

    def first_run(self, now_ms: int) -> int:
        """When a new scheduler runs first."""
        start = self.start_date
        if self.every is not None:
            return start if start is not None and start > now_ms else now_ms
        if self.immediately and (start is None or start <= now_ms):
            return now_ms
        return self._cron_from(now_ms)

    def restart_run(self, now_ms: int) -> int:
        """When a scheduler that has no iteration left runs again after an upsert that keeps
        its timing: ``every`` restarts on the next multiple of ``every`` (BullMQ's offset 0).
        """
        if self.every is not None:
            start = self.start_date
            if start is not None and start > now_ms:
                return start
            return (now_ms // self.every + 1) * self.every
        return self._cron_from(now_ms)

    def next_run(self, prev_ms: int, now_ms: int) -> int | None:
        """The run after ``prev_ms`` (the iteration a worker just took at ``now_ms``), or
        ``None`` when ``end_date`` stops the scheduler. ``limit`` is checked by the caller."""
        if self.every is not None:
            if self.end_date is not None and now_ms > self.end_date:
                return None
            steps = max(1, (now_ms - prev_ms) // self.every + 1)
            return prev_ms + steps * self.every
        nxt = self._cron_from(max(now_ms, prev_ms))
        if self.end_date is not None and nxt > self.end_date:
            return None
        return nxt

    def check_runs(self, now_ms: int) -> int:
        """The first run, refusing a schedule whose ``end_date`` leaves no run at all."""
        first = self.first_run(now_ms)
        if self.end_date is not None and first > self.end_date:
            raise InvalidOptionError(
                f"end_date ({self.end_date} ms) is before the first run ({first} ms)"
            )
        return first


@dataclass(frozen=True, slots=True)
class JobTemplate:
    """What each iteration of a scheduler is made of: job name, data, and ``opts`` JSON
    (BullMQ's option names)."""

    name: str
    data: Any = None
    opts: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class JobScheduler:
    """A job scheduler as stored in ``K:repeat:<id>`` (BullMQ's ``JobSchedulerJson``).

    ``every``, ``start_date``, ``end_date`` and ``next_run`` are in (epoch) ms, as stored.
    ``next_run`` is the scheduler's score in ``K:repeat``: the run time of its pending
    iteration, or of its last one when it has stopped (``limit`` or ``end_date`` reached).
    """

    id: str
    name: str
    every: int | None
    pattern: str | None
    tz: str | None
    limit: int | None
    start_date: int | None
    end_date: int | None
    offset: int
    iteration_count: int
    next_run: int | None
    template: JobTemplate

    @classmethod
    def from_hash(
        cls, scheduler_id: str, fields: Mapping[str, str], score: float | None
    ) -> JobScheduler:
        timing = Schedule.from_fields(fields)
        name = fields.get("name") or scheduler_id
        return cls(
            id=scheduler_id,
            name=name,
            every=timing.every,
            pattern=timing.pattern,
            tz=timing.tz,
            limit=timing.limit,
            start_date=timing.start_date,
            end_date=timing.end_date,
            offset=int(float(fields.get("offset") or 0)),
            iteration_count=int(fields.get("ic") or 0),
            next_run=None if score is None else int(score),
            template=JobTemplate(
                name=name,
                data=_codec.loads(fields.get("data")),
                opts=_codec.loads(fields.get("opts")) or {},
            ),
        )

    @property
    def schedule(self) -> Schedule:
        return Schedule(
            every=self.every,
            pattern=self.pattern,
            tz=self.tz,
            start_date=self.start_date,
            end_date=self.end_date,
            limit=self.limit,
        )
