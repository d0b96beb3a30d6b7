# Generated from corral/_async/job_removal.py by scripts/unasync.py: do not edit.
"""Removing a job with the flow below it, in calls of bounded server time.

A tree that fits one script call (:data:`ATOMIC_JOBS` jobs, :data:`ATOMIC_SCAN` list entries
to search) goes in one call of ``remove_job.lua``, all or nothing, as before. A bigger one is
refused untouched by that call and removed here in steps:

1. Collect, reading only: the tree is walked from its top with ``inspect_jobs.lua`` (at most
   :data:`READ_BATCH` keys a call) and ``SSCAN``/``HSCAN``/``ZRANGE`` pages of the children.
   A job holding a lock, or in its queue's active list, refuses the removal here, before
   anything is written (``JobLockedError``), as the single call does. For the jobs sitting
   in a long wait list, their places in it are read too (``LRANGE`` pages).
2. Remove in chunks of about :data:`CHUNK` jobs with ``remove_jobs.lua``, children before
   parents (completed children first, pending ones last), each chunk reading every list it
   touches once, from where its jobs were seen: a parent with 100k children in wait costs
   about 200 calls of some milliseconds instead of one call of minutes.

What stays atomic is each chunk. Between chunks other clients run, so the removal checks
every job again when it removes it: a job that became active meanwhile is kept, with the
jobs above it (each still waits for it), and the call raises ``JobLockedError`` saying how
many jobs went; a job added to the tree meanwhile is collected in another pass (at most
:data:`PASSES`). A parent inside the removal is never released by the removal of its
children, and never waits between two calls with nothing pending: it goes in the same chunk
as its last pending child (up to a chain of :data:`CHUNK` such parents). No parent is left
waiting for a child that is gone. If the process dies half-way, the part not removed yet
stays as it was, its top included: removing the top again finishes the work. Readers
meanwhile see a tree with fewer jobs, never a job without its list or zset.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterator, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from redis import Redis

from corral import _codec, _scripts
from corral.bounds import names_a_job
from corral.errors import JobError, JobLockedError, script_error

if TYPE_CHECKING:
    from corral._sync._queue_base import QueueBase


class _JobLike(Protocol):
    """What a removal needs of a job: its queue and its id (an ``Job``, or one of its
    mixins)."""

    queue: QueueBase
    id: str


_REMOVE_JOB = _scripts.load("remove_job")
_REMOVE_UNPROCESSED_CHILDREN = _scripts.load("remove_unprocessed_children")
_REMOVE_JOBS = _scripts.load("remove_jobs")
_INSPECT_JOBS = _scripts.load("inspect_jobs")

#: The most jobs removed in one call of remove_job.lua: 5-10 ms of server time (measured on 2
#: busy cores: 1000 jobs took 15-25 ms).
ATOMIC_JOBS = 500
#: The most list entries one call of remove_job.lua may read to find its jobs (each LREM reads
#: the whole list, about 20 ns an entry): about 5 ms.
ATOMIC_SCAN = 250_000
#: Jobs per chunk of remove_jobs.lua: about 8 ms (a chunk grows past it to keep a parent with
#: its last pending child, up to twice this).
CHUNK = 500
#: Keys per call of inspect_jobs.lua, and entries per page of every read.
READ_BATCH = 1000
#: The most entries of one list a chunk reads to find its jobs; a list this short is read
#: whole and its jobs' places are not read beforehand.
SWEEP = 10_000
#: How far before the place a job was seen a chunk starts reading its list (jobs removed
#: before it by others move it towards the head; jobs added at the head move it away).
SLACK = 1_000
#: Collect-and-remove passes before giving up on a tree that keeps changing.
PASSES = 5
#: The answer of a script refusing a tree over its budget (nothing written).
TOO_BIG = -9


@dataclass(slots=True)
class _Node:
    key: str
    prefix: str
    id: str
    #: Index of the parent in the tree, -1 for a top.
    parent: int
    #: In its tree parent's :dependencies (not finished for it).
    pending: bool
    #: The zset that holds it, "list" (in a list, or in no place), or "" (gone).
    state: str = ""
    children: list[int] = field(default_factory=list)
    #: Where it was seen in a long list of its queue (list key, index), if read.
    place: tuple[str, int] | None = None
    #: Its queue's lists were read and it was in none.
    nowhere: bool = False


#: A scheduler's iteration id (repeat:<scheduler id>:<ms>) holds colons of its own.
_ITERATION_KEY = re.compile(r"^(.*:)(repeat:.+:\d+)$", re.DOTALL)


def _split(job_key: str) -> tuple[str, str]:
    """``(queue prefix, job id)`` of a full job key, as include/parent.lua's split_job_key."""
    match = _ITERATION_KEY.match(job_key)
    if match:
        return match.group(1), match.group(2)
    head, sep, tail = job_key.rpartition(":")
    return head + sep, tail


class _Tree:
    """A tree of jobs as collected: nodes, the queues they belong to, where they sit."""

    def __init__(self, job: _JobLike) -> None:
        self.job = job
        self.nodes: list[_Node] = []
        self.index: dict[str, int] = {}
        #: Nodes found active (holding a lock, or in their queue's active list).
        self.busy: list[int] = []
        self._places: dict[str, _Places] = {}

    def add(self, key: str, parent: int, pending: bool) -> int:
        """Add a node (-1 when the key is in the tree already: a job is removed once)."""
        if key in self.index:
            return -1
        prefix, job_id = _split(key)
        self.index[key] = len(self.nodes)
        self.nodes.append(_Node(key, prefix, job_id, parent, pending))
        if parent >= 0:
            self.nodes[parent].children.append(len(self.nodes) - 1)
        return len(self.nodes) - 1

    def collect(self, frontier: list[int], with_children: bool) -> None:
        """Walk the tree down from the nodes of ``frontier``, reading only."""
        queue = self.job.queue
        client = queue.client()
        while frontier:
            found: list[int] = []
            for start in range(0, len(frontier), READ_BATCH):
                batch = frontier[start : start + READ_BATCH]
                reply = queue._run(_INSPECT_JOBS, [self.nodes[i].key for i in batch])
                for n, i in enumerate(batch):
                    node = self.nodes[i]
                    state, deps, processed, failed, unsuccessful = reply[5 * n : 5 * n + 5]
                    node.state = _codec.text(state)
                    if node.state == "locked":
                        self.busy.append(i)
                    if not node.state or not with_children:
                        continue
                    key = node.key
                    if int(processed):
                        for child, _ in client.hscan_iter(key + ":processed", count=1000):
                            found.append(self.add(child, i, False))
                    if int(failed):
                        for child, _ in client.hscan_iter(key + ":failed", count=1000):
                            found.append(self.add(child, i, False))
                    for first in range(0, int(unsuccessful), READ_BATCH):
                        page: list[str] = client.zrange(  # type: ignore[assignment]
                            key + ":unsuccessful", first, first + READ_BATCH - 1
                        )
                        found.extend(self.add(child, i, False) for child in page)
                    if int(deps):
                        for child in client.sscan_iter(key + ":dependencies", count=1000):
                            found.append(self.add(child, i, True))
            frontier = [i for i in found if i >= 0]
        self._check_active()

    def _check_active(self) -> None:
        """Jobs in their queue's active list without a lock (stalled ones) are active too."""
        client = self.job.queue.client()
        by_prefix: dict[str, dict[str, int]] = {}
        for i, node in enumerate(self.nodes):
            if node.state == "list":
                by_prefix.setdefault(node.prefix, {})[node.id] = i
        for prefix, ids in by_prefix.items():
            for job_id in _pages(client, prefix + "active"):
                if job_id in ids:
                    self.busy.append(ids[job_id])

    def busy_tops(self) -> set[int]:
        """The nodes just below the top (parent 0) whose subtree holds a busy node."""
        tops = set()
        for i in self.busy:
            while i > 0 and self.nodes[i].parent > 0:
                i = self.nodes[i].parent
            tops.add(i)
        return tops

    def find_places(self) -> None:
        """Read where the jobs in no zset sit in their queues' long lists (pages from both ends,
        until all are found); short lists are read whole by each chunk instead."""
        client = self.job.queue.client()
        by_prefix: dict[str, dict[str, _Node]] = {}
        for node in self.nodes:
            if node.state == "list":
                by_prefix.setdefault(node.prefix, {})[node.id] = node
        for prefix, wanted in by_prefix.items():
            left: dict[str, _Node | None] = dict(wanted)
            for name in ("wait", "paused"):
                list_key = prefix + name
                length = int(client.llen(list_key))
                if length <= SWEEP:
                    # Short: each chunk reads it whole; read here only to know what is in it.
                    for job_id in client.lrange(list_key, 0, -1):
                        left.pop(_codec.text(job_id), None)
                    continue
                head, tail = 0, length
                while left and head < tail:
                    page = client.lrange(list_key, head, head + READ_BATCH - 1)
                    for n, job_id in enumerate(page):
                        hit = left.pop(_codec.text(job_id), None)
                        if hit is not None:
                            hit.place = (list_key, head + n)
                    head += READ_BATCH
                    if not left or head >= tail:
                        break
                    low = max(head, tail - READ_BATCH)
                    page = client.lrange(list_key, low - length, tail - length - 1)
                    for n, job_id in enumerate(page):
                        hit = left.pop(_codec.text(job_id), None)
                        if hit is not None:
                            hit.place = (list_key, low + n)
                    tail = low
            for rest in left.values():
                if rest is not None:
                    rest.nowhere = True

    def order(self, tops: list[int]) -> list[int]:
        """Post-order: every job after its children; among siblings, finished ones first and
        pending ones last, each by their place in their list."""

        def rank(i: int) -> tuple[bool, int]:
            node = self.nodes[i]
            return node.pending, node.place[1] if node.place else -1

        out: list[int] = []
        stack = [(i, False) for i in reversed(sorted(tops, key=rank))]
        while stack:
            i, expanded = stack.pop()
            if expanded:
                out.append(i)
                continue
            stack.append((i, True))
            children = self.nodes[i].children
            if len(children) > 1:
                children = sorted(children, key=rank)
            stack.extend((c, False) for c in reversed(children))
        return out

    def chunks(self, order: list[int]) -> list[list[int]]:
        """Cut the removal order into chunks of about CHUNK jobs. A parent goes in the chunk of
        its last child (so a parent is never left without pending children between calls),
        and the places of a chunk's jobs in one list stay within what the chunk reads."""
        out: list[list[int]] = []
        current: list[int] = []
        spans: dict[str, tuple[int, int]] = {}
        for i in order:
            node = self.nodes[i]
            if current:
                follows_child = self.nodes[current[-1]].parent == i
                full = len(current) >= CHUNK
                wide = False
                if node.place is not None and node.place[0] in spans:
                    low, high = spans[node.place[0]]
                    spread = max(high, node.place[1]) - min(low, node.place[1])
                    wide = spread > SWEEP - 2 * SLACK
                if (full or wide) and not (follows_child and len(current) < 2 * CHUNK):
                    out.append(current)
                    current, spans = [], {}
            current.append(i)
            if node.place is not None:
                low, high = spans.get(node.place[0], node.place[1:] * 2)
                spans[node.place[0]] = (min(low, node.place[1]), max(high, node.place[1]))
        if current:
            out.append(current)
        return out

    def starts(self, chunk: list[int]) -> list[Any]:
        """The (list key, start index) pairs of a chunk: where its first job of each long list
        was seen, less the jobs of that list that earlier chunks removed before that place,
        less SLACK. Call it for the chunks in their order: it counts them as removed."""
        first: dict[str, int] = {}
        for i in chunk:
            place = self.nodes[i].place
            if place is not None:
                first[place[0]] = min(first.get(place[0], place[1]), place[1])
        pairs: list[Any] = []
        for list_key, index in first.items():
            before = self._removed(list_key).count_below(index)
            pairs += [list_key, max(0, index - before - SLACK)]
        for i in chunk:
            place = self.nodes[i].place
            if place is not None:
                self._removed(place[0]).add(place[1])
        return pairs

    def _removed(self, list_key: str) -> _Places:
        if list_key not in self._places:
            self._places[list_key] = _Places(
                n.place[1] for n in self.nodes if n.place is not None and n.place[0] == list_key
            )
        return self._places[list_key]


class _Places:
    """Which of a fixed set of places in a list are marked, counted below a place in
    O(log n) (a Fenwick tree over the places' ranks)."""

    def __init__(self, places: Iterable[int]) -> None:
        self._sorted = sorted(places)
        self._tree = [0] * (len(self._sorted) + 1)

    def add(self, place: int) -> None:
        i = bisect.bisect_left(self._sorted, place) + 1
        while i < len(self._tree):
            self._tree[i] += 1
            i += i & -i

    def count_below(self, place: int) -> int:
        i = bisect.bisect_left(self._sorted, place)
        total = 0
        while i > 0:
            total += self._tree[i]
            i -= i & -i
        return total


def _pages(client: Redis, list_key: str) -> Iterator[str]:
    """Every entry of a list, READ_BATCH per read."""
    start = 0
    while True:
        page: list[str] = client.lrange(list_key, start, start + READ_BATCH - 1)  # type: ignore[assignment]
        for entry in page:
            yield _codec.text(entry)
        if len(page) < READ_BATCH:
            return
        start += READ_BATCH


def _remove_chunks(
    tree: _Tree, tops: list[int], release_tops: bool
) -> tuple[int, list[str], list[str]]:
    """Remove the collected tree, chunk by chunk; returns (removed, busy keys, kept keys)."""
    tree.find_places()
    # No job id is ":" (ids hold no ':' but in repeat:<id>:<ms>), and a short mark keeps the
    # list's nodes from growing where it is written.
    tombstone = ":"
    removed = 0
    busy: list[str] = []
    kept: list[str] = []
    top_set = set(tops)
    for chunk in tree.chunks(tree.order(tops)):
        pairs = tree.starts(chunk)
        args: list[Any] = [tombstone, SWEEP, len(pairs) // 2, *pairs]
        for i in chunk:
            node = tree.nodes[i]
            parent = tree.nodes[node.parent].key if node.parent >= 0 else ""
            release = "1" if i in top_set and release_tops else "0"
            args += [node.key, parent, release, "-" if node.nowhere else ""]
        reply = tree.job.queue._run(_REMOVE_JOBS, args)
        removed += int(reply[0])
        n_busy = int(reply[1])
        busy += [_codec.text(k) for k in reply[2 : 2 + n_busy]]
        kept += [_codec.text(k) for k in reply[2 + n_busy :]]
    return removed, busy, kept


def remove_tree(job: _JobLike, *, remove_children: bool) -> int:
    """Remove ``job`` (and its children): one call when it fits, else in chunks.

    Returns how many jobs were removed.

    Raises:
        JobNotFoundError: the job does not exist.
        JobLockedError: the job or a job below it is active: nothing was removed when it was
            so from the start; when it became active during a removal in chunks, the message
            says how many jobs were removed (it and the jobs above it were kept).
        JobStateError: the job is the pending iteration of a job scheduler.
    """
    queue = job.queue
    if not names_a_job(job.id):
        raise script_error(-1, queue=queue.name, job_id=job.id)  # a queue's own key: no job
    reply = int(
        queue._run(
            _REMOVE_JOB,
            [queue._job_prefix, job.id, "1" if remove_children else "0", ATOMIC_JOBS, ATOMIC_SCAN],
        )
    )
    if reply != TOO_BIG:
        if reply < 0:
            raise script_error(reply, queue=queue.name, job_id=job.id)
        return reply
    root_key = queue._job_prefix + job.id
    removed = 0
    for _ in range(PASSES):
        tree = _Tree(job)
        tree.add(root_key, -1, False)
        tree.collect([0], remove_children)
        if not tree.nodes[0].state:
            return removed  # gone: removed by someone else, or by the passes before
        if tree.busy:
            raise _locked(job, tree.nodes[tree.busy[0]].key, removed)
        done, busy, kept = _remove_chunks(tree, [0], True)
        removed += done
        if busy:
            raise _locked(job, busy[0], removed)
        if not kept:
            return removed
    raise JobError(
        f"job {job.id} in queue {queue.name}: its tree kept changing during {PASSES} passes "
        f"of removal ({removed} jobs removed); remove it again",
        queue=queue.name,
        job_id=job.id,
    )


def remove_unprocessed(job: _JobLike) -> int:
    """Remove the pending children of ``job``, each with the flow below it, keeping those whose
    subtree holds an active job; one call when it fits, else in chunks (as :func:`remove_tree`).

    Returns how many jobs were removed.

    Raises:
        JobNotFoundError: the job does not exist.
    """
    queue = job.queue
    if not names_a_job(job.id):
        raise script_error(-1, queue=queue.name, job_id=job.id)  # a queue's own key: no job
    reply = int(
        queue._run(
            _REMOVE_UNPROCESSED_CHILDREN, [queue._job_prefix, job.id, ATOMIC_JOBS, ATOMIC_SCAN]
        )
    )
    if reply != TOO_BIG:
        if reply < 0:
            raise script_error(reply, queue=queue.name, job_id=job.id)
        return reply
    parent_key = queue._job_prefix + job.id
    client = queue.client()
    removed = 0
    for _ in range(PASSES):
        tree = _Tree(job)
        tree.add(parent_key, -1, False)
        for child in client.sscan_iter(parent_key + ":dependencies", count=1000):
            # A member ending in ':' is no child but the mark of a flow still being added in
            # chunks (release_parents.lua): it stays, and the parent waits for what is to come.
            if not child.endswith(":"):
                tree.add(child, 0, True)
        tops = list(range(1, len(tree.nodes)))
        tree.collect(tops, True)
        # A child whose subtree holds an active job stays, with its subtree.
        busy = tree.busy_tops()
        tops = [t for t in tops if t not in busy]
        if not tops:
            return removed
        done, _, kept = _remove_chunks(tree, tops, True)
        removed += done
        if not kept or not done:
            return removed
    return removed


def _locked(job: _JobLike, busy_key: str, removed: int) -> JobLockedError:
    busy_id = _split(busy_key)[1]
    what = "it" if busy_id == job.id else f"job {busy_id} below it"
    if removed:
        message = (
            f"job {job.id} in queue {job.queue.name}: {what} became active during the removal; "
            f"{removed} jobs of its tree were removed, {what} and the jobs above it were kept"
        )
    else:
        message = f"job {job.id} in queue {job.queue.name}: {what} is active; nothing was removed"
    return JobLockedError(message, queue=job.queue.name, job_id=job.id)
