"""How ``add_bulk`` splits a bulk into calls of add_jobs.lua, and which job each item gets back.

A script call holds the whole server while it runs, so a bulk goes in chunks that each take
a bounded time (:data:`CHUNK_JOBS`, :data:`CHUNK_BYTES`). And a debounced add
(``deduplication`` with ``replace=True`` and a ``delay``) deletes the delayed job holding its
id, which may be an earlier item of the same bulk: that item then gets the job that replaced
it (:class:`Replacements`). Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from corral import _codec
from corral.errors import BulkAddError, InvalidOptionError

#: The most jobs one add_jobs.lua call carries. Measured (valkey 8.1, 2 cores, idle to busy),
#: an add takes 11-18 us of server time without options, 17-35 us delayed and 30-60 us with
#: every option (delay, parent, deduplication, idempotency key): a call of 300 takes 3-5 ms,
#: 5-10 ms and 9-18 ms, and the server answers other clients between two calls. Smaller
#: calls cost no throughput: a bulk's server time is the same, one round trip more a call.
CHUNK_JOBS = 300
#: The most bytes of values (data, options, names, ids) one call carries: each MiB costs the
#: server 1 to 2.5 ms to copy. A job bigger than this goes alone in its call.
CHUNK_BYTES = 1 << 20
#: What a number costs in a record, in bytes (digits and framing): a rough figure is enough.
_NUMBER_BYTES = 8


@dataclass(slots=True)
class Chunk:
    """The items of one add_jobs.lua call: ``start`` is the bulk index of its first item,
    ``records`` the call's ARGV from 25 on (see the script's header)."""

    start: int
    records: list[Any] = field(default_factory=list)
    count: int = 0
    size: int = 0

    @property
    def end(self) -> int:
        """The bulk index after its last item."""
        return self.start + self.count


class Chunker:
    """Builds the chunks of a bulk as its items are validated, in order."""

    def __init__(self) -> None:
        # Read at each bulk (not bound at import) so that a test can make chunks small.
        self.max_jobs = CHUNK_JOBS
        self.max_bytes = CHUNK_BYTES
        self.chunks: list[Chunk] = []
        #: Whether an item is a debounced add, which may replace an earlier item's job.
        self.replaces = False

    def add(self, args: list[Any], *, short: bool) -> None:
        """Append one item: ``args`` is its add_job.lua ARGV; ``short`` when it has no options
        of its own, so that only what differs from the call's shared group is sent."""
        if short:  # custom id, name, data, timestamp (add_job's ARGV[2], [3], [4], [6])
            record = [4, args[1], args[2], args[3], args[5]]
            size = text_bytes(args[1]) + text_bytes(args[2]) + text_bytes(args[3]) + 16
        else:  # add_job's ARGV[2..19]
            record = [18, *args[1:]]
            size = record_bytes(record)
        if args[15] == "1":  # debounce: it may delete the job of an earlier item
            self.replaces = True
        chunk = self.chunks[-1] if self.chunks else None
        if chunk is None or chunk.count >= self.max_jobs or chunk.size + size > self.max_bytes:
            chunk = Chunk(chunk.end if chunk else 0)
            self.chunks.append(chunk)
        chunk.records += record
        chunk.count += 1
        chunk.size += size


def text_bytes(text: str) -> int:
    """The UTF-8 length of ``text`` (``isascii`` is a flag lookup: no copy for most text)."""
    return len(text) if text.isascii() else len(text.encode())


def record_bytes(values: list[Any]) -> int:
    """About how many bytes ``values`` take in a call (strings exactly, numbers roughly)."""
    return sum(text_bytes(v) if isinstance(v, str) else _NUMBER_BYTES for v in values)


class Replacements:
    """Which item's job each item of a bulk gets in the end.

    Fed the items' add_jobs.lua replies in order (:meth:`note`). A reply ``{id, 1, old}``
    says the item's job replaced the delayed job ``old`` (debounce), deleting it: when
    ``old`` was created by an earlier item of the bulk, that item, and every item whose reply
    named ``old`` (a duplicate or deduplicated add), gets the new job instead. Chains
    (a burst of debounced adds) end at the job that holds the deduplication id last.
    """

    __slots__ = ("_creator", "_named", "_next", "enabled")

    def __init__(self, enabled: bool = True) -> None:
        #: ``False`` for a bulk without debounced items: nothing to track, each keeps its job.
        self.enabled = enabled
        #: Job id -> index of the item of this bulk that created the job now under that id.
        self._creator: dict[str, int] = {}
        #: Per item, the index of the item that created the job its reply names, or -1.
        self._named: list[int] = []
        #: Creator index -> index of the item whose job replaced its job.
        self._next: dict[int, int] = {}

    def note(self, reply: list[Any]) -> None:
        """The reply of the next item."""
        if not self.enabled:
            return
        index = len(self._named)
        job_id = _codec.text(reply[0])
        if int(reply[1]) == 1:
            if len(reply) > 2:
                old = self._creator.pop(_codec.text(reply[2]), None)
                if old is not None:
                    self._next[old] = index
            self._creator[job_id] = index
            self._named.append(index)
        else:
            self._named.append(self._creator.get(job_id, -1))

    def final(self, index: int) -> int:
        """The index of the item whose job item ``index`` gets: ``index`` itself unless the job
        its reply named was replaced later in the bulk."""
        if not self.enabled:
            return index
        named = self._named[index]
        if named < 0 or named not in self._next:
            return index
        last = named
        while last in self._next:
            last = self._next[last]
        while named != last:  # point the chain at its end for the next item that names it
            after = self._next[named]
            self._next[named] = last
            named = after
        return last


def unpack_item(item: Any) -> tuple[str, Any, Mapping[str, Any]]:
    """``(name, data, options)`` of a bulk item; raises ``InvalidOptionError`` for a bad one."""
    if isinstance(item, Sequence) and not isinstance(item, str) and len(item) in (2, 3):
        opts = item[2] if len(item) == 3 else {}
        if not isinstance(opts, Mapping):
            raise InvalidOptionError(f"options must be a dict, got {opts!r}")
        return item[0], item[1], opts
    raise InvalidOptionError(f"expected (name, data) or (name, data, options), got {item!r}")


def stopped(added: list[Any], replaced: Replacements, total: int, cause: Exception) -> BulkAddError:
    """The error of a bulk that stopped after ``len(added)`` of its ``total`` items were added
    (``added`` holds their jobs as the calls answered)."""
    index = len(added)
    return BulkAddError(
        f"add_bulk added items 0 to {index - 1} of {total}, then stopped: "
        f"{type(cause).__name__}: {cause}",
        jobs=[added[replaced.final(i)] for i in range(index)],
        index=index,
    )
