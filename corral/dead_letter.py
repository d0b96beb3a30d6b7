"""Dead letters: what a job that failed for good becomes in its dead-letter queue, and what a
replay of it adds back to its queue. Pure.

The scripts that fail a job for good leave a record of it (``_lua/include/dead_letter.lua``):
the job's whole hash and its logs, taken in the same call. :func:`envelope` turns one record
into the data of the DLQ job, a plain JSON object any BullMQ client reads (Node's
``job.data``, bull-board's data tab): the origin queue and id, name, data, options, the last
failure reason and every attempt's stack, attempts made and started, stalls and timestamps.
:func:`dead_letter_id` names that job after the record's number, so that copying a record
twice adds one job. :func:`replay_opts` gives the options a replay re-adds the job with.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from corral import _codec
from corral.bounds import MAX_JOB_ID_LENGTH, check_text
from corral.errors import InvalidOptionError
from corral.options import DEAD_LETTER_KEY

#: The opts key of a replayed job that says where it came from: ``{"queue": DLQ name, "id":
#: DLQ job id, "jobId": the id the job failed under}`` (BullMQ never reads it).
REPLAY_OF_KEY = "x-replay-of"
#: The field of a DLQ job's hash that holds the id of the job its replay added.
REPLAYED_FIELD = "x-replayed"

#: opts a replay leaves out: they belonged to the first run (its id, delay and time, its place
#: in a flow or a scheduler), or they would make the re-add a no-op (its deduplication id, which
#: the failed job may still hold). corral's idempotency key is a job field, not an option.
_NOT_REPLAYED = frozenset(
    {
        "jobId",
        "delay",
        "timestamp",
        "parent",
        "fpof",
        "cpof",
        "idof",
        "rdof",
        "de",
        "deduplication",
        "debounce",
        "repeat",
        "repeatJobKey",
        "prevMillis",
        REPLAY_OF_KEY,
    }
)

#: The job hash fields an envelope keeps as integers (``atm`` as ``attemptsMade``...).
_INT_FIELDS = {
    "timestamp": "timestamp",
    "processedOn": "processedOn",
    "finishedOn": "finishedOn",
    "atm": "attemptsMade",
    "ats": "attemptsStarted",
    "stc": "stalledCounter",
    "priority": "priority",
    "delay": "delay",
}
#: The job hash fields an envelope keeps as text, under BullMQ's public names.
_TEXT_FIELDS = {
    "failedReason": "failedReason",
    "pb": "processedBy",
    "parentKey": "parentKey",
    "deid": "deduplicationId",
    "x-idem": "idempotencyKey",
    "rjk": "repeatJobKey",
}
#: The JSON fields; one that does not decode is kept as text under ``<name>Text``.
_JSON_FIELDS = ("data", "opts", "progress", "returnvalue")


def dead_letter_id(queue_name: str, number: str | int) -> str:
    """The DLQ job id of record ``number`` of ``queue_name``: ``"<queue>-<number>"`` (unique:
    the number, all digits, follows the last ``-``), or a digest of a name too long for a job
    id in its place."""
    job_id = f"{queue_name}-{number}"
    if len(job_id) <= MAX_JOB_ID_LENGTH:
        return job_id
    return f"{hashlib.sha1(queue_name.encode()).hexdigest()}-{number}"


def _decode(raw: str) -> tuple[Any, bool]:
    try:
        value = _codec.loads(raw)
        _codec.dumps(value)  # a lone surrogate decodes, but cannot be stored again
    except (ValueError, TypeError):
        return None, False
    return value, True


def _flat_pairs(flat: Any) -> dict[str, str]:
    # HGETALL's flat list, as cjson encodes it (an empty Lua table is "{}", not "[]").
    if not isinstance(flat, list) or len(flat) % 2:
        raise ValueError("the job's fields are not a flat list of pairs")
    pairs = iter(flat)
    return {str(k): str(v) for k, v in zip(pairs, pairs, strict=True)}


@dataclass(frozen=True, slots=True)
class Record:
    """One pending dead letter, as the failing script recorded it."""

    number: str
    target: str
    job_id: str
    at: int
    fields: dict[str, str]
    logs: list[str]

    @classmethod
    def parse(cls, number: str, raw: str) -> Record:
        """Read a record of the hash ``K:x-dlq``.

        Raises:
            ValueError: the record is not what dead_letter.lua writes.
        """
        value = _codec.loads(raw)
        if not isinstance(value, dict) or not isinstance(value.get("q"), str):
            raise ValueError("not a dead-letter record")
        logs = value.get("logs")
        return cls(
            number=number,
            target=value["q"],
            job_id=str(value["id"]),
            at=int(value["at"]),
            fields=_flat_pairs(value.get("h")),
            logs=[str(line) for line in logs] if isinstance(logs, list) else [],
        )


def envelope(queue_name: str, prefix: str, record: Record) -> dict[str, Any]:
    """The data of the DLQ job for ``record`` of ``queue_name``."""
    fields = record.fields
    doc: dict[str, Any] = {
        "queue": queue_name,
        "prefix": prefix,
        "jobId": record.job_id,
        "name": fields.get("name", ""),
        "deadLetteredAt": record.at,
        "deadLetterNumber": int(record.number),
    }
    for name in _JSON_FIELDS:
        if name in fields:
            value, ok = _decode(fields[name])
            doc[name] = value
            if not ok:
                doc[f"{name}Text"] = fields[name]  # the stored text, to replay as it was
    for field, name in _INT_FIELDS.items():
        if field in fields:
            try:
                doc[name] = int(fields[field])
            except ValueError:
                doc[name] = fields[field]
    for field, name in _TEXT_FIELDS.items():
        if field in fields:
            doc[name] = fields[field]
    stack, ok = _decode(fields.get("stacktrace", "[]"))
    doc["stacktrace"] = stack if ok and isinstance(stack, list) else []
    doc["logs"] = record.logs
    return doc


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A job of a dead-letter queue, read back: where it failed, why, and its replay.

    ``id`` is the DLQ job's id; ``queue`` and ``job_id`` the queue and id it failed under;
    ``replayed_as`` the id of the job a replay added to ``queue`` (``None``: not replayed).
    """

    id: str
    queue: str
    job_id: str
    name: str
    failed_reason: str | None
    attempts_made: int
    dead_lettered_at: int
    replayed_as: str | None
    data: dict[str, Any]

    @classmethod
    def from_job(cls, job_id: str, data: Any, replayed_as: str | None) -> DeadLetter:
        """The dead letter of a DLQ job (its id, its data, its ``x-replayed`` field).

        Raises:
            InvalidOptionError: the job's data is not a dead letter's envelope (a job added
                to the queue some other way).
        """
        if (
            not isinstance(data, dict)
            or not isinstance(data.get("queue"), str)
            or not isinstance(data.get("jobId"), str)
        ):
            raise InvalidOptionError(
                f"job {job_id} is not a dead letter (its data has no origin queue and job id)"
            )
        return cls(
            id=job_id,
            queue=data["queue"],
            job_id=data["jobId"],
            name=str(data.get("name", "")),
            failed_reason=data.get("failedReason"),
            attempts_made=int(data.get("attemptsMade") or 0),
            dead_lettered_at=int(data.get("deadLetteredAt") or 0),
            replayed_as=replayed_as,
            data=data,
        )

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready summary (what ``corral dlq list --json`` prints)."""
        return {
            "id": self.id,
            "queue": self.queue,
            "job_id": self.job_id,
            "name": self.name,
            "failed_reason": self.failed_reason,
            "attempts_made": self.attempts_made,
            "dead_lettered_at": self.dead_lettered_at,
            "replayed_as": self.replayed_as,
        }


@dataclass(frozen=True, slots=True)
class Replay:
    """What a replay did: DLQ job ``id`` is (or already was, ``already``) replayed as job
    ``job_id`` of ``queue``."""

    id: str
    queue: str
    job_id: str
    already: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "queue": self.queue, "job_id": self.job_id, "already": self.already}


def replay_opts(letter: DeadLetter, dlq_name: str) -> dict[str, Any]:
    """The opts JSON object a replay adds the job with: the first run's options (attempts,
    backoff, retention, timeouts, its dead-letter queue...), less :data:`_NOT_REPLAYED`, plus
    :data:`REPLAY_OF_KEY`."""
    given = letter.data.get("opts")
    opts: dict[str, Any] = {
        k: v
        for k, v in (given if isinstance(given, Mapping) else {}).items()
        if k not in _NOT_REPLAYED
    }
    opts.setdefault("attempts", 0)
    opts[REPLAY_OF_KEY] = {"queue": dlq_name, "id": letter.id, "jobId": letter.job_id}
    return opts


def replay_data(letter: DeadLetter) -> str:
    """The data JSON a replay re-adds: the stored text when it did not decode (so the replay
    carries what the first run had), else the data encoded again."""
    text = letter.data.get("dataText")
    if isinstance(text, str):
        return text
    return _codec.encode_data(letter.data.get("data"))


def job_name(name: str) -> str:
    """``name`` when corral can add a job under it, else ``"dead-letter"`` (Node may have
    added a job with an empty name; its dead letter must not be refused for that)."""
    try:
        return check_text("job name", name)
    except InvalidOptionError:
        return "dead-letter"


__all__ = [
    "DEAD_LETTER_KEY",
    "REPLAYED_FIELD",
    "REPLAY_OF_KEY",
    "DeadLetter",
    "Record",
    "Replay",
    "dead_letter_id",
    "envelope",
    "job_name",
    "replay_data",
    "replay_opts",
]
