# Generated from corral/_async/queue_stream.py by scripts/unasync.py: do not edit.
"""Reading a job's stream of partial results: ``queue.read_stream(job_id)`` (a mixin of
:class:`Queue`).

A reader yields the chunks ``job.stream`` appended (:class:`~corral.stream_items.StreamItem`,
in order, each with its stream id), then one :class:`~corral.stream_items.StreamEnd` once the
job completes or fails for good, and stops. The finish scripts know nothing of streams: a
reader learns of the finish from the queue's events stream (``completed``/``failed`` carry the
job id and the value), with one ``XREAD BLOCK`` over both streams. The job's own entries are
handed out first, so every chunk written before the finish comes before the end. Since the
events stream is trimmed (``maxLenEvents``) and an event can be missed, the job's state is
also read before the first block and at least every :data:`STATE_POLL_S`: no reader hangs on
a job that is done. A reader that joins after the finish replays what the stream still holds,
then ends with the outcome read from the job's hash.
"""

from __future__ import annotations

import logging
from time import sleep
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from corral import _codec
from corral._sync.queue_events import BLOCK_MS, check_stream_id
from corral._supervisor import Outage
from corral.backoff import reconnect_delay
from corral.bounds import names_a_job
from corral.clock import monotonic
from corral.errors import InvalidOptionError, JobNotFoundError, server_error_kind
from corral.stream_items import StreamEnd, StreamItem, parse_entry

if TYPE_CHECKING:
    from redis import Redis

    from corral._keys import QueueKeys

logger = logging.getLogger("corral.stream")

#: How often a reader reads the job's state besides watching its events (seconds): a finish
#: whose event was trimmed before the reader saw it is found within this time.
STATE_POLL_S = 1.0
#: Entries taken per read of either stream.
READ_COUNT = 500

Entries = list[tuple[str, dict[str, str]]]


def _check_from_id(from_id: Any) -> str:
    try:
        checked = check_stream_id(from_id)
    except InvalidOptionError:
        checked = "$"
    if checked == "$":
        raise InvalidOptionError(
            f"from_id must be '0' or a chunk's stream id like '1700000000000-0', got {from_id!r}"
        )
    return checked


class QueueStreamMixin:
    """The ``read_stream`` method of :class:`Queue`."""

    if TYPE_CHECKING:
        name: str
        keys: QueueKeys

        def client(self) -> Redis: ...

    def read_stream(
        self, job_id: str, from_id: str = "0"
    ) -> Iterator[StreamItem | StreamEnd]:
        """The chunks a job streamed (``job.stream``), then how it ended.

        Yields every chunk after ``from_id`` in order, waiting for new ones while the job runs,
        then one :class:`~corral.stream_items.StreamEnd` (``completed`` with the return value,
        or ``failed`` with the reason) when the job finishes for good, and stops. A retried
        attempt is no end: its chunks follow, with a higher ``attempt``. Transient server
        errors (a dropped connection, a restart) are waited out, and reading goes on from the
        last chunk seen.

        Args:
            job_id: the job.
            from_id: read the chunks after this stream id: ``"0"`` (default) for all of them,
                or the ``id`` of the last chunk seen, to resume after a reconnect.

        Raises:
            JobNotFoundError: there is no such job (never added, or removed: its stream went
                with it), at the start or while reading.
            InvalidOptionError: ``from_id`` is not a stream id.

        Example::

            for item in queue.read_stream(job.id):
                if isinstance(item, StreamEnd):
                    print("finished:", item.state, item.value)
                else:
                    print(item.value, end="")
        """
        last = _check_from_id(from_id)
        if not names_a_job(job_id):
            raise self._not_found(job_id)
        keys = self.keys
        stream_key, events_key = keys.job_stream(job_id), keys.events
        client = self.client()
        # The events stream's position is taken before the job is looked at: a finish cannot
        # slip between the look and the first read.
        newest: Entries = client.xrevrange(events_key, count=1)  # type: ignore[assignment]
        events_at = newest[0][0] if newest else "0-0"
        end = self._stream_end(job_id)
        polled = monotonic()
        outage = Outage(f"stream of job {job_id} in queue {self.name}", logger)
        while end is None:
            try:
                reply: list[tuple[str, Entries]] = client.xread(  # type: ignore[assignment]
                    {stream_key: last, events_key: events_at}, count=READ_COUNT, block=BLOCK_MS
                )
            except Exception as exc:
                if server_error_kind(exc) != "transient":
                    raise
                outage.failed("read", exc)
                sleep(reconnect_delay(outage.failures, cap=1.0))
                client = self.client()
                continue
            outage.succeeded()
            streams = {_codec.text(name): entries for name, entries in reply or ()}
            for entry_id, fields in streams.get(stream_key, ()):
                last = entry_id
                yield parse_entry(entry_id, fields)
            for entry_id, fields in streams.get(events_key, ()):
                events_at = entry_id
                end = end or _end_event(job_id, fields)
            if end is None and (not reply or monotonic() - polled >= STATE_POLL_S):
                end = self._stream_end(job_id, events_at)
                polled = monotonic()
        # Done: the chunks written before the finish that no read has handed out yet.
        while True:
            entries: Entries = client.xrange(  # type: ignore[assignment]
                stream_key, f"({last}", "+", count=READ_COUNT
            )
            for entry_id, fields in entries:
                last = entry_id
                yield parse_entry(entry_id, fields)
            if len(entries) < READ_COUNT:
                break
        yield end

    def _not_found(self, job_id: str) -> JobNotFoundError:
        return JobNotFoundError(
            f"job {job_id} does not exist in queue {self.name}", queue=self.name, job_id=job_id
        )

    def _stream_end(self, job_id: str, events_at: str | None = None) -> StreamEnd | None:
        """How the job ended, read from its hash; ``None`` while it has not finished.

        A job that is gone raises JobNotFoundError, unless its finish is in the events after
        ``events_at`` (a job removed by its own ``removeOnComplete``/``removeOnFail`` is gone
        the moment it ends: its event still says how).
        """
        client = self.client()
        keys = self.keys
        with client.pipeline(transaction=True) as pipe:
            pipe.zscore(keys.completed, job_id)
            pipe.zscore(keys.failed, job_id)
            pipe.hmget(keys.job(job_id), "returnvalue", "failedReason")
            pipe.exists(keys.job(job_id))
            done, failed, (value, reason), exists = pipe.execute()
        if done is not None:
            return StreamEnd("completed", _codec.loads(value))
        if failed is not None:
            return StreamEnd("failed", reason or "")
        if exists:
            return None
        if events_at is not None:
            while True:
                entries: Entries = client.xrange(  # type: ignore[assignment]
                    keys.events, f"({events_at}", "+", count=READ_COUNT
                )
                for entry_id, fields in entries:
                    events_at = entry_id
                    end = _end_event(job_id, fields)
                    if end is not None:
                        return end
                if len(entries) < READ_COUNT:
                    break
        raise self._not_found(job_id)


def _end_event(job_id: str, fields: dict[str, str]) -> StreamEnd | None:
    """The end a ``completed``/``failed`` event of the queue's stream tells for this job."""
    if fields.get("jobId") != job_id:
        return None
    event = fields.get("event")
    if event == "completed":
        return StreamEnd("completed", _codec.loads(fields.get("returnvalue")))
    if event == "failed":
        return StreamEnd("failed", fields.get("failedReason", ""))
    return None
