"""``AsyncShardedQueue``: one logical queue spread over N plain queues in different hash slots.

A BullMQ queue keeps every key in one hash slot, so one busy queue never uses more than one
Redis Cluster master. A sharded queue is N plain queues (shards), each in a slot of its own
(:mod:`corral._shards` names them), which ``Worker(name, ..., shards=N)`` consumes in fair
rotation. Each shard is an :class:`AsyncQueue` with its own client, opened through the
per-queue path, so on a cluster each talks to the master of its slot; a Node BullMQ worker
can work one shard as the plain queue it is.

What a job is placed by: its ``job_id``, its deduplication id or its idempotency key
(``crc32 mod N`` of it: so deduplication by id holds over the logical queue), its parent's
shard, or else the round robin; jobs without an id get one made to fall in their shard, so
ids are unique over the logical queue and :meth:`get_job` asks one shard. Counts add up over
the shards, listings merge, and pause, resume, drain, obliterate and close act on each. What
is given up, and refused with a clear error rather than done wrong: one order over the shards
(order holds per shard only), flows across shards, and deduplication, rate limits or global
concurrency counted over the shards (per shard only). See docs/scaling.md.
"""

from __future__ import annotations

import random
from collections.abc import Collection, Iterable, Mapping
from typing import Any

from typing_extensions import Unpack

from corral import _shards, _telemetry, options
from corral._async._redis import Connectable
from corral._async.job import AsyncJob
from corral._async.job_data import DEFAULT_MAX_LOG_LINE_BYTES, DEFAULT_MAX_PROGRESS_BYTES
from corral._async.queue import AsyncQueue, BulkItem
from corral._async.queue_schedulers import Template
from corral._async.sharded_getters import AsyncShardedGetters
from corral._bulk import unpack_item
from corral._keys import DEFAULT_PREFIX
from corral.errors import (
    BulkAddError,
    InvalidOptionError,
    NotDurableError,
    QueueBusyError,
)
from corral.options import Duration, JobOptions, JobOptionsDict
from corral.schedule import DateLike


class AsyncShardedQueue(AsyncShardedGetters):
    """One logical queue over ``shards`` plain queues in different hash slots.

    The options not listed below (``default_job_options``, ``backoff_types``, ``strict``,
    ``add_retries``, ``max_progress_bytes``, ``max_log_line_bytes``, ``durable``,
    ``durable_replicas``, ``durable_timeout``, ``dead_letter_queue``, ``telemetry``) are as for
    :class:`AsyncQueue`, for every shard (a span of an add names the shard's queue).

    Args:
        name: the logical queue's name (no ``:``; with ``shards > 1`` no braces either).
        shards: how many plain queues (1 to 256). ``1`` is the plain queue ``name`` itself;
            more are the queues ``{<name>.shard<i>.<k>}`` (see docs/scaling.md). Every
            producer and worker of the queue must give the same count: a shard records it,
            and opening it with another is a ``ConfigurationError``.
        connection: a URL (a ``redis+cluster://`` one puts each shard on its slot's master),
            a client, or ``None`` for ``CORRAL_REDIS_URL`` / ``REDIS_URL`` / the embedded
            server. Each shard opens its own client from it.
        prefix: key prefix, ``bull`` by default; with ``shards > 1`` it cannot hold a hash tag
            (``{bull}`` would put every shard in one slot).

    Raises:
        InvalidOptionError: a bad argument; a prefix with a hash tag, or a name with a brace,
            with ``shards > 1``.

    Example::

        async with AsyncShardedQueue("emails", shards=3) as queue:
            job = await queue.add("welcome", {"to": "ada@example.com"})
            same = await queue.get_job(job.id)   # asks only the shard of job.id
    """

    def __init__(
        self,
        name: str,
        *,
        shards: int,
        connection: Connectable = None,
        prefix: str = DEFAULT_PREFIX,
        default_job_options: JobOptionsDict | None = None,
        backoff_types: Collection[str] = (),
        strict: bool = False,
        add_retries: int = 20,
        max_progress_bytes: int = DEFAULT_MAX_PROGRESS_BYTES,
        max_log_line_bytes: int = DEFAULT_MAX_LOG_LINE_BYTES,
        durable: bool = False,
        durable_replicas: int = 1,
        durable_timeout: Duration = 1.0,
        dead_letter_queue: str | None = None,
        telemetry: _telemetry.Hooks | bool | None = None,
    ) -> None:
        #: The logical name (a ``str`` that a flow's ``queue_name`` refuses with shards > 1).
        self.shards = _shards.check_shards(shards)
        self.name = _shards.ShardedName(
            options.check_name("queue name", name, colon=False), self.shards
        )
        self.prefix = options.check_prefix(prefix)
        _shards.check_sharding(name, prefix, self.shards)
        self.queues = tuple(
            AsyncQueue(
                sub_queue,
                connection=connection,
                prefix=prefix,
                default_job_options=default_job_options,
                backoff_types=backoff_types,
                strict=strict,
                add_retries=add_retries,
                max_progress_bytes=max_progress_bytes,
                max_log_line_bytes=max_log_line_bytes,
                durable=durable,
                durable_replicas=durable_replicas,
                durable_timeout=durable_timeout,
                dead_letter_queue=dead_letter_queue,
                telemetry=telemetry,
            )
            for sub_queue in _shards.shard_names(name, self.shards)
        )
        self._names = tuple(queue.name for queue in self.queues)
        self._ids = _shards.IdMaker(self.shards)
        # Where the round robin starts: producers that add one job each spread too.
        self._turn = random.randrange(self.shards)
        self._checked = [self.shards == 1] * self.shards

    # -- adding --------------------------------------------------------------------------

    def _place(self, given: Mapping[str, Any]) -> tuple[int, Mapping[str, Any]]:
        """The shard of a job with options ``given``, and the options it is added with (an
        id made for it when it has none). Raises before any I/O."""
        if self.shards == 1:
            return 0, given
        if not given:
            index = self._next_turn()
            return index, {"job_id": self._ids.make(index)}
        first = self.queues[0]
        opts = JobOptions.build(
            given, defaults=first.default_job_options, backoff_types=first.backoff_types
        )
        parent = None
        if opts.parent is not None:
            parent = _shards.parent_shard(opts.parent, self.prefix, self._names)
        named = _shards.route(
            self.shards,
            job_id=opts.job_id,
            dedup_id=None if opts.dedup is None else opts.dedup.id,
            idempotency_key=opts.idempotency_key or None,
            parent_shard=parent,
        )
        index = self._next_turn() if named is None else named
        if opts.job_id is None:
            given = {**given, "job_id": self._ids.make(index)}
        return index, given

    def _next_turn(self) -> int:
        self._turn = (self._turn + 1) % self.shards
        return self._turn

    async def add(
        self,
        name: str,
        data: Any = None,
        *,
        durable: bool | None = None,
        **options: Unpack[JobOptionsDict],
    ) -> AsyncJob:
        """Add a job to its shard and return it (:meth:`AsyncQueue.add`'s options).

        It goes to the shard of its ``job_id``, deduplication id or idempotency key, or of
        its ``parent`` (which must be in a shard of this queue); else to the next shard in
        turn, with an id made for it. ``job.queue_name`` is the shard's queue.

        Raises:
            InvalidOptionError: as for ``AsyncQueue.add``; also when two of them name
                different shards, or the parent is in no shard of this queue.
            ConfigurationError: the shard was made for another count of shards.
        """
        index, given = self._place(options)
        queue = await self._ready(index)
        return await queue.add(name, data, durable=durable, **given)

    async def add_bulk(
        self, jobs: Iterable[BulkItem], *, durable: bool | None = None
    ) -> list[AsyncJob]:
        """Add many jobs: each item is placed as :meth:`add` places it, then each shard gets
        its items in one :meth:`AsyncQueue.add_bulk`, shard after shard. Returns one job per
        item, in order.

        Each shard's part is all or nothing as ``AsyncQueue.add_bulk`` makes it, not the
        whole: a failure raises :class:`~corral.errors.BulkAddError` whose ``.jobs`` are the
        jobs of the items before ``.index``, the first item not added; items after it that
        went to shards written before were added too (items with a ``job_id`` can be sent
        again safely).

        Raises:
            InvalidOptionError: naming the index of the first bad item; nothing was written.
            BulkAddError: a shard's call failed after other items were written.
            NotDurableError: durable, and a shard's replicas did not all acknowledge in time:
                raised once every shard was written, with every job in ``.jobs``.
        """
        items: list[tuple[int, BulkItem]] = []
        for position, item in enumerate(jobs):
            try:
                name, data, given = unpack_item(item)
                index, given = self._place(given)
            except InvalidOptionError as exc:
                raise InvalidOptionError(f"add_bulk item {position}: {exc}") from None
            items.append((index, (name, data, given)))
        added: list[AsyncJob | None] = [None] * len(items)
        short: NotDurableError | None = None
        for index in range(self.shards):
            positions = [p for p, (i, _) in enumerate(items) if i == index]
            if not positions:
                continue
            try:
                queue = await self._ready(index)
                answer = await queue.add_bulk([items[p][1] for p in positions], durable=durable)
            except NotDurableError as exc:
                answer, short = exc.jobs, exc if short is None else short
                short.acknowledged = min(short.acknowledged, exc.acknowledged)
            except Exception as exc:
                done = exc.jobs if isinstance(exc, BulkAddError) else []
                for p, job in zip(positions, done, strict=False):
                    added[p] = job
                if all(job is None for job in added):
                    raise
                raise _stopped(added, index, exc) from exc
            for p, job in zip(positions, answer, strict=True):
                added[p] = job
        result = [job for job in added if job is not None]
        if short is not None:
            short.jobs = result
            raise short
        return result

    # -- one job, the whole queue --------------------------------------------------------

    async def remove(self, job_id: str, *, remove_children: bool = True) -> bool:
        """Remove a job (see :meth:`AsyncQueue.remove`); ``False`` when there is none."""
        queue = await self._ready(self.shard_index(job_id))
        return await queue.remove(job_id, remove_children=remove_children)

    # -- the whole queue -----------------------------------------------------------------

    async def pause(self) -> None:
        """Pause every shard (one after the other)."""
        for queue in await self._each():
            await queue.pause()

    async def resume(self) -> None:
        """Resume every shard."""
        for queue in await self._each():
            await queue.resume()

    async def is_paused(self) -> bool:
        """Whether every shard is paused."""
        return all([await queue.is_paused() for queue in await self._each()])

    async def drain(self, *, delayed: bool = False) -> None:
        """Delete every job waiting to run in every shard (see :meth:`AsyncQueue.drain`)."""
        for queue in await self._each():
            await queue.drain(delayed=delayed)

    async def obliterate(self, *, force: bool = False) -> None:
        """Delete every shard (see :meth:`AsyncQueue.obliterate`), its recorded count too.

        Raises:
            QueueBusyError: a shard has active jobs and ``force`` is not set; checked in every
                shard before any is deleted (a job taken meanwhile stops it part-way).
        """
        queues = await self._each()
        if not force:
            for queue in queues:
                if (await queue.get_job_counts("active"))["active"]:
                    raise QueueBusyError(
                        f"queue {self.name}: shard {queue.name} has active jobs: "
                        "obliterate(force=True) deletes them"
                    )
        for index, queue in enumerate(queues):
            await queue.obliterate(force=force)
            self._checked[index] = self.shards == 1

    async def close(self) -> None:
        """Close every shard's client (unless it was given by the caller)."""
        for queue in self.queues:
            await queue.close()

    async def __aenter__(self) -> AsyncShardedQueue:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- schedulers: each lives in the shard of its id -----------------------------------

    async def upsert_job_scheduler(
        self,
        scheduler_id: str,
        *,
        every: Duration | None = None,
        cron: str | None = None,
        tz: str | None = None,
        limit: int | None = None,
        start_date: DateLike | None = None,
        end_date: DateLike | None = None,
        immediately: bool = False,
        template: Template | None = None,
        now_ms: int | None = None,
    ) -> AsyncJob | None:
        """Create or update a scheduler (:meth:`AsyncQueue.upsert_job_scheduler`) in the shard
        of its id, which holds it and all its iterations."""
        queue = await self._ready(self._scheduler_shard(scheduler_id))
        return await queue.upsert_job_scheduler(
            scheduler_id,
            every=every,
            cron=cron,
            tz=tz,
            limit=limit,
            start_date=start_date,
            end_date=end_date,
            immediately=immediately,
            template=template,
            now_ms=now_ms,
        )

    async def remove_job_scheduler(self, scheduler_id: str) -> bool:
        """Delete a scheduler and its pending iteration; ``False`` when there was none."""
        queue = await self._ready(self._scheduler_shard(scheduler_id))
        return await queue.remove_job_scheduler(scheduler_id)

    # -- refused: limits over the shards -------------------------------------------------

    async def set_global_concurrency(self, concurrency: int) -> None:
        """Refused with ``shards > 1``: a global concurrency counts per shard."""
        await self._per_shard(
            "set_global_concurrency", "global concurrency"
        ).set_global_concurrency(concurrency)

    async def set_global_rate_limit(self, max_jobs: int, duration: Duration) -> None:
        """Refused with ``shards > 1``: a global rate limit counts per shard."""
        await self._per_shard("set_global_rate_limit", "global rate limit").set_global_rate_limit(
            max_jobs, duration
        )

    def _per_shard(self, method: str, what: str) -> AsyncQueue:
        if self.shards > 1:
            raise InvalidOptionError(
                f"a {what} is counted in one queue, and queue {self.name} is {self.shards} "
                f"shards: set it per shard (queue.shard(i).{method}(...) for each i: the "
                f"logical queue then allows {self.shards} times as much), or use shards=1"
            )
        return self.queues[0]


def _stopped(added: list[AsyncJob | None], shard: int, cause: Exception) -> BulkAddError:
    index = next(i for i, job in enumerate(added) if job is None)
    later = sum(1 for job in added[index:] if job is not None)
    return BulkAddError(
        f"add_bulk added items 0 to {index - 1} of {len(added)} (and {later} later items, in "
        f"shards written before), then stopped at shard {shard}: {type(cause).__name__}: "
        f"{cause}",
        jobs=[job for job in added[:index] if job is not None],
        index=index,
    )
