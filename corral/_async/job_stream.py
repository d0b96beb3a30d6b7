"""Streamed partial results of :class:`AsyncJob` (a mixin): ``await job.stream(chunk)``.

A processor appends chunks (tokens, steps, any JSON value) to the job's own Redis stream,
``<prefix>:<queue>:<id>:x-stream``; consumers read them with ``queue.read_stream`` (see
:mod:`corral._async.queue_stream`) while the job runs, or after. The stream is corral's: BullMQ
never reads it, so a Node worker processes such a job as any other. It is bounded three ways:
a chunk's size (:data:`MAX_CHUNK_BYTES`), the stream's length (``max_len``, trimmed as it
grows) and its life (``ttl`` after the last chunk); removing the job deletes it at once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from corral import _codec, _scripts
from corral.bounds import MAX_COUNT, check_int, names_a_job
from corral.errors import InvalidOptionError, script_error
from corral.options import Duration, positive_ms

if TYPE_CHECKING:
    from corral._async._queue_base import AsyncQueueBase

#: Largest chunk ``job.stream`` takes, in bytes of JSON: a token, a step's result or a short
#: document fit; 10,000 of them (the default cap) stay within 640 MiB.
MAX_CHUNK_BYTES = 64 * 1024
#: Default cap on a job's stream length (entries); the oldest go first. The trim is
#: approximate (``XADD MAXLEN ~``, which drops whole nodes of the stream): up to about 100
#: entries more may stay.
DEFAULT_STREAM_MAX_LEN = 10_000
#: Default life of a job's stream after its last chunk, in seconds (a day): long enough for a
#: consumer that joins late or reconnects, short enough that a job nobody removes (or that a
#: Node worker removes, not knowing the stream) leaves nothing behind for ever.
DEFAULT_STREAM_TTL = 24 * 3600.0

_ADD_STREAM_CHUNK = _scripts.load("add_stream_chunk")


class AsyncJobStreamMixin:
    """The ``stream`` method of :class:`AsyncJob`."""

    if TYPE_CHECKING:
        queue: AsyncQueueBase
        id: str
        token: str | None

    async def stream(
        self,
        chunk: Any,
        *,
        max_len: int = DEFAULT_STREAM_MAX_LEN,
        ttl: Duration = DEFAULT_STREAM_TTL,
    ) -> str:
        """Append ``chunk`` to the job's stream of partial results, for ``queue.read_stream``.

        Chunks are read in the order they were appended, each with the attempt that wrote it.
        The stream is deleted with the job (``remove``, ``removeOnComplete``/``removeOnFail``,
        ``clean``, ``obliterate``), and in any case ``ttl`` after its last chunk.

        Args:
            chunk: any JSON value, of at most :data:`MAX_CHUNK_BYTES` (64 KiB) of JSON.
            max_len: keep about the newest ``max_len`` chunks (10,000 by default; the trim is
                approximate, a hundred more may stay).
            ttl: seconds (or a ``timedelta``) the stream lives after this chunk; a day by
                default.

        Returns:
            The chunk's stream id (``"<ms>-<seq>"``).

        Raises:
            InvalidOptionError: ``chunk`` is not JSON-serializable or is too large, or
                ``max_len``/``ttl`` is out of range; nothing was written.
            JobNotFoundError: the job does not exist any more.
            JobFinishedError: the job has already finished (its readers have stopped).
            LockMissingError, LockMismatchError: this attempt lost the job's lock (it may run
                elsewhere now); nothing was written.

        Example::

            async def process(job):
                async for token in model.generate(job.data["prompt"]):
                    await job.stream(token)
                return "done"
        """
        encoded = _codec.encode_data(chunk)
        size = len(encoded.encode())
        if size > MAX_CHUNK_BYTES:
            raise InvalidOptionError(
                f"stream chunk is {size} bytes of JSON, over the limit of {MAX_CHUNK_BYTES}"
            )
        max_len = check_int("max_len", max_len, 1, MAX_COUNT)
        ttl_ms = positive_ms("ttl", ttl)
        if not names_a_job(self.id):
            raise script_error(-1, queue=self.queue.name, job_id=self.id)
        reply = await self.queue._run(
            _ADD_STREAM_CHUNK,
            [
                self.queue._job_prefix,
                self.id,
                encoded,
                max_len,
                ttl_ms,
                MAX_CHUNK_BYTES,
                self.token or "0",  # the attempt's lock; none for a job processed by hand
            ],
        )
        if isinstance(reply, list):  # {-10, limit}: checked above, so only on a mismatch
            raise InvalidOptionError(f"stream chunk is over the limit of {int(reply[1])} bytes")
        if isinstance(reply, int):
            raise script_error(reply, queue=self.queue.name, job_id=self.id)
        return _codec.text(reply)
