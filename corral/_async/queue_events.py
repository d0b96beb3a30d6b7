"""``AsyncQueueEvents``: follow a queue's events stream (BullMQ's ``QueueEvents``).

It reads ``<prefix>:<queue>:events`` with ``XREAD BLOCK`` on its own connection and yields
typed events (:mod:`corral.events`). It remembers the id of the last event it yielded, so a
lost connection or a restarted server costs nothing: it reconnects with capped backoff and
reads on from that id. Pass ``last_event_id`` to resume where an earlier listener stopped.
"""

from __future__ import annotations

import logging
import re
from asyncio import sleep
from collections import deque
from collections.abc import AsyncIterator
from typing import Any

from corral import _codec, options
from corral._async._queue_base import AsyncQueueBase
from corral._async._redis import Connectable, LazyClient
from corral._keys import DEFAULT_PREFIX, QueueKeys
from corral._listeners import Callback, Listeners
from corral._supervisor import Outage
from corral.backoff import reconnect_delay
from corral.bounds import check_timeout
from corral.clock import monotonic
from corral.errors import InvalidOptionError, JobFailedError, JobNotFoundError, server_error_kind
from corral.events import EVENT_TYPES, Completed, Failed, QueueEvent, parse_event

logger = logging.getLogger("corral.events")
#: How long one XREAD blocks, in ms; short enough for redis-py's default read timeout (5 s).
BLOCK_MS = 1000


class AsyncQueueEvents:
    """The events of one queue, as an async iterator or through callbacks.

    Args:
        queue_name: the queue to follow.
        connection: a URL, a redis-py client (``decode_responses=True``) or ``None``.
        prefix: key prefix (``bull``).
        last_event_id: where to start: ``"$"`` (default) for events from now on, ``"0"`` for
            everything still in the stream, or the ``event_id`` of an event seen before.

    Example::

        async with AsyncQueueEvents("emails") as events:
            async for event in events:
                if isinstance(event, Completed):
                    print(event.job_id, event.returnvalue)
    """

    def __init__(
        self,
        queue_name: str,
        *,
        connection: Connectable = None,
        prefix: str = DEFAULT_PREFIX,
        last_event_id: str = "$",
    ) -> None:
        options.check_name("queue name", queue_name, colon=False)
        self.queue_name = queue_name
        self.keys = QueueKeys(queue_name, options.check_prefix(prefix))
        self.last_event_id = check_stream_id(last_event_id)
        self._clients = LazyClient(connection, slot_key=self.keys.base, owner="QueueEvents")
        self._outage = Outage(f"events {queue_name}", logger)
        self._buffer: deque[QueueEvent] = deque()
        self._closed = False
        self._listeners = Listeners("queue events", {**dict.fromkeys(EVENT_TYPES, ""), "*": ""})

    async def _read(self, block_ms: int) -> None:
        """Fill the buffer with the next events, waiting at most ``block_ms``."""
        client = await self._clients.get()
        if self.last_event_id == "$":
            # Pin "$" to a real id now: a reconnect must not skip what came in between.
            newest: list[tuple[str, Any]] = await client.xrevrange(self.keys.events, count=1)  # type: ignore[assignment]
            self.last_event_id = newest[0][0] if newest else "0-0"
        reply: list[tuple[str, list[tuple[str, dict[str, str]]]]] = await client.xread(  # type: ignore[assignment]
            {self.keys.events: self.last_event_id}, count=500, block=block_ms
        )
        for _stream, entries in reply or ():
            for event_id, fields in entries:
                self._buffer.append(parse_event(_codec.text(event_id), fields))

    async def next_event(self, timeout: float | None = None) -> QueueEvent | None:
        """The next event, or ``None`` after ``timeout`` seconds (``None``: wait as long as it
        takes).

        Transient server errors (a dropped connection, a restart, ``READONLY`` on a failover,
        ``BUSY``...) are waited out with capped backoff, one warning per outage, and reading
        goes on from the last id seen. Other errors (a wrong password, a missing permission)
        are raised.
        """
        timeout = check_timeout(timeout)
        deadline = None if timeout is None else monotonic() + timeout
        while not self._buffer:
            if self._closed:
                return None
            left = BLOCK_MS if deadline is None else int((deadline - monotonic()) * 1000)
            if left <= 0:
                return None
            try:
                await self._read(max(1, min(BLOCK_MS, left)))
            except Exception as exc:
                if self._closed:
                    return None  # close() cut the read short: nothing went wrong
                if server_error_kind(exc) != "transient":
                    raise
                self._outage.failed("read", exc)
                await sleep(reconnect_delay(self._outage.failures, cap=1.0))
            else:
                self._outage.succeeded()
        event = self._buffer.popleft()
        self.last_event_id = event.event_id
        return event

    def __aiter__(self) -> AsyncIterator[QueueEvent]:
        return self

    async def __anext__(self) -> QueueEvent:
        event = await self.next_event()
        if event is None:
            raise StopAsyncIteration
        return event

    def on(self, event: str, callback: Callback | None = None) -> Any:
        """Call ``callback(event)`` for events of that name (``"*"``: every event) while
        :meth:`run` runs; usable as a decorator."""
        return self._listeners.on(event, callback)

    async def run(self) -> None:
        """Dispatch events to the callbacks of :meth:`on` until :meth:`close`."""
        async for event in self:
            await self._listeners.emit(event.name, event)
            await self._listeners.emit("*", event)

    async def close(self) -> None:
        """Stop iterating (a running :meth:`run` returns within a second) and disconnect."""
        self._closed = True
        await self._clients.close()

    async def __aenter__(self) -> AsyncQueueEvents:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


#: How often a wait for a job also reads the job's state (seconds): the events stream is
#: trimmed (``maxLenEvents``), so a finish whose event was trimmed away is still seen.
STATE_POLL_S = 1.0


#: A stream entry id as XREAD takes it: ``<ms>`` or ``<ms>-<seq>``; ``$`` and ``0`` too.
_STREAM_ID = re.compile(r"\$|\d{1,20}(-\d{1,20})?")


def check_stream_id(value: Any) -> str:
    """``last_event_id``: ``"$"`` (only new events), ``"0"`` (from the start), or an id an
    event carried (``"1700000000000-0"``); refused now, rather than at the first read."""
    if not isinstance(value, str) or not _STREAM_ID.fullmatch(value):
        raise InvalidOptionError(
            f"last_event_id must be '$', '0' or an event id like '1700000000000-0', got {value!r}"
        )
    ms, _, seq = value.partition("-")
    if value != "$" and (int(ms) >= 2**64 or (seq and int(seq) >= 2**64)):
        raise InvalidOptionError(f"last_event_id parts must be below 2**64, got {value!r}")
    return value


async def wait_until_finished(queue: AsyncQueueBase, job_id: str, timeout: float | None) -> Any:
    """The return value of a job once it completes; raise its failure once it fails.

    It works for jobs that finished before the call: the events stream's position is taken
    first, then the job is looked at, then the stream is read from that position, so no
    finish can slip between the two. The job's state is read again every
    :data:`STATE_POLL_S` and before giving up, so a finish whose event was trimmed from the
    stream is not missed.

    Raises:
        JobFailedError: the job failed (for good); ``failed_reason`` says why.
        JobNotFoundError: no such job (it may have been removed after it finished).
        TimeoutError: ``timeout`` seconds passed first.
        InvalidOptionError: ``timeout`` is not ``None`` or seconds.
    """
    timeout = check_timeout(timeout)
    client = await queue.client()
    newest: list[tuple[str, Any]] = await client.xrevrange(queue.keys.events, count=1)  # type: ignore[assignment]
    start = newest[0][0] if newest else "0-0"
    found, value = await _finished(queue, job_id)
    if found:
        return value
    events = AsyncQueueEvents(
        queue.name, connection=client, prefix=queue.prefix, last_event_id=start
    )
    deadline = None if timeout is None else monotonic() + timeout
    while True:
        left = STATE_POLL_S if deadline is None else min(STATE_POLL_S, deadline - monotonic())
        event = await events.next_event(left) if left > 0 else None
        if event is None:  # a while without its event: look at the job itself
            found, value = await _finished(queue, job_id)
            if found:
                return value
            if deadline is not None and monotonic() >= deadline:
                raise TimeoutError(
                    f"job {job_id} of queue {queue.name} did not finish in {timeout}s"
                )
        elif isinstance(event, Completed) and event.job_id == job_id:
            return event.returnvalue
        elif isinstance(event, Failed) and event.job_id == job_id:
            raise JobFailedError(event.failed_reason, queue=queue.name, job_id=job_id)


async def _finished(queue: AsyncQueueBase, job_id: str) -> tuple[bool, Any]:
    """``(True, return value)`` when the job completed, ``(False, None)`` while it has not
    finished; raises its failure, or JobNotFoundError when there is no such job."""
    client = await queue.client()
    keys = queue.keys
    async with client.pipeline(transaction=True) as pipe:
        pipe.zscore(keys.completed, job_id)
        pipe.zscore(keys.failed, job_id)
        pipe.hmget(keys.job(job_id), "returnvalue", "failedReason")
        pipe.exists(keys.job(job_id))
        done, failed, (value, reason), exists = await pipe.execute()
    if done is not None:
        return True, _codec.loads(value)
    if failed is not None:
        raise JobFailedError(reason or "", queue=queue.name, job_id=job_id)
    if not exists:
        raise JobNotFoundError(
            f"job {job_id} does not exist in queue {queue.name} (removed after it finished?)",
            queue=queue.name,
            job_id=job_id,
        )
    return False, None
