"""Flow trees: the nodes a ``FlowProducer`` adds, the tree it returns, and their checks. Pure.

A flow is a tree of jobs: a parent runs after its children, which may live in other queues
of the same prefix. :class:`FlowJob` describes one node to add (plain dicts are accepted
too), :class:`JobNode` is a job as added or read back with the nodes below it, and
:func:`flow_nodes` checks a whole tree before anything is written.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypedDict, TypeVar

from corral.errors import InvalidOptionError
from corral.job import JobState
from corral.options import JobOptions, JobOptionsDict, check_name

#: The keys a flow node may have when it is given as a dict.
NODE_KEYS = frozenset({"name", "queue_name", "data", "opts", "children"})


@dataclass
class FlowJob:
    """One node of a flow: a job, and the children it waits for.

    Args:
        name: the job's name.
        queue_name: its queue (any queue of the flow producer's prefix).
        data: JSON data; ``None`` is stored as ``{}``, as Node's ``FlowProducer`` does.
        options: the keyword options of ``Queue.add`` (``job_id``, ``delay``, ``priority``,
            ``attempts``, ``fail_parent_on_failure``...). ``parent`` is set by the tree; only
            the root may name an existing job as its own parent.
        children: nodes (``FlowJob`` or dicts with the keys ``name``, ``queue_name``,
            ``data``, ``opts``, ``children``) that run before this job.

    Example::

        FlowJob("report", "reports", children=[FlowJob("part", "parts", {"n": 1})])
    """

    name: str
    queue_name: str
    data: Any = None
    options: JobOptionsDict = field(default_factory=lambda: JobOptionsDict())
    children: list[FlowJob | Mapping[str, Any]] = field(default_factory=list)


J = TypeVar("J")


@dataclass
class JobNode(Generic[J]):
    """A job of a flow with the nodes below it (BullMQ's ``JobNode``).

    ``state`` is filled by ``get_flow`` (read with ``job.get_state()``); ``add`` leaves it
    ``None``.
    """

    job: J
    children: list[JobNode[J]] = field(default_factory=list)
    state: JobState | None = None


class Dependencies(TypedDict, total=False):
    """A parent's children by outcome (``job.get_dependencies()``), keyed by full job key.

    A whole read has the four kinds; a read by pages has the kinds asked for, each with the
    cursor of its next page (0: that was the last), as BullMQ's ``getDependencies``.
    """

    #: Completed children and their return values.
    processed: dict[str, Any]
    #: Children not finished yet.
    unprocessed: list[str]
    #: Children that failed with ``fail_parent_on_failure``.
    failed: list[str]
    #: Children that failed with ``ignore_dependency_on_failure`` (or
    #: ``continue_parent_on_failure``) and their failed reasons.
    ignored: dict[str, str]
    next_processed_cursor: int
    next_unprocessed_cursor: int
    next_failed_cursor: int
    next_ignored_cursor: int


#: One page of a kind of children, ``job.get_dependencies(processed={"cursor": c, "count": n})``
#: (BullMQ's ``DependencyOpts``): ``cursor`` 0 (the default) for the first page, then the
#: ``next_*_cursor`` of the page before; ``count`` how many to read (a hint for the sets and
#: hashes, as SCAN's; 20 by default).
DependencyPage = Mapping[str, int]


@dataclass(frozen=True)
class UnfinishedFlow:
    """A flow being written in chunks, or whose producer stopped part-way
    (``FlowProducer.get_unfinished_flows``): some of its parents are marked, and wait for it.
    """

    #: The id that ``release_unfinished_flow`` takes (also ``FlowAddError.flow_id``).
    flow_id: str
    #: The full key of its (first) root job, and how many trees it writes (``add_bulk``).
    root: str
    trees: int
    #: How many jobs it has, and how many were written before its last chunk began.
    jobs: int
    written: int
    #: When its first and its last chunk began (epoch ms).
    started_ms: int
    updated_ms: int
    #: How many of its parents are still marked (they wait for the flow's end).
    marked: int


@dataclass
class FlowNode:
    """A node checked by :func:`flow_nodes`: where it is in the tree, and its parent."""

    node: FlowJob
    path: str
    parent: FlowNode | None
    children: list[FlowNode] = field(default_factory=list)


def as_flow_job(value: Any, path: str) -> FlowJob:
    """``value`` as a :class:`FlowJob` (a dict is converted); raises naming ``path``."""
    if isinstance(value, FlowJob):
        node = value
    elif isinstance(value, Mapping):
        unknown = sorted(set(value) - NODE_KEYS)
        if unknown:
            raise InvalidOptionError(
                f"flow node {path}: unknown key {unknown[0]!r} (use {', '.join(sorted(NODE_KEYS))})"
            )
        if "name" not in value or "queue_name" not in value:
            raise InvalidOptionError(f"flow node {path}: 'name' and 'queue_name' are required")
        node = FlowJob(
            value["name"],
            value["queue_name"],
            value.get("data"),
            value.get("opts") or JobOptionsDict(),
            value.get("children") or [],
        )
    else:
        raise InvalidOptionError(f"flow node {path}: expected a FlowJob or a dict, got {value!r}")
    try:
        check_name("job name", node.name)
        shards = getattr(node.queue_name, "shards", 1)  # a ShardedQueue, or its name
        if shards != 1:
            raise InvalidOptionError(
                f"queue {getattr(node.queue_name, 'name', node.queue_name)} has {shards} shards: "
                "a flow cannot span them; put it in one (queue.shard_for(id).name)"
            )
        check_name("queue name", node.queue_name, colon=False)
        if not isinstance(node.options, Mapping):
            raise InvalidOptionError(f"options must be a dict, got {node.options!r}")
        if not isinstance(node.children, (list, tuple)):
            raise InvalidOptionError(f"children must be a list, got {node.children!r}")
        if path != "root" and node.options.get("parent") is not None:
            raise InvalidOptionError("parent is set by the tree; only the root may name one")
    except InvalidOptionError as exc:
        raise InvalidOptionError(f"flow node {path} ({node.name!r}): {exc}") from None
    return node


def flow_nodes(tree: Any) -> FlowNode:
    """Check the shape of a whole tree (names, keys, nesting) and give it as :class:`FlowNode`s.

    Options and data are checked when each node is prepared for its queue.
    """
    root = FlowNode(as_flow_job(tree, "root"), "root", None)
    seen = {id(tree)}
    pending = [root]
    while pending:
        current = pending.pop()
        for i, child in enumerate(current.node.children):
            path = f"{current.path}.children[{i}]"
            if id(child) in seen:
                raise InvalidOptionError(f"flow node {path}: the same node appears twice")
            seen.add(id(child))
            node = FlowNode(as_flow_job(child, path), path, current)
            current.children.append(node)
            pending.append(node)
    return root


def breadth_first(root: FlowNode) -> Iterator[FlowNode]:
    """The nodes of a tree, every parent before its children (the order they are added in)."""
    level = [root]
    while level:
        yield from level
        level = [child for node in level for child in node.children]


def check_ids(nodes: Sequence[tuple[FlowNode, str, str]]) -> None:
    """Refuse a node whose job is one of the nodes above it, or the root's own ``parent``:
    it would be a duplicate of that job rather than its child (nothing would be added for it)
    and the parent would wait for itself.

    Args:
        nodes: every node (parents first) with its full job key and the full key of the
            parent it names (``""`` for none).
    """
    first: dict[str, FlowNode] = {}
    keys: dict[int, str] = {}
    for node, key, parent_key in nodes:
        keys[id(node)] = key
        above = None
        if node.parent is None and parent_key == key:
            what = "its parent"
        elif key in first:
            # Only a repeated key walks up the tree: ids are seldom repeated.
            above = node.parent
            while above is not None and keys[id(above)] != key:
                above = above.parent
            if above is None:
                continue  # a repeated id elsewhere in the tree: the later node is a no-op
            what = "its parent" if above is node.parent else f"the node {above.path} above it"
        else:
            first[key] = node
            continue
        raise InvalidOptionError(
            f"flow node {node.path} ({node.node.name!r}): job id {key.rpartition(':')[2]!r} "
            f"is the id of {what}; a job cannot be its own child"
        )


#: A flow's ``queues_options`` as checked: queue name -> its jobs' default options.
QueueDefaults = dict[str, dict[str, Any]] | None


def check_queues_options(value: Any) -> QueueDefaults:
    """``FlowProducer.add``'s ``queues_options`` (BullMQ's ``queuesOptions``): queue name ->
    ``{"default_job_options": {...}}``, checked as a queue's ``default_job_options`` are.

    Raises:
        InvalidOptionError: naming the queue and the option.
    """
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise InvalidOptionError(
            f"queues_options must be a dict of queue name -> options, got {value!r}"
        )
    checked: dict[str, dict[str, Any]] = {}
    for name, settings in value.items():
        check_name("queues_options queue name", name, colon=False)
        if not isinstance(settings, Mapping) or not set(settings) <= {"default_job_options"}:
            raise InvalidOptionError(
                f"queues_options[{name!r}] takes only 'default_job_options' (the other "
                f"queue settings are the Queue's own), got {settings!r}"
            )
        given = settings.get("default_job_options") or {}
        if not isinstance(given, Mapping):
            raise InvalidOptionError(
                f"queues_options[{name!r}]['default_job_options'] must be a dict of job "
                f"options, got {given!r}"
            )
        defaults = dict(given)
        try:
            JobOptions.build({}, defaults=defaults)
        except InvalidOptionError as exc:
            raise InvalidOptionError(f"queues_options[{name!r}]: {exc}") from None
        checked[name] = defaults
    return checked
