"""What a reader of a job's stream of partial results gets (``queue.read_stream``).

Pure: two small records and the parsing of one stream entry. A reader gets the job's chunks as
:class:`StreamItem`, in the order ``job.stream`` wrote them, then one :class:`StreamEnd` once the
job has finished, after which the iteration stops.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from corral import _codec

#: How a job's stream ends: the job completed or failed for good (a retried attempt is no end).
EndState = Literal["completed", "failed"]


@dataclass(frozen=True, slots=True)
class StreamItem:
    """One chunk a processor passed to ``job.stream``.

    Attributes:
        id: its stream id (``"<ms>-<seq>"``): pass it as ``from_id`` to read on after it (an
            SSE client sends it back as ``Last-Event-ID``).
        value: the chunk, decoded from JSON.
        attempt: the attempt that wrote it (1 for the first run; a retry's chunks follow the
            earlier attempts' with a higher number).
    """

    id: str
    value: Any
    attempt: int


@dataclass(frozen=True, slots=True)
class StreamEnd:
    """The job finished: the last item of a read.

    Attributes:
        state: ``"completed"`` or ``"failed"``.
        value: the return value (completed) or the failure reason, a string (failed).
    """

    state: EndState
    value: Any

    @property
    def completed(self) -> bool:
        return self.state == "completed"


def parse_entry(entry_id: str, fields: dict[str, str]) -> StreamItem:
    """The :class:`StreamItem` of one entry of a job's stream (fields ``v``, the chunk's JSON,
    and ``a``, the attempt); an entry someone else wrote without ``v`` reads as ``None``."""
    raw = fields.get("v")
    attempt = fields.get("a", "0")
    return StreamItem(
        id=entry_id,
        value=None if raw is None else _codec.loads(raw),
        attempt=int(attempt) if attempt.isdigit() else 0,
    )
