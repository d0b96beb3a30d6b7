# Generated from corral/_async/_redis.py by scripts/unasync.py: do not edit.
"""Opening a client, checking the server once, and running scripts with EVALSHA."""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Sequence
from typing import Any

from redis import BlockingConnectionPool, Redis
from redis.connection import parse_url
from redis.exceptions import NoScriptError, ResponseError

from corral import _wire, connection
from corral._sync._sentinel import open_sentinel_client
from corral._scripts import Script
from corral._wire import Wire
from corral.connection import is_sentinel_url, parse_sentinel_url
from corral.errors import (
    ConfigurationError,
    InvalidOptionError,
    ServerReplyError,
    server_error_kind,
)

#: Connections a client opened from a URL keeps at most; callers that wait for more (many
#: concurrent adds, a worker's slots) queue for a free one instead of failing.
DEFAULT_MAX_CONNECTIONS = 64


def open_client(
    conn: str | Redis | None, *, max_connections: int = DEFAULT_MAX_CONNECTIONS
) -> Redis:
    """A client for ``conn``: a given client is used as is; a URL or ``None`` is resolved.

    redis-py's default pool refuses a command when all its connections are busy ("Too many
    connections"); a blocking pool makes it wait for one, which is what a queue wants. A
    ``redis+sentinel://`` URL gives a client of the master its sentinels name (and follow).

    Raises:
        InvalidOptionError: a bad Sentinel URL given as ``conn``.
        ConfigurationError: a bad Sentinel URL in ``CORRAL_REDIS_URL`` or ``REDIS_URL``.
    """
    if isinstance(conn, Redis):
        if not conn.connection_pool.connection_kwargs.get("decode_responses"):
            raise ConfigurationError("pass a client created with decode_responses=True")
        return conn
    url = connection.resolve_url(conn)
    if is_sentinel_url(url):
        source = connection.url_source(conn)
        try:
            settings = parse_sentinel_url(url, name=source)
        except InvalidOptionError as exc:
            if source == "connection":
                raise
            raise ConfigurationError(str(exc)) from None
        return open_sentinel_client(settings, max_connections=max_connections)
    pool = BlockingConnectionPool.from_url(
        url,
        decode_responses=True,
        max_connections=max_connections,
        timeout=None,
    )
    return Redis.from_pool(pool)


def open_client_off_loop(
    conn: str | Redis | None, *, max_connections: int = DEFAULT_MAX_CONNECTIONS
) -> Redis:
    """:func:`open_client` for code on an event loop: when no server is configured, the
    embedded one is found or started in a thread (a process, a file lock and polling for it to
    answer must not stop the loop)."""
    if conn is None and connection.configured_url() is None:
        conn = connection.resolve_url(None)
    return open_client(conn, max_connections=max_connections)


def check_server(client: Redis, *, strict: bool = False, owned: bool = True) -> None:
    """Check version and eviction policy (see ``connection.check_server_info``).

    A client corral opened itself (``owned``) is closed when the check fails.
    """
    try:
        info: dict[str, Any] = dict(client.info("server"))
        info.update(client.info("memory"))
        connection.check_server_info(info, strict=strict)
    except BaseException:
        if owned:
            client.close()
        raise


def running_loop() -> object:
    """The caller's event loop (``None`` in the blocking twin, which has none)."""
    return None


def check_connection(connection: Any) -> str | Redis | None:
    """A ``connection`` argument: ``None``, a client, or a URL redis-py can parse (checked
    now: a bad one would fail at the first call, far from where it was given)."""
    if connection is None or isinstance(connection, Redis):
        return connection
    if not isinstance(connection, str):
        raise InvalidOptionError(
            f"connection must be a redis:// URL or a client, got {type(connection).__name__}"
        )
    if is_sentinel_url(connection):
        parse_sentinel_url(connection)
        return connection
    try:
        parse_url(connection)  # type: ignore[no-untyped-call, unused-ignore]
    except ValueError as exc:  # also a bad port, host or an unknown scheme
        raise InvalidOptionError(f"connection is not a usable Redis URL: {exc}") from None
    return connection


class LazyClient:
    """The client of one queue-facing object (a queue, a flow producer, an events reader).

    It is opened and checked on first use; callers that get there at the same time share one
    client (the others' are closed). A client corral opened itself is opened again when the
    object is used from a new event loop (a second ``asyncio.run()``): the old one's
    connections belong to a loop that is gone, and would fail or hang there. A client given
    by the caller stays the caller's, on whatever loop the caller uses it.
    """

    def __init__(self, connection: str | Redis | None, *, strict: bool = False) -> None:
        self.connection = check_connection(connection)
        self.strict = strict
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
        loop = self._follow_loop()
        if self.current is None:
            client = open_client_off_loop(self.connection)
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
        """Close the client if corral opened it."""
        self._follow_loop()
        if self.owned:
            assert self.current is not None
            self.current.close()
        self.current = None


def run_script(client: Redis, script: Script, keys: list[str], args: list[Any]) -> Any:
    """EVALSHA ``script``; on NOSCRIPT (a new or flushed server) load it once and retry."""
    try:
        return client.evalsha(script.sha, len(keys), *keys, *args)
    except NoScriptError:
        client.script_load(script.source)
        return client.evalsha(script.sha, len(keys), *keys, *args)


def run_atomically(
    client: Redis,
    calls: Sequence[tuple[Script, list[str], list[Any]]],
    *,
    must_exist: Collection[str] = (),
) -> tuple[list[Any], str | None]:
    """EVALSHA each ``(script, keys, args)`` of ``calls``, in order, in one MULTI/EXEC.

    Every key of ``must_exist`` is WATCHed and checked first: when one is missing nothing runs
    and it is returned as the second element. MULTI/EXEC does not roll back a script that
    refuses its work, so a precondition that the scripts check (a parent must exist) is made
    true for the whole transaction this way; when a watched key changes before EXEC, the
    transaction is tried again.

    The transaction is packed here (:mod:`corral._wire`) and sent on one connection of the
    client's pool: a flow's hundreds of calls of twenty-odd arguments each cost several times
    more to pack through redis-py's pipeline than the server takes to run them.

    Returns:
        ``(replies, None)``, or ``([], missing key)`` when nothing was written.

    Raises:
        ServerReplyError: the first error among the replies that waiting will not fix (the
            other calls of the transaction ran).
        redis.exceptions.ResponseError: a transient one (the same), or the transaction was
            refused as a whole (EXECABORT: nothing ran).
    """
    # Loaded before MULTI: a NOSCRIPT inside the transaction would fail it all.
    for script in {script.sha: script for script, _, _ in calls}.values():
        client.script_load(script.source)
    watched = sorted(set(must_exist))
    body = [_wire.pack(["MULTI"])]
    for script, keys, args in calls:
        body.append(_wire.pack(["EVALSHA", script.sha, len(keys), *keys, *args]))
    body.append(_wire.pack(["EXEC"]))
    packed = b"".join(body)
    # redis-py leaves these connection calls partly untyped (and differently per API).
    pool: Any = client.connection_pool
    conn: Any = pool.get_connection()
    try:
        while True:
            if watched:
                conn.send_packed_command([_wire.pack(["WATCH", *watched])])
                conn.read_response()
                for key in watched:
                    conn.send_packed_command([_wire.pack(["EXISTS", key])])
                    if not conn.read_response():
                        conn.send_packed_command([_wire.pack(["UNWATCH"])])
                        conn.read_response()
                        return [], key
            conn.send_packed_command([packed], check_health=False)
            failure: ResponseError | None = None
            for _ in range(len(calls) + 1):  # +OK for MULTI, +QUEUED for each call
                try:
                    conn.read_response()
                except ResponseError as exc:  # not queued: EXEC answers EXECABORT
                    failure = failure or exc
            try:
                replies = conn.read_response()
            except ResponseError as exc:
                raise failure or exc from None
            if replies is None:  # a watched key changed: nothing ran
                continue
            for reply in replies:
                if isinstance(reply, ResponseError):
                    if server_error_kind(reply) != "other" or isinstance(reply, ServerReplyError):
                        raise reply  # transient or a setting: the callers' retries handle them
                    raise ServerReplyError(f"a call of the transaction failed: {reply}") from reply
            return list(replies), None
    except ResponseError:
        raise  # every reply was read: the connection is fine
    except BaseException:
        # A reply may still be on its way (a cancelled or broken call): never reuse it.
        conn.disconnect()
        raise
    finally:
        pool.release(conn)


class ScriptCaller:
    """Runs a queue's scripts with their keys packed once.

    Every call of a queue's scripts sends the same EVALSHA, SHA, key count, keys and job key
    prefix; packing them once per script (instead of redis-py encoding each argument at each
    call) is a large part of a job's client-side cost. The command goes out on the caller's
    own pipelined connection (:mod:`corral._wire`) when the client's settings allow it, else
    on a connection of the client's pool. Either way a script is loaded on the connection
    that runs it, and a NOSCRIPT is answered on that same connection (load, then the call
    again), so a retry never travels on another connection than its call.

    Args:
        client: the queue's client.
        keys: the queue's script keys.
        reply_timeout: used when the client sets no socket timeout (a worker's calls are
            short, and a dead connection must not hang them).
    """

    def __init__(self, client: Redis, keys: list[str], reply_timeout: float | None = None) -> None:
        self._client = client
        self._keys = keys
        self._packed_keys = _wire.pack_args(keys)
        self._prefixes: dict[str, bytes] = {}
        self._wire = Wire.open(client, default_timeout=reply_timeout)

    def _prefix(self, script: Script) -> bytes:
        prefix = self._prefixes.get(script.sha)
        if prefix is None:
            head = _wire.pack_args(["EVALSHA", script.sha, len(self._keys)])
            prefix = self._prefixes[script.sha] = head + self._packed_keys
        return prefix

    def __call__(self, script: Script, args: list[Any]) -> Any:
        count = 3 + len(self._keys) + len(args)
        packed = b"*%d\r\n" % count + self._prefix(script) + _wire.pack_args(args)
        try:
            if self._wire is not None:
                return self._wire.call(packed, script)
            return self._pooled(packed, script)
        except ResponseError as exc:
            if server_error_kind(exc) != "other" or isinstance(exc, ServerReplyError):
                raise  # transient or a setting: the callers' retries and outages handle them
            raise ServerReplyError(f"script {script.name} failed: {exc}") from exc

    def _pooled(self, packed: bytes, script: Script) -> Any:
        # redis-py leaves these connection calls partly untyped (and differently per API).
        pool: Any = self._client.connection_pool
        conn: Any = pool.get_connection()
        try:
            conn.send_packed_command([packed], check_health=False)
            try:
                return conn.read_response()
            except NoScriptError:
                # On this same connection: load the script, then the call once more.
                conn.send_packed_command([_wire.load_command(script), packed])
                conn.read_response()
                return conn.read_response()
        except ResponseError:
            raise  # the reply was read whole: the connection is fine
        except BaseException:
            # A reply may still be on its way (a cancelled or broken call): never reuse it.
            conn.disconnect()
            raise
        finally:
            pool.release(conn)

    def close(self) -> None:
        """Close the caller's own connection (the client's pool is the client's)."""
        if self._wire is not None:
            try:
                self._wire.close()
            except RuntimeError:  # its event loop has ended: nothing to close it with
                self.abandon()

    def abandon(self) -> None:
        """Drop the caller's connection without closing it: its event loop has ended (closing
        needs the loop; the socket is closed when it is collected)."""
        self._wire = None
