"""How a flow is cut into the calls that write it. Pure.

A flow is written parents first (breadth first), so every node's parent comes before it and the
children of one parent are next to each other. A flow that fits one chunk is written in one
transaction, as it always was. A bigger one is written in chunks, one transaction each, so that
no call holds the server for long: a parent whose children go on past its own chunk is
*marked* there (a member in its ``:dependencies`` that no completion removes, see
``_lua/release_parents.lua``), and the chunk that writes its last child removes the mark and
releases it when nothing is pending. Every chunk ends with that release step, which also
releases a parent none of whose children was created (deduplicated, an idempotency key's hit,
an existing job id).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from corral import _codec
from corral.clock import now_ms
from corral.errors import FlowAddError
from corral.flow_job import UnfinishedFlow

#: Jobs per chunk, and the most a flow written in one transaction (all or nothing) has. A
#: numbered add costs the server about 17 microseconds on a quiet machine and 35 to 95 on a
#: busy one (two cores shared with other servers: measured), so a chunk of 250 holds it for
#: 4 to 25 ms, under the 50 ms that no call may exceed.
FLOW_CHUNK_JOBS = 250
#: Bytes (data and options JSON) per chunk: a chunk of few jobs with big data also stays
#: short. A job bigger than this is a chunk of its own.
FLOW_CHUNK_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Chunk:
    """One transaction of a flow: the nodes ``start`` to ``end - 1`` (breadth-first indexes),
    then the release step."""

    start: int
    end: int
    #: Parents written in this chunk whose children go on in later chunks.
    mark: list[int] = field(default_factory=list)
    #: Parents whose last child is written in this chunk (or that are written here with all
    #: their children): their mark goes, and they are released if nothing is pending.
    done: list[int] = field(default_factory=list)


def cut(
    parents: Sequence[int],
    sizes: Sequence[int],
    *,
    max_jobs: int = FLOW_CHUNK_JOBS,
    max_bytes: int = FLOW_CHUNK_BYTES,
) -> list[Chunk]:
    """Cut a flow into chunks.

    Args:
        parents: for each node (breadth first), the index of its parent node, or -1 (a root).
        sizes: the bytes each node sends.
        max_jobs, max_bytes: the bounds of one chunk.
    """
    bounds: list[tuple[int, int]] = []
    start, used = 0, 0
    for i, size in enumerate(sizes):
        if i > start and (i - start >= max_jobs or used + size > max_bytes):
            bounds.append((start, i))
            start, used = i, 0
        used += size
    if start < len(sizes):
        bounds.append((start, len(sizes)))
    chunk_of = [0] * len(sizes)
    for k, (first, end) in enumerate(bounds):
        for i in range(first, end):
            chunk_of[i] = k
    last_child: dict[int, int] = {}
    for i, parent in enumerate(parents):
        if parent >= 0:
            last_child[parent] = i
    chunks = [Chunk(first, end) for first, end in bounds]
    for parent, last in sorted(last_child.items()):
        if chunk_of[last] != chunk_of[parent]:
            chunks[chunk_of[parent]].mark.append(parent)
        chunks[chunk_of[last]].done.append(parent)
    return chunks


def flow_add_error(
    flow_id: str,
    paths: Sequence[str],
    replies: Sequence[Any],
    failed: Chunk,
    released: bool,
    cause: Exception,
) -> FlowAddError:
    """The error for a flow whose chunk ``failed`` could not be written (``replies``: the
    add_job.lua answers of the chunks before it; ``paths``: every node's path)."""
    written = [
        path
        for path, reply in zip(paths, replies, strict=False)
        if not isinstance(reply, int) and int(reply[1]) == 1
    ]
    then = (
        "the parents written were released to run with the children they got"
        if released
        else "its parents wait: call release_unfinished_flow() once the server is back"
    )
    return FlowAddError(
        f"flow {flow_id} stopped part-way ({cause!r}): {failed.start} of {len(paths)} jobs "
        f"handled ({len(written)} created), the next {failed.end - failed.start} maybe "
        f"written; {then}",
        flow_id=flow_id,
        written=written,
        unsure=list(paths[failed.start : failed.end]),
        released=released,
    )


def record(root: str, trees: int, jobs: int, written: int, started_ms: int) -> str:
    """The JSON a chunked flow is listed with while it has marked parents (KEYS[1] of
    release_parents.lua), rewritten by every chunk."""
    return _codec.dumps(
        {
            "root": root,
            "trees": trees,
            "jobs": jobs,
            "written": written,
            "started": started_ms,
            "updated": now_ms(),
        }
    )


def unfinished(flow_id: str, text: str, marked: int) -> UnfinishedFlow:
    """A flow as listed by :func:`record`."""
    data = _codec.loads(text)
    return UnfinishedFlow(
        flow_id=flow_id,
        root=data["root"],
        trees=data["trees"],
        jobs=data["jobs"],
        written=data["written"],
        started_ms=data["started"],
        updated_ms=data["updated"],
        marked=marked,
    )
