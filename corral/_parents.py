"""A job's parent option (``parent=``) and the child failure policies: the parts of a job's
options that link it into a flow (:mod:`corral.options` re-exports them)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypedDict

from corral.bounds import MAX_JOB_ID_LENGTH, RESERVED_JOB_IDS, check_text
from corral.errors import InvalidOptionError


class ParentOptions(TypedDict):
    """A job's parent (BullMQ's ``opts.parent``): its id, and its queue's qualified name
    ``"<prefix>:<queue name>"`` (``job.queue_qualified_name``), in any queue of the prefix."""

    id: str
    queue: str


#: The child failure policies, and the short names BullMQ stores them under in ``opts`` and in
#: the child's ``parent`` field (BullMQ's ``optsEncodeMap``). At most one may be set.
FAILURE_POLICIES = {
    "fail_parent_on_failure": "fpof",
    "continue_parent_on_failure": "cpof",
    "ignore_dependency_on_failure": "idof",
    "remove_dependency_on_failure": "rdof",
}


def check_parent(value: Any, prefix: str | None = None) -> dict[str, str]:
    """A ``parent`` option: ``{"id": job id, "queue": "<prefix>:<queue name>"}``.

    With ``prefix`` (the child queue's), the parent's queue must be under the same prefix: a
    parent reference names a job hash of a queue, never some other key.
    """
    if not isinstance(value, Mapping) or set(value) != {"id", "queue"}:
        raise InvalidOptionError(
            f"parent must be {{'id': job id, 'queue': '<prefix>:<queue name>'}}, got {value!r}"
        )
    job_id, queue = value["id"], value["queue"]
    check_text("parent id", job_id, max_length=MAX_JOB_ID_LENGTH, colon=False)
    if job_id in RESERVED_JOB_IDS:
        raise InvalidOptionError(f"parent id {job_id!r} is a queue key's name, not a job id")
    check_text("parent queue", queue)
    parent_prefix, _, queue_name = queue.rpartition(":")
    if not parent_prefix or not queue_name:
        raise InvalidOptionError(
            f"parent queue must be the qualified name '<prefix>:<queue name>', got {queue!r}"
        )
    if prefix is not None and parent_prefix != prefix:
        raise InvalidOptionError(
            f"parent queue {queue!r} is not under this queue's prefix {prefix!r}: a parent must "
            "be a job of a queue with the same prefix"
        )
    return {"id": job_id, "queue": queue}
