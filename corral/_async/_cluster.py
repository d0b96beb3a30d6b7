"""Clients of one hash slot of a Redis Cluster, which follow the slot when it moves.

Every key of a BullMQ queue is in one hash slot when the prefix or the queue name carries a
hash tag (``{bull}``), so a queue needs one node of the cluster: the master of that slot. A
client here is an ordinary redis-py client whose pool connects to that master: every script,
transaction, blocking read and subscription of corral works on it unchanged, with no routing
of commands. The pool learns the cluster's map (``CLUSTER SLOTS``) from any node it knows, and
learns it again when the slot's master changes:

- a connection that cannot reach the master makes the next connect ask the map again (a
  killed master is replaced by its replica once the cluster has voted, within a couple of
  ``cluster-node-timeout``\\ s);
- a ``MOVED`` reply (the slot was resharded, or a failover made the old master a replica)
  names the new master: the pool goes there and the call fails as a :class:`SlotMovedError`,
  a ``ConnectionError`` that corral's script calls send again at once (a redirected command
  did not run) and redis-py's own retries handle for its commands; connections still open to
  the old master meet the same ``MOVED`` at their next call;
- ``ASK`` (the slot is being migrated and a key is already on the other node) becomes a
  ``TRYAGAIN``, transient like the server's own: the callers' retries send the call again
  until the migration is done (a script needs every key of its queue on one node, which
  ``ASKING`` on the target would not give while keys are on both).

Classic pub/sub is cluster-wide (a ``PUBLISH`` reaches subscribers on every node), so the
cancel channel works from any node; the pool's own node is the one used.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from typing import Any

from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.connection import Connection, SSLConnection
from redis.exceptions import AskError, MovedError, ResponseError, TryAgainError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from corral.connection import ClusterSettings
from corral.errors import ConfigurationError, tls_failure

#: redis-py's connection classes, whose constructors it leaves untyped in the blocking API.
_Connection: Any = Connection
_SSLConnection: Any = SSLConnection
#: Settings a pool's connections have that a probe of the cluster's map must not copy.
_NOT_FOR_PROBES = ("connection_pool", "client_name", "db", "lib_name", "lib_version")


class SlotMovedError(RedisConnectionError):
    """The slot's master changed under a call, which did not run: send it again."""


class ClusterSlotConnection(Connection):
    """A connection to whichever node is the master of its pool's slot when it connects."""

    def __init__(self, **kwargs: Any) -> None:
        self.connection_pool: ClusterSlotPool = kwargs.pop("connection_pool")
        super().__init__(**kwargs)  # type: ignore[no-untyped-call, unused-ignore]

    async def _connect(self) -> Any:
        self.host, self.port = await self.connection_pool.master_address()
        try:
            return await super()._connect()  # type: ignore[no-untyped-call, unused-ignore]
        except BaseException:
            self.connection_pool.forget_master()  # down, or no longer there: ask again
            raise

    async def read_response(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return await super().read_response(*args, **kwargs)
        except MovedError as exc:
            self.connection_pool.moved(exc.slot_id, (exc.host, int(exc.port)))
            await self.disconnect()  # type: ignore[no-untyped-call, unused-ignore]
            raise SlotMovedError(
                f"slot {exc.slot_id} moved to {exc.host}:{exc.port}; the call did not run"
            ) from None
        except AskError as exc:
            # The slot is being migrated and a key of the call is on the other node already:
            # the call did not run. A queue's call needs all its keys on one node, so it waits
            # (a transient error) until the migration ends and MOVED names the new master.
            raise TryAgainError(
                f"slot {exc.slot_id} is migrating to {exc.host}:{exc.port}; the call did not run"
            ) from None


class ClusterSlotSSLConnection(ClusterSlotConnection, SSLConnection):
    """The same over TLS (``rediss+cluster://``)."""


class ClusterSlotPool(BlockingConnectionPool):
    """At most ``max_connections`` connections to the master of ``slot``; callers wait for a
    free one.

    Args:
        nodes: cluster nodes to ask for the map first; nodes the map names are added.
        slot: the hash slot whose master the connections go to.
        tls: over TLS (``kwargs`` then hold the ``ssl_*`` settings), the map's probes too.
        **kwargs: the connections' settings, as for redis-py's pools.
    """

    def __init__(
        self, *, nodes: Iterable[tuple[str, int]], slot: int, tls: bool = False, **kwargs: Any
    ) -> None:
        kwargs["connection_class"] = ClusterSlotSSLConnection if tls else ClusterSlotConnection
        self.tls = tls
        super().__init__(**kwargs)  # type: ignore[no-untyped-call, unused-ignore]
        self.connection_kwargs["connection_pool"] = self
        self.nodes: list[tuple[str, int]] = list(dict.fromkeys(nodes))
        self.slot = slot
        self.master: tuple[str, int] | None = None

    async def master_address(self) -> tuple[str, int]:
        """The slot's master, from the map (asked for when not known)."""
        if self.master is None:
            self.master = await self._ask_map()
        return self.master

    def forget_master(self) -> None:
        """Ask the map again at the next connect."""
        self.master = None

    def moved(self, slot: int, address: tuple[str, int]) -> None:
        """A node answered ``MOVED slot host:port``: that is the slot's master now (the pool's
        connections send keys of its own slot only, so ``slot`` is the pool's)."""
        if slot == self.slot:
            self.master = address
            if address not in self.nodes:
                self.nodes.append(address)

    async def _ask_map(self) -> tuple[str, int]:
        """Ask the known nodes, in turn, for the cluster's map; learn its nodes; return the
        master of the pool's slot.

        Raises:
            ConfigurationError: a node is not in cluster mode.
            redis.exceptions.ConnectionError: from a TLS handshake refused for its settings
                (a certificate): as is, for ``errors.server_error_kind`` to call it one.
            redis.exceptions.ConnectionError: no known node answers, or none serves the slot
                yet (a failover in progress): transient, the callers' retries wait.
        """
        settings = {k: v for k, v in self.connection_kwargs.items() if k not in _NOT_FOR_PROBES}
        failures = []
        for host, port in list(self.nodes):
            probe: Any = (_SSLConnection if self.tls else _Connection)(
                **{**settings, "host": host, "port": port}
            )
            try:
                await probe.connect()
                await probe.send_command("CLUSTER", "SLOTS")
                ranges = await probe.read_response()
            except ResponseError as exc:
                if "cluster support disabled" in str(exc).lower():
                    raise ConfigurationError(
                        f"{host}:{port} is not a Redis Cluster node (cluster support is "
                        "disabled): use a redis:// URL for a single server"
                    ) from None
                failures.append(f"{host}:{port}: {exc}")
                continue
            except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
                if tls_failure(exc) is not None:
                    raise  # refused TLS settings: the next node would refuse them too
                failures.append(f"{host}:{port}: {exc}")
                continue
            finally:
                with contextlib.suppress(Exception):
                    await probe.disconnect()
            master = self._learn(ranges)
            if master is not None:
                return master
            failures.append(f"{host}:{port}: no master serves slot {self.slot}")
        raise RedisConnectionError(
            f"no cluster node gave a master of slot {self.slot}: " + "; ".join(failures)
        )

    def _learn(self, ranges: Any) -> tuple[str, int] | None:
        """Add the nodes of a ``CLUSTER SLOTS`` reply; the master of the slot, if any."""
        master = None
        for start, end, *nodes in ranges:
            for node in nodes:
                address = (str(node[0]), int(node[1]))
                if address[0] and address not in self.nodes:
                    self.nodes.append(address)
            if int(start) <= self.slot <= int(end) and nodes:
                master = (str(nodes[0][0]), int(nodes[0][1]))
        return master


def is_cluster_pool(pool: object) -> bool:
    """Whether ``pool`` is a slot pool of either API."""
    return hasattr(pool, "slot") and hasattr(pool, "nodes") and hasattr(pool, "tls")


def open_cluster_client(settings: ClusterSettings, *, slot: int, max_connections: int) -> Redis:
    """A client of the master of ``slot`` in the cluster of ``settings`` (decoded replies)."""
    kwargs: dict[str, Any] = {
        "username": settings.username,
        "password": settings.password,
        "health_check_interval": settings.health_check_interval,
    }
    if settings.socket_timeout is not None:
        kwargs["socket_timeout"] = settings.socket_timeout
    if settings.socket_connect_timeout is not None:
        kwargs["socket_connect_timeout"] = settings.socket_connect_timeout
    kwargs.update(settings.tls or ())
    pool = ClusterSlotPool(
        nodes=settings.nodes,
        slot=slot,
        tls=settings.tls is not None,
        decode_responses=True,
        max_connections=max_connections,
        timeout=None,
        **kwargs,
    )
    return Redis.from_pool(pool)


def settings_of_cluster_client(client: Any) -> tuple[ClusterSettings, dict[str, Any]]:
    """The nodes and connection settings of a redis-py ``RedisCluster`` client (either API).

    corral does not send its commands through such a client (it routes each command by its
    keys, while a queue's scripts want one node); it opens clients of its own on the same
    nodes with the same settings.
    """
    manager = client.nodes_manager
    known = [*manager.startup_nodes.values(), *manager.nodes_cache.values()]
    nodes = tuple(dict.fromkeys((str(n.host), int(n.port)) for n in known))
    node_kwargs = dict(manager.connection_kwargs)
    if not node_kwargs.get("decode_responses"):
        raise ConfigurationError("pass a RedisCluster client created with decode_responses=True")
    ssl = tuple(sorted((k, v) for k, v in node_kwargs.items() if k.startswith("ssl_")))
    connection_class = node_kwargs.get("connection_class")
    # redis-py's TLS connection classes, of either API, are named so.
    tls = bool(ssl) or "SSL" in getattr(connection_class, "__name__", "")
    settings = ClusterSettings(
        nodes,
        username=node_kwargs.get("username"),
        password=node_kwargs.get("password"),
        socket_timeout=node_kwargs.get("socket_timeout"),
        socket_connect_timeout=node_kwargs.get("socket_connect_timeout"),
        health_check_interval=node_kwargs.get("health_check_interval") or 0.0,
        tls=ssl if tls else None,
    )
    return settings, node_kwargs


def twin(pool: Any, **settings: Any) -> Redis:
    """A client of the master that ``pool`` follows (a slot pool of either API), on a pool
    of its own, with the connection ``settings`` given."""
    settings = {
        k: v for k, v in settings.items() if k not in ("connection_pool", "connection_class")
    }
    copy = ClusterSlotPool(
        nodes=pool.nodes,
        slot=pool.slot,
        tls=pool.tls,
        max_connections=pool.max_connections,
        timeout=getattr(pool, "timeout", None),
        **settings,
    )
    copy.master = pool.master
    return Redis.from_pool(copy)
