"""What every queue-facing class shares: names, keys, the client, and running scripts."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping
from typing import Any

from redis.asyncio import Redis

from corral import options
from corral._async._calls import ScriptCaller
from corral._async._redis import Connectable, LazyClient, running_loop
from corral._async.job import AsyncJob
from corral._keys import DEFAULT_PREFIX, QueueKeys
from corral._scripts import Script
from corral._version import __version__
from corral.bounds import names_a_job

#: ``meta.version`` and ``meta.x-version``, written at a queue's first add (Node's Queue writes
#: its own when it starts): the BullMQ release whose data layout corral writes, which is what
#: ``version`` tells BullMQ ("the version that produced this queue's data"), and corral's own
#: version in a field BullMQ never writes.
META_VERSION = ("bullmq:6.7.0", f"corral:{__version__}")


class AsyncQueueBase:
    """A queue's name, keys and connection; the public API is :class:`AsyncQueue`.

    Args:
        name: the queue's name (no ``:``).
        connection: a URL, a redis-py client made with ``decode_responses=True``, or
            ``None`` for ``CORRAL_REDIS_URL`` / ``REDIS_URL`` / the embedded server.
        prefix: key prefix, ``bull`` by default (what Node BullMQ and bull-board read).
        strict: refuse, rather than warn about, a server whose maxmemory-policy evicts keys.
    """

    def __init__(
        self,
        name: str,
        *,
        connection: Connectable = None,
        prefix: str = DEFAULT_PREFIX,
        strict: bool = False,
    ) -> None:
        self.name = options.check_name("queue name", name, colon=False)
        self.prefix = options.check_prefix(prefix)
        self.keys = QueueKeys(name, prefix)
        self._script_keys = self.keys.script_keys()
        self._job_prefix = self.keys.base + ":"
        self._clients = LazyClient(connection, strict=strict, slot_key=self.keys.base)
        self._caller: ScriptCaller | None = None
        self._caller_client: Redis | None = None
        self._caller_loop: object = None
        #: Reply timeout of the script calls when the client sets none (a worker sets it).
        self._reply_timeout: float | None = None
        #: The client that wrote ``meta.version`` for this queue object (see stamp_meta).
        self._stamped: Redis | None = None
        #: A worker's ``removeOnComplete``/``removeOnFail``, for the jobs of its queue whose
        #: opts give none (BullMQ's names; set by the worker on its own queue object).
        self._retention_defaults: Mapping[str, Any] = {}

    @property
    def _connection(self) -> Connectable:
        return self._clients.connection

    @property
    def _client(self) -> Redis | None:
        return self._clients.current

    async def client(self) -> Redis:
        """The redis-py client, opened and checked on first use (and again when used from a
        new event loop, unless the client was given)."""
        return await self._clients.get()

    def _abandon_caller(self) -> None:
        if self._caller is not None:
            self._caller.abandon()
            self._caller = self._caller_client = None

    async def _run(
        self, script: Script, args: list[Any], wait: tuple[int, int] | None = None
    ) -> Any:
        """Run one of the queue's scripts with the queue's keys; with ``wait`` (replicas,
        timeout ms) then ``WAIT`` for replicas, and answer ``(reply, replicas acknowledged)``."""
        caller = self._caller
        if (
            caller is None
            or self._caller_loop is not running_loop()
            or self._caller_client is not self._clients.current
        ):
            caller = await self._new_caller()
        if wait is not None:
            return await caller.call_then_wait(script, args, *wait)
        return await caller(script, args)

    async def _new_caller(self) -> ScriptCaller:
        # First use, a new client (closed and opened again, a flow producer's), or a new
        # event loop: the old caller's connection is on the loop that ended, if any.
        client = await self.client()
        self._abandon_caller()
        self._caller = ScriptCaller(client, self._script_keys, self._reply_timeout)
        self._caller_client = client
        self._caller_loop = running_loop()
        return self._caller

    async def _stamp_meta(self) -> None:
        """Write ``meta.version`` after this queue object's first add (see stamp_meta): after,
        so that an add refused (a missing parent...) still writes nothing."""
        if self._stamped is None or self._stamped is not self._clients.current:
            await stamp_meta(await self.client(), [self])

    def _bind(self, job_id: str, fields: dict[str, str], token: str | None = None) -> AsyncJob:
        job = AsyncJob.from_hash(self.name, job_id, fields, token=token)
        job.queue = self
        return job

    async def get_job(self, job_id: str) -> AsyncJob | None:
        """The job with this id, or ``None`` when there is none (or ``job_id`` names one of
        the queue's own keys, which no job can have)."""
        if not names_a_job(job_id):
            return None
        client = await self.client()
        fields: dict[str, str] = await client.hgetall(self.keys.job(job_id))  # type: ignore[assignment]
        if not fields:
            return None
        return self._bind(job_id, fields)

    def _close_caller(self) -> None:
        if self._caller is not None:
            self._caller.close()
            self._caller = self._caller_client = None

    async def close(self) -> None:
        """Close the client, unless it was given by the caller; a call after this raises
        :class:`~corral.errors.ClosedError`."""
        await self._clients.close()
        self._close_caller()  # a caller of an ended loop is dropped (ScriptCaller.close)

    async def _release(self) -> None:
        """Close the connections but stay usable: a flow producer's own queues, which the
        jobs it returned keep using after it closes (they connect again when used)."""
        await self.close()
        self._clients.closed = False


async def stamp_meta(client: Redis, queues: Iterable[AsyncQueueBase]) -> None:
    """Write :data:`META_VERSION` into the ``meta`` of each queue object that has not written
    it on this client, in one round trip: once per object, as a Node Queue writes it once
    when it starts. Best effort: the field only informs, so a failure is left to the add
    that follows (it meets the same server) and the next add tries again."""
    todo = {id(q): q for q in queues if q._stamped is not client}
    if not todo:
        return
    with contextlib.suppress(Exception):
        async with client.pipeline(transaction=False) as pipe:
            for queue in todo.values():
                pipe.hset(
                    queue.keys.meta,
                    mapping={"version": META_VERSION[0], "x-version": META_VERSION[1]},
                )
            await pipe.execute()
        for queue in todo.values():
            queue._stamped = client
