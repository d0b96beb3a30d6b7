"""What runs beside a worker's fetching, as steps of its supervisor: lock renewal, the
stalled-job check and the copy of dead letters. None handles errors itself: the supervisor
waits out transient ones and restarts a step that failed for another reason.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from corral import _codec, _scripts
from corral._async.dead_letter_queue import DeadLetterCopier
from corral._async.queue import AsyncQueue
from corral._lease import Lease
from corral.clock import monotonic, now_ms

logger = logging.getLogger("corral.worker")

#: How the upkeep steps report: ``emit(event, *args)``.
Emit = Callable[..., Awaitable[None]]


class LockRenewer:
    """Renews the lock of every lease that needs it, in one call, every ``lock_ms / 2``.

    A lease needs its lock until the server confirmed how its job ended, so a finish that
    waits out an outage still holds the job. A lock found lost is reported by its lease.
    """

    def __init__(self, queue: AsyncQueue, leases: Callable[[], Iterable[Lease]], lock_ms: int):
        self._queue = queue
        self._leases = leases
        self._lock_ms = lock_ms

    async def step(self) -> float:
        leases = [lease for lease in self._leases() if lease.renewing]
        if leases:
            args: list[Any] = [self._queue._job_prefix, self._lock_ms]
            for lease in leases:
                args += (lease.job_id, lease.token)
            sent = monotonic()
            lost = {_codec.text(t) for t in await self._queue._run(_scripts.EXTEND_LOCKS, args)}
            for lease in leases:
                if lease.token in lost:
                    await lease.lock_lost()
                else:
                    lease.renewed(sent)
        return self._lock_ms / 2000


class StallChecker:
    """Runs the queue's stalled check at start, then when the earliest lock expires (at most
    every ``interval_ms``): a dead worker's job is back in wait as soon as its lock is gone."""

    def __init__(self, queue: AsyncQueue, interval_ms: int, emit: Emit) -> None:
        self._queue = queue
        self._interval_ms = interval_ms
        self._emit = emit

    async def step(self) -> float:
        reply = await self._queue._run(
            _scripts.CHECK_STALLED, [self._queue._job_prefix, now_ms(), self._interval_ms]
        )
        for raw in reply[1:]:
            job_id = _codec.text(raw)
            logger.warning("worker %s: job %s stalled, back in wait", self._queue.name, job_id)
            await self._emit("stalled", job_id)
        return min(int(reply[0]), self._interval_ms) / 1000


class DeadLetterSweeper:
    """Copies the queue's pending dead letters into their DLQs: at start (what a worker that
    died between failing a job and copying it left), when woken after a final failure, and
    at least every ``interval_ms`` (the jobs failed at fetch, or by ``queue.cancel`` in a
    process that could not copy them)."""

    def __init__(self, queue: AsyncQueue, interval_ms: int) -> None:
        self._copier = DeadLetterCopier(queue)
        self._interval_ms = interval_ms

    async def copy(self) -> int:
        return await self._copier.copy()

    async def close(self) -> None:
        await self._copier.close()

    async def step(self) -> float:
        await self._copier.copy()
        return self._interval_ms / 1000
