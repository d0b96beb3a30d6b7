# Generated from corral/_async/flow_reader.py by scripts/unasync.py: do not edit.
"""The parts of :class:`~corral._sync.flow.FlowProducer` that read flows back: a tree
below a job (``get_flow``), and the flows written in chunks whose producer stopped part-way
(``get_unfinished_flows``, ``release_unfinished_flow``, and the release after a failed
chunk)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from redis import Redis

from corral import _flow_chunks, _scripts
from corral._sync._calls import run_script
from corral._sync.job import Job
from corral._sync.queue import Queue
from corral._keys import split_job_key
from corral.clock import now_ms
from corral.flow_job import JobNode, UnfinishedFlow

#: ``get_flow``'s default cap on the children read per kind (pending, processed...) and node.
MAX_CHILDREN = 1000

#: One script call of a transaction: the script, its KEYS and its ARGV.
Call = tuple[_scripts.Script, list[str], list[Any]]

#: The producer's queue of a name (and prefix): ``FlowProducer._queue``.
QueueOf = Callable[[str, str | None], Queue]


def read_flow(
    queue_of: QueueOf, job: Job, depth: int, max_children: int
) -> JobNode[Job]:
    """``job`` and, ``depth`` levels down, its children, each with its state."""
    node = JobNode(job, state=job.get_state())
    if depth <= 0:
        return node
    deps = job.get_dependencies()
    keys = [
        *deps["unprocessed"][:max_children],
        *sorted(deps["processed"])[:max_children],
        *sorted(deps["ignored"])[:max_children],
        *deps["failed"][:max_children],
    ]
    for key in dict.fromkeys(keys):
        if key.endswith(":"):  # a chunked flow's mark (release_parents.lua), not a job
            continue
        prefix, name, child_id = split_job_key(key)
        child = queue_of(name, prefix).get_job(child_id)
        if child is not None:
            node.children.append(read_flow(queue_of, child, depth - 1, max_children))
    node.children.sort(key=lambda n: (n.job.timestamp, n.job.id))
    return node


def unfinished_flows(client: Redis, queue: Queue) -> list[UnfinishedFlow]:
    """The flows of ``queue`` being written in chunks, or left part-way, oldest first."""
    raw: dict[str, str] = client.hgetall(queue.keys.key("x-flow:adding"))  # type: ignore[assignment]
    flows = []
    for flow_id, text in raw.items():
        marked = int(client.scard(queue.keys.key(f"x-flow:{flow_id}")))
        flows.append(_flow_chunks.unfinished(flow_id, text, marked))
    return sorted(flows, key=lambda flow: (flow.started_ms, flow.flow_id))


def release_flow(client: Redis, queue: Queue, flow_id: str) -> int:
    """Unmark every parent of flow ``flow_id`` (queued at once when no child is pending);
    returns how many were marked."""
    marked = queue.keys.key(f"x-flow:{flow_id}")
    released = 0
    while True:
        # A batch per call, so that a flow of many parents does not hold the server.
        batch: list[str] = client.srandmember(marked, _flow_chunks.FLOW_CHUNK_JOBS)  # type: ignore[assignment]
        script, keys, args = release_parents(queue, flow_id, "", [], list(batch))
        run_script(client, script, keys, args)
        if not batch:  # the call above dropped the record
            return released
        released += len(batch)


def job_key_of(args: list[Any]) -> str:
    """The full key of the job an add_job.lua ARGV adds (a flow's ids are always given)."""
    return f"{args[0]}{args[1]}"


def release_parents(
    queue: Queue, flow_id: str, record: str, mark: list[str], done: list[str]
) -> Call:
    """A call of release_parents.lua for a flow whose (first) root is in ``queue``."""
    keys = [queue.keys.key("x-flow:adding"), queue.keys.key(f"x-flow:{flow_id}")]
    return (_scripts.RELEASE_PARENTS, keys, [now_ms(), flow_id, record, len(mark), *mark, *done])
