"""The lock tokens of a worker's fetches, and the jobs of fetches that nobody runs.

Every job a fetch takes is locked with ``f"{base}:{seq}"``: one uuid per worker, one number per
job, handed out in ranges (:meth:`FetchTokens.fetch`). A fetch whose reply was lost, or whose
jobs arrive when nobody will run them (close began, concurrency dropped, the run's ``max_jobs``
was reached), may have locked jobs that no lease owns: their ranges are kept here and given
back to wait in one ``release_fetched`` call at the next chance. They were never started, so
they do not count as stalled.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable
from typing import Any

from corral import _scripts
from corral._async.queue import AsyncQueue
from corral._supervisor import Outage
from corral.errors import server_error_kind
from corral.worker_options import WorkerOptions

logger = logging.getLogger("corral.worker")


class FetchTokens:
    """Hands out a worker's lock tokens and gives back the jobs of lost fetches.

    Args:
        o: the worker's options (lock, name, stall and limiter settings of every fetch).
        wake: called when a fetch is lost, so that the fetch loop gives its jobs back soon.
    """

    __slots__ = (
        "_dead_letter_queue",
        "_limit_max",
        "_limit_ms",
        "_lock_ms",
        "_max_stalled",
        "_metrics_points",
        "_name",
        "_queue_name",
        "_seq",
        "_wake",
        "base",
        "lost",
    )

    def __init__(self, o: WorkerOptions, wake: Callable[[], None]) -> None:
        self.base = str(uuid.uuid4())
        self._seq = 0
        #: ``(first_seq, count)`` of lock tokens handed out by fetches whose reply was lost.
        #: Always the same list (emptied in place): the worker reads it on every fetch step.
        self.lost: list[tuple[int, int]] = []
        self._wake = wake
        self._queue_name = o.queue_name
        self._lock_ms = o.lock_ms
        self._name = o.name
        self._max_stalled = o.max_stalled
        self._limit_max = o.limit_max
        self._limit_ms = o.limit_ms
        self._metrics_points = o.metrics_points
        self._dead_letter_queue = o.dead_letter_queue

    def fetch(self, count: int) -> _scripts.FetchNext:
        """The fetch part of a script call for ``count`` jobs, with their range of tokens."""
        first = self._seq
        self._seq += count
        return _scripts.FetchNext(
            count,
            self.base,
            first,
            self._lock_ms,
            self._name,
            self._max_stalled,
            self._limit_max,
            self._limit_ms,
            self._metrics_points,
            self._dead_letter_queue,
        )

    def fetch_lost(self, first_seq: int, count: int) -> None:
        """A fetch may have handed out jobs that nobody runs: give them back at the next
        chance (they were never started, so they do not count as stalled)."""
        self.lost.append((first_seq, count))
        self._wake()

    async def release(self, queue: AsyncQueue) -> None:
        """Give the jobs of every lost fetch back to wait (kept for the next try on error)."""
        lost = self.lost.copy()
        self.lost.clear()
        args: list[Any] = [queue._job_prefix, self.base]
        for first, count in lost:
            args += (first, count)
        try:
            released = await queue._run(_scripts.RELEASE_FETCHED, args)
        except BaseException:
            self.lost += lost  # not done: try again at the next step
            raise
        for job_id in released:
            logger.info(
                "worker %s: job %s given back to wait (fetched, not started)",
                self._queue_name,
                job_id,
            )

    async def give_back_now(self, queue: AsyncQueue, outage: Outage) -> None:
        """:meth:`release` when the fetch loop has ended, retrying a transient error for as
        long as a lock lasts (after that the stalled check gives the jobs back anyway)."""
        for _ in range(max(1, round(self._lock_ms / 250))):
            try:
                await self.release(queue)
                return
            except Exception as exc:
                if server_error_kind(exc) != "transient":
                    return
                await asyncio.sleep(outage.failed("give back", exc))
