"""The job record: a typed view of the job hash, and the states a job can be in. Pure.

``AsyncJob`` (``_async/job.py``) and ``Job`` (its generated blocking twin) add the methods
that act on a job through its queue.
"""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field
from typing import Any

from typing_extensions import Self

from corral import _codec
from corral._provenance import Provenance
from corral._provenance import read as read_provenance
from corral.options import SOFT_TIMEOUT_KEY, TIMEOUT_KEY

#: The states the inspection tools (``corral stats``, ``corral top``, the dashboard) count
#: and list, in the order they show them.
SHOWN_STATES = (
    "waiting",
    "prioritized",
    "delayed",
    "active",
    "waiting-children",
    "completed",
    "failed",
)
#: The states listed the last finished first; the others are listed the next to run first.
NEWEST_FIRST = frozenset({"completed", "failed"})


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


#: The hash fields ``JobRecord.from_hash`` reads, in the order of the record's own fields.
_HASH_FIELDS = (
    "name",
    "data",
    "opts",
    "timestamp",
    "delay",
    "priority",
    "processedOn",
    "finishedOn",
    "returnvalue",
    "failedReason",
    "stacktrace",
    "progress",
    "atm",
    "ats",
    "stc",
    "pb",
    "parentKey",
    "parent",
    "rjk",
)


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
    #: While a worker runs the job: when its ``timeout`` stops it (epoch seconds), or ``None``.
    deadline: float | None = None
    #: While a worker runs the job: when its ``soft_timeout`` warns it (epoch seconds).
    soft_deadline: float | None = None
    #: Set by the worker once the soft timeout passed (sync code can poll it).
    soft_timed_out: bool = False

    @classmethod
    def from_hash(
        cls, queue_name: str, job_id: str, fields: dict[str, str], *, token: str | None = None
    ) -> Self:
        """Build a job from the decoded fields of its hash."""
        # A worker builds one per job it takes: written out (no helper calls, JSON decoded
        # only when present), as this is a visible part of a busy worker's time.
        get = fields.get
        loads = _codec.loads
        v = [get(f) for f in _HASH_FIELDS]
        return cls(
            queue_name,
            job_id,
            v[0] or "",
            loads(v[1]) if v[1] else None,
            (loads(v[2]) if v[2] else None) or {},
            int(v[3]) if v[3] else 0,
            int(v[4]) if v[4] else 0,
            int(v[5]) if v[5] else 0,
            int(v[6]) if v[6] else None,
            int(v[7]) if v[7] else None,
            loads(v[8]) if v[8] else None,
            v[9],
            (loads(v[10]) if v[10] else None) or [],
            loads(v[11]) if v[11] else None,
            int(v[12]) if v[12] else 0,
            int(v[13]) if v[13] else 0,
            int(v[14]) if v[14] else 0,
            v[15],
            v[16],
            loads(v[17]) if v[17] else None,
            v[18],
            token,
        )

    @property
    def timeout(self) -> float | None:
        """The job's ``timeout`` option in seconds (``None``: none of its own)."""
        ms = self.opts.get(TIMEOUT_KEY)
        return ms / 1000 if isinstance(ms, (int, float)) and ms > 0 else None

    @property
    def soft_timeout(self) -> float | None:
        """The job's ``soft_timeout`` option in seconds (``None``: none of its own)."""
        ms = self.opts.get(SOFT_TIMEOUT_KEY)
        return ms / 1000 if isinstance(ms, (int, float)) and ms > 0 else None

    @property
    def provenance(self) -> Provenance | None:
        """Who triggered the job, as its producer claimed (``opts["x-prov"]``), verified with
        this process's key (see docs/provenance.md); ``None`` when it carries no record."""
        return read_provenance(self)

    def time_left(self) -> float | None:
        """Seconds until the worker stops this attempt (``None``: no timeout)."""
        if self.deadline is None:
            return None
        return max(0.0, self.deadline - time.time())

    @property
    def max_attempts(self) -> int:
        """How many times the job may run in all (BullMQ's ``attempts: 0`` means once)."""
        return max(1, int(self.opts.get("attempts") or 1))
