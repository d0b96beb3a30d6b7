"""The dashboard's event streams: a page's :class:`~corral.dashboard.live.LiveHub`
subscription as ``text/event-stream`` (server-sent events)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from corral.dashboard.live import LiveHub, Subscription

#: The ``retry:`` hint of the event stream: how long a browser waits to reconnect, in ms.
RETRY_MS = 2000


def _event(update: dict[str, Any]) -> bytes:
    return b"event: update\ndata: " + orjson.dumps(update) + b"\n\n"


class _EventStream(StreamingResponse):
    """A streaming response that releases its subscription however the stream ends (the
    client went away, the hub closed, the server stopped)."""

    def __init__(self, hub: LiveHub, names: tuple[str, ...], request: Request) -> None:
        self._hub = hub
        self._names = names
        self._request = request
        self._sub: Subscription | None = None
        super().__init__(
            self._body(),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    async def _body(self) -> AsyncIterator[bytes]:
        sub = self._sub = await self._hub.open(list(self._names))
        yield f"retry: {RETRY_MS}\n\n".encode()
        while True:
            update = await sub.next(self._hub.heartbeat)
            if sub.closed:
                return
            if update is None:
                if await self._request.is_disconnected():
                    return
                yield b": ping\n\n"
            else:
                yield _event(update)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            if self._sub is not None:
                self._hub.release(self._sub)
            with contextlib.suppress(Exception):
                await self.body_iterator.aclose()  # type: ignore[attr-defined]


def sse_response(hub: LiveHub, queue_names: list[str], request: Request) -> StreamingResponse:
    """A ``text/event-stream`` of the queues' live state for one page: a ``retry:`` hint, the
    current state, then an ``event: update`` with ``data: <json>`` per update, and a
    ``: ping`` comment every ``hub.heartbeat`` s of quiet. It ends when the client goes away
    or the hub closes, and releases its subscription.

    Raises:
        InvalidOptionError: ``queue_names`` is not a list of queue names.
    """
    return _EventStream(hub, hub.check_names(queue_names), request)
