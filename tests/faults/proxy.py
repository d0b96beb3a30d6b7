"""A TCP proxy between clients and a test server that can drop, delay, blackhole connections
and lose replies: the network faults of the fault-injection suite, on real sockets.

It runs its own asyncio loop in a daemon thread, so sync and async tests drive it alike::

    with FaultProxy(server_port) as proxy:
        url = proxy.url                # point corral here
        proxy.drop()                   # reset every open connection
        proxy.blackhole()              # keep connections open, forward nothing (half-open peer)
        proxy.heal()                   # forward again (new connections only, after blackhole)
        proxy.lose_replies(1)          # the next reply is read from the server, then the
                                       # client's connection is dropped instead (the command
                                       # ran, the client never hears of it)
        proxy.refuse()                 # refuse new connections, as a server that is down
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


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
        self._pairs: set[tuple[asyncio.StreamWriter, asyncio.StreamWriter]] = set()
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
            self._server.close()
            self.drop()
            self._server = None
            self._call(self._cancel_all())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop.close()

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

    def heal(self) -> None:
        """End blackhole and refuse modes. Connections black-holed so far are dropped (their
        protocol state is lost); new ones are forwarded."""
        was = self._blackholed
        self._blackholed = False
        self._refusing = False
        if was:
            self.drop()

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

    # -- inside the proxy's loop ------------------------------------------------------------

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(10)

    async def _drop_all(self) -> None:
        for client, upstream in list(self._pairs):
            for writer in (client, upstream):
                _reset(writer)
        self._pairs.clear()

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
        pair = (writer, up_writer)
        self._pairs.add(pair)
        await asyncio.gather(
            self._pipe(reader, up_writer, pair, from_server=False),
            self._pipe(up_reader, writer, pair, from_server=True),
            return_exceptions=True,
        )
        self._pairs.discard(pair)
        for w in pair:
            _reset(w)

    async def _pipe(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        pair: tuple[asyncio.StreamWriter, asyncio.StreamWriter],
        *,
        from_server: bool,
    ) -> None:
        while True:
            data = await reader.read(65536)
            if not data:
                break
            if self._blackholed:
                continue  # read and forget: the sender sees its bytes accepted
            if self.delay_s:
                await asyncio.sleep(self.delay_s)
            if from_server and self._replies_to_lose > 0:
                self._replies_to_lose -= 1
                for w in pair:
                    _reset(w)
                break
            writer.write(data)
            await writer.drain()


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close with RST where possible (SO_LINGER 0), as a dropped peer or a killed proxy does."""
    import socket
    import struct

    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(Exception):
        writer.transport.abort()
