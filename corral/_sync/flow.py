# Generated from corral/_async/flow.py by scripts/unasync.py: do not edit.
"""``FlowProducer``: add trees of jobs whose parents wait for their children, and read
them back (BullMQ's ``FlowProducer``).

A whole tree, or several (``add_bulk``), goes in one MULTI/EXEC of ``add_job.lua``, parents
before their children: a parent is parked in waiting-children, each child joins its parent's
``:dependencies``. Every node is checked first, so a bad one means nothing is written. The
queues of a flow share the producer's prefix and may differ from node to node.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Any

from redis import Redis

from corral import _codec, _scripts, options
from corral._sync._redis import LazyClient, run_atomically
from corral._sync.job import Job
from corral._sync.queue import Queue, external_parents, missing_parent
from corral._keys import DEFAULT_PREFIX, split_job_key
from corral.errors import InvalidOptionError
from corral.flow_job import FlowJob, FlowNode, JobNode, breadth_first, flow_nodes

#: ``get_flow``'s default cap on the children read per kind (pending, processed...) and node.
MAX_CHILDREN = 1000


class FlowProducer:
    """Adds flows: trees of jobs in queues of one prefix.

    Args:
        connection: a URL, a redis-py asyncio client made with ``decode_responses=True``, or
            ``None`` for ``CORRAL_REDIS_URL`` / ``REDIS_URL`` / the embedded server.
        prefix: key prefix of every queue of the flows, ``bull`` by default. On Redis Cluster,
            give it a hash tag (``{bull}``): one flow is one transaction over several queues.
        strict: refuse, rather than warn about, a server whose maxmemory-policy evicts keys.

    Example::

        with FlowProducer() as flows:
            node = flows.add(
                FlowJob("report", "reports", children=[
                    FlowJob("page", "pages", {"n": 1}),
                    FlowJob("page", "pages", {"n": 2}),
                ])
            )
            # node.job runs once both pages completed; it reads them with
            # job.get_children_values()
    """

    def __init__(
        self,
        *,
        connection: str | Redis | None = None,
        prefix: str = DEFAULT_PREFIX,
        strict: bool = False,
    ) -> None:
        self.prefix = options.check_prefix(prefix)
        self._clients = LazyClient(connection, strict=strict)
        self._queues: dict[tuple[str, str], Queue] = {}

    @property
    def _client(self) -> Redis | None:
        return self._clients.current

    def client(self) -> Redis:
        """The redis-py client, opened and checked on first use (shared by every queue)."""
        before = self._clients.current
        client = self._clients.get()
        if client is not before:  # opened now (or again, on a new event loop)
            for queue in self._queues.values():
                self._attach(queue)
        return client

    def _attach(self, queue: Queue) -> None:
        # The queue uses the producer's client as if it had been given it: it is checked
        # already, and closing the queue leaves it open.
        assert self._client is not None
        queue._clients.use(self._client)

    def _queue(self, name: str, prefix: str | None = None) -> Queue:
        """The queue ``name`` (no I/O: nodes are prepared before the client is opened)."""
        key = (prefix or self.prefix, name)
        queue = self._queues.get(key)
        if queue is None:
            queue = Queue(name, prefix=key[0])
            if self._client is not None:
                self._attach(queue)
            self._queues[key] = queue
        return queue

    # -- adding --------------------------------------------------------------------------------

    def add(self, tree: FlowJob | dict[str, Any]) -> JobNode[Job]:
        """Add one flow atomically and return its jobs as a tree.

        Parents (nodes with children) wait in waiting-children until their children are
        done; leaves are queued like ``Queue.add`` queues them. Job ids are UUID v4s unless a
        node's options give ``job_id``; each queue's ``K:id`` is counted per job all the same.

        Args:
            tree: the root :class:`FlowJob`, or a dict with the keys ``name``,
                ``queue_name``, ``data``, ``opts`` and ``children``.

        Raises:
            InvalidOptionError: a node was refused (the message names its path, e.g.
                ``root.children[1]``); nothing was written.
            ParentNotFoundError: the root names a ``parent`` that does not exist.
        """
        return (self._add([flow_nodes(tree)]))[0]

    def add_bulk(self, trees: Iterable[FlowJob | dict[str, Any]]) -> list[JobNode[Job]]:
        """Add several flows in one transaction: all of them, or (on any error) none.

        Raises:
            InvalidOptionError: naming the flow's index and the node's path; nothing was
                written.
            ParentNotFoundError: a root names a ``parent`` that does not exist.
        """
        roots = []
        for index, tree in enumerate(trees):
            try:
                roots.append(flow_nodes(tree))
            except InvalidOptionError as exc:
                raise InvalidOptionError(f"flow {index}: {exc}") from None
        return self._add(roots, numbered=True)

    def _add(self, roots: list[FlowNode], numbered: bool = False) -> list[JobNode[Job]]:
        planned: list[tuple[FlowNode, Queue, list[Any]]] = []
        for index, root in enumerate(roots):
            try:
                planned.extend(self._plan(root))
            except InvalidOptionError as exc:
                if numbered:
                    raise InvalidOptionError(f"flow {index}: {exc}") from None
                raise
        if not planned:
            return []
        prepared = [args for _, _, args in planned]
        replies, missing = run_atomically(
            self.client(),
            _scripts.ADD_JOB,
            [(queue._script_keys, args) for _, queue, args in planned],
            must_exist=external_parents(prepared),
        )
        if missing is not None:
            raise missing_parent(missing)
        built: dict[int, JobNode[Job]] = {}
        for (node, queue, args), reply in zip(planned, replies, strict=True):
            if isinstance(reply, int):
                raise missing_parent(args[9])
            job = None if int(reply[1]) else queue.get_job(_codec.text(reply[0]))
            built[id(node)] = JobNode(job or queue._added(args, reply))
            if node.parent is not None:
                built[id(node.parent)].children.append(built[id(node)])
        return [built[id(root)] for root in roots]

    def _plan(self, root: FlowNode) -> list[tuple[FlowNode, Queue, list[Any]]]:
        """The add_job.lua ARGV of every node of a tree, parents first; raises before I/O."""
        ids: dict[int, tuple[str, str]] = {}  # node -> (job id, qualified queue name)
        planned = []
        for flow_node in breadth_first(root):
            node = flow_node.node
            queue = self._queue(node.queue_name)
            given: dict[str, Any] = dict(node.options)
            custom = given.get("job_id")
            job_id = custom if isinstance(custom, str) and custom else str(uuid.uuid4())
            if flow_node.parent is not None:
                parent_id, parent_queue = ids[id(flow_node.parent)]
                given["parent"] = {"id": parent_id, "queue": parent_queue}
            data = {} if node.data is None else node.data
            try:
                args = queue._prepare(
                    node.name,
                    data,
                    given,
                    job_id=job_id,
                    wait_children=bool(flow_node.children),
                )
            except InvalidOptionError as exc:
                raise InvalidOptionError(
                    f"flow node {flow_node.path} ({node.name!r}): {exc}"
                ) from None
            ids[id(flow_node)] = (job_id, queue.keys.base)
            planned.append((flow_node, queue, args))
        return planned

    # -- reading -------------------------------------------------------------------------------

    def get_flow(
        self,
        job_id: str,
        queue_name: str,
        *,
        depth: int = 10,
        max_children: int = MAX_CHILDREN,
    ) -> JobNode[Job] | None:
        """Read a job and the flow below it, each node with its state (BullMQ's ``getFlow``).

        Children are those still pending, completed, and failed (ignored or failing the
        parent), in the order they were created (timestamp, then id).

        Args:
            job_id: the job at the top of the tree read (any job of a flow).
            queue_name: its queue.
            depth: how many levels below it are read (0: the job alone).
            max_children: at most this many children of each kind per node.

        Returns:
            The tree, or ``None`` when there is no such job.
        """
        options.int_option("depth", depth, 0)
        options.int_option("max_children", max_children, 1)
        self.client()
        job = self._queue(queue_name).get_job(job_id)
        if job is None:
            return None
        return self._read(job, depth, max_children)

    def _read(self, job: Job, depth: int, max_children: int) -> JobNode[Job]:
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
            prefix, name, child_id = split_job_key(key)
            child = self._queue(name, prefix).get_job(child_id)
            if child is not None:
                node.children.append(self._read(child, depth - 1, max_children))
        node.children.sort(key=lambda n: (n.job.timestamp, n.job.id))
        return node

    # -- closing -------------------------------------------------------------------------------

    def close(self) -> None:
        """Close the client, unless it was given by the caller."""
        for queue in self._queues.values():
            queue.close()  # its own connection; the client is the producer's
        self._clients.close()
        self._queues.clear()

    def __enter__(self) -> FlowProducer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
