"""Queue administration: pause, drain, clean, obliterate, moving jobs in bulk, and cancelling.

A layer of :class:`AsyncQueue` (over the getters and the limits). Every bulk operation runs
its script in batches of at most :data:`BATCH` jobs and loops here until it is done: one
script call blocks the whole server while it runs, so a long one would stall every other
client, workers included.
"""

from __future__ import annotations

import logging
import re
from typing import TYPE_CHECKING, Any

from corral import _scripts, clock
from corral._async.job_data import DEFAULT_MAX_LOG_LINE_BYTES, DEFAULT_MAX_PROGRESS_BYTES
from corral._async.queue_getters import check_int
from corral._async.queue_limits import AsyncQueueLimits
from corral.bounds import (
    JOB_KEY_SUFFIXES,
    KEY_NAMESPACES,
    MAX_TIMESTAMP_MS,
    check_text,
    names_a_job,
)
from corral.errors import InvalidOptionError, QueueBusyError, script_error
from corral.job import JobState
from corral.options import MAX_SIZE_LIMIT, Duration, duration_ms

if TYPE_CHECKING:
    from corral._async._queue_base import AsyncQueueBase

logger = logging.getLogger("corral.queue")

_PAUSE = _scripts.load("pause_queue")
_DRAIN = _scripts.load("drain_queue")
_CLEAN = _scripts.load("clean_jobs")
_OBLITERATE = _scripts.load("obliterate_queue")
_RETRY_JOBS = _scripts.load("retry_jobs")
_PROMOTE_JOBS = _scripts.load("promote_jobs")

#: The most jobs one script call deletes or moves.
BATCH = 1000

#: The longest reason ``cancel`` takes, in characters (it is kept in failedReason, in the
#: events stream and in the message every worker of the queue receives).
MAX_CANCEL_REASON = 1000

#: States ``clean()`` accepts, and the name clean_jobs.lua knows each by.
CLEAN_STATES = {
    "completed": "completed",
    "failed": "failed",
    "wait": "wait",
    "waiting": "wait",
    "paused": "paused",
    "active": "active",
    "delayed": "delayed",
    "prioritized": "prioritized",
}

_GLOB_SPECIAL = re.compile(r"([*?\[\]\\])")


def _owned_leftover(rest: str, nested: set[str]) -> bool:
    """Whether ``K:<rest>``, a key left after obliterate's scripts, is this queue's to delete:
    not a key of a queue nested under it (``nested``), and not a key that hangs off a job of
    the queue this one is nested in (``bull:app:mail:logs`` is job "mail"'s log in queue
    "app"; no job of queue "mail" can be named "logs")."""
    head, colon, _ = rest.partition(":")
    if not colon:
        return rest not in JOB_KEY_SUFFIXES
    return head not in nested


def glob_escape(text: str) -> str:
    """``text`` as a literal in a ``SCAN MATCH`` pattern."""
    return _GLOB_SPECIAL.sub(r"\\\1", text)


def check_cancel_reason(reason: Any) -> str:
    """``reason`` when ``cancel`` can take it: ``""``, or text of at most
    :data:`MAX_CANCEL_REASON` characters."""
    if isinstance(reason, str) and not reason:
        return reason
    return check_text("reason", reason, max_length=MAX_CANCEL_REASON)


async def cancel_job(queue: AsyncQueueBase, job_id: str, reason: str = "") -> JobState:
    """Cancel the job ``job_id`` of ``queue``; what :meth:`AsyncQueueAdmin.cancel` does (and
    :meth:`AsyncJob.cancel`, which cannot import the queue classes)."""
    text = check_cancel_reason(reason)
    if not names_a_job(job_id):
        # A queue's own key (wait, meta...) is no job: refused before any I/O.
        raise script_error(-1, queue=queue.name, job_id=job_id)
    code = int(
        await queue._run(
            _scripts.CANCEL_JOB,
            [queue._job_prefix, job_id, text, clock.now_ms(), queue.keys.cancel_channel()],
        )
    )
    if code < 0:
        raise script_error(code, queue=queue.name, job_id=job_id)
    if code == 1:
        await _copy_dead_letter(queue, job_id)
    return JobState.ACTIVE if code == 2 else JobState.FAILED


async def _copy_dead_letter(queue: AsyncQueueBase, job_id: str) -> None:
    """A job cancelled here failed for good: when its opts name a dead-letter queue, the
    script left its record; copy it now (a worker of the queue copies it otherwise)."""
    from corral._async.dead_letter_queue import copy_dead_letters  # it imports the queue

    try:
        await copy_dead_letters(queue)
    except Exception as exc:  # the cancel itself is done
        logger.warning(
            "queue %s: job %s cancelled; its dead letter is left for a worker to copy: %s",
            queue.name,
            job_id,
            exc,
        )


def _finished_state(state: str) -> str:
    if state not in ("failed", "completed"):
        raise InvalidOptionError(f"state must be 'failed' or 'completed', got {state!r}")
    return state


class AsyncQueueAdmin(AsyncQueueLimits):
    """Methods that manage the whole queue."""

    _max_progress_bytes = DEFAULT_MAX_PROGRESS_BYTES
    _max_log_line_bytes = DEFAULT_MAX_LOG_LINE_BYTES

    @property
    def max_progress_bytes(self) -> int:
        """The largest progress ``job.update_progress`` stores for this queue's jobs, in bytes
        of JSON: 1 to 536,870,912 (512 MiB, Redis' largest string), 65,536 by default. Each
        update is also copied into the events stream, whose 10,000 entries this bounds."""
        return self._max_progress_bytes

    @max_progress_bytes.setter
    def max_progress_bytes(self, value: int) -> None:
        self._max_progress_bytes = check_int("max_progress_bytes", value, 1, MAX_SIZE_LIMIT)

    @property
    def max_log_line_bytes(self) -> int:
        """The longest line ``job.log`` stores for this queue's jobs, in bytes of UTF-8: 1 to
        536,870,912, 65,536 by default."""
        return self._max_log_line_bytes

    @max_log_line_bytes.setter
    def max_log_line_bytes(self, value: int) -> None:
        self._max_log_line_bytes = check_int("max_log_line_bytes", value, 1, MAX_SIZE_LIMIT)

    async def pause(self) -> None:
        """Pause the queue: no worker takes a job until :meth:`resume`.

        Active jobs run on and new jobs are still added (to wait, as BullMQ 6.x does).
        Writes ``meta.paused`` and the ``paused`` event.
        """
        await self._run(_PAUSE, [self._job_prefix, "pause"])

    async def resume(self) -> None:
        """Resume a paused queue and wake its workers (event ``resumed``)."""
        await self._run(_PAUSE, [self._job_prefix, "resume"])

    async def is_paused(self) -> bool:
        """Whether the queue is paused."""
        client = await self.client()
        return bool(await client.hexists(self.keys.meta, "paused"))

    async def drain(self, *, delayed: bool = False) -> None:
        """Delete every job waiting to run: waiting and prioritized ones, and delayed ones with
        ``delayed=True``. Active, completed, failed and waiting-children jobs stay.
        """
        flag = "1" if delayed else "0"
        while await self._run(_DRAIN, [self._job_prefix, flag, BATCH]) > 0:
            pass

    async def clean(self, grace: Duration, limit: int, state: str = "completed") -> list[str]:
        """Delete up to ``limit`` jobs of ``state`` older than ``grace``; returns their ids.

        A completed or failed job's age counts from when it finished, any other job's from
        when it was created. An active job is deleted only when it holds no lock (its worker
        is gone); a job being processed never is. Oldest jobs go first. Writes one
        ``cleaned{count}`` event.

        Args:
            grace: keep jobs younger than this (seconds or a ``timedelta``).
            limit: the most jobs to delete, 0 for no limit.
            state: ``completed``, ``failed``, ``waiting`` (or ``wait``), ``delayed``,
                ``prioritized``, ``active``, or ``paused`` (the legacy list).

        Raises:
            InvalidOptionError: a negative ``grace`` or ``limit`` or an unknown state; nothing
                was deleted.
        """
        cutoff = clock.now_ms() - duration_ms("grace", grace)
        check_int("limit", limit)
        if not isinstance(state, str) or state not in CLEAN_STATES:
            known = ", ".join(CLEAN_STATES)
            raise InvalidOptionError(f"state must be among {known}, got {state!r}")
        removed: list[str] = []
        cursor = 0
        while cursor >= 0:
            left = limit - len(removed) if limit else BATCH + 1
            reply = await self._run(
                _CLEAN,
                [
                    self._job_prefix,
                    CLEAN_STATES[state],
                    cutoff,
                    min(left, BATCH),
                    "1" if left <= BATCH else "0",
                    cursor,
                    len(removed),
                ],
            )
            cursor = int(reply[0])
            removed.extend(reply[1:])
        return removed

    async def obliterate(self, *, force: bool = False) -> None:
        """Delete the whole queue: every job, its settings, events, counters and schedulers.

        The queue is paused first so no worker takes a job meanwhile. Keys of other queues
        are untouched, even those whose name starts with this one's.

        Args:
            force: delete active jobs too (their workers then fail to finish them).

        Raises:
            QueueBusyError: the queue has active jobs and ``force`` is not set; nothing was
                deleted.
        """
        flag = "1" if force else "0"
        while True:
            reply = await self._run(_OBLITERATE, [self._job_prefix, flag, BATCH])
            if reply < 0:
                raise QueueBusyError(
                    f"queue {self.name} has active jobs: obliterate(force=True) deletes them"
                )
            if reply == 0:
                break
        # Left are keys no list names (K:de:*, K:repeat*, K:metrics*, debris). The ':' ends the
        # queue's name in the pattern, so queue "q" never matches the keys of queue "q2".
        client = await self.client()
        pattern = glob_escape(self._job_prefix) + "*"
        nested = await self._nested_queues()
        batch: list[str] = []
        async for key in client.scan_iter(match=pattern, count=BATCH):
            if not _owned_leftover(key[len(self._job_prefix) :], nested):
                continue
            batch.append(key)
            if len(batch) >= BATCH:
                await client.delete(*batch)
                batch.clear()
        if batch:
            await client.delete(*batch)

    async def _nested_queues(self) -> set[str]:
        """Names of the queues whose prefix is this queue's ``prefix:name`` (queue "mail" of
        prefix "bull:app" beside queue "app" of prefix "bull"): their keys are under this
        queue's, and must survive its obliterate. A queue has a ``meta`` hash."""
        client = await self.client()
        found: set[str] = set()
        pattern = glob_escape(self._job_prefix) + "*:meta"
        async for key in client.scan_iter(match=pattern, count=BATCH):
            name, _, rest = key[len(self._job_prefix) :].partition(":")
            if rest == "meta" and name not in KEY_NAMESPACES:
                found.add(name)
        return found

    async def retry_jobs(
        self, state: str = "failed", count: int = 1000, timestamp: int | None = None
    ) -> int:
        """Send every failed (or completed) job back to wait; returns how many.

        Each is retried as :meth:`AsyncJob.retry` does (finishedOn, processedOn,
        failedReason and returnvalue are cleared; attempt counters stay; priority is
        respected), with a ``waiting{prev: state}`` event, oldest first.

        Args:
            state: ``failed`` or ``completed``.
            count: jobs moved per script call (at most :data:`BATCH`, whatever is given:
                one call must not hold the server for long).
            timestamp: only jobs finished at or before this epoch ms; by default the time of
                the call, so jobs failing again meanwhile are not retried twice.

        Raises:
            InvalidOptionError: a bad state, a count < 1 or a negative timestamp.
        """
        _finished_state(state)
        check_int("count", count, 1)
        until = (
            clock.now_ms()
            if timestamp is None
            else check_int("timestamp", timestamp, 0, MAX_TIMESTAMP_MS)
        )
        batch = min(count, BATCH)
        total = 0
        while True:
            moved = int(await self._run(_RETRY_JOBS, [self._job_prefix, state, batch, until]))
            total += moved
            if moved < batch:
                return total

    async def promote_jobs(self, count: int = 1000) -> int:
        """Run every delayed job now (to wait, or prioritized); returns how many.

        Args:
            count: jobs moved per script call (at most :data:`BATCH`).

        Raises:
            InvalidOptionError: a count < 1.
        """
        batch = min(check_int("count", count, 1), BATCH)
        total = 0
        while True:
            moved = int(await self._run(_PROMOTE_JOBS, [self._job_prefix, batch]))
            total += moved
            if moved < batch:
                return total

    async def cancel(self, job_id: str, reason: str = "") -> JobState:
        """Cancel a job from any process: it fails for good with ``failedReason``
        ``"cancelled: <reason>"`` (``"cancelled"`` without one) and is never retried.

        A job that has not started (waiting, delayed, prioritized, waiting for its children)
        fails now, as a job failed at fetch does: its flow parent is told by its failure
        policy, its deduplication id is freed, ``removeOnFail`` applies, and the ``failed``
        event (BullMQ's, so Node listeners see it) gives the state it left as ``prev``. An
        active job's worker is asked to stop it, and fails it once its processor is stopped.
        An active job whose worker is gone (no lock) fails now.

        Args:
            job_id: the job's id.
            reason: why, up to 1000 characters; ``""`` for none.

        Returns:
            ``JobState.FAILED`` when the job failed now, ``JobState.ACTIVE`` when its worker
            was asked to stop it.

        Raises:
            InvalidOptionError: ``job_id`` or ``reason`` is not text, or ``reason`` is too
                long; nothing was written.
            JobNotFoundError: there is no such job.
            JobFinishedError: the job already completed or failed.
            JobStateError: the job is the pending iteration of a job scheduler (remove the
                scheduler instead), or is in none of the queue's states.

        Example::

            await queue.cancel(job.id, "the user closed the tab")
        """
        return await cancel_job(self, job_id, reason)
