"""Repeatable jobs as BullMQ before 6 wrote them, and the ``repeat`` option of ``add``. Pure.

Node BullMQ 4 and 5 made a job repeat with ``queue.add(name, data, {repeat: ...})``. What they
wrote, as observed from bullmq 4.18.3 and 5.81.5 (black-box: their public API and the keys
they left):

- ``K:repeat`` is the zset job schedulers use too: member = the entry's *key*, score = its
  next run (ms). The key is built from ``"<name>:<jobId>:<endDate ms>:<tz>:<pattern or
  every ms>"`` (empty parts stay empty, ``"tick::::*/5 * * * *"``): 4.x uses that string
  itself; 5.x its MD5 in hex (or ``repeat.key`` when given).
- 4.x writes nothing else. 5.x also writes a hash ``K:repeat:<key>`` holding ``name`` and
  ``pattern`` or ``every``, plus ``tz`` and ``endDate`` when given (never ``ic``, which
  every 6.x scheduler hash has: that is how a legacy entry is told from a scheduler). A 5.x
  ``add`` with the same options as a 4.x entry keeps the 4.x key and adds such a hash.
- Each run is a job ``repeat:<md5>:<run ms>`` with ``rjk`` = the entry's key (for a 5.x key
  the MD5 is the key itself; for a 4.x one some other digest), pending in ``delayed`` at the
  entry's score, whose ``opts.repeat`` repeats the options (``pattern``/``every``, ``tz``,
  ``startDate``, ``endDate``, ``limit``, ``jobId``, ``count``) and whose name, data and other
  options are the job's: an old worker copied them into the next run when it took one.
- ``getRepeatableJobs(start, end, asc)`` lists every ``K:repeat`` member, latest next run
  first: ``{key, name, endDate, tz, pattern, every, next}`` from the hash (``every`` a
  string) in 5.x; ``{key, name, id, endDate, tz, pattern, next}`` parsed from the key in 4.x
  (an ``every`` shows as ``pattern``).

Node BullMQ 6.7.0 dropped all of this: its ``Queue`` has no ``getRepeatableJobs``, its
``add`` stores ``opts.repeat`` as given and adds a plain job that runs once, its workers run a
5.x entry's iterations on as a scheduler's (with data ``{}``: the entry holds no data), and it
refuses a 4.x entry ("Legacy repeatable job metadata is not supported in BullMQ v6").
"""

from __future__ import annotations

import difflib
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypedDict

from corral import _codec
from corral.bounds import check_text
from corral.errors import InvalidOptionError
from corral.options import Duration
from corral.schedule import TIMING_FIELDS, DateLike, Schedule, date_ms


class RepeatOptions(TypedDict, total=False):
    """``add(..., repeat={...})``: the job scheduler to make (see :func:`parse_repeat`)."""

    pattern: str
    cron: str
    every: Duration
    tz: str
    limit: int
    start_date: DateLike
    end_date: DateLike
    immediately: bool
    key: str


REPEAT_KEYS = frozenset(RepeatOptions.__annotations__)

#: Options of an old iteration that belong to that run, not to the job it repeats.
RUN_OPTIONS = frozenset({"jobId", "delay", "timestamp", "prevMillis", "repeat", "repeatJobKey"})


@dataclass(frozen=True, slots=True)
class Repeat:
    """A checked ``repeat`` option: the schedule, and the custom ``key`` if one was given."""

    schedule: Schedule
    key: str | None = None

    def suffix(self) -> str:
        """The last part of the legacy key: the pattern, or ``every`` in ms."""
        return (
            self.schedule.pattern if self.schedule.pattern is not None else str(self.schedule.every)
        )

    def raw_key(self, name: str, job_id: str | None) -> str:
        """The key BullMQ 4 stored: ``name:jobId:endDate:tz:pattern-or-every``."""
        s = self.schedule
        end = "" if s.end_date is None else str(s.end_date)
        return f"{name}:{job_id or ''}:{end}:{s.tz or ''}:{self.suffix()}"

    def scheduler_id(self, name: str, job_id: str | None) -> str:
        """The key BullMQ 5 stored for these options: ``key``, else the MD5 of the raw key.
        corral's ``add(repeat=)`` names its scheduler so."""
        if self.key is not None:
            return self.key
        return hashlib.md5(self.raw_key(name, job_id).encode()).hexdigest()


def parse_repeat(value: Any) -> Repeat:
    """Check a ``repeat`` option.

    It is a dict with ``pattern`` (or ``cron``, corral's name) or ``every`` (seconds or a
    ``timedelta``), and optionally ``tz``, ``limit``, ``start_date``, ``end_date`` (a
    ``datetime`` or epoch ms), ``immediately`` and ``key`` (the scheduler id, as BullMQ 5's
    ``repeat.key``), read as :meth:`~corral.AsyncQueue.upsert_job_scheduler` reads them.

    Raises:
        InvalidOptionError: naming the first key or value refused.
    """
    if not isinstance(value, Mapping):
        raise InvalidOptionError(
            f"repeat must be a dict such as {{'pattern': '0 * * * *'}} or {{'every': 60}}, "
            f"got {value!r}"
        )
    unknown = sorted(set(value) - REPEAT_KEYS, key=str)
    if unknown:
        hint = difflib.get_close_matches(str(unknown[0]), REPEAT_KEYS, n=1)
        also = f" (did you mean {hint[0]!r}?)" if hint else ""
        raise InvalidOptionError(f"unknown repeat option {unknown[0]!r}{also}")
    if "pattern" in value and "cron" in value:
        raise InvalidOptionError("repeat takes 'pattern' or 'cron' (the same thing), not both")
    cron = value.get("pattern", value.get("cron"))
    if cron is None and value.get("every") is None:
        raise InvalidOptionError("repeat needs 'pattern' (a cron pattern) or 'every' (seconds)")
    if cron is not None and value.get("every") is not None:
        raise InvalidOptionError("repeat takes 'pattern' or 'every', not both")
    schedule = Schedule.build(
        every=value.get("every"),
        cron=cron,
        tz=value.get("tz"),
        limit=value.get("limit"),
        start_date=value.get("start_date"),
        end_date=value.get("end_date"),
        immediately=value.get("immediately", False),
    )
    key = value.get("key")
    if key is not None:
        key = check_text("repeat key", key, colon=False)
    return Repeat(schedule, key)


def parse_raw_key(key: str) -> tuple[str, str | None, int | None, str | None, str | None]:
    """``(name, job id, end date ms, tz, pattern-or-every)`` of a BullMQ 4 key.

    Read from the right, as neither a pattern, a zone nor a date holds ``:``; so a job name
    with colons reads back whole (BullMQ 4 split it), but a job id with colons does not. A
    key of fewer than five parts is taken as a name.
    """
    parts = key.split(":")
    if len(parts) < 5:
        return key, None, None, None, None
    name, _, job_id = ":".join(parts[:-3]).rpartition(":")
    end = parts[-3]
    return (
        name,
        job_id or None,
        int(end) if end.isdigit() else None,
        parts[-2] or None,
        parts[-1] or None,
    )


def _int(value: Any) -> int | None:
    if value in (None, ""):
        return None
    try:
        return int(float(value))
    except (TypeError, ValueError):
        return None


@dataclass(frozen=True, slots=True)
class RepeatableJob:
    """One entry of ``K:repeat`` as BullMQ 5's ``getRepeatableJobs`` described it.

    ``end_date``, ``every`` and ``next`` are (epoch) ms. ``id`` is the ``jobId`` the repeat was
    added with, known only from a BullMQ 4 key (BullMQ 5's hash does not keep it). ``legacy``
    is corral's addition: ``True`` for an entry written by BullMQ before 6 (no ``ic`` in its
    hash, or no hash), ``False`` for a job scheduler, which ``getRepeatableJobs`` listed too.
    """

    key: str
    name: str
    id: str | None
    end_date: int | None
    tz: str | None
    pattern: str | None
    every: int | None
    next: int | None
    legacy: bool

    @classmethod
    def from_entry(cls, key: str, score: float | None, fields: Mapping[str, str]) -> RepeatableJob:
        """An entry from its ``K:repeat`` member and score and its hash (``{}`` when none)."""
        nxt = None if score is None else int(score)
        if fields:
            return cls(
                key=key,
                name=fields.get("name") or key,
                id=None,
                end_date=_int(fields.get("endDate")),
                tz=fields.get("tz") or None,
                pattern=fields.get("pattern") or None,
                every=_int(fields.get("every")),
                next=nxt,
                legacy="ic" not in fields,
            )
        name, job_id, end, tz, suffix = parse_raw_key(key)
        every = suffix is not None and suffix.isdigit()
        return cls(
            key=key,
            name=name,
            id=job_id,
            end_date=end,
            tz=tz,
            pattern=None if every else suffix,
            every=int(suffix) if every and suffix is not None else None,
            next=nxt,
            legacy=True,
        )


def _date_text(value: Any) -> str:
    """A date from old ``opts.repeat`` (ms, or the ISO text a JS ``Date`` becomes), as ms
    text; ``""`` when absent or unreadable."""
    if isinstance(value, bool):
        return ""
    if isinstance(value, (int, float)):
        return str(int(value))
    if isinstance(value, str) and value:
        if value.isdigit():
            return value
        try:
            return str(date_ms("date", datetime.fromisoformat(value.replace("Z", "+00:00"))))
        except (ValueError, InvalidOptionError):
            return ""
    return ""


@dataclass(frozen=True, slots=True)
class LegacyRun:
    """What an old iteration carries: the job it repeats and the entry's timing, in the
    scheduler hash's encoding (:data:`~corral.schedule.TIMING_FIELDS`, ``""`` = absent)."""

    name: str
    data: str
    opts: str
    count: int
    timing: tuple[str, ...]

    @classmethod
    def from_job(cls, fields: Mapping[str, str], entry: RepeatableJob) -> LegacyRun:
        """From an iteration's hash; what its ``opts.repeat`` lacks comes from ``entry``."""
        opts = _codec.loads(fields.get("opts")) or {}
        if not isinstance(opts, dict):
            opts = {}
        rep = opts.get("repeat")
        rep = rep if isinstance(rep, dict) else {}
        template = {k: v for k, v in opts.items() if k not in RUN_OPTIONS}
        if template.get("attempts") == 0:  # BullMQ writes it into every job; no choice made
            del template["attempts"]
        pattern = rep.get("pattern") if rep.get("every") is None else None
        every = _int(rep.get("every")) if pattern is None else None
        if pattern is None and every is None:
            pattern, every = entry.pattern, entry.every
        values = {
            "tz": rep.get("tz") or entry.tz or "",
            "limit": str(_int(rep.get("limit")) or ""),
            "pattern": pattern or "",
            # Old Node held cron runs until startDate but not every runs: so only cron keeps it.
            "startDate": "" if every is not None else _date_text(rep.get("startDate")),
            "endDate": _date_text(rep.get("endDate"))
            or ("" if entry.end_date is None else str(entry.end_date)),
            "every": "" if every is None else str(every),
        }
        return cls(
            name=fields.get("name") or entry.name,
            data=fields.get("data") or "",
            opts=_codec.dumps(template) if template else "",
            count=_int(rep.get("count")) or 1,
            timing=tuple(values[name] for name in TIMING_FIELDS),
        )


def migrated_id(key: str) -> str:
    """The id of the job scheduler a legacy entry becomes: its key when that is a BullMQ 5
    key (no ``:``), else the MD5 BullMQ 5 would have named the same options with."""
    return key if ":" not in key else hashlib.md5(key.encode()).hexdigest()
