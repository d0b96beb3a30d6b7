"""``AsyncFlowProducer``: add trees of jobs whose parents wait for their children, and read
them back (BullMQ's ``FlowProducer``).

A tree, or several (``add_bulk``), is written parents before their children with
``add_job.lua``: a parent is parked in waiting-children, each child joins its parent's
``:dependencies``. Every node is checked first, so a bad one means nothing is written. A flow
of up to ``FLOW_CHUNK_JOBS`` jobs goes in one MULTI/EXEC, all or nothing; a bigger one in
chunks of that size, each its own transaction, so that no call holds the server for long
(``corral._flow_chunks``: marked parents wait for the chunks still to come). Each
transaction ends with ``release_parents.lua``, which releases a parent left with no child to
wait for (its children were not created: deduplicated, an idempotency key's hit, an existing
job id). The queues of a flow share the producer's prefix and may differ from node to node.
"""

from __future__ import annotations

import logging
import uuid
from asyncio import sleep
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from redis.asyncio import Redis

from corral import _flow_chunks, _scripts, _telemetry, options
from corral._adds import MAX_ADD_RETRIES, add_retry_delay, may_resend
from corral._async._calls import run_atomically
from corral._async._queue_base import stamp_meta
from corral._async._redis import Connectable, LazyClient
from corral._async.flow_reader import (
    MAX_CHILDREN,
    Call,
    job_key_of,
    read_flow,
    release_flow,
    release_parents,
    unfinished_flows,
)
from corral._async.job import AsyncJob
from corral._async.queue import AsyncQueue, external_parents
from corral._async.queue_adds import missing_parent
from corral._flow_chunks import Chunk, flow_add_error
from corral._keys import DEFAULT_PREFIX
from corral._supervisor import Outage
from corral.clock import now_ms
from corral.errors import InvalidOptionError, ParentNotFoundError
from corral.flow_job import (
    FlowJob,
    FlowNode,
    JobNode,
    QueueDefaults,
    UnfinishedFlow,
    breadth_first,
    check_ids,
    check_queues_options,
    flow_nodes,
)

logger = logging.getLogger("corral.flow")

#: One node as planned: where it is in the tree, its queue, and its add_job.lua ARGV.
Planned = tuple[FlowNode, AsyncQueue, list[Any]]


class AsyncFlowProducer:
    """Adds flows: trees of jobs in queues of one prefix.

    Args:
        connection: a URL, a redis-py client made with ``decode_responses=True``, or
            ``None`` for ``CORRAL_REDIS_URL`` / ``REDIS_URL`` / the embedded server.
        prefix: key prefix of every queue of the flows, ``bull`` by default. On Redis Cluster,
            give it a hash tag (``{bull}``): one flow is one transaction over several queues.
        strict: refuse, rather than warn about, a server whose maxmemory-policy evicts keys.
        add_retries: how many times a chunk of a flow too big for one transaction is sent
            again after a transient error (a resend never creates a job twice); 0 for none.
        telemetry: a :class:`corral.otel.Telemetry` (or ``True`` for one on the global
            providers): a PRODUCER span per call and per job, each job carrying its span's
            context (see docs/observability.md, "OpenTelemetry"). Off by default.

    Example::

        async with AsyncFlowProducer() as flows:
            node = await flows.add(
                FlowJob("report", "reports", children=[
                    FlowJob("page", "pages", {"n": 1}),
                    FlowJob("page", "pages", {"n": 2}),
                ])
            )
            # node.job runs once both pages completed; it reads them with
            # await job.get_children_values()
    """

    def __init__(
        self,
        *,
        connection: Connectable = None,
        prefix: str = DEFAULT_PREFIX,
        strict: bool = False,
        add_retries: int = 20,
        telemetry: _telemetry.Hooks | bool | None = None,
    ) -> None:
        self.prefix = options.check_prefix(prefix)
        self._telemetry = _telemetry.resolve(telemetry)
        self.add_retries = options.int_option("add_retries", add_retries, 0, MAX_ADD_RETRIES)
        self._clients = LazyClient(
            connection, strict=strict, slot_key=self.prefix, owner="FlowProducer"
        )
        self._queues: dict[tuple[str, str], AsyncQueue] = {}
        self._outage = Outage("flow producer", logger)

    @property
    def _client(self) -> Redis | None:
        return self._clients.current

    async def client(self) -> Redis:
        """The redis-py client, opened and checked on first use (shared by every queue)."""
        before = self._clients.current
        client = await self._clients.get()
        if client is not before:  # opened now (or again, on a new event loop)
            for queue in self._queues.values():
                self._attach(queue)
        return client

    def _attach(self, queue: AsyncQueue) -> None:
        # The queue uses the producer's client as if it had been given it: it is checked
        # already, and closing the queue leaves it open.
        assert self._client is not None
        queue._clients.use(self._client)

    def _queue(self, name: str, prefix: str | None = None) -> AsyncQueue:
        """The queue ``name`` (no I/O: nodes are prepared before the client is opened)."""
        options.check_name("queue name", name, colon=False)
        key = (prefix or self.prefix, name)
        queue = self._queues.get(key)
        if queue is None:
            queue = AsyncQueue(name, prefix=key[0], add_retries=self.add_retries)
            if self._client is not None:
                self._attach(queue)
            self._queues[key] = queue
        return queue

    # -- adding --------------------------------------------------------------------------------

    async def add(
        self,
        tree: FlowJob | dict[str, Any],
        *,
        queues_options: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> JobNode[AsyncJob]:
        """Add one flow and return its jobs as a tree.

        Parents (nodes with children) wait in waiting-children until their children are
        done; leaves are queued like ``Queue.add`` queues them. Job ids are UUID v4s unless a
        node's options give ``job_id``; each queue's ``K:id`` is counted per job all the same.
        A flow of up to ``FLOW_CHUNK_JOBS`` (250) jobs is written in one transaction, all or
        nothing; a bigger one in chunks, and no parent runs before all its children are
        written (see ``docs/flows.md``).

        A child that is not created (a ``job_id`` that exists already, a ``deduplication``
        id held by another job, an ``idempotency_key`` used within its window) is no
        dependency of its parent: its node is the existing job, and the parent does not wait
        for it (a parent left with nothing to wait for is queued at once).

        Args:
            tree: the root :class:`FlowJob`, or a dict with the keys ``name``,
                ``queue_name``, ``data``, ``opts`` and ``children``.
            queues_options: per queue name, ``{"default_job_options": {...}}``: options of
                this flow's jobs in that queue where their own say nothing (BullMQ's
                ``queuesOptions``).

        Raises:
            InvalidOptionError: a node was refused (the message names its path, e.g.
                ``root.children[1]``); nothing was written.
            ParentNotFoundError: the root names a ``parent`` that does not exist; nothing was
                written.
            FlowAddError: a flow written in chunks stopped part-way; its parents written so
                far were released to run with the children they got.
        """
        defaults = check_queues_options(queues_options)
        return (await self._traced([flow_nodes(tree)], defaults=defaults))[0]

    async def add_bulk(
        self,
        trees: Iterable[FlowJob | dict[str, Any]],
        *,
        queues_options: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> list[JobNode[AsyncJob]]:
        """Add several flows in one transaction: all of them, or (on any error) none. Flows
        of more than ``FLOW_CHUNK_JOBS`` jobs in all are written in chunks, as by :meth:`add`
        (``queues_options`` too).

        Raises:
            InvalidOptionError: naming the flow's index and the node's path; nothing was
                written.
            ParentNotFoundError: a root names a ``parent`` that does not exist.
            FlowAddError: as for :meth:`add`.
        """
        defaults = check_queues_options(queues_options)
        roots = []
        for index, tree in enumerate(trees):
            try:
                roots.append(flow_nodes(tree))
            except InvalidOptionError as exc:
                raise InvalidOptionError(f"flow {index}: {exc}") from None
        return await self._traced(roots, numbered=True, defaults=defaults)

    async def _traced(
        self, roots: list[FlowNode], numbered: bool = False, defaults: QueueDefaults = None
    ) -> list[JobNode[AsyncJob]]:
        if self._telemetry is None or not roots:
            return await self._add(roots, numbered, None, defaults)
        names = [root.node.name for root in roots]
        queue = roots[0].node.queue_name
        with self._telemetry.adding_flows(queue, names, bulk=numbered) as spans:
            return await self._add(roots, numbered, spans, defaults)

    async def _add(
        self,
        roots: list[FlowNode],
        numbered: bool = False,
        spans: _telemetry.FlowSpans | None = None,
        defaults: QueueDefaults = None,
    ) -> list[JobNode[AsyncJob]]:
        planned: list[Planned] = []
        for index, root in enumerate(roots):
            try:
                tree = self._plan(root, spans, defaults)
            except InvalidOptionError as exc:
                if numbered:
                    raise InvalidOptionError(f"flow {index}: {exc}") from None
                raise
            if numbered:
                for node, _, _ in tree:
                    node.path = f"flow {index}: {node.path}"
            planned.extend(tree)
        if not planned:
            return []
        at = {id(node): i for i, (node, _, _) in enumerate(planned)}
        parents = [-1 if node.parent is None else at[id(node.parent)] for node, _, _ in planned]
        sizes = [len(args[3]) + len(args[4]) + 100 for _, _, args in planned]
        # Read here, not bound at import: tests make them small to write small flows in chunks.
        chunks = _flow_chunks.cut(
            parents,
            sizes,
            max_jobs=_flow_chunks.FLOW_CHUNK_JOBS,
            max_bytes=_flow_chunks.FLOW_CHUNK_BYTES,
        )
        client = await self.client()
        if len(chunks) == 1:
            replies = await self._write_at_once(client, planned, chunks[0])
        else:
            replies = await self._write_in_chunks(client, planned, chunks)
        await stamp_meta(client, [q for _, q, _ in planned])
        return await self._built(roots, planned, replies)

    def _plan(
        self,
        root: FlowNode,
        spans: _telemetry.FlowSpans | None = None,
        defaults: QueueDefaults = None,
    ) -> list[Planned]:
        """The add_job.lua ARGV of every node of a tree, parents first; raises before I/O.
        With ``spans``, each node gets a span (its parent's child) whose context it carries."""
        ids: dict[int, tuple[str, str]] = {}  # node -> (job id, qualified queue name)
        planned = []
        for flow_node in breadth_first(root):
            node = flow_node.node
            queue = self._queue(node.queue_name)
            given: dict[str, Any] = {**(defaults or {}).get(node.queue_name, {}), **node.options}
            custom = given.get("job_id")
            job_id = custom if isinstance(custom, str) and custom else str(uuid.uuid4())
            if flow_node.parent is not None:
                parent_id, parent_queue = ids[id(flow_node.parent)]
                given["parent"] = {"id": parent_id, "queue": parent_queue}
            data = {} if node.data is None else node.data
            tm = None
            if spans is not None:
                above = None if flow_node.parent is None else id(flow_node.parent)
                tm = spans.node(id(flow_node), above, queue.name, node.name, job_id)
            try:
                args = queue._prepare(
                    node.name,
                    data,
                    given,
                    job_id=job_id,
                    wait_children=bool(flow_node.children),
                    tm=tm,
                )
            except InvalidOptionError as exc:
                raise InvalidOptionError(
                    f"flow node {flow_node.path} ({node.name!r}): {exc}"
                ) from None
            ids[id(flow_node)] = (args[1], queue.keys.base)
            planned.append((flow_node, queue, args))
        check_ids([(node, job_key_of(args), args[9]) for node, _, args in planned])
        return planned

    async def _write_at_once(
        self, client: Redis, planned: list[Planned], chunk: Chunk
    ) -> list[Any]:
        """One transaction: every add, then the release of parents left with nothing to wait
        for. Not resent: the adds carry no numbers (as before flows had chunks)."""
        calls: list[Call] = [(_scripts.ADD_JOB, q._script_keys, args) for _, q, args in planned]
        calls.append(self._release_call(planned, "", "", chunk))
        replies, missing = await run_atomically(
            client, calls, must_exist=external_parents(args for _, _, args in planned)
        )
        if missing is not None:
            raise missing_parent(missing)
        return replies[:-1]

    async def _write_in_chunks(
        self, client: Redis, planned: list[Planned], chunks: list[Chunk]
    ) -> list[Any]:
        flow_id = uuid.uuid4().hex
        outside = set(external_parents(args for _, _, args in planned))
        started = now_ms()
        root_key = job_key_of(planned[0][2])
        trees = sum(1 for node, _, _ in planned if node.parent is None)
        replies: list[Any] = []
        for k, chunk in enumerate(chunks):
            record = _flow_chunks.record(root_key, trees, len(planned), chunk.start, started)
            # The first chunk checks every parent named from outside the flow (nothing is
            # written when one is missing); a later one checks those its own nodes name.
            nodes = planned[chunk.start : chunk.end]
            must_exist = (
                sorted(outside) if k == 0 else [a[9] for _, _, a in nodes if a[9] in outside]
            )
            try:
                replies += await self._send_chunk(
                    client, planned, chunk, flow_id, record, must_exist
                )
            except Exception as exc:
                if k == 0 and isinstance(exc, ParentNotFoundError):
                    raise  # nothing was written
                released = await self._release_after_failure(planned[0][1], flow_id)
                paths = [node.path for node, _, _ in planned]
                raise flow_add_error(flow_id, paths, replies, chunk, released, exc) from exc
        return replies

    async def _send_chunk(
        self,
        client: Redis,
        planned: list[Planned],
        chunk: Chunk,
        flow_id: str,
        record: str,
        must_exist: Sequence[str],
    ) -> list[Any]:
        """Write one chunk in one transaction, resending it after a transient error: every
        add is numbered (include/resend.lua), so a resend answers with the jobs the first send
        created instead of adding them twice, and the release step is harmless to repeat."""
        nodes = planned[chunk.start : chunk.end]
        numbers: list[int | str] = [
            q._adds.number() if q._adds.producer else "" for _, q, _ in nodes
        ]
        release = self._release_call(planned, flow_id, record, chunk)
        retries = 0
        while True:
            forget = [q._adds.to_forget() for _, q, _ in nodes]
            calls: list[Call] = [
                (_scripts.ADD_JOB, q._script_keys, [*args, q._adds.producer, number, *done])
                for (_, q, args), number, done in zip(nodes, numbers, forget, strict=True)
            ]
            calls.append(release)
            try:
                replies, missing = await run_atomically(client, calls, must_exist=must_exist)
            except Exception as exc:
                for (_, q, _), done in zip(nodes, forget, strict=True):
                    q._adds.not_forgotten(done)
                resendable = all(number != "" for number in numbers)
                if not resendable or not may_resend(exc, retries, self.add_retries):
                    raise
                retries += 1
                self._outage.failed("flow chunk", exc)
                await sleep(add_retry_delay(retries))
                continue
            if retries:
                self._outage.succeeded()
            if missing is not None:
                for (_, q, _), done in zip(nodes, forget, strict=True):
                    q._adds.not_forgotten(done)
                raise missing_parent(missing)
            replies = replies[:-1]
            for (_, q, _), number, done, reply in zip(nodes, numbers, forget, replies, strict=True):
                if isinstance(reply, int):  # refused (-7): it wrote and forgot nothing
                    q._adds.not_forgotten(done)
                elif int(reply[1]) == 1 and isinstance(number, int):
                    q._adds.heard(number, resent=retries > 0)
            return replies

    def _release_call(
        self, planned: list[Planned], flow_id: str, record: str, chunk: Chunk
    ) -> Call:
        mark = [job_key_of(planned[i][2]) for i in chunk.mark]
        done = [job_key_of(planned[i][2]) for i in chunk.done]
        return release_parents(planned[0][1], flow_id, record, mark, done)

    async def _release_after_failure(self, queue: AsyncQueue, flow_id: str) -> bool:
        try:
            await release_flow(await self.client(), queue, flow_id)
        except Exception as exc:  # the server is away: the record tells an operator
            logger.warning("flow %s: its parents could not be released: %s", flow_id, exc)
            return False
        return True

    async def _built(
        self, roots: list[FlowNode], planned: list[Planned], replies: list[Any]
    ) -> list[JobNode[AsyncJob]]:
        """The tree of jobs the adds answered with. A node that was not created is the job
        that made it a no-op; the nodes below a node whose job does not exist (deduplicated or
        an idempotency key's hit) were not written (their parent was missing) and are left out.
        """
        built: dict[int, JobNode[AsyncJob]] = {}
        for (node, queue, args), reply in zip(planned, replies, strict=True):
            if isinstance(reply, int):
                if node.parent is None:
                    raise missing_parent(args[9])
                continue
            if int(reply[1]) == 1:
                job = queue._added(args, reply)
            else:
                job = await queue._result(args, reply)
            built[id(node)] = JobNode(job)
            above = None if node.parent is None else built.get(id(node.parent))
            if above is not None:  # (a node below a skipped one joined an existing job)
                above.children.append(built[id(node)])
        return [built[id(root)] for root in roots]

    # -- flows whose producer stopped part-way -------------------------------------------------

    async def get_unfinished_flows(self, queue_name: str) -> list[UnfinishedFlow]:
        """The flows of ``queue_name`` (the queue of their root) being written in chunks, or
        whose producer stopped part-way, oldest first.

        A flow is listed while some of its parents are marked (waiting for chunks still to
        come). One whose ``updated_ms`` is minutes old has lost its producer: release its
        parents with :meth:`release_unfinished_flow`, or remove its root job to drop what
        was written of it.
        """
        return await unfinished_flows(await self.client(), self._queue(queue_name))

    async def release_unfinished_flow(self, queue_name: str, flow_id: str) -> int:
        """Let the parents of an unfinished flow run with the children they got.

        Their marks go, and each parent with no pending child is queued at once (as after its
        last child's completion); the flow leaves :meth:`get_unfinished_flows`. Only for a
        flow whose producer is gone: one still writing would add children to parents that no
        longer wait for them.

        Args:
            queue_name: the queue of the flow's root.
            flow_id: as listed by :meth:`get_unfinished_flows` (or ``FlowAddError.flow_id``).

        Returns:
            How many parents were still marked.
        """
        options.check_name("flow_id", flow_id, colon=False)
        return await release_flow(await self.client(), self._queue(queue_name), flow_id)

    # -- reading -------------------------------------------------------------------------------

    async def get_flow(
        self,
        job_id: str,
        queue_name: str,
        *,
        depth: int = 10,
        max_children: int = MAX_CHILDREN,
    ) -> JobNode[AsyncJob] | None:
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
        await self.client()
        job = await self._queue(queue_name).get_job(job_id)
        if job is None:
            return None
        return await read_flow(self._queue, job, depth, max_children)

    # -- closing -------------------------------------------------------------------------------

    async def close(self) -> None:
        """Close the client, unless it was given by the caller."""
        for queue in self._queues.values():
            # Its own connection goes (the client is the producer's); the queue stays usable
            # for the jobs this producer returned.
            await queue._release()
        await self._clients.close()
        self._queues.clear()

    async def __aenter__(self) -> AsyncFlowProducer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
