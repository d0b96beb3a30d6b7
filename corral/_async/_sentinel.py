"""Clients whose master is found through Redis Sentinel, and the copies a worker makes of them.

redis-py's Sentinel client asks the sentinels for the master's address whenever one of its
connections (re)connects, and a connection that meets ``READONLY`` (a master demoted to a
replica) drops itself with a ``ConnectionError``; so after a failover the next call of a
loop that retries transient errors goes to the new master.

That is not enough for a requested failover (``SENTINEL FAILOVER``): the old master is not
down, it keeps taking writes until the sentinels demote it, which they do when they next poll
it (up to 10 s later); what is written there meanwhile is lost with its demotion (a job
finished twice, an add gone). So corral's pool also asks the sentinels where the master is
at most once per :data:`MASTER_CHECK_S` when it hands out a connection, and drops the
connections to a master that is no longer theirs. It also waits for a free connection (as
corral's pools for plain URLs do) and closes its sentinel connections with it. Copies of a
client on pools of their own (a worker's blocking reads, the blocking API's twin) follow the
master in the same way.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

import redis.asyncio.sentinel
from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.sentinel import Sentinel, SentinelConnectionPool
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from corral.connection import SentinelSettings

#: How often (at most) a pool asks the sentinels where the master is, besides at each connect:
#: bounds how long it writes to a master the sentinels have replaced.
MASTER_CHECK_S = 1.0
#: redis-py's sentinel manager, whose calls it leaves untyped.
_Sentinel: Any = Sentinel


class SentinelBlockingPool(SentinelConnectionPool, BlockingConnectionPool):
    """The master's connections: at most ``max_connections``, callers wait for a free one.

    The pool owns its sentinel manager: closing the pool closes the manager's connections to
    the sentinels too (they would otherwise stay open until collected).
    """

    _next_check = 0.0

    async def get_connection(self, *args: Any, **kwargs: Any) -> Any:
        now = time.monotonic()
        if self.is_master and now >= self._next_check:
            self._next_check = now + MASTER_CHECK_S
            # Sentinels away: the master may be fine, the call will tell.
            with contextlib.suppress(RedisConnectionError, RedisTimeoutError):
                # A new address drops the idle connections; the ones in use, on release.
                await self.get_master_address()  # type: ignore[no-untyped-call, unused-ignore]
        return await super().get_connection(*args, **kwargs)  # type: ignore[no-untyped-call]

    async def release(self, connection: Any) -> None:
        master = self.master_address
        if self.is_master and master is not None and (connection.host, connection.port) != master:
            await connection.disconnect()  # to a master that is no longer the sentinels'
        await super().release(connection)  # type: ignore[no-untyped-call, unused-ignore]

    async def disconnect(self, inuse_connections: bool = True) -> None:
        await super().disconnect(inuse_connections)
        # ``inuse_connections=False`` is the sweep of idle connections when the master moved:
        # the sentinels are still wanted then. A client on them reconnects if used again.
        if inuse_connections:
            await self.sentinel_manager.aclose()


def open_sentinel_client(settings: SentinelSettings, *, max_connections: int) -> Redis:
    """A client of ``settings``' master, found through its sentinels (decoded replies)."""
    timeouts: dict[str, Any] = {}
    if settings.socket_timeout is not None:
        timeouts["socket_timeout"] = settings.socket_timeout
    if settings.socket_connect_timeout is not None:
        timeouts["socket_connect_timeout"] = settings.socket_connect_timeout
    sentinel_kwargs: dict[str, Any] = dict(timeouts)
    if settings.sentinel_password is not None:
        sentinel_kwargs["password"] = settings.sentinel_password
    if settings.sentinel_username is not None:
        sentinel_kwargs["username"] = settings.sentinel_username
    manager = _Sentinel(
        list(settings.sentinels),
        min_other_sentinels=settings.min_other_sentinels,
        sentinel_kwargs=sentinel_kwargs,
    )
    client: Redis = manager.master_for(
        settings.service_name,
        connection_pool_class=SentinelBlockingPool,
        decode_responses=True,
        max_connections=max_connections,
        timeout=None,
        db=settings.db,
        username=settings.username,
        password=settings.password,
        health_check_interval=settings.health_check_interval,
        **timeouts,
    )
    return client


def is_sentinel_pool(pool: object) -> bool:
    """Whether ``pool`` is a Sentinel master pool of either API."""
    return hasattr(pool, "sentinel_manager") and hasattr(pool, "service_name")


def copy_manager(manager: Any) -> Any:
    """A sentinel manager of this API with the settings of ``manager`` (of either API)."""
    addresses = [
        (c.connection_pool.connection_kwargs["host"], c.connection_pool.connection_kwargs["port"])
        for c in manager.sentinels
    ]
    return _Sentinel(
        addresses,
        min_other_sentinels=manager.min_other_sentinels,
        sentinel_kwargs=dict(manager.sentinel_kwargs),
        force_master_ip=getattr(manager, "_force_master_ip", None),
    )


def twin(pool: Any, **settings: Any) -> Redis:
    """A client of the master that ``pool`` follows (a Sentinel pool of either API), on a
    pool and sentinel connections of its own, with the connection ``settings`` given.

    A pool made for another API cannot be copied by its class: the connection class is
    taken by name from this API's Sentinel module (a custom one is left to the default).
    """
    settings = {
        k: v for k, v in settings.items() if k not in ("connection_pool", "connection_class")
    }
    connection_class = getattr(redis.asyncio.sentinel, pool.connection_class.__name__, None)
    if connection_class is not None:
        settings["connection_class"] = connection_class
    client: Redis = copy_manager(pool.sentinel_manager).master_for(
        pool.service_name,
        connection_pool_class=SentinelBlockingPool,
        max_connections=pool.max_connections,
        timeout=getattr(pool, "timeout", None),
        check_connection=pool.check_connection,
        **settings,
    )
    return client
