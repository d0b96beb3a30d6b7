"""``Worker(name, processor, shards=N)``: one worker over the N shards of a sharded queue.

It is made of N inner workers, one per shard (each a plain :class:`~corral.worker.Worker` of
the shard's queue, with its own connections opened through the per-queue path, so that on a
cluster each talks to the master of its slot), run together on one event loop. Their slots
draw on one :class:`~corral._rotation.Rotation`: ``concurrency`` is shared by every shard, a
free slot goes to the shards in turn, and a busy shard gives slots back until a trickling one
has its share. The run's bounds are shared too (``max_jobs`` counts the jobs of every shard;
a burst ends when every shard is drained), and so is its summary. Each inner worker checks,
once connected, the count of shards its shard recorded (``x-shards`` in its meta hash).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Mapping
from typing import Any

from corral import options
from corral._async.job import AsyncJob
from corral._async.queue import AsyncQueue
from corral._async.sharded_getters import check_shard_count
from corral._burst import RunLimits, RunSummary, StopReason
from corral._keys import DEFAULT_PREFIX
from corral._listeners import Callback
from corral._rotation import Rotation
from corral._shards import check_shard_count_of, check_sharding, check_shards, shard_names
from corral.errors import ConfigurationError, InvalidOptionError
from corral.worker import Processor, Worker

logger = logging.getLogger("corral.worker")


class ShardedWorker(Worker):
    """What ``Worker(queue_name, processor, shards=N)`` makes for ``N > 1`` (see ``Worker``).

    ``limiter`` and ``processes`` are refused: a rate limit counts per shard (set one on each
    shard's queue instead), and each shard would start its own pool of child processes.
    Events are those of every shard (``drained`` comes once per shard); the jobs' queue is
    their shard's.
    """

    def __init__(
        self,
        queue_name: str,
        processor: Processor | str | None,
        *,
        shards: int,
        prefix: str = DEFAULT_PREFIX,
        limiter: Mapping[str, Any] | None = None,
        processes: int | None = None,
        **settings: Any,
    ) -> None:
        count = check_shards(shards)
        options.check_name("queue name", queue_name, colon=False)
        check_sharding(queue_name, prefix, count)
        check_shard_count_of(queue_name, count)
        if limiter is not None:
            raise InvalidOptionError(
                f"limiter with shards={count}: a rate limit counts per shard, so the queue "
                f"would take up to {count} times the limit; set one on each shard "
                "(queue.shard(i).set_global_rate_limit) or work the queue without shards"
            )
        if processes is not None:
            raise InvalidOptionError(
                f"processes with shards={count}: not supported (each shard would start its own "
                "children); run one worker process per shard, or use threads or async jobs"
            )
        #: One plain worker per shard, shard 0 first.
        self.workers = [
            Worker(sub_queue, processor, prefix=prefix, **settings)
            for sub_queue in shard_names(queue_name, count)
        ]
        first = self.workers[0]
        self.queue_name = queue_name
        self.shards = count
        self.processor = first.processor
        self.name = first.name
        self.prefix = first.prefix
        self.close_grace = first.close_grace
        self._rotation = Rotation(first.concurrency)
        for index, worker in enumerate(self.workers):
            worker._slots.rotation = self._rotation
            self._rotation.join(worker._slots)
            worker._on_open = functools.partial(self._check_count, index)
        self._turn = 0
        #: Set once shard 0's count was checked (``_first_error``: it was refused).
        self._first = asyncio.Event()
        self._first_error: ConfigurationError | None = None

    async def _check_count(self, index: int, queue: AsyncQueue) -> None:
        """Check (or record) the shard's count of shards once connected, shard 0's first:
        every count has the same shard 0, so a worker with another count is refused there
        before it records its own in a shard that another count shares."""
        if index:
            await self._first.wait()
            if self._first_error is not None:
                raise ConfigurationError(str(self._first_error))
            await check_shard_count(queue, self.shards, self.queue_name)
            return
        try:
            await check_shard_count(queue, self.shards, self.queue_name)
        except ConfigurationError as exc:
            self._first_error = exc
            raise
        finally:
            self._first.set()

    @property
    def concurrency(self) -> int:
        """How many jobs run at once over every shard; can be changed while running."""
        return self._rotation.concurrency

    @concurrency.setter
    def concurrency(self, value: int) -> None:
        value = options.int_option("concurrency", value, 1)
        for worker in self.workers:
            worker.concurrency = value  # sizes its thread pool: it may run them all
        self._rotation.concurrency = value

    def on(self, event: str, callback: Callback | None = None) -> Any:
        """Call ``callback`` on ``event`` in any shard (see ``Worker.on``)."""

        def register(fn: Callback) -> Callback:
            for worker in self.workers:
                worker.on(event, fn)
            return fn

        return register if callback is None else register(callback)

    @property
    def keys_marker(self) -> str:
        raise InvalidOptionError("a sharded worker has a marker per shard: see .workers")

    async def _run(self, limits: RunLimits) -> RunSummary:
        """Run every shard's worker on the shared bounds until all have stopped; the first
        failure stops the others (gracefully) and is raised."""
        if self._first_error is not None:  # checked again: the queue may have been remade
            self._first, self._first_error = asyncio.Event(), None
        tasks = {asyncio.ensure_future(w._run(limits)): w for w in self.workers}
        pending = set(tasks)
        reasons: list[StopReason] = []
        failure: BaseException | None = None
        try:
            while pending:
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    if task.cancelled() or task.exception() is not None:
                        if failure is None:
                            failure = task.exception() or asyncio.CancelledError()
                            for worker in self.workers:
                                worker._close_soon()
                        continue
                    reason = task.result().stopped
                    reasons.append(reason)
                    if reason == "max_jobs":  # the budget is shared: every shard is done
                        for worker in self.workers:
                            worker._slots.end_run("max_jobs")
        finally:
            if pending:  # cancelled from outside: let every shard settle
                for worker in self.workers:
                    worker._exit_now()
                await asyncio.gather(*pending, return_exceptions=True)
        if failure is not None:
            raise failure
        return limits.summary(_stop_reason(reasons))

    def _signalled(self, count: int) -> None:
        for worker in self.workers:
            worker._signalled(count)

    async def close(self, *, grace: float | None = None) -> None:
        """Close every shard's worker (see ``Worker.close``)."""
        await asyncio.gather(*(worker.close(grace=grace) for worker in self.workers))

    def _exit_now(self) -> None:
        for worker in self.workers:
            worker._exit_now()

    async def get_next_job(self) -> AsyncJob | None:
        """Take one job from the shards, asked in turn; ``None`` when none has one ready."""
        await self.workers[0]._open()  # shard 0 is checked first (see _check_count)
        for step in range(self.shards):
            index = (self._turn + step) % self.shards
            job = await self.workers[index].get_next_job()
            if job is not None:
                self._turn = index + 1
                return job
        return None


def _stop_reason(reasons: list[StopReason]) -> StopReason:
    """Why a sharded run ended: a bound that one shard reached, ``drained`` when every shard
    was, else ``closed``."""
    bounds: tuple[StopReason, ...] = ("max_jobs", "max_time")
    for bound in bounds:
        if bound in reasons:
            return bound
    return "drained" if reasons and all(r == "drained" for r in reasons) else "closed"
