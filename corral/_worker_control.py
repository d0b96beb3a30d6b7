"""What changes a worker as it runs: its concurrency, pausing and resuming it, its running
state, and the queue's rate limit (BullMQ's ``Worker.concurrency``, ``pause``/``resume``/
``isPaused``/``isRunning``/``rateLimit``), and manual fetching (``get_next_job``).

A mixin of :class:`~corral.worker.Worker`: pausing one worker stops its fetching (the
queue is untouched: other workers go on, and nothing is written), lets the jobs it runs
finish, and emits ``paused``; resuming starts fetching again and emits ``resumed``. A worker
made of inner workers (lanes, shards) pauses every one of them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from corral import options
from corral._async.queue_schedulers import schedule_next_iteration
from corral.options import Duration

if TYPE_CHECKING:
    from corral._async.job import AsyncJob
    from corral._async.queue import AsyncQueue
    from corral._runners import Runner
    from corral._slots import Slots


#: The worker's events of its life and of pausing, with their callbacks' arguments.
CONTROL_EVENTS = {
    "ready": "(): connected, before the first job is taken",
    "closing": "(reason): close() began",
    "closed": "(): the run ended and the connections are released",
    "paused": "(): pause() stopped the fetching and the running jobs finished",
    "resumed": "()",
}


class WorkerControl:
    """What changes a worker as it runs: ``concurrency``, ``pause``/``resume`` (and
    ``is_paused``/``is_running``), ``rate_limit``."""

    _slots: Slots
    _runner: Runner | None
    _running: bool
    _queue: AsyncQueue | None
    _emit: Callable[..., Awaitable[None]]
    _open: Callable[[], Awaitable[AsyncQueue | None]]

    @property
    def concurrency(self) -> int:
        """How many jobs run at once. Setting it while running takes effect at once."""
        return self._slots.concurrency

    @concurrency.setter
    def concurrency(self, value: int) -> None:
        self._slots.concurrency = options.int_option("concurrency", value, 1)
        if self._runner is not None:
            self._runner.resize(value)
        self._slots.freed.set()

    def _parts(self) -> list[WorkerControl]:
        # A worker of lanes or shards (corral._worker_group) holds its inner workers in
        # `workers` and has no slots of its own.
        inner: list[WorkerControl] | None = getattr(self, "workers", None)
        return [self] if inner is None else inner

    async def pause(self, *, do_not_wait_active: bool = False) -> None:
        """Stop taking jobs; return once the jobs this worker runs have finished (at once
        with ``do_not_wait_active=True``), then emit ``paused``.

        Only this worker stops: the queue is not paused (see ``Queue.pause``). A worker
        paused before it runs starts paused. Pausing a paused worker does nothing.
        """
        parts = [p for p in self._parts() if not p._slots.paused]
        if not parts:
            return
        for part in parts:
            part._slots.pause()
        if not do_not_wait_active:
            await asyncio.gather(*(p._slots.settle() for p in parts))
        for part in parts:
            await part._emit("paused")

    async def resume(self) -> None:
        """Take jobs again after :meth:`pause`, and emit ``resumed`` (nothing when the worker
        is not paused)."""
        for part in self._parts():
            if part._slots.paused:
                part._slots.resume()
                await part._emit("resumed")

    def is_paused(self) -> bool:
        """Whether :meth:`pause` was called and :meth:`resume` not since."""
        return any(p._slots.paused for p in self._parts())

    def is_running(self) -> bool:
        """Whether the worker is in a run and working: taking jobs, or, paused, still
        finishing some (as BullMQ's ``isRunning``, false once a pause has settled)."""
        return any(
            p._running and not (p._slots.paused and not p._slots.leases) for p in self._parts()
        )

    async def rate_limit(self, duration: Duration) -> None:
        """Make every worker of the queue wait ``duration`` before taking another job, as
        ``Queue.rate_limit`` (BullMQ's ``Worker.rateLimit``); usually called by a job that
        hit an outside limit, which then raises :class:`~corral.errors.RateLimitError`.

        Raises:
            InvalidOptionError: ``duration`` under 1 ms.
        """
        for part in self._parts():
            queue: Any = part._queue or await part._open()
            await queue.rate_limit(duration)

    # -- manual fetching -----------------------------------------------------------------

    async def get_next_job(self) -> AsyncJob | None:
        """Take one job without a processor (manual processing); ``None`` when none is ready.

        Finish it with ``job.move_to_completed(value)`` or ``job.move_to_failed(error)``, and
        renew its lock with ``job.extend_lock(seconds)`` if it runs long.
        """
        queue = await self._open()
        assert queue is not None
        fetched, _ = await self._slots.move_to_active(queue, 1)
        if not fetched:
            return None
        job = queue._bind(fetched[0].job_id, fetched[0].fields, token=fetched[0].token)
        if job.repeat_job_key:
            await schedule_next_iteration(job.queue, job)
        return job
