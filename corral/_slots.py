"""A worker's slots: the leases it holds, the fetch loop that fills the free ones, and the
wait for work when there is none.

A slot is a task that runs one lease after the other: each finish takes the slot's next job
in the same script call (fetch-next), so a busy slot makes one round trip per job. The fetch
loop (a supervisor step) takes jobs for the slots that are free; when there is nothing to
take it blocks on ``BZPOPMIN K:marker`` until work may be there. Jobs taken that nobody will
run (close began meanwhile, concurrency dropped, the run's ``max_jobs`` was reached) go back
to wait through :class:`~corral._fetch_tokens.FetchTokens`. The worker sizes and stops the
slots; everything a job does per fetch and per finish happens here, on this object's own
attributes.

The slots of one shard of a ``Worker(shards=N)`` draw on a
:class:`~corral._rotation.Rotation` that all its shards share (``rotation``), rather than on
a concurrency of their own; without one (``shards=1``) nothing here asks it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from redis.asyncio import Redis

from corral import _scripts
from corral._async.queue import AsyncQueue
from corral._burst import RunLimits, StopReason
from corral._fetch_tokens import FetchTokens
from corral._lease import Lease, LeaseContext
from corral._rotation import Pool
from corral._supervisor import Outage
from corral.clock import now_ms
from corral.worker_options import WorkerOptions

logger = logging.getLogger("corral.worker")


class Slots:
    """The slots of one worker, and the fetching that fills them.

    Args:
        o: the worker's options.
        outage: the worker's link state (a fetch that got through ends an episode).
        emit: the worker's ``emit(event, *args)`` (``drained``).
    """

    def __init__(
        self, o: WorkerOptions, outage: Outage, emit: Callable[..., Awaitable[None]]
    ) -> None:
        self._o = o
        self._outage = outage
        self._emit = emit
        self._marker = f"{o.prefix}:{o.queue_name}:marker"
        #: How many jobs run at once (the worker's ``concurrency``).
        self.concurrency = o.concurrency
        #: Every job this worker holds, by lock token: the leases are the only per-job state.
        self.leases: dict[str, Lease] = {}
        self.tasks: set[asyncio.Task[None]] = set()
        #: Set when a slot frees, the concurrency changes or the worker closes: the fetch loop
        #: (and any other wait of the worker) looks again.
        self.freed = asyncio.Event()
        self.tokens = FetchTokens(o, self.freed.set)
        # Read on every fetch: bound once here rather than looked up through tokens each time.
        self._fetch, self.lost = self.tokens.fetch, self.tokens.lost
        #: No more fetching: the worker closes, or the run reached a bound (never undone).
        self.closing = False
        #: No fetching until resumed: ``Worker.pause`` (corral._worker_control).
        self.paused = False
        self._paused_read = False
        self.limits = RunLimits()
        self.stop_reason: StopReason = "closed"
        self._drained = True
        self._queue: AsyncQueue | None = None
        self._blocking: Redis | None = None
        self._ctx: LeaseContext | None = None
        self._block_task: asyncio.Task[Any] | None = None
        #: The slots shared with the other shards or lanes of the worker (``None``: its own).
        self.rotation: Pool | None = None

    # -- asked by the worker -------------------------------------------------------------

    def reset(self, limits: RunLimits) -> None:
        """A run begins, with these bounds."""
        self.limits = limits
        self.stop_reason = "closed"

    def arm(self, queue: AsyncQueue, blocking: Redis, ctx: LeaseContext) -> None:
        """The run's queue, the marker's connection, and what every lease shares."""
        self._queue, self._blocking, self._ctx = queue, blocking, ctx

    def stop_fetching(self) -> None:
        """Stop fetching at once, a wait on the marker included."""
        self.closing = True
        self.freed.set()
        if self._block_task is not None:
            self._block_task.cancel()
        if self.rotation is not None:
            self.rotation.leave(self)

    def pause(self) -> None:
        """Stop fetching until :meth:`resume`, a wait on the marker included; the jobs
        held run on, and their finishes take no next job."""
        self.paused = True
        self.freed.set()
        if self._block_task is not None:
            self._paused_read = True  # the cancel below is ours, however soon a resume comes
            self._block_task.cancel()

    def resume(self) -> None:
        self.paused = False
        self.freed.set()

    def end_run(self, reason: StopReason) -> None:
        """A bound of the run was reached: stop fetching; running jobs finish."""
        if not self.closing:
            logger.info("worker %s: run over (%s)", self._o.queue_name, reason)
            self.stop_reason = reason
            self.closing = True
            self.freed.set()
            if self.rotation is not None:  # another shard reached the run's bound
                self.rotation.leave(self)
                if self._block_task is not None:
                    self._block_task.cancel()

    async def settle(self) -> None:
        """Return once every lease has settled (a slot may start its next job meanwhile)."""
        while self.tasks:
            await asyncio.gather(*self.tasks, return_exceptions=True)

    # -- fetching ------------------------------------------------------------------------

    def want_next(self) -> bool:
        # Asked by a finishing lease, itself still counted among the leases.
        if self.paused:
            return False
        if self.rotation is not None:
            return not self.closing and self.rotation.may_keep(self) and self.limits.room(1) > 0
        return not self.closing and len(self.leases) <= self.concurrency and self.limits.room(1) > 0

    async def fetch_step(self) -> float:
        """One round of fetching: take jobs for the free slots, or wait for work."""
        if self.closing:
            return -1
        if self.lost:
            assert self._queue is not None
            await self.tokens.release(self._queue)
        if self.paused:
            self.freed.clear()
            await self.freed.wait()
            return 0
        if self.rotation is None:
            free = self.limits.room(self.concurrency - len(self.leases))
        else:
            free = self.limits.room(self.rotation.room(self))
        if free <= 0:
            if not self.leases and not self.limits.room(1):
                self.end_run("max_jobs")
                return -1
            self.freed.clear()
            await self.freed.wait()
            return 0
        assert self._queue is not None
        fetched, wake = await self._take(free)
        self._outage.succeeded()
        if self.closing and fetched:
            # Close began while the fetch was on its way: these jobs go back, not run.
            for f in fetched:
                self.tokens.fetch_lost(int(f.token.rpartition(":")[2]), 1)
            await self.tokens.release(self._queue)
            return -1
        if fetched:
            self._drained = False
            for f in fetched:
                self._start(f)
            return 0
        return await self._idle(wake)

    async def _take(self, count: int) -> tuple[list[_scripts.Fetched], int]:
        """The fetch of a step; with a rotation, its slots are reserved while it is out (no
        other shard may fill them), and given back as its reply comes, before anything else
        runs: its jobs become leases then, and what it did not fill is passed on."""
        assert self._queue is not None
        rotation = self.rotation
        if rotation is None:
            return await self.move_to_active(self._queue, count)
        rotation.reserve(count)
        got = 0
        try:
            fetched, wake = await self.move_to_active(self._queue, count)
            got = len(fetched)
            return fetched, wake
        finally:
            rotation.unreserve(count, got)

    async def _idle(self, wake: int) -> float:
        """Nothing was fetched: say so once (``drained``), end a burst, or wait for work."""
        if not self._drained and not self.leases:
            self._drained = True
            await self._emit("drained")
        if self.limits.burst and wake >= 0:
            due_in = wake - now_ms() if wake else None
            if self.leases and (due_in is None or due_in > self._o.drain_delay * 1000):
                # Running jobs may add work (a retry, a child): look again when one ends.
                await self._sleep_unless_closing(self._o.drain_delay)
                return 0
            if not self.leases and (due_in is None or due_in > self.limits.burst_wait_ms):
                self.end_run("drained")
                return -1
        await self._wait_for_work(wake)
        return 0

    async def _wait_for_work(self, wake: int) -> None:
        """Block until work may be there: a marker, the next delayed job, or ``drain_delay``.

        ``wake`` is the fetch's hint: < 0 means rate limited for ``-wake`` ms, > 0 is when the
        next delayed job is due (epoch ms).
        """
        if wake < 0:
            # Rate limited: sleep it out; new jobs cannot be taken before then anyway.
            await self._sleep_unless_closing(-wake / 1000)
            return
        deadline = now_ms() + self._o.drain_delay * 1000
        if wake:
            deadline = min(deadline, wake)
        while not self.closing and not self.lost and not self.paused:
            popped = await self._block_on_marker(max(0.001, (deadline - now_ms()) / 1000))
            if popped is None:
                return  # timed out: time to look again
            due = int(float(popped[2]))
            if due <= now_ms():
                return  # work now ("0" marker), or a delayed job that is due
            # A marker for a delayed job that is not due yet (the fetch re-arms it for every
            # worker): keep blocking until then, so an idle worker never spins on it.
            deadline = min(deadline, due)

    async def _block_on_marker(self, timeout: float) -> Any:
        assert self._blocking is not None
        task = self._block_task = asyncio.ensure_future(
            self._blocking.bzpopmin(self._marker, timeout=timeout)
        )
        task.add_done_callback(_retrieved)
        try:
            # Shielded, so that a cancel of the fetch (the worker's task cancelled) ends it at
            # once: redis-py can swallow the cancel it passes on to the read, which then
            # returns at its timeout as if nothing happened, and the fetch would block again,
            # for ever.
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            task.cancel()  # close() and pause() cancel the read itself: that ends here too
            if not (self.closing or self._paused_read):
                raise
            return None
        finally:
            self._block_task = None
            self._paused_read = False

    async def _sleep_unless_closing(self, seconds: float) -> None:
        self.freed.clear()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self.freed.wait(), seconds)

    async def move_to_active(
        self, queue: AsyncQueue, count: int
    ) -> tuple[list[_scripts.Fetched], int]:
        """Take up to ``count`` jobs: the jobs, and the fetch's hint of when to look again."""
        fetch = self._fetch(count)
        try:
            reply = await queue._run(
                _scripts.MOVE_TO_ACTIVE, [queue._job_prefix, now_ms(), *fetch.args()]
            )
        except BaseException:
            self.tokens.fetch_lost(fetch.first_seq, fetch.count)
            raise
        return _scripts.parse_fetched(reply, 2), int(reply[0])

    # -- the slots -----------------------------------------------------------------------

    def _start(self, fetched: _scripts.Fetched) -> None:
        task = asyncio.create_task(self._slot(self._lease(fetched)))
        self.tasks.add(task)
        task.add_done_callback(self._slot_done)

    def _may_start(self) -> bool:
        """Whether a job a finish took may run (the concurrency was not lowered meanwhile)."""
        if self.rotation is None:
            return len(self.leases) < self.concurrency
        return self.rotation.may_start()

    def _lease(self, fetched: _scripts.Fetched) -> Lease:
        # Counted at once, before its task runs: the fetch loop sizes fetches by the leases.
        assert self._ctx is not None
        lease = self.leases[fetched.token] = Lease(fetched, self._ctx)
        self.limits.taken += 1
        return lease

    def _slot_done(self, task: asyncio.Task[None]) -> None:
        self.tasks.discard(task)
        self.freed.set()
        if self.rotation is not None:
            self.rotation.wake()
        if not task.cancelled() and task.exception() is not None:
            logger.error("worker slot crashed", exc_info=task.exception())

    async def _slot(self, lease: Lease | None) -> None:
        """Run the slot's jobs one after the other: each finish hands over the next."""
        while lease is not None:
            try:
                fetched = await lease.run()
            finally:
                del self.leases[lease.token]
                self.freed.set()
                if self.rotation is not None:
                    self.rotation.wake()
            lease = None
            if fetched is None:
                break
            if self.closing or not self._may_start() or not self.limits.room(1):
                # Taken while close began, concurrency dropped or the run's max_jobs was
                # reached: back to wait, unstarted.
                self.tokens.fetch_lost(int(fetched.token.rpartition(":")[2]), 1)
                if self.closing:
                    assert self._queue is not None
                    await self.tokens.give_back_now(self._queue, self._outage)
                break
            lease = self._lease(fetched)


def _retrieved(task: asyncio.Future[Any]) -> None:
    """Retrieve the outcome of a marker read left behind by a cancel (no "exception never
    retrieved" warning for a read whose connection was closed under it)."""
    if not task.cancelled():
        task.exception()
