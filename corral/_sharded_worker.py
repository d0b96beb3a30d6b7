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
from corral._keys import DEFAULT_PREFIX
from corral._rotation import Rotation
from corral._shards import check_shard_count_of, check_sharding, check_shards, shard_names
from corral._worker_group import WorkerGroup
from corral.errors import ConfigurationError, InvalidOptionError
from corral.worker import Processor, Worker

logger = logging.getLogger("corral.worker")


class ShardedWorker(WorkerGroup):
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

    def _before_run(self) -> None:
        if self._first_error is not None:  # checked again: the queue may have been remade
            self._first, self._first_error = asyncio.Event(), None

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
