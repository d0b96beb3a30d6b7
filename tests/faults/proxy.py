"""A TCP proxy between clients and a test server that can drop, delay, blackhole connections
and lose replies: the network faults of the fault-injection suite, on real sockets.

It runs its own asyncio loop in a daemon thread, so sync and async tests drive it alike::

    with FaultProxy(server_port) as proxy:
        url = proxy.url                # point corral here
        proxy.drop()                   # reset every open connection
        proxy.blackhole()              # keep connections open, forward nothing (half-open peer)
        proxy.heal()                   # forward again (new connections only, after blackhole)
        proxy.heal(keep_holes=True)    # forward new connections; black-holed ones stay so
                                       # for good (a NAT that forgot them: no FIN, no RST)
        proxy.lose_replies(1)          # the next reply is read from the server, then the
                                       # client's connection is dropped instead (the command
                                       # ran, the client never hears of it)
        proxy.lose_reply_to(b"EVALSHA", b"<sha>")  # the same, for the next command that has
                                       # these arguments (once its reply came: it ran)
        proxy.refuse()                 # refuse new connections, as a server that is down
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

import hiredis

T = TypeVar("T")


class _Link:
    """One client connection and its upstream, with what the faults need to know of it."""

    def __init__(self, client: asyncio.StreamWriter, upstream: asyncio.StreamWriter) -> None:
        self.writers = (client, upstream)
        #: Forwards nothing (a black hole) until dropped.
        self.hole = False
        # Commands and replies counted as they pass (RESP2: one reply per command, in order).
        self.requests = hiredis.Reader()
        self.replies = hiredis.Reader()
        self.sent = 0
        self.answered = 0
        #: The number of the command whose reply is to be lost.
        self.lose_at: int | None = None

    def reset(self) -> None:
        for writer in self.writers:
            _reset(writer)


class FaultProxy:
    """Forwards ``127.0.0.1:<port>`` to ``127.0.0.1:<target_port>``, with faults on demand."""

    def __init__(self, target_port: int, *, host: str = "127.0.0.1") -> None:
        self.target_port = target_port
        self.host = host
        self.port = 0
        self.delay_s = 0.0
        self._blackholed = False
        self._refusing = False
        self._replies_to_lose = 0
        self._lose_args: tuple[bytes, ...] | None = None
        self._links: set[_Link] = set()
        #: Replies lost so far (by lose_replies and lose_reply_to).
        self.lost = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.base_events.Server | None = None
        #: Connections accepted so far (a reconnecting client shows up here).
        self.accepted = 0

    # -- life cycle -------------------------------------------------------------------------

    def start(self) -> FaultProxy:
        self._thread.start()
        self._server = self._call(asyncio.start_server(self._serve, self.host, 0))
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    def stop(self) -> None:
        if self._server is not None:
            # On the proxy's own loop: asyncio's Server is not thread-safe, and closing it
            # from this thread raced with its last connection detaching there.
            self._call(self._close_server())
            self.drop()
            self._server = None
            self._call(self._cancel_all())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop.close()

    async def _close_server(self) -> None:
        assert self._server is not None
        self._server.close()

    async def _cancel_all(self) -> None:
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        return f"redis://{self.host}:{self.port}/0"

    # -- faults -----------------------------------------------------------------------------

    def drop(self) -> None:
        """Reset every open connection at once (the clients see a connection error)."""
        self._call(self._drop_all())

    def blackhole(self) -> None:
        """Stop forwarding in both directions and keep the connections open: a peer that
        vanished without a FIN/RST. New connections are accepted and black-holed too."""
        self._blackholed = True
        self._call(self._hole_all())

    def heal(self, *, keep_holes: bool = False) -> None:
        """End blackhole and refuse modes: new connections are forwarded. Connections
        black-holed so far are dropped (their protocol state is lost), or with ``keep_holes``
        left as they are for good: half-open, as after a NAT forgot them."""
        self._blackholed = False
        self._refusing = False
        if not keep_holes:
            self._call(self._drop_holes())

    def refuse(self) -> None:
        """Close every connection and refuse new ones until :meth:`heal`."""
        self._refusing = True
        self.drop()

    def delay(self, seconds: float) -> None:
        """Hold every chunk this long before forwarding it (both directions)."""
        self.delay_s = seconds

    def lose_replies(self, n: int = 1) -> None:
        """The next ``n`` chunks the server sends are swallowed, and the connection that was
        to receive each is dropped: the command ran, its client never hears of it."""
        self._replies_to_lose = n

    def lose_reply_to(self, *args: bytes) -> None:
        """The next command whose arguments include all of ``args`` runs, and its reply is
        lost: once the server has answered it, its connection is dropped instead."""
        self._lose_args = args

    # -- inside the proxy's loop ------------------------------------------------------------

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(10)

    async def _drop_all(self) -> None:
        for link in list(self._links):
            link.reset()
        self._links.clear()

    async def _hole_all(self) -> None:
        for link in self._links:
            link.hole = True

    async def _drop_holes(self) -> None:
        for link in [link for link in self._links if link.hole]:
            link.reset()
            self._links.discard(link)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        if self._refusing:
            _reset(writer)
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(self.host, self.target_port)
        except OSError:
            _reset(writer)
            return
        link = _Link(writer, up_writer)
        link.hole = self._blackholed
        self._links.add(link)
        pipes = {
            asyncio.ensure_future(self._pipe(reader, up_writer, link, from_server=False)),
            asyncio.ensure_future(self._pipe(up_reader, writer, link, from_server=True)),
        }
        _, pending = await asyncio.wait(pipes, return_when=asyncio.FIRST_COMPLETED)
        # One side closed (a killed server, a client gone): reset the other at once, as the
        # kernel resets a dead peer's connections; a black-holed link stays open, as a
        # half-open connection does, until it is healed or dropped.
        while pending and link.hole:
            _, pending = await asyncio.wait(pending, timeout=0.05)
        for pipe in pending:
            pipe.cancel()
        await asyncio.gather(*pipes, return_exceptions=True)
        self._links.discard(link)
        link.reset()

    async def _pipe(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        link: _Link,
        *,
        from_server: bool,
    ) -> None:
        while True:
            data = await reader.read(65536)
            if not data:
                break
            if link.hole:
                continue  # read and forget: the sender sees its bytes accepted
            if self.delay_s:
                await asyncio.sleep(self.delay_s)
            if from_server:
                if self._replies_to_lose > 0 or self._answers_lost_command(link, data):
                    self._replies_to_lose = max(0, self._replies_to_lose - 1)
                    self.lost += 1
                    link.reset()
                    break
            else:
                self._note_commands(link, data)
            writer.write(data)
            await writer.drain()

    def _note_commands(self, link: _Link, data: bytes) -> None:
        link.requests.feed(data)
        while (command := link.requests.gets()) is not False:
            link.sent += 1
            wanted = self._lose_args
            if wanted is not None and isinstance(command, list) and set(wanted) <= set(command):
                self._lose_args = None
                link.lose_at = link.sent

    def _answers_lost_command(self, link: _Link, data: bytes) -> bool:
        link.replies.feed(data)
        while link.replies.gets() is not False:
            link.answered += 1
        return link.lose_at is not None and link.answered >= link.lose_at


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close with RST where possible (SO_LINGER 0), as a dropped peer or a killed proxy does."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(Exception):
        writer.transport.abort()
