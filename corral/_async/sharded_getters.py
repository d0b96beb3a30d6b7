"""Reading a sharded queue: which shard holds a job, and counts and listings over the shards.

A layer of :class:`~corral._async.sharded_queue.AsyncShardedQueue` that only reads (and
records the count of shards on a shard's first use, :func:`check_shard_count`). A job is read
from its one shard; counts are summed, and listings merged, over every shard.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable

from corral import _shards, options
from corral._async.job import AsyncJob
from corral._async.queue import AsyncQueue
from corral._async.queue_getters import COUNTED_STATES, check_int, check_states
from corral._async.state_getters import AsyncStateGetters
from corral.errors import ConfigurationError
from corral.job import JobState
from corral.schedule import JobScheduler


async def check_shard_count(queue: AsyncQueue, shards: int, logical: str) -> None:
    """Record ``shards`` in the shard ``queue``'s meta hash, or check the count found there.

    Raises:
        ConfigurationError: the shard was made for another count: naming both.
    """
    client = await queue.client()
    async with client.pipeline(transaction=True) as pipe:
        pipe.hsetnx(queue.keys.meta, _shards.COUNT_FIELD, shards)
        pipe.hget(queue.keys.meta, _shards.COUNT_FIELD)
        _, recorded = await pipe.execute()
    if recorded != str(shards):
        raise ConfigurationError(
            f"queue {logical}: its shard {queue.name} was made for {recorded} shards, and this "
            f"one is opened with shards={shards}: every producer and worker of a sharded queue "
            "must give the same count (to change it, let it drain and obliterate it first)"
        )


class AsyncShardedGetters(AsyncStateGetters):
    """Methods that find jobs in their shard, and count and list jobs over the shards."""

    #: The logical name, the key prefix, and how many shards.
    name: _shards.ShardedName
    prefix: str
    shards: int
    #: The shards' plain queues, shard 0 first.
    queues: tuple[AsyncQueue, ...]
    #: Shards whose recorded count was checked (shards=1, the plain queue, has none).
    _checked: list[bool]

    # -- shards --------------------------------------------------------------------------

    def shard(self, index: int) -> AsyncQueue:
        """The plain queue of shard ``index`` (flows, global limits, events: per shard)."""
        return self.queues[check_int("shard index", index, 0, self.shards - 1)]

    def shard_index(self, job_id: str) -> int:
        """The shard that holds (or will hold) the job ``job_id``."""
        return _shards.shard_of(options.check_name("job_id", job_id), self.shards)

    def shard_for(self, job_id: str) -> AsyncQueue:
        """The plain queue of the shard of ``job_id``: where its children must go."""
        return self.queues[self.shard_index(job_id)]

    async def _ready(self, index: int) -> AsyncQueue:
        """Shard ``index``, its recorded count checked on first use, and shard 0's before
        (every count of shards has the same shard 0: a process with another is caught
        there, whichever shards it uses)."""
        for i in (0, index) if index else (0,):
            if not self._checked[i]:
                await check_shard_count(self.queues[i], self.shards, self.name)
                self._checked[i] = True
        return self.queues[index]

    async def _each(self) -> list[AsyncQueue]:
        return [await self._ready(i) for i in range(self.shards)]

    # -- one job -------------------------------------------------------------------------

    async def get_job(self, job_id: str) -> AsyncJob | None:
        """The job with this id (read from its shard alone), or ``None``."""
        return await (await self._ready(self.shard_index(job_id))).get_job(job_id)

    async def get_job_state(self, job_id: str) -> JobState:
        """The state of a job (``JobState.UNKNOWN`` when there is no such job)."""
        return await (await self._ready(self.shard_index(job_id))).get_job_state(job_id)

    async def get_job_logs(
        self, job_id: str, start: int = 0, end: int = -1, asc: bool = True
    ) -> tuple[list[str], int]:
        """A job's log lines (see :meth:`AsyncQueue.get_job_logs`)."""
        queue = await self._ready(self.shard_index(job_id))
        return await queue.get_job_logs(job_id, start, end, asc)

    async def get_deduplication_job_id(self, deduplication_id: str) -> str | None:
        """The id of the job that holds a deduplication id (in the id's shard), or ``None``."""
        index = _shards.key_of(
            options.check_name("deduplication id", deduplication_id), self.shards
        )
        return await (await self._ready(index)).get_deduplication_job_id(deduplication_id)

    # -- counts and listings -------------------------------------------------------------

    async def get_job_counts(self, *states: str) -> dict[str, int]:
        """How many jobs are in each state, summed over the shards."""
        total = dict.fromkeys(states or COUNTED_STATES, 0)
        for queue in await self._each():
            for state, n in (await queue.get_job_counts(*states)).items():
                total[state] += n
        return total

    async def count(self) -> int:
        """Jobs yet to run, over every shard."""
        return sum([await queue.count() for queue in await self._each()])

    async def get_counts_per_priority(self, priorities: Iterable[int]) -> dict[int, int]:
        """How many jobs are ready at each priority, summed over the shards."""
        wanted = list(priorities) if isinstance(priorities, Iterable) else priorities
        total: dict[int, int] = {}
        for queue in await self._each():
            for priority, n in (await queue.get_counts_per_priority(wanted)).items():
                total[priority] = total.get(priority, 0) + n
        return total

    async def get_jobs(
        self,
        states: str | Iterable[str] | None = None,
        start: int = 0,
        end: int = -1,
        *,
        asc: bool = False,
    ) -> list[AsyncJob]:
        """The jobs in ``states`` (:meth:`AsyncQueue.get_jobs`), merged over the shards.

        Within a state the shards' lists are merged by what orders them (arrival for
        waiting, run time for delayed, priority then arrival for prioritized, finish time for
        completed and failed; newest first, or oldest with ``asc=True``): each shard's own
        order is kept, and ``[start, end]`` is cut from the merged list. A page reads up to
        ``end + 1`` jobs of each shard (all of them for a negative bound).
        """
        wanted = check_states(states)
        check_int("start", start, None)
        check_int("end", end, None)
        if self.shards == 1:
            return await (await self._ready(0)).get_jobs(wanted, start, end, asc=asc)
        upto = end if start >= 0 and end >= 0 else -1
        merged: list[AsyncJob] = []
        for state in wanted:
            lists = [await queue.get_jobs(state, 0, upto, asc=asc) for queue in await self._each()]
            merged.extend(heapq.merge(*lists, key=_shards.MERGE_KEYS[state], reverse=not asc))
        return _shards.cut(merged, start, end)

    # -- schedulers: each lives in the shard of its id -----------------------------------

    async def get_job_scheduler(self, scheduler_id: str) -> JobScheduler | None:
        """The scheduler with this id (from its shard), or ``None``."""
        queue = await self._ready(self._scheduler_shard(scheduler_id))
        return await queue.get_job_scheduler(scheduler_id)

    async def get_job_schedulers(
        self, start: int = 0, end: int = -1, asc: bool = False
    ) -> list[JobScheduler]:
        """Schedulers of every shard ordered by next run, latest first (``asc``: soonest)."""
        check_int("start", start, None)
        check_int("end", end, None)
        upto = end if start >= 0 and end >= 0 else -1
        lists = [await q.get_job_schedulers(0, upto, asc) for q in await self._each()]
        merged = list(heapq.merge(*lists, key=_next_run, reverse=not asc))
        return _shards.cut(merged, start, end)

    async def count_job_schedulers(self) -> int:
        """How many schedulers the shards have."""
        return sum([await queue.count_job_schedulers() for queue in await self._each()])

    def _scheduler_shard(self, scheduler_id: str) -> int:
        return _shards.key_of(options.check_name("scheduler id", scheduler_id), self.shards)


def _next_run(scheduler: JobScheduler) -> int:
    return scheduler.next_run or 0
