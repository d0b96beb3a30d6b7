"""A lean, pipelined RESP2 connection for the scripts on the hot path.

redis-py's asyncio client spends about 130 µs of Python on every command (a pool checkout
with a health probe, a timeout context, several parser layers): more than the server needs
to run the Lua of an add or a finish. corral's script calls go over an :class:`AsyncWire`
instead: one asyncio protocol per queue object, replies parsed by hiredis, and any number of
callers pipelined on the one socket, answered in the order they asked (RESP guarantees it).

Only what this module fully understands takes that path: plain TCP or Unix socket
connections speaking RESP2, with an optional user/password, database and client name. TLS,
credential providers, RESP3 and other connection classes keep redis-py's path, as does the
blocking API (its ``Wire`` never opens; redis-py's synchronous client is lean already).
Errors are redis-py's own exceptions, parsed by redis-py's rules, so callers cannot tell the
two paths apart.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from typing import Any, NamedTuple, cast

import hiredis
from redis._parsers.base import BaseParser
from redis.asyncio.connection import Connection, UnixDomainSocketConnection
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError


def pack(args: list[Any]) -> bytes:
    """``args`` as one RESP command (an array of bulk strings)."""
    return b"*%d\r\n" % len(args) + pack_args(args)


def pack_args(args: list[Any]) -> bytes:
    """``args`` as RESP bulk strings, without the array header.

    Built as text and encoded once: per argument that is several times cheaper than packing
    bytes (job arguments are mostly short ASCII, often empty). ``bytes`` take the slow path.
    """
    out: list[str] = []
    put = out.append
    for value in args:
        if type(value) is not str:
            if isinstance(value, bytes):
                return _pack_bytes(args)
            value = str(value)
        if not value:
            put("$0\r\n\r\n")
        elif value.isascii():
            put(f"${len(value)}\r\n{value}\r\n")
        else:
            put(f"${len(value.encode())}\r\n{value}\r\n")
    return "".join(out).encode()


def _pack_bytes(args: list[Any]) -> bytes:
    out = []
    for value in args:
        data = value if isinstance(value, bytes) else str(value).encode()
        out.append(b"$%d\r\n%b\r\n" % (len(data), data))
    return b"".join(out)


class Params(NamedTuple):
    """Where and how to connect, taken from a redis-py client."""

    host: str
    port: int
    path: str
    db: int
    username: str | None
    password: str | None
    client_name: str | None
    timeout: float | None
    connect_timeout: float | None
    encoding: str


def params_of(client: Any) -> Params | None:
    """The wire's settings for the asyncio ``client``, or ``None`` when redis-py must do it."""
    pool = getattr(client, "connection_pool", None)
    if pool is None or pool.connection_class not in (Connection, UnixDomainSocketConnection):
        return None
    # An unconnected connection object resolves the pool's settings and their defaults.
    conn = pool.connection_class(**pool.connection_kwargs)
    if conn.credential_provider is not None or not conn.encoder.decode_responses:
        return None
    if conn.encoder.encoding_errors != "strict":
        return None
    return Params(
        host=getattr(conn, "host", ""),
        port=int(getattr(conn, "port", 0)),
        path=getattr(conn, "path", ""),
        db=int(conn.db or 0),
        username=conn.username,
        password=conn.password,
        client_name=conn.client_name,
        timeout=conn.socket_timeout,
        connect_timeout=conn.socket_connect_timeout,
        encoding=conn.encoder.encoding,
    )


class _Protocol(asyncio.Protocol):
    """Matches replies to the futures of the calls, first in first out."""

    def __init__(self, encoding: str, timeout: float | None) -> None:
        self.reader = hiredis.Reader(encoding=encoding, replyError=BaseParser.parse_error)
        self.waiters: deque[asyncio.Future[Any]] = deque()
        self.sent_at: deque[float] = deque()
        self.transport: asyncio.Transport | None = None
        self.lost: Exception | None = None
        self.timeout = timeout
        self._watchdog: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # Not an isinstance check: uvloop's transports do not derive from asyncio's classes.
        self.transport = cast(asyncio.Transport, transport)
        if self.timeout:
            self._watch()

    def send(self, packed: bytes) -> asyncio.Future[Any]:
        """Write one command; the future gets its reply."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        if self.lost is not None:
            future.set_exception(self.lost)
            return future
        self.waiters.append(future)
        if self.timeout:
            self.sent_at.append(loop.time())
        assert self.transport is not None
        self.transport.write(packed)
        return future

    def _watch(self) -> None:
        # One timer per connection rather than one per call: a reply overdue by more than
        # the socket timeout drops the connection, as redis-py does with a silent server.
        assert self.timeout
        loop = asyncio.get_running_loop()
        if self.sent_at and loop.time() - self.sent_at[0] > self.timeout:
            self.close(RedisTimeoutError("Timeout reading from the server."))
            return
        self._watchdog = loop.call_later(min(1.0, self.timeout / 2), self._watch)

    def data_received(self, data: bytes) -> None:
        reader = self.reader
        reader.feed(data)
        waiters = self.waiters
        while True:
            try:
                reply = reader.gets()
            except hiredis.ProtocolError as exc:
                self.close(RedisConnectionError(f"Protocol error from the server: {exc}"))
                return
            if reply is False:
                return
            if not waiters:
                self.close(RedisConnectionError("The server sent a reply nobody asked for."))
                return
            future = waiters.popleft()
            if self.sent_at:
                self.sent_at.popleft()
            if future.done():  # its caller was cancelled: the reply is dropped
                continue
            if isinstance(reply, Exception):
                future.set_exception(reply)
            else:
                future.set_result(reply)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.lost is None:
            self.lost = RedisConnectionError(
                "Connection closed by server." if exc is None else f"Connection lost: {exc}"
            )
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        self.sent_at.clear()
        while self.waiters:
            future = self.waiters.popleft()
            if not future.done():
                future.set_exception(self.lost)

    def close(self, reason: Exception) -> None:
        if self.lost is None:
            self.lost = reason
        if self.transport is not None:
            self.transport.close()
        self.connection_lost(None)


class AsyncWire:
    """One pipelined connection; connects on first use and again after a loss."""

    def __init__(self, params: Params) -> None:
        self._params = params
        self._protocol: _Protocol | None = None
        self._connecting: asyncio.Future[_Protocol] | None = None

    @classmethod
    def open(cls, client: Any) -> AsyncWire | None:
        """A wire to ``client``'s server, or ``None`` when redis-py must carry the calls."""
        params = params_of(client)
        return None if params is None else cls(params)

    async def call(self, packed: bytes) -> Any:
        """Send one packed command and return its reply (redis-py's exceptions on errors).

        A cancelled call leaves the connection usable: its reply is read and dropped.
        """
        protocol = self._protocol
        if protocol is None or protocol.lost is not None:
            protocol = await self._connect()
        return await protocol.send(packed)

    async def _connect(self) -> _Protocol:
        # Callers arriving while a connection is being made share it.
        if self._connecting is None:
            self._connecting = asyncio.ensure_future(self._handshake())
        connecting = self._connecting
        try:
            return await asyncio.shield(connecting)
        finally:
            if connecting.done():
                self._connecting = None

    async def _handshake(self) -> _Protocol:
        p = self._params
        loop = asyncio.get_running_loop()
        protocol = _Protocol(p.encoding, p.timeout)
        if p.path:
            connecting = loop.create_unix_connection(lambda: protocol, p.path)
        else:
            connecting = loop.create_connection(lambda: protocol, p.host, p.port)
        try:
            await asyncio.wait_for(connecting, p.connect_timeout)
        except (OSError, asyncio.TimeoutError) as exc:
            where = p.path or f"{p.host}:{p.port}"
            raise RedisConnectionError(f"Error connecting to {where}: {exc}") from exc
        setup: list[list[Any]] = []
        if p.password:
            setup.append(["AUTH", p.username, p.password] if p.username else ["AUTH", p.password])
        if p.db:
            setup.append(["SELECT", p.db])
        if p.client_name:
            setup.append(["CLIENT", "SETNAME", p.client_name])
        # Sent before the connection is handed out, so no call can overtake them.
        futures = [protocol.send(pack(command)) for command in setup]
        try:
            for future in futures:
                await future
        except BaseException:
            protocol.close(RedisConnectionError("Connection setup failed."))
            for future in futures:  # retrieved, so asyncio does not report them
                if future.done() and not future.cancelled():
                    future.exception()
            raise
        self._protocol = protocol
        return protocol

    def close(self) -> None:
        """Close the connection; calls still waiting get a ``ConnectionError``."""
        if self._protocol is not None:
            self._protocol.close(RedisConnectionError("Connection closed by the client."))
            self._protocol = None

    def __del__(self) -> None:
        # A queue dropped without close() (common when the client was given) must not leak
        # its socket until the loop closes; nothing can be waiting on an unreachable wire.
        protocol = self._protocol
        if protocol is not None and protocol.transport is not None:
            transport = protocol.transport
            with contextlib.suppress(RuntimeError):  # the loop is closed already
                transport.close()


class Wire:
    """The blocking API's twin of :class:`AsyncWire`: it never opens, so redis-py's pooled
    connections carry the calls (threads of a sync program each get their own)."""

    @classmethod
    def open(cls, client: Any) -> Wire | None:
        return None

    def call(self, packed: bytes) -> Any:
        raise NotImplementedError  # never opened

    def close(self) -> None:
        pass
