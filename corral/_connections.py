"""A worker's connections: its queue's client, opened and checked, and the two that block.

The queue's client runs every script; it is opened off the loop and checked (version,
``maxmemory-policy``, the ACL), and a server that is away is waited for, since a worker often
starts before its Redis. Two more connections are made from it once the run starts: one for
``BZPOPMIN`` on the marker, which waits longer than a script may take and carries the BullMQ
client name that ``get_workers`` lists, and one for the cancel listener (a subscribed
connection can do nothing else). :meth:`WorkerConnections.release` closes them all (not a
client the caller gave).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib

from redis.asyncio import Redis

from corral import _twins
from corral._async._redis import check_server, open_client_off_loop
from corral._async.queue import AsyncQueue
from corral._keys import QueueKeys
from corral._supervisor import Outage
from corral.errors import ConfigurationError, server_error_kind
from corral.worker_options import WorkerOptions

#: A worker's calls are short scripts: when the client sets no socket timeout, a reply this
#: late (at most; less with short locks) means a dead or half-open connection, which is then
#: dropped and the call retried, so a lost peer never hangs fetching or renewal for minutes.
DEFAULT_REPLY_TIMEOUT_S = 10.0


class WorkerConnections:
    """Opens and releases the connections of one worker.

    Args:
        o: the worker's options (connection, queue, prefix, name, limits of replies).
        outage: the worker's link state: a failed connect is one of its episodes.
        wake: set when the worker closes; it cuts short a wait for the server.
    """

    def __init__(self, o: WorkerOptions, outage: Outage, wake: asyncio.Event) -> None:
        self._o = o
        self._outage = outage
        self._wake = wake
        #: The marker's connection (``BZPOPMIN``), while a run holds it.
        self.blocking: Redis | None = None
        #: The cancel listener's subscribed connection, while a run holds it.
        self.listen: Redis | None = None

    async def connect(self, max_connections: int) -> AsyncQueue | None:
        """The queue on a new client, checked; ``None`` when the server is away (after a
        backoff, or less if the worker closes meanwhile).

        Raises:
            ConfigurationError: the server refused the worker's settings.
        """
        o = self._o
        client = await open_client_off_loop(
            o.connection,
            max_connections=max_connections,
            slot_key=QueueKeys(o.queue_name, o.prefix).base,
        )
        owned = client is not o.connection
        try:
            await check_server(client, strict=o.strict, owned=owned)
        except Exception as exc:
            kind = server_error_kind(exc)
            if kind == "configuration":
                raise ConfigurationError(f"worker {o.queue_name}: {exc}") from None
            if kind != "transient":
                raise
            await self._wait_for_server(exc)
            return None
        self._outage.succeeded()
        queue = AsyncQueue(
            o.queue_name,
            connection=client,
            prefix=o.prefix,
            max_progress_bytes=o.max_progress_bytes,
            max_log_line_bytes=o.max_log_line_bytes,
        )
        queue._reply_timeout = self._reply_timeout(client)
        return queue

    async def _wait_for_server(self, exc: Exception) -> None:
        delay = self._outage.failed("connect", exc)
        self._wake.clear()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._wake.wait(), delay)

    def _reply_timeout(self, client: Redis) -> float:
        timeout = client.connection_pool.connection_kwargs.get("socket_timeout")
        # Renewals go out every lock / 2, with half the lock left: one stuck on a dead
        # connection times out after a quarter, which leaves a quarter to send it again.
        return float(timeout or min(DEFAULT_REPLY_TIMEOUT_S, max(1.0, self._o.lock_ms / 4000)))

    @property
    def client_name(self) -> str:
        """The marker connection's name: BullMQ's, so that ``get_workers`` lists it."""
        o = self._o
        encoded = base64.b64encode(o.queue_name.encode()).decode()
        base = f"{o.prefix}:{encoded}"
        return f"{base}:w:{o.name}" if o.name else base

    def open_blocking(self, queue: AsyncQueue, client: Redis) -> tuple[Redis, Redis]:
        """The marker's connection and the cancel listener's, made from ``client``."""
        # They read for BZPOPMIN's wait plus the reply timeout (a half-open one is given up
        # as on the wire).
        read = self._o.drain_delay + (queue._reply_timeout or DEFAULT_REPLY_TIMEOUT_S)
        self.blocking = _twins.blocking_twin(
            client, read_timeout=read, client_name=self.client_name
        )
        self.listen = _twins.blocking_twin(client, read_timeout=read, client_name="")
        return self.blocking, self.listen

    async def release(self, queue: AsyncQueue | None) -> None:
        """Close every connection, ``queue``'s client included (unless the caller gave it)."""
        if self.listen is not None:
            await _twins.close_async(self.listen)
            self.listen = None
        if self.blocking is not None:
            await _twins.close_async(self.blocking)
            self.blocking = None
        if queue is not None:
            queue._close_caller()
            client = queue._client
            if client is not None and client is not self._o.connection:
                await client.aclose()
