"""The job record: a typed view of the job hash, and the states a job can be in. Pure.

``AsyncJob`` (``_async/job.py``) and ``Job`` (its generated blocking twin) add the methods
that act on a job through its queue.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from typing_extensions import Self

from corral import _codec


class JobState(str, enum.Enum):
    """Where a job is; values are BullMQ's state names."""

    WAITING = "waiting"
    ACTIVE = "active"
    DELAYED = "delayed"
    PRIORITIZED = "prioritized"
    WAITING_CHILDREN = "waiting-children"
    COMPLETED = "completed"
    FAILED = "failed"
    UNKNOWN = "unknown"

    def __str__(self) -> str:
        return self.value


def _int(value: str | None, default: int = 0) -> int:
    return int(value) if value else default


def _opt_int(value: str | None) -> int | None:
    return int(value) if value else None


@dataclass(slots=True)
class JobRecord:
    """One job as stored in its hash ``prefix:queue:<id>`` (BullMQ 6.x field names).

    Times are epoch milliseconds; ``data``, ``opts``, ``returnvalue`` and ``progress`` are
    decoded from JSON. ``token`` is the lock token while a worker holds the job.
    """

    queue_name: str
    id: str
    name: str
    data: Any
    opts: dict[str, Any] = field(default_factory=dict)
    timestamp: int = 0
    delay: int = 0
    priority: int = 0
    processed_on: int | None = None
    finished_on: int | None = None
    returnvalue: Any = None
    failed_reason: str | None = None
    stacktrace: list[str] = field(default_factory=list)
    progress: Any = None
    attempts_made: int = 0
    attempts_started: int = 0
    stalled_counter: int = 0
    processed_by: str | None = None
    parent_key: str | None = None
    #: A flow child's link to its parent: ``{"id", "queueKey"}`` plus its failure policy flag.
    parent: dict[str, Any] | None = None
    #: The id of the job scheduler that made this job (hash field ``rjk``), if one did.
    repeat_job_key: str | None = None
    token: str | None = None

    @classmethod
    def from_hash(
        cls, queue_name: str, job_id: str, fields: dict[str, str], *, token: str | None = None
    ) -> Self:
        """Build a job from the decoded fields of its hash."""
        return cls(
            queue_name=queue_name,
            id=job_id,
            name=fields.get("name", ""),
            data=_codec.loads(fields.get("data")),
            opts=_codec.loads(fields.get("opts")) or {},
            timestamp=_int(fields.get("timestamp")),
            delay=_int(fields.get("delay")),
            priority=_int(fields.get("priority")),
            processed_on=_opt_int(fields.get("processedOn")),
            finished_on=_opt_int(fields.get("finishedOn")),
            returnvalue=_codec.loads(fields.get("returnvalue")),
            failed_reason=fields.get("failedReason"),
            stacktrace=_codec.loads(fields.get("stacktrace")) or [],
            progress=_codec.loads(fields.get("progress")),
            attempts_made=_int(fields.get("atm")),
            attempts_started=_int(fields.get("ats")),
            stalled_counter=_int(fields.get("stc")),
            processed_by=fields.get("pb"),
            parent_key=fields.get("parentKey"),
            parent=_codec.loads(fields.get("parent")),
            repeat_job_key=fields.get("rjk"),
            token=token,
        )

    @property
    def max_attempts(self) -> int:
        """How many times the job may run in all (BullMQ's ``attempts: 0`` means once)."""
        return max(1, int(self.opts.get("attempts") or 1))
