# Generated from corral/_async/_redis.py by scripts/unasync.py: do not edit.
"""Opening a client (of one server, a Sentinel master or a cluster slot) and checking the
server once; :mod:`corral._sync._calls` runs the scripts on it."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Iterable
from typing import Any

from redis import BlockingConnectionPool, Redis, RedisCluster
from redis.connection import parse_url
from redis.crc import key_slot

from corral import _tls, connection
from corral._sync._cluster import (
    open_cluster_client,
    settings_of_cluster_client,
)
from corral._sync._sentinel import open_sentinel_client
from corral._keys import slot_of
from corral._signals import warn_if_loop_runs
from corral.connection import (
    ClusterSettings,
    is_cluster_url,
    is_sentinel_url,
    parse_cluster_url,
    parse_sentinel_url,
)
from corral.errors import (
    ClosedError,
    ConfigurationError,
    CrossSlotError,
    InvalidOptionError,
)

#: Connections a client opened from a URL keeps at most; callers that wait for more (many
#: concurrent adds, a worker's slots) queue for a free one instead of failing.
DEFAULT_MAX_CONNECTIONS = 64

#: What ``connection=`` accepts: a URL, a client, or ``None`` (the environment, else the
#: embedded server).
Connectable = str | Redis | RedisCluster | None


def cluster_slot(slot_key: str | None) -> int:
    """The hash slot of the keys ``slot_key:...`` of a queue (or of every queue of a flow
    producer's prefix) on Redis Cluster.

    Raises:
        CrossSlotError: they are not in one slot (no hash tag).
    """
    slot = None if slot_key is None else slot_of(slot_key)
    if slot is None:
        raise CrossSlotError(
            f"on Redis Cluster every key of a queue must be in one hash slot, and the keys "
            f"{slot_key}:... are not: give the prefix a hash tag (prefix='{{bull}}', as BullMQ "
            "advises, puts every queue of the prefix in one slot) or the queue name one "
            "('{emails}')"
        )
    return slot


def check_same_slot(client: Redis, keys: Iterable[str], what: str) -> None:
    """On a cluster client, refuse ``keys`` (of ``what``: "parent") outside its slot.

    Raises:
        CrossSlotError: naming the first such key and both slots.
    """
    slot = getattr(client.connection_pool, "slot", None)
    if slot is None:
        return
    for key in keys:
        theirs = key_slot(key.encode())
        if theirs != slot:
            raise CrossSlotError(
                f"the {what} {key} is in hash slot {theirs} and this queue's keys in {slot}: "
                "on Redis Cluster they must share one (give both the same hash tag, e.g. the "
                "prefix '{bull}')"
            )


def _cluster_settings(conn: Connectable, url: str | None) -> ClusterSettings | None:
    """The cluster ``conn`` (a ``RedisCluster`` client) or ``url`` names, else ``None``."""
    if isinstance(conn, RedisCluster):
        return settings_of_cluster_client(conn)[0]
    if url is None or not is_cluster_url(url):
        return None
    return parse_cluster_url(
        url, name=connection.url_source(conn if isinstance(conn, str) else None)
    )


def open_client(
    conn: Connectable,
    *,
    max_connections: int = DEFAULT_MAX_CONNECTIONS,
    slot_key: str | None = None,
) -> Redis:
    """A client for ``conn``: a given client is used as is; a URL or ``None`` is resolved.

    redis-py's default pool refuses a command when all its connections are busy ("Too many
    connections"); a blocking pool makes it wait for one, which is what a queue wants. A
    ``redis+sentinel://`` URL gives a client of the master its sentinels name (and follow).
    A ``redis+cluster://`` URL or a ``RedisCluster`` client gives a client of the master of
    the hash slot of ``slot_key`` (the queue's ``prefix:name``), which follows that slot.

    Raises:
        InvalidOptionError: a bad Sentinel or cluster URL given as ``conn``.
        ConfigurationError: a bad one in ``CORRAL_REDIS_URL`` or ``REDIS_URL``.
        CrossSlotError: on a cluster, ``slot_key`` holds no hash tag.
    """
    if isinstance(conn, Redis):
        if not conn.connection_pool.connection_kwargs.get("decode_responses"):
            raise ConfigurationError("pass a client created with decode_responses=True")
        return conn
    url = None if isinstance(conn, RedisCluster) else connection.resolve_url(conn)
    source = connection.url_source(conn if isinstance(conn, str) else None)
    try:
        cluster = _cluster_settings(conn, url)
        if cluster is not None:
            slot = cluster_slot(slot_key)
            return open_cluster_client(cluster, slot=slot, max_connections=max_connections)
        assert url is not None
        if is_sentinel_url(url):
            settings = parse_sentinel_url(url, name=source)
            return open_sentinel_client(settings, max_connections=max_connections)
    except InvalidOptionError as exc:
        if source == "connection":
            raise
        raise ConfigurationError(str(exc)) from None
    assert url is not None  # not a RedisCluster client: one of those is a cluster
    pool = BlockingConnectionPool.from_url(
        url,
        decode_responses=True,
        max_connections=max_connections,
        timeout=None,
    )
    return Redis.from_pool(pool)


def open_client_off_loop(
    conn: Connectable,
    *,
    max_connections: int = DEFAULT_MAX_CONNECTIONS,
    slot_key: str | None = None,
) -> Redis:
    """:func:`open_client` for code on an event loop: when no server is configured, the
    embedded one is found or started in a thread (a process, a file lock and polling for it to
    answer must not stop the loop)."""
    if conn is None and connection.configured_url() is None:
        conn = connection.resolve_url(None)
    return open_client(conn, max_connections=max_connections, slot_key=slot_key)


def check_server(client: Redis, *, strict: bool = False, owned: bool = True) -> None:
    """Check version and eviction policy (see ``connection.check_server_info``).

    A client corral opened itself (``owned``) is closed when the check fails.

    Raises:
        ConfigurationError: the TLS handshake was refused for its settings (a certificate);
            the message names the likely fix (:func:`corral._tls.explain`).
    """
    try:
        info: dict[str, Any] = dict(client.info("server"))
        info.update(client.info("memory"))
        connection.check_server_info(info, strict=strict)
    except BaseException as exc:
        if owned:
            client.close()
        refused = _tls.explain(exc)
        if refused is not None:  # the first contact is where wrong TLS settings show
            raise ConfigurationError(refused) from exc
        raise


#: True in the blocking twin of this module (corral._sync._redis, generated from it).
BLOCKING = not inspect.iscoroutinefunction(check_server)


def running_loop() -> object:
    """The caller's event loop (``None`` in the blocking twin, which has none)."""
    return None


def check_connection(connection: Any, *, slot_key: str | None = None) -> Connectable:
    """A ``connection`` argument: ``None``, a client, or a URL redis-py can parse (checked
    now: a bad one would fail at the first call, far from where it was given). On a cluster
    the keys ``slot_key:...`` must share a hash slot (checked now too, when given)."""
    if connection is None or isinstance(connection, Redis):
        return connection
    if isinstance(connection, RedisCluster):
        settings_of_cluster_client(connection)  # decoded replies
        if slot_key is not None:
            cluster_slot(slot_key)
        return connection
    if not isinstance(connection, str):
        raise InvalidOptionError(
            f"connection must be a redis:// URL or a client, got {type(connection).__name__}"
        )
    if is_sentinel_url(connection):
        parse_sentinel_url(connection)
        return connection
    if is_cluster_url(connection):
        parse_cluster_url(connection)
        if slot_key is not None:
            cluster_slot(slot_key)
        return connection
    try:
        parse_url(connection)  # type: ignore[no-untyped-call, unused-ignore]
    except ValueError as exc:  # also a bad port, host or an unknown scheme
        raise InvalidOptionError(f"connection is not a usable Redis URL: {exc}") from None
    _tls.check_url(connection)
    return connection


class LazyClient:
    """The client of one queue-facing object (a queue, a flow producer, an events reader).

    It is opened and checked on first use; callers that get there at the same time share one
    client (the others' are closed). A client corral opened itself is opened again when the
    object is used from a new event loop (a second ``asyncio.run()``): the old one's
    connections belong to a loop that is gone, and would fail or hang there. A client given
    by the caller stays the caller's, on whatever loop the caller uses it.
    """

    def __init__(
        self,
        connection: Connectable,
        *,
        strict: bool = False,
        slot_key: str | None = None,
        owner: str = "Queue",
    ) -> None:
        self.connection = check_connection(connection, slot_key=slot_key)
        #: What the client is for, as the warning of the blocking twin names it.
        self.owner = owner
        #: After close(): what uses the client raises ClosedError instead of opening one.
        self.closed = False
        self.strict = strict
        #: ``prefix:name`` of the queue (a flow producer's prefix): on a cluster, the client
        #: goes to the master of its hash slot.
        self.slot_key = slot_key
        #: The client once opened (``None`` before, and after :meth:`close`).
        self.current: Redis | None = None
        self._loop: object = None

    @property
    def owned(self) -> bool:
        return self.current is not None and self.current is not self.connection

    def _follow_loop(self) -> object:
        """Drop what belongs to an event loop that is no longer the caller's."""
        loop = running_loop()
        if self.current is not None and loop is not self._loop:
            if self._loop is not None and self.owned:  # used on another loop before
                self.current = None  # its sockets go with the old loop
            self._loop = loop
        return loop

    def get(self) -> Redis:
        if self.closed:
            raise ClosedError(f"this {self.owner} is closed: make a new one to use it again")
        loop = self._follow_loop()
        if self.current is None:
            if BLOCKING:
                warn_if_loop_runs(self.owner)
            client = open_client_off_loop(self.connection, slot_key=self.slot_key)
            owned = client is not self.connection
            check_server(client, strict=self.strict, owned=owned)
            if self.current is None:
                self.current = client
                self._loop = loop
            elif owned:  # another caller opened one meanwhile
                client.close()
        return self.current

    def use(self, client: Redis) -> None:
        """Use ``client`` as if it had been given (checked already, closed by its owner)."""
        self.connection = self.current = client
        self._loop = None

    def close(self) -> None:
        """Close the client if corral opened it; from now on :meth:`get` raises."""
        self.closed = True
        self._follow_loop()
        if self.owned:
            assert self.current is not None
            self.current.close()
        self.current = None
