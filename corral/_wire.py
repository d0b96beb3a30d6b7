"""A lean, pipelined RESP2 connection for the scripts on the hot path.

redis-py's asyncio client spends about 130 µs of Python on every command (a pool checkout
with a health probe, a timeout context, several parser layers): more than the server needs
to run the Lua of an add or a finish. corral's script calls go over an :class:`AsyncWire`
instead: one asyncio protocol per queue object, replies parsed by hiredis, and any number of
callers pipelined on the one socket, answered in the order they asked (RESP guarantees it).

Only what this module fully understands takes that path: TCP (plain or TLS) or Unix socket
connections speaking RESP2, with an optional user/password, database and client name. A TLS
connection uses the very ``ssl.SSLContext`` redis-py's ``SSLConnection`` builds from the same
settings (CA, client certificate, verification mode, host name check), and the same server
name (the host). Credential providers, RESP3 and other connection classes keep redis-py's
path, as does the blocking API (its ``Wire`` never opens; redis-py's synchronous client is
lean already).
Errors are redis-py's own exceptions, parsed by redis-py's rules, so callers cannot tell the
two paths apart.

Scripts live on the connection that runs them: every script the wire has run is loaded
again as part of each (re)connect, before any call can use the connection, and a NOSCRIPT
(``SCRIPT FLUSH`` on a live connection) is answered on that same connection, at once, by
loading the script and sending the call again; so no call and its retry can be overtaken by
another call of the same wire. A reply overdue by more than the timeout drops the connection
(a half-open peer never hangs a caller), idle connections are probed when the client asks for
health checks, TCP keepalive follows the client's settings, and the write buffer is bounded
(callers wait while the server does not read).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
from collections import deque
from typing import TYPE_CHECKING, Any, NamedTuple, cast

import hiredis
from redis._parsers.base import BaseParser
from redis.asyncio.connection import Connection, SSLConnection, UnixDomainSocketConnection
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError
from redis.exceptions import TimeoutError as RedisTimeoutError

if TYPE_CHECKING:
    from corral._scripts import Script

#: The write buffer's bounds: past the high mark callers wait until it drains to the low one.
WRITE_BUFFER_HIGH = 4 * 1024 * 1024
WRITE_BUFFER_LOW = 1024 * 1024
#: Connect timeout when the client sets none: a server that does not answer a SYN in this
#: long is treated as down (and retried), rather than waited for as long as the OS would.
DEFAULT_CONNECT_TIMEOUT_S = 10.0


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
    keepalive: bool = False
    keepalive_options: tuple[tuple[int, int], ...] = ()
    health_check_interval: float = 0.0
    #: The TLS context of a ``rediss://`` connection (``None``: plain TCP or Unix socket).
    tls: ssl.SSLContext | None = None


#: The connection classes whose settings the wire reproduces exactly.
_CONNECTION_CLASSES = (Connection, SSLConnection, UnixDomainSocketConnection)


def params_of(client: Any) -> Params | None:
    """The wire's settings for the asyncio ``client``, or ``None`` when redis-py must do it."""
    pool = getattr(client, "connection_pool", None)
    if pool is None or pool.connection_class not in _CONNECTION_CLASSES:
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
        keepalive=bool(getattr(conn, "socket_keepalive", False)),
        keepalive_options=tuple((getattr(conn, "socket_keepalive_options", None) or {}).items()),
        health_check_interval=float(getattr(conn, "health_check_interval", 0) or 0),
        # redis-py's own context for these settings, built as its SSLConnection builds it.
        tls=conn.ssl_context.get() if isinstance(conn, SSLConnection) else None,
    )


def load_command(script: Script) -> bytes:
    """``SCRIPT LOAD`` of ``script``, packed."""
    return pack(["SCRIPT", "LOAD", script.source])


class _Waiter(NamedTuple):
    """A call in flight: the future of its reply (``None``: the reply is dropped) and, for a
    script call, what to send again on NOSCRIPT: the script's load, then the call. Kept as
    two parts and joined only on NOSCRIPT: a script's load is kilobytes, and copying it
    into every call cost more than the rest of the call's packing."""

    future: asyncio.Future[Any] | None
    resend: tuple[bytes, bytes] | None


class _Protocol(asyncio.Protocol):
    """Matches replies to the futures of the calls, first in first out."""

    def __init__(self, params: Params) -> None:
        # Bytes that are not UTF-8 (never written by corral or BullMQ) reach the caller as
        # surrogate escapes instead of breaking the connection; JSON decoding then names them.
        self.reader = hiredis.Reader(
            encoding=params.encoding, errors="surrogateescape", replyError=BaseParser.parse_error
        )
        self.waiters: deque[_Waiter] = deque()
        self.sent_at: deque[float] = deque()
        self.transport: asyncio.Transport | None = None
        self.lost: Exception | None = None
        self.params = params
        self.timeout = params.timeout
        #: SHAs of the scripts loaded on this connection.
        self.loaded: set[str] = set()
        self.last_reply = 0.0
        self._writable: asyncio.Event | None = None
        self._watchdog: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # Not an isinstance check: uvloop's transports do not derive from asyncio's classes.
        self.transport = cast(asyncio.Transport, transport)
        self.transport.set_write_buffer_limits(high=WRITE_BUFFER_HIGH, low=WRITE_BUFFER_LOW)
        self._keepalive()
        self.last_reply = asyncio.get_running_loop().time()
        if self.timeout:
            self._watch()

    def _keepalive(self) -> None:
        sock = self.transport.get_extra_info("socket") if self.transport else None
        if sock is None or not self.params.keepalive or sock.family == socket.AF_UNIX:
            return
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
            for option, value in self.params.keepalive_options:
                sock.setsockopt(socket.IPPROTO_TCP, option, value)

    def send(self, packed: bytes, resend: tuple[bytes, bytes] | None = None) -> asyncio.Future[Any]:
        """Write one command; the future gets its reply. ``resend`` is written instead of a
        NOSCRIPT reply (once)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        if self.lost is not None:
            future.set_exception(self.lost)
            return future
        self._write(packed, _Waiter(future, resend), loop)
        return future

    def send_dropped(self, packed: bytes) -> None:
        """Write a command whose reply nobody waits for (a script load, a health probe)."""
        if self.lost is None:
            self._write(packed, _Waiter(None, None), asyncio.get_running_loop())

    def _write(self, packed: bytes, waiter: _Waiter, loop: asyncio.AbstractEventLoop) -> None:
        self.waiters.append(waiter)
        if self.timeout:
            self.sent_at.append(loop.time())
        assert self.transport is not None
        self.transport.write(packed)

    def pause_writing(self) -> None:
        self._writable = asyncio.Event()

    def resume_writing(self) -> None:
        if self._writable is not None:
            self._writable.set()
            self._writable = None

    async def writable(self) -> None:
        """Return when the write buffer is below its high mark (or the connection is lost)."""
        while self._writable is not None and self.lost is None:
            await self._writable.wait()

    def _watch(self) -> None:
        # One timer per connection rather than one per call: a reply overdue by more than
        # the socket timeout drops the connection, as redis-py does with a silent server.
        assert self.timeout
        loop = asyncio.get_running_loop()
        now = loop.time()
        if self.sent_at and now - self.sent_at[0] > self.timeout:
            self.close(RedisTimeoutError("Timeout reading from the server."))
            return
        interval = self.params.health_check_interval
        if interval and not self.waiters and now - self.last_reply > interval:
            self.send_dropped(b"*1\r\n$4\r\nPING\r\n")  # an idle link is probed: the
            self.last_reply = now  # timeout above then catches a peer that is gone
        # Checked four times per timeout: an overdue reply is found at most 25% late.
        self._watchdog = loop.call_later(min(1.0, self.timeout / 4), self._watch)

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
                break
            if not waiters:
                self.close(RedisConnectionError("The server sent a reply nobody asked for."))
                return
            future, resend = waiters.popleft()
            if self.sent_at:
                self.sent_at.popleft()
            if resend is not None and isinstance(reply, NoScriptError):
                # The server lost its scripts (SCRIPT FLUSH): load this one and send the call
                # again, here and now, so it keeps its place before any later call's retry.
                self.loaded.clear()
                self.transport.writelines(resend)  # type: ignore[union-attr]
                self.waiters.append(_Waiter(None, None))
                self.waiters.append(_Waiter(future, None))
                if self.timeout:
                    now = asyncio.get_running_loop().time()
                    self.sent_at.extend((now, now))
                continue
            if future is None or future.done():  # dropped, or its caller was cancelled
                continue
            if isinstance(reply, Exception):
                future.set_exception(reply)
            else:
                future.set_result(reply)
        self.last_reply = asyncio.get_running_loop().time()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.lost is None:
            self.lost = RedisConnectionError(
                "Connection closed by server." if exc is None else f"Connection lost: {exc}"
            )
            self.lost.__cause__ = exc  # a TLS alert (a refused certificate) stays readable
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        self.resume_writing()
        self.sent_at.clear()
        while self.waiters:
            future = self.waiters.popleft().future
            if future is not None and not future.done():
                future.set_exception(self.lost)

    def close(self, reason: Exception) -> None:
        if self.lost is None:
            self.lost = reason
        if self.transport is not None:
            self.shut()
        self.connection_lost(None)

    def shut(self) -> None:
        """Close the socket. A TLS one is aborted: a graceful close waits (up to 30 s) for
        the peer's answer to its close_notify, and its socket would outlive a loop that ends
        before; nothing is lost, as a closed wire's callers have their answer already."""
        assert self.transport is not None
        if self.params.tls is not None:
            self.transport.abort()
        else:
            self.transport.close()


class AsyncWire:
    """One pipelined connection; connects on first use and again after a loss."""

    def __init__(self, params: Params) -> None:
        self._params = params
        self._protocol: _Protocol | None = None
        self._connecting: asyncio.Future[_Protocol] | None = None
        #: Every script run on this wire, by SHA, with its packed SCRIPT LOAD: loaded again
        #: on each new connection.
        self._scripts: dict[str, bytes] = {}

    @classmethod
    def open(cls, client: Any, *, default_timeout: float | None = None) -> AsyncWire | None:
        """A wire to ``client``'s server, or ``None`` when redis-py must carry the calls.

        ``default_timeout`` is the reply timeout when the client sets no socket timeout
        (redis-py's own default, 5 s since 8.0, does not count as set: a worker with short
        locks needs a shorter one, or a half-open connection outlasts the locks).
        """
        params = params_of(client)
        if params is None:
            return None
        if default_timeout and not client.connection_pool.connection_kwargs.get("socket_timeout"):
            params = params._replace(timeout=default_timeout)
        return cls(params)

    async def call(self, packed: bytes, script: Script | None = None) -> Any:
        """Send one packed command and return its reply (redis-py's exceptions on errors).

        ``script`` is the script an EVALSHA runs: it is loaded on the connection first if
        this connection has not loaded it yet, and again on NOSCRIPT (once).
        A cancelled call leaves the connection usable: its reply is read and dropped.
        """
        protocol = self._protocol
        if protocol is None or protocol.lost is not None:
            protocol = await self._connect()
        if protocol._writable is not None:
            await protocol.writable()
        if script is None:
            return await protocol.send(packed)
        load = self._scripts.get(script.sha)
        if load is None:
            load = self._scripts[script.sha] = load_command(script)
        if script.sha not in protocol.loaded:
            protocol.loaded.add(script.sha)
            protocol.send_dropped(load)
        return await protocol.send(packed, (load, packed))

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
        protocol = _Protocol(p)
        if p.path:
            connecting = loop.create_unix_connection(lambda: protocol, p.path)
        else:
            # With TLS the server name is the host, as for redis-py's SSLConnection.
            connecting = loop.create_connection(lambda: protocol, p.host, p.port, ssl=p.tls)
        try:
            await asyncio.wait_for(connecting, p.connect_timeout or DEFAULT_CONNECT_TIMEOUT_S)
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
        # Sent before the connection is handed out, so no call can overtake them; the scripts
        # this wire ran before are loaded again (a restarted server has none).
        futures = [protocol.send(pack(command)) for command in setup]
        futures += [protocol.send(load) for load in self._scripts.values()]
        try:
            for future in futures:
                await future
        except BaseException:
            protocol.close(RedisConnectionError("Connection setup failed."))
            for future in futures:  # retrieved, so asyncio does not report them
                if future.done() and not future.cancelled():
                    future.exception()
            raise
        protocol.loaded.update(self._scripts)
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
            with contextlib.suppress(RuntimeError):  # the loop is closed already
                protocol.shut()


class Wire:
    """The blocking API's twin of :class:`AsyncWire`: it never opens, so redis-py's pooled
    connections carry the calls (threads of a sync program each get their own)."""

    @classmethod
    def open(cls, client: Any, *, default_timeout: float | None = None) -> Wire | None:
        return None

    def call(self, packed: bytes, script: Any = None) -> Any:
        raise NotImplementedError  # never opened

    def close(self) -> None:
        pass
