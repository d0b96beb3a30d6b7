"""The dashboard's view of the server: one shared client, the queues it shows, their figures.

A :class:`QueueDirectory` opens one client for the whole app, lazily (the first request, on
the server's event loop) and closes it at shutdown; it keeps one :class:`AsyncQueue` per name.
Queues are those given (``queues=``) or found with ``SCAN`` like ``corral stats`` does
(cached a few seconds: a SCAN walks the whole keyspace, which is long on a server holding a
million jobs). The figures of the overview are those of ``corral stats``, read with the same
pure functions (:mod:`corral._rates`, :func:`~corral._async.queue_getters.workers_in`).

On a ``redis+cluster://`` URL the shared client is a redis-py ``RedisCluster`` (SCAN then
walks every master); each queue opens its own client of its slot's master from it, and the
workers are counted with one ``CLIENT LIST`` per queue instead of one for the server.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from redis.asyncio import ConnectionPool, Redis, RedisCluster
from redis.asyncio.cluster import ClusterNode

from corral import _rates, clock, options
from corral._async._cluster import open_cluster_client
from corral._async._redis import open_client, open_client_off_loop
from corral._async.queue import AsyncQueue
from corral._async.queue_admin import glob_escape
from corral._async.queue_getters import workers_in
from corral._keys import slot_of
from corral._rates import RATE_KINDS
from corral.connection import (
    ClusterSettings,
    cluster_client_kwargs,
    configured_url,
    is_cluster_url,
    masked_url,
    parse_cluster_url,
    resolve_url,
)
from corral.job import SHOWN_STATES

# The states shown, and their order (shared with ``corral stats``).
STATES = SHOWN_STATES

#: Seconds a SCAN's list of queues is reused before the next one.
DISCOVERY_TTL = 10.0
#: Keys one of which every queue that has ever held a job has.
_MARKERS = ("meta", "id", "wait", "active", "delayed", "prioritized", "completed", "failed",
            "waiting-children", "repeat", "events")  # fmt: skip

Client = Redis | RedisCluster


def _async_cluster(settings: ClusterSettings) -> RedisCluster:
    """A ``RedisCluster`` (asyncio) of ``settings``' nodes, as ``corral stats`` opens one."""
    nodes = [ClusterNode(host, port) for host, port in settings.nodes]
    return RedisCluster(startup_nodes=nodes, **cluster_client_kwargs(settings))


class QueueDirectory:
    """The client and the queues of one dashboard.

    Args:
        connection: a URL (``redis://``, ``rediss://``, ``redis+sentinel://``,
            ``redis+cluster://``), a redis-py asyncio client made with
            ``decode_responses=True``, or ``None`` for ``CORRAL_REDIS_URL`` / ``REDIS_URL``
            / the embedded server.
        prefix: the key prefix of the queues.
        names: the only queues shown; ``None`` for every queue of the prefix.
    """

    def __init__(
        self, connection: str | Client | None, prefix: str, names: Sequence[str] | None
    ) -> None:
        self.prefix = options.check_prefix(prefix)
        self.fixed = (
            None if names is None else [options.check_name("queue name", n, colon=False)
                                        for n in names]
        )  # fmt: skip
        self._connection = connection
        self._given = not isinstance(connection, str) and connection is not None
        self._client: Client | None = None
        self._url: str | None = None
        self._opening = asyncio.Lock()
        self._queues: dict[str, AsyncQueue] = {}
        self._discovered: tuple[float, list[str]] | None = None

    @property
    def where(self) -> str:
        """The server, for messages: the masked URL, or what was given."""
        if isinstance(self._connection, str):
            return masked_url(self._connection)
        found = configured_url(None) if self._connection is None else None
        return masked_url(found) if found else "the given client"

    async def client(self) -> Client:
        """The shared client, opened on first use."""
        if self._client is not None:
            return self._client
        async with self._opening:
            if self._client is None:
                conn = self._connection
                if isinstance(conn, (Redis, RedisCluster)):
                    self._client = conn
                else:
                    url = await asyncio.to_thread(resolve_url, conn)
                    self._url = url
                    if is_cluster_url(url):
                        self._client = _async_cluster(parse_cluster_url(url))
                    else:
                        self._client = await open_client_off_loop(url)
        return self._client

    @property
    def is_cluster(self) -> bool:
        return isinstance(self._client, RedisCluster)

    def blocking_client_factory(self) -> Callable[[], Awaitable[Redis]] | None:
        """A maker of new clients for blocking reads (the live hub's), each its own
        connection: of the server, or on a cluster of the master of the prefix's slot (when
        the prefix has a hash tag, so every queue is there); ``None`` when there is no one
        node to read from (a cluster without a hash tag in the prefix, a given cluster)."""
        client = self._client
        if self._url is not None and is_cluster_url(self._url):
            slot = slot_of(self.prefix)
            if slot is None:
                return None
            settings = parse_cluster_url(self._url)

            async def of_slot() -> Redis:
                return open_cluster_client(settings, slot=slot, max_connections=4)

            return of_slot
        if self._url is not None:
            url = self._url

            async def of_url() -> Redis:
                return open_client(url, max_connections=4)

            return of_url
        if isinstance(client, Redis):
            pool = client.connection_pool

            async def like_given() -> Redis:
                return Redis(
                    connection_pool=ConnectionPool(
                        connection_class=pool.connection_class, **pool.connection_kwargs
                    )
                )

            return like_given
        return None

    async def names(self) -> list[str]:
        """The queues shown: those given, else those of the prefix (SCAN, cached)."""
        if self.fixed is not None:
            return list(self.fixed)
        now = time.monotonic()
        if self._discovered is not None and now - self._discovered[0] < DISCOVERY_TTL:
            return list(self._discovered[1])
        found = await self._discover()
        self._discovered = (time.monotonic(), found)
        return list(found)

    async def _discover(self) -> list[str]:
        """Every ``<prefix>:<name>:meta`` or ``:id`` key's name (``discover_queues`` of
        :mod:`corral.cli_inspect`, on the asyncio client)."""
        client = await self.client()
        start = f"{self.prefix}:"
        names: set[str] = set()
        for suffix in (":meta", ":id"):
            pattern = f"{glob_escape(self.prefix)}:*{suffix}"
            async for key in client.scan_iter(match=pattern, count=1000):
                name = key[len(start) : -len(suffix)]
                if name and ":" not in name:  # not a job's own key (bull:q:<id>:...)
                    names.add(name)
        return sorted(names)

    async def get(self, name: str) -> AsyncQueue | None:
        """The queue ``name`` when the dashboard shows it and it has keys, else ``None``."""
        if self.fixed is not None and name not in self.fixed:
            return None
        if not options_ok(name):
            return None
        queue = self._queues.get(name)
        if queue is None:
            queue = AsyncQueue(name, connection=await self.client(), prefix=self.prefix)
        qclient = await queue.client()
        base = queue.keys.base
        markers = (f"{base}:{marker}" for marker in _MARKERS)
        if self.fixed is None and not await qclient.exists(*markers):
            return None
        self._queues.setdefault(name, queue)
        return self._queues[name]

    async def any_queue(self, name: str) -> AsyncQueue | None:
        """A queue of the prefix, shown or not (a flow child's), for reads; ``None`` for a
        name no queue can have."""
        if not options_ok(name):
            return None
        if name not in self._queues:
            client = await self.client()
            self._queues[name] = AsyncQueue(name, connection=client, prefix=self.prefix)
        return self._queues[name]

    async def close(self) -> None:
        for queue in self._queues.values():
            await queue.close()
        self._queues.clear()
        if self._client is not None and not self._given:
            await self._client.aclose()
        self._client = None


def options_ok(name: str) -> bool:
    """Whether ``name`` can be a queue's name (no ``:``, not empty, not too long)."""
    try:
        options.check_name("queue name", name, colon=False)
    except ValueError:
        return False
    return True


async def worker_counts(directory: QueueDirectory, queues: list[AsyncQueue]) -> dict[str, int]:
    """The workers of each queue: one ``CLIENT LIST`` for them all on one server."""
    client = await directory.client()
    if isinstance(client, RedisCluster):
        return {queue.name: len(await queue.get_workers()) for queue in queues}
    entries = await client.client_list()
    return {queue.name: len(workers_in(entries, queue.prefix, queue.name)) for queue in queues}


async def queue_figures(queue: AsyncQueue, workers: int) -> dict[str, Any]:
    """What the overview shows of a queue (``corral stats --json``'s entry), two round trips:
    the counts, then the pause flag, head of the wait list and rates in one pipeline."""
    counts = await queue.get_job_counts(*STATES)
    client = await queue.client()
    now_ms = clock.now_ms()
    async with client.pipeline(transaction=False) as pipe:
        pipe.hexists(queue.keys.meta, "paused")
        pipe.lindex(queue.keys.wait, -1)
        _rates.queue_rate_reads(pipe, queue.keys, now_ms)
        replies = await pipe.execute()
    paused, head = replies[0], replies[1]
    rates, _ = _rates.rates_from(replies[2:], now_ms)
    return {
        "name": queue.name,
        "paused": bool(paused),
        "counts": counts,
        "workers": workers,
        "oldest_waiting_age_s": await _oldest_waiting_age(queue, head, now_ms),
        "rates_per_min": rates,
    }


async def _oldest_waiting_age(queue: AsyncQueue, head: str | None, now_ms: int) -> float | None:
    """Seconds since the job at the head of the wait list became due (as ``corral stats``)."""
    if head is None:
        return None
    client = await queue.client()
    timestamp, delay = await client.hmget(queue.keys.job(str(head)), ["timestamp", "delay"])
    if not timestamp:
        return None
    return max(now_ms - int(timestamp) - int(delay or 0), 0) / 1000


async def metrics_series(queue: AsyncQueue, points: int) -> dict[str, list[int]]:
    """The last ``points`` per-minute data points of each kind, oldest first (empty when no
    worker records metrics)."""
    series: dict[str, list[int]] = {}
    for kind in RATE_KINDS:
        metrics = await queue.get_metrics(kind, 0, points - 1)
        series[kind] = list(reversed(metrics.data))
    return series
