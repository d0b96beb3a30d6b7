"""A job's streamed partial results as server-sent events, for Starlette and FastAPI apps.

:func:`job_events` turns ``queue.read_stream`` into a ``text/event-stream`` response that a
browser's ``EventSource`` reads and resumes: each chunk is an ``event: chunk`` whose ``id:`` is
its stream id, so a reconnecting browser sends ``Last-Event-ID`` and gets the chunks after it,
none twice. Needs Starlette (``pip install 'corral[sse]'``; FastAPI brings it).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import orjson

try:
    from starlette.requests import Request
    from starlette.responses import PlainTextResponse, Response, StreamingResponse
    from starlette.types import Receive, Scope, Send
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        f"corral.sse needs Starlette ({exc.name} is missing): pip install 'corral[sse]'"
    ) from exc

from corral._async.queue_stream import _check_from_id
from corral.bounds import names_a_job
from corral.errors import InvalidOptionError, JobNotFoundError
from corral.stream_items import StreamEnd, StreamItem

if TYPE_CHECKING:
    from corral._async.queue import AsyncQueue

#: The ``retry:`` hint sent first by default: how long a browser waits before it reconnects,
#: in ms.
RETRY_MS = 2000
#: Default seconds between ``: ping`` comments while no chunk comes: proxies and load
#: balancers close connections that stay silent (often after 30 to 60 s).
DEFAULT_HEARTBEAT = 15.0


def _chunk(item: StreamItem) -> bytes:
    return (
        b"id: " + item.id.encode() + b"\nevent: chunk\ndata: " + orjson.dumps(item.value) + b"\n\n"
    )


def _end(end: StreamEnd) -> bytes:
    return b"event: end\ndata: " + orjson.dumps({"state": end.state, "value": end.value}) + b"\n\n"


class _JobEventStream(StreamingResponse):
    """The event stream of one job. It looks for the job before it answers, so that a job that
    does not exist gets a plain 404 rather than a stream that fails at once."""

    def __init__(
        self,
        queue: AsyncQueue,
        job_id: str,
        from_id: str,
        request: Request | None,
        heartbeat: float,
        retry_ms: int,
    ) -> None:
        self._queue, self._job_id = queue, job_id
        self._retry_ms = retry_ms
        self._items = queue.read_stream(job_id, from_id)
        self._request = request
        self._heartbeat = heartbeat
        self._next: asyncio.Future[StreamItem | StreamEnd] | None = None
        super().__init__(
            self._body(),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    async def _check_job(self) -> None:
        """Raise JobNotFoundError for a job that does not exist (InvalidOptionError for an id
        that names none), before the response starts: a 404, not a stream that fails."""
        if not names_a_job(self._job_id):
            raise JobNotFoundError(f"no job {self._job_id!r} in queue {self._queue.name}")
        client = await self._queue.client()
        if not await client.exists(self._queue.keys.job(self._job_id)):
            raise JobNotFoundError(
                f"job {self._job_id} does not exist in queue {self._queue.name}",
                queue=self._queue.name,
                job_id=self._job_id,
            )

    def _pending(self) -> asyncio.Future[StreamItem | StreamEnd]:
        # One read in flight, kept across heartbeats: cancelling it would end the generator.
        if self._next is None:
            self._next = asyncio.ensure_future(self._items.__anext__())
        return self._next

    async def _take(self) -> StreamItem | StreamEnd | None:
        """The next item, or ``None`` after ``heartbeat`` seconds without one."""
        pending = self._pending()
        done, _ = await asyncio.wait({pending}, timeout=self._heartbeat)
        if not done:
            return None
        self._next = None
        return pending.result()

    async def _body(self) -> AsyncIterator[bytes]:
        yield f"retry: {self._retry_ms}\n\n".encode()
        while True:
            try:
                item = await self._take()
            except JobNotFoundError as exc:  # removed while it was read
                yield b"event: gone\ndata: " + orjson.dumps({"error": str(exc)}) + b"\n\n"
                return
            if item is None:
                if self._request is not None and await self._request.is_disconnected():
                    return
                yield b": ping\n\n"
            elif isinstance(item, StreamEnd):
                yield _end(item)
                return
            else:
                yield _chunk(item)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            try:
                await self._check_job()
            except (JobNotFoundError, InvalidOptionError) as exc:
                status = 404 if isinstance(exc, JobNotFoundError) else 400
                await PlainTextResponse(str(exc), status_code=status)(scope, receive, send)
                return
            await super().__call__(scope, receive, send)
        finally:
            # The client went away, the stream ended, or the server stops: no read left behind.
            if self._next is not None:
                self._next.cancel()
                with contextlib.suppress(BaseException):
                    await self._next
            with contextlib.suppress(Exception):
                await self._items.aclose()  # type: ignore[attr-defined]


def job_events(
    queue: AsyncQueue,
    job_id: str,
    request: Request | None = None,
    *,
    from_id: str = "0",
    heartbeat: float = DEFAULT_HEARTBEAT,
    retry_ms: int = RETRY_MS,
) -> Response:
    """A ``text/event-stream`` response of the job's chunks, then how it ended.

    The stream sends a ``retry:`` hint, then for each chunk ``id: <stream id>``,
    ``event: chunk``, ``data: <the chunk's JSON>``; then one ``event: end`` with
    ``data: {"state": "completed"|"failed", "value": <return value or reason>}``, and closes.
    While no chunk comes it sends a ``: ping`` comment every ``heartbeat`` seconds, and stops
    when the client has gone. A job removed while it is read gets ``event: gone``. A browser
    should call ``close()`` on ``end``: an ``EventSource`` reconnects to a stream that closed.

    Args:
        queue: the job's queue.
        job_id: the job.
        request: the request; its ``Last-Event-ID`` header (sent by a reconnecting
            ``EventSource``) says where to resume, and it is used to notice a client gone.
        from_id: where to start when the request carries no ``Last-Event-ID`` (``"0"``: the
            first chunk).
        heartbeat: seconds between pings.
        retry_ms: the ``retry:`` hint: how long a browser waits before it reconnects after a
            drop, in ms (0 to 3,600,000; 2000 by default).

    Returns:
        The streaming response; a plain 404 when the job does not exist, a 400 when
        ``job_id`` is no job id or ``Last-Event-ID`` is no stream id.

    Example::

        @app.get("/jobs/{job_id}/events")
        async def events(job_id: str, request: Request):
            return job_events(queue, job_id, request)
    """
    if (
        isinstance(heartbeat, bool)
        or not isinstance(heartbeat, (int, float))
        or not (0 < heartbeat <= 3600)
    ):
        raise InvalidOptionError(f"heartbeat must be seconds from 0 to 3600, got {heartbeat!r}")
    if (
        isinstance(retry_ms, bool)
        or not isinstance(retry_ms, int)
        or not 0 <= retry_ms <= 3_600_000
    ):
        raise InvalidOptionError(
            f"retry_ms must be an int of ms from 0 to 3600000, got {retry_ms!r}"
        )
    start = _check_from_id(from_id)
    if request is not None:
        resume: Any = request.headers.get("last-event-id")
        if resume:
            try:
                start = _check_from_id(resume.strip())
            except InvalidOptionError as exc:
                message = str(exc).replace("from_id", "Last-Event-ID", 1)
                return PlainTextResponse(message, status_code=400)
    return _JobEventStream(queue, job_id, start, request, float(heartbeat), retry_ms)
