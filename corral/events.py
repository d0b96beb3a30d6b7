"""Typed queue events: what each entry of ``<prefix>:<queue>:events`` means. Pure.

BullMQ writes flat string pairs that start with ``event``; :func:`parse_event` turns one
stream entry into the dataclass of its name, decoding JSON fields (``returnvalue``,
progress ``data``) and numbers (``delay``, ``attemptsMade``, ``count``) as Node's
``QueueEvents`` does. Names corral does not know (custom events) become :class:`CustomEvent`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, ClassVar

from corral import _codec


@dataclass(frozen=True, slots=True)
class QueueEvent:
    """One event. ``event_id`` is its stream id: pass it as ``last_event_id`` to resume."""

    name: ClassVar[str] = ""
    event_id: str


@dataclass(frozen=True, slots=True)
class JobEvent(QueueEvent):
    """An event about one job."""

    job_id: str


@dataclass(frozen=True, slots=True)
class Added(JobEvent):
    name: ClassVar[str] = "added"
    job_name: str = ""
    #: The actor of the job's provenance record (``corral.provenance``), if it has one.
    actor: str | None = None


@dataclass(frozen=True, slots=True)
class Waiting(JobEvent):
    name: ClassVar[str] = "waiting"
    #: Where the job came from (``delayed``, ``failed``, ``active``, ``waiting-children``);
    #: ``None`` for a new job.
    prev: str | None = None


@dataclass(frozen=True, slots=True)
class WaitingChildren(JobEvent):
    name: ClassVar[str] = "waiting-children"


@dataclass(frozen=True, slots=True)
class Delayed(JobEvent):
    name: ClassVar[str] = "delayed"
    #: When the job is due, epoch ms (BullMQ's ``delay`` field holds the absolute time).
    delay: int = 0


@dataclass(frozen=True, slots=True)
class Active(JobEvent):
    name: ClassVar[str] = "active"
    prev: str | None = None


@dataclass(frozen=True, slots=True)
class Progress(JobEvent):
    name: ClassVar[str] = "progress"
    data: Any = None


@dataclass(frozen=True, slots=True)
class Completed(JobEvent):
    name: ClassVar[str] = "completed"
    returnvalue: Any = None
    prev: str | None = None


@dataclass(frozen=True, slots=True)
class Failed(JobEvent):
    name: ClassVar[str] = "failed"
    failed_reason: str = ""
    prev: str | None = None


@dataclass(frozen=True, slots=True)
class RetriesExhausted(JobEvent):
    name: ClassVar[str] = "retries-exhausted"
    attempts_made: int = 0


@dataclass(frozen=True, slots=True)
class Stalled(JobEvent):
    name: ClassVar[str] = "stalled"


@dataclass(frozen=True, slots=True)
class Removed(JobEvent):
    name: ClassVar[str] = "removed"
    #: The key the job was removed from (``wait``, ``delayed``, ``completed``...).
    prev: str | None = None


@dataclass(frozen=True, slots=True)
class Duplicated(JobEvent):
    name: ClassVar[str] = "duplicated"


@dataclass(frozen=True, slots=True)
class Deduplicated(JobEvent):
    name: ClassVar[str] = "deduplicated"
    deduplication_id: str = ""
    #: The id of the add that was dropped (``job_id`` is the job that was kept).
    deduplicated_job_id: str = ""


@dataclass(frozen=True, slots=True)
class Drained(QueueEvent):
    name: ClassVar[str] = "drained"


@dataclass(frozen=True, slots=True)
class Paused(QueueEvent):
    name: ClassVar[str] = "paused"


@dataclass(frozen=True, slots=True)
class Resumed(QueueEvent):
    name: ClassVar[str] = "resumed"


@dataclass(frozen=True, slots=True)
class Cleaned(QueueEvent):
    name: ClassVar[str] = "cleaned"
    count: int = 0


@dataclass(frozen=True, slots=True)
class CustomEvent(QueueEvent):
    """An event with a name corral does not know, e.g. one published by an application."""

    event_name: str = ""
    fields: dict[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:  # type: ignore[override]
        return self.event_name


#: Every BullMQ event type by its name.
EVENT_TYPES: dict[str, type[QueueEvent]] = {
    cls.name: cls
    for cls in (
        Added,
        Waiting,
        WaitingChildren,
        Delayed,
        Active,
        Progress,
        Completed,
        Failed,
        RetriesExhausted,
        Stalled,
        Removed,
        Duplicated,
        Deduplicated,
        Drained,
        Paused,
        Resumed,
        Cleaned,
    )
}


def _json(value: str | None) -> Any:
    # Node's QueueEvents parses these fields and keeps the text when it is not JSON.
    if value is None:
        return None
    try:
        return _codec.loads(value)
    except (ValueError, json.JSONDecodeError):
        return value


def _int(value: str | None) -> int:
    try:
        return int(value) if value else 0
    except ValueError:
        return int(float(value or 0))


def parse_event(event_id: str, fields: dict[str, str]) -> QueueEvent:
    """The typed event of one stream entry (``fields`` as read, ``event`` included)."""
    name = fields.get("event", "")
    job_id = fields.get("jobId", "")
    prev = fields.get("prev")
    if name == "added":
        return Added(event_id, job_id, fields.get("name", ""), fields.get("actor"))
    if name == "waiting":
        return Waiting(event_id, job_id, prev)
    if name == "delayed":
        return Delayed(event_id, job_id, _int(fields.get("delay")))
    if name == "active":
        return Active(event_id, job_id, prev)
    if name == "progress":
        return Progress(event_id, job_id, _json(fields.get("data")))
    if name == "completed":
        return Completed(event_id, job_id, _json(fields.get("returnvalue")), prev)
    if name == "failed":
        return Failed(event_id, job_id, fields.get("failedReason", ""), prev)
    if name == "retries-exhausted":
        return RetriesExhausted(event_id, job_id, _int(fields.get("attemptsMade")))
    if name == "removed":
        return Removed(event_id, job_id, prev)
    if name == "deduplicated":
        return Deduplicated(
            event_id,
            job_id,
            fields.get("deduplicationId", ""),
            fields.get("deduplicatedJobId", ""),
        )
    if name == "cleaned":
        return Cleaned(event_id, _int(fields.get("count")))
    if name in ("waiting-children", "stalled", "duplicated"):
        return EVENT_TYPES[name](event_id, job_id)  # type: ignore[call-arg]
    if name in ("drained", "paused", "resumed"):
        return EVENT_TYPES[name](event_id)
    return CustomEvent(event_id, name, {k: v for k, v in fields.items() if k != "event"})
