"""One logical queue over N plain queues: their names, their hash slots, and which shard a
job belongs to. Pure: no I/O (``ShardedQueue`` and ``Worker(shards=N)`` do that).

Shard ``i`` of a queue ``name`` split ``N`` ways is the plain BullMQ queue
``{<name>.shard<i>.<k>}``: the whole name is a hash tag, so every key of the shard is in one
hash slot, and ``k`` is the first number (from 0) that puts that slot in the ``i``-th of ``N``
equal ranges of the 16384 slots, kept :data:`EDGE` slots away from the range's ends so that
either rounding of a boundary holds. A cluster made with ``valkey-cli --cluster create`` and
``N`` masters then has one shard on each master. The logical name is part of the tag, so two
sharded queues put their shard ``i`` in different slots of the same range. Shard 0 is the
same queue whatever ``N`` is (its slot is in the first range of :data:`MAX_SHARDS`, which is
in the first range of any ``N``): every sharded queue of a name meets there, which is how a
process opened with another ``N`` is caught (the count is recorded in each shard's meta hash,
field :data:`COUNT_FIELD`). ``shards=1`` is the plain queue ``name`` itself.

Every job is in the shard its id gives: ``crc32(utf-8 id) mod N`` (:func:`shard_of`), except
a scheduler's iterations (``repeat:<scheduler id>:<ms>``), which are in their scheduler's
shard, ``crc32(scheduler id) mod N``. So a reader finds any job in one call, and a job whose
id was chosen by the caller can be found by a Node producer too. Jobs added without an id get
one (:class:`IdMaker`) made to fall in the shard the round robin picked.
"""

from __future__ import annotations

import functools
import itertools
import uuid
import zlib
from collections.abc import Mapping
from typing import Any, TypeVar

from redis.crc import REDIS_CLUSTER_HASH_SLOTS, key_slot

from corral import bounds
from corral.errors import InvalidOptionError

T = TypeVar("T")

#: The most shards a logical queue may have (a cluster of more masters is rare; each shard
#: costs every worker a blocking connection).
MAX_SHARDS = 256

#: Slots kept free at each inner end of a shard's range (cluster tools round boundaries).
EDGE = 2

#: The field of each shard's ``K:meta`` that records ``N`` (BullMQ ignores unknown fields).
COUNT_FIELD = "x-shards"

#: The slots of Redis Cluster (16384).
SLOTS = REDIS_CLUSTER_HASH_SLOTS


def check_shards(shards: Any) -> int:
    """``shards`` when it is an ``int`` from 1 to :data:`MAX_SHARDS`.

    Raises:
        InvalidOptionError: naming the value.
    """
    return bounds.check_int("shards", shards, 1, MAX_SHARDS)


def check_sharding(name: str, prefix: str, shards: int) -> None:
    """Refuse a name or prefix that would put the shards of ``name`` in one hash slot.

    Raises:
        InvalidOptionError: the prefix or the name holds a brace (a hash tag would make the
            slot of every shard the same; a lone brace would change which part is the tag).
    """
    if shards == 1:
        return
    if "{" in prefix or "}" in prefix:
        raise InvalidOptionError(
            f"prefix {prefix!r} has a hash tag: with shards={shards} every shard would be in "
            "its one hash slot, on one node; a sharded queue gives each shard a tag of its own, "
            "so use a prefix without braces (the default 'bull')"
        )
    if len(name) > bounds.MAX_NAME_LENGTH - 32:
        raise InvalidOptionError(
            f"queue name must be at most {bounds.MAX_NAME_LENGTH - 32} characters with shards > 1 "
            f"(its shards' names are longer), got {len(name)}"
        )
    if "{" in name or "}" in name:
        raise InvalidOptionError(
            f"queue name {name!r} has a brace: with shards={shards} each shard's name is a hash "
            "tag of its own; use a name without braces"
        )


def check_shard_count_of(name: Any, shards: int) -> None:
    """Refuse a sharded queue's name (:class:`ShardedName`) given with another count.

    Raises:
        InvalidOptionError: ``Worker(queue.name)`` for a queue of 3 shards, say.
    """
    named = getattr(name, "shards", None)
    if named is not None and named != shards:
        raise InvalidOptionError(
            f"queue {name} has {named} shards, and this worker is given shards={shards}: "
            f"give shards={named}"
        )


def slot_range(index: int, shards: int) -> range:
    """The slots shard ``index`` of ``shards`` may use: the ``index``-th of ``shards`` equal
    ranges, without :data:`EDGE` slots at each inner end."""
    low = -(-index * SLOTS // shards) + (EDGE if index else 0)
    high = (index + 1) * SLOTS // shards - (EDGE if index < shards - 1 else 0)
    return range(low, high)


@functools.lru_cache(maxsize=1024)
def shard_names(name: str, shards: int) -> tuple[str, ...]:
    """The plain queues of ``name`` split ``shards`` ways, shard 0 first (``(name,)`` for 1)."""
    if shards == 1:
        return (name,)
    names = []
    for index in range(shards):
        # Shard 0 is looked for in the first range of MAX_SHARDS: the same for every count.
        wanted = slot_range(0, MAX_SHARDS) if index == 0 else slot_range(index, shards)
        for k in itertools.count():
            candidate = f"{{{name}.shard{index}.{k}}}"
            if key_slot(candidate.encode()) in wanted:
                names.append(candidate)
                break
    return tuple(names)


def shard_slot(sub_queue: str) -> int:
    """The hash slot of every key of a shard (its name is its hash tag)."""
    return key_slot(sub_queue.encode())


def shard_of(job_id: str, shards: int) -> int:
    """The shard of the job ``job_id`` (a scheduler's iteration: its scheduler's shard)."""
    if shards == 1:
        return 0
    if ":" in job_id:
        head, _, run_ms = job_id.rpartition(":")
        if head.startswith("repeat:") and run_ms.isdigit():
            return key_of(head[len("repeat:") :], shards)
    return key_of(job_id, shards)


def key_of(key: str, shards: int) -> int:
    """The shard of a job id, a deduplication id, an idempotency key or a scheduler id."""
    return zlib.crc32(key.encode("utf-8", "surrogatepass")) % shards


def route(
    shards: int,
    *,
    job_id: str | None,
    dedup_id: str | None,
    idempotency_key: str | None,
    parent_shard: int | None,
) -> int | None:
    """The shard a job must go to, from what names it; ``None``: any (the round robin's pick).

    Raises:
        InvalidOptionError: two of them name different shards (a job id and a deduplication
            id, say): the job cannot be in both, and deduplication or finding the job by id
            would then fail.
    """
    named: dict[str, int] = {}
    if job_id is not None:
        named[f"job_id {job_id!r}"] = shard_of(job_id, shards)
    if dedup_id is not None:
        named[f"deduplication id {dedup_id!r}"] = key_of(dedup_id, shards)
    if idempotency_key:
        named[f"idempotency_key {idempotency_key!r}"] = key_of(idempotency_key, shards)
    if parent_shard is not None:
        named["its parent"] = parent_shard
    if len(set(named.values())) > 1:
        listed = ", ".join(f"{what} is in shard {i}" for what, i in named.items())
        raise InvalidOptionError(
            f"a job of a queue of {shards} shards goes to one shard, and {listed}: give only "
            "one of them, or choose ids in the same shard (queue.shard_index(id) tells)"
        )
    return next(iter(named.values()), None)


def parent_shard(parent: Mapping[str, Any], prefix: str, names: tuple[str, ...]) -> int:
    """The shard of the queue that holds ``parent`` (``{"id", "queue": "<prefix>:<name>"}``).

    Raises:
        InvalidOptionError: the parent is not in one of the shards: a flow across queues
            would cross hash slots (and shards), which a sharded queue does not do.
    """
    queue = parent.get("queue")
    for index, sub_queue in enumerate(names):
        if queue == f"{prefix}:{sub_queue}":
            return index
    raise InvalidOptionError(
        f"parent {queue}:{parent.get('id')} is not in a shard of this queue: a flow of a sharded "
        "queue lives in one shard (children and parent in the same one); add the children to "
        "queue.shard_for(parent_id), or use a FlowProducer on the shard's queue"
    )


class IdMaker:
    """Ids for the jobs added without one, each made to fall in the shard asked for.

    ``<16 hex digits>-<n>``: the digits are random per maker, ``n`` counts up; the numbers
    that would hash to another shard are skipped (about ``N - 1`` of every ``N``), so the
    ids of one maker never repeat, and two makers share none (a 64-bit random part).
    """

    __slots__ = ("_base", "_seq", "_shards")

    def __init__(self, shards: int) -> None:
        self._base = uuid.uuid4().hex[:16]
        self._seq = 0
        self._shards = shards

    def make(self, shard: int) -> str:
        while True:
            self._seq += 1
            job_id = f"{self._base}-{self._seq}"
            if key_of(job_id, self._shards) == shard:
                return job_id


def _finished(job: Any) -> int:
    return int(job.finished_on or 0)


#: How :meth:`ShardedQueue.get_jobs` interleaves the shards' lists of one state: by what
#: orders each list (run time, priority then arrival, finish time...), so that the shards'
#: lists merge as one; each shard's own order is kept whatever the key says.
MERGE_KEYS: dict[str, Any] = {
    "waiting": lambda job: job.timestamp,
    "paused": lambda job: job.timestamp,
    "active": lambda job: job.processed_on or job.timestamp,
    "delayed": lambda job: job.timestamp + job.delay,
    "prioritized": lambda job: (job.priority, job.timestamp),
    "waiting-children": lambda job: job.timestamp,
    "completed": _finished,
    "failed": _finished,
}


class ShardedName(str):
    """A sharded queue's name: a ``str`` that knows how many shards it names (``.shards``), so
    that where a plain queue's name is wanted (a flow's ``queue_name``) it can be refused."""

    shards: int

    def __new__(cls, name: str, shards: int) -> ShardedName:
        named = super().__new__(cls, name)
        named.shards = shards
        return named


def cut(items: list[T], start: int, end: int) -> list[T]:
    """``items[start..end]`` with Redis-style inclusive bounds (negative: from the end)."""
    total = len(items)
    first = start if start >= 0 else max(total + start, 0)
    last = min(end if end >= 0 else total + end, total - 1)
    return items[first : last + 1]
