"""Extra clients made from a worker's client: one that blocks, and a blocking-API twin.

A worker needs a connection for ``BZPOPMIN`` (it waits longer than redis-py's default read
timeout allows) and, for plain-function processors, a synchronous client for the ``Job``
they receive. Both copy the settings of the client the worker was given or opened, on pools
of their own, which :func:`close_async` / :func:`close_sync` shut. A client of a Sentinel
master gets twins that ask the same sentinels for the master (:mod:`corral._async._sentinel`),
so they follow a failover as it does; a client of a cluster's slot gets twins of the same slot
(:mod:`corral._async._cluster`).
"""

from __future__ import annotations

from typing import Any

import redis
import redis.asyncio

from corral._async import _cluster as async_cluster
from corral._async import _sentinel as async_sentinel
from corral._sync import _cluster as sync_cluster
from corral._sync import _sentinel as sync_sentinel


def pool_settings(client: redis.asyncio.Redis, **overrides: Any) -> dict[str, Any]:
    """``client``'s connection settings, without redis-py's per-pool internals."""
    kwargs = {
        k: v
        for k, v in client.connection_pool.connection_kwargs.items()
        if not k.startswith(("maint_notifications", "orig_", "himport"))
        and k != "connection_pool"  # a Sentinel connection's link back to its own pool
    }
    kwargs.update(overrides)
    return kwargs


def blocking_twin(
    client: redis.asyncio.Redis, *, read_timeout: float, client_name: str
) -> redis.asyncio.Redis:
    """An asyncio client for blocking reads of up to ``read_timeout`` seconds, named
    ``client_name`` on the server (what ``get_workers`` lists)."""
    pool = client.connection_pool
    if async_sentinel.is_sentinel_pool(pool):
        settings = pool_settings(client, socket_timeout=read_timeout, client_name=client_name)
        return async_sentinel.twin(pool, **settings)
    if async_cluster.is_cluster_pool(pool):
        settings = pool_settings(client, socket_timeout=read_timeout, client_name=client_name)
        return async_cluster.twin(pool, **settings)
    return redis.asyncio.Redis(
        connection_pool=type(pool)(
            connection_class=pool.connection_class,
            **pool_settings(client, socket_timeout=read_timeout, client_name=client_name),
        )
    )


def sync_twin(client: redis.asyncio.Redis) -> redis.Redis:
    """A blocking client with ``client``'s settings (redis-py names the matching pool and
    connection classes alike in both APIs)."""
    pool = client.connection_pool
    if async_sentinel.is_sentinel_pool(pool):
        return sync_sentinel.twin(pool, **pool_settings(client))
    if async_cluster.is_cluster_pool(pool):
        return sync_cluster.twin(pool, **pool_settings(client))
    pool_class = getattr(redis.connection, type(pool).__name__)
    connection_class = getattr(redis.connection, pool.connection_class.__name__)
    return redis.Redis(
        connection_pool=pool_class(connection_class=connection_class, **pool_settings(client))
    )


async def close_async(client: redis.asyncio.Redis) -> None:
    # A client built on a pool it was given leaves that pool open when closed.
    await client.aclose()
    await client.connection_pool.disconnect()


def close_sync(client: redis.Redis) -> None:
    client.close()
    client.connection_pool.disconnect()
