"""Repeatable jobs written by Node BullMQ before 6, and ``add(..., repeat=...)``.

A layer of :class:`AsyncQueue`: ``get_repeatable_jobs``, ``remove_repeatable`` and
``remove_repeatable_by_key`` read and delete what BullMQ 4 and 5 wrote (their
``getRepeatableJobs``, ``removeRepeatable``, ``removeRepeatableByKey``), and
``migrate_repeatable_jobs`` turns those entries into job schedulers. A worker that takes a run
of a legacy entry migrates that entry the same way (:func:`adopt_legacy`), so a schedule left
by old Node goes on with its data. ``add(repeat=)`` makes a job scheduler named as BullMQ 5
named the repeatable (:func:`add_repeatable`). The layout is described in ``corral.repeat``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from corral import _scripts, clock
from corral._async._queue_base import AsyncQueueBase
from corral._async.queue_getters import check_int
from corral.bounds import check_text
from corral.errors import InvalidOptionError
from corral.job import JobRecord
from corral.options import check_name
from corral.repeat import LegacyRun, RepeatableJob, RepeatOptions, migrated_id, parse_repeat

if TYPE_CHECKING:
    from corral._async.job import AsyncJob
    from corral._async.queue_schedulers import AsyncQueueSchedulers

logger = logging.getLogger("corral.schedulers")

_REMOVE = _scripts.load("remove_repeatable")
_MIGRATE = _scripts.load("migrate_repeatable")

#: Entries read per command when all of ``K:repeat`` is walked.
PAGE = 1000

#: Options ``add(repeat=)`` refuses: each run's time and id are the scheduler's.
REPEAT_REFUSED = ("delay", "timestamp")


class AsyncQueueRepeatable(AsyncQueueBase):
    """Methods for the repeatable jobs of Node BullMQ before 6 (see the module docstring)."""

    async def get_repeatable_jobs(
        self, start: int = 0, end: int = -1, asc: bool = False
    ) -> list[RepeatableJob]:
        """The entries of ``K:repeat`` as BullMQ 5's ``getRepeatableJobs`` listed them.

        That is every repeatable job Node BullMQ 4 or 5 added with ``repeat`` and every job
        scheduler, by next run, latest first (``asc=True``: soonest first); ``start``/``end``
        are inclusive indexes into that order. ``legacy`` tells the old entries, which
        :meth:`migrate_repeatable_jobs` turns into schedulers (Node BullMQ 6 refuses BullMQ
        4's and runs BullMQ 5's without their data).
        """
        check_int("start", start, None)
        check_int("end", end, None)
        client = await self.client()
        ranked: list[tuple[str, float]] = await client.zrange(  # type: ignore[assignment]
            self.keys.key("repeat"), start, end, desc=not asc, withscores=True
        )
        return await self._entries(ranked)

    async def _entries(self, ranked: list[tuple[str, float]]) -> list[RepeatableJob]:
        if not ranked:
            return []
        client = await self.client()
        async with client.pipeline(transaction=False) as pipe:
            for key, _ in ranked:
                pipe.hgetall(self.keys.key(f"repeat:{key}"))
            hashes = await pipe.execute()
        return [
            RepeatableJob.from_entry(key, score, _entry_hash(fields))
            for (key, score), fields in zip(ranked, hashes, strict=True)
        ]

    async def remove_repeatable(
        self, name: str, repeat: RepeatOptions, job_id: str | None = None
    ) -> bool:
        """Remove the repeatable job that ``add(name, ..., repeat=repeat, job_id=job_id)``
        made, by BullMQ 4, BullMQ 5 or corral (BullMQ 5's ``removeRepeatable``).

        The entry is found by the key those versions built from the name, ``job_id``,
        ``end_date``, ``tz`` and ``pattern`` or ``every`` (or ``repeat["key"]``); the other
        repeat options do not matter. Removes what :meth:`remove_repeatable_by_key` does.

        Returns:
            ``False`` when there was no such entry.

        Raises:
            InvalidOptionError: a bad ``repeat`` or name.
        """
        check_name("job name", name)
        rep = parse_repeat(repeat)
        if job_id is not None:
            check_text("job_id", job_id)
        keys = [rep.scheduler_id(name, job_id)]
        if rep.key is None:
            keys.append(rep.raw_key(name, job_id))  # BullMQ 4 kept the key itself
        for key in keys:
            if await self.remove_repeatable_by_key(key):
                return True
        return False

    async def remove_repeatable_by_key(self, key: str) -> bool:
        """Remove an entry of ``K:repeat`` by its key (``get_repeatable_jobs()[i].key``), as
        BullMQ 5's ``removeRepeatableByKey``: the entry, its hash, and its pending run when
        that is delayed (a run already due is left to run, as Node left it). A job
        scheduler's key removes the scheduler the same way.

        Returns:
            ``False`` when ``K:repeat`` had no such key.
        """
        check_text("repeatable key", key)
        return int(await self._run(_REMOVE, [self._job_prefix, key])) == 1

    async def migrate_repeatable_jobs(self) -> list[str]:
        """Turn every repeatable job BullMQ 4 or 5 left into a job scheduler; return their
        ids.

        Each entry with a pending run becomes the scheduler ``<key>`` (a BullMQ 5 key) or
        ``<MD5 of the key>`` (a BullMQ 4 key, the id BullMQ 5 gives the same options), with
        the run's name, data and options as its template and the entry's timing (``pattern``
        or ``every``, ``tz``, ``start_date``, ``end_date``, ``limit``), at the same next run;
        Node BullMQ 6 and corral then see and run it as any scheduler. An entry without a
        pending run (an old worker took the last one and made no other) would never run again
        and carries no data: it is left, and :meth:`remove_repeatable_by_key` deletes it.
        Calling this again, or from several processes at once, migrates each entry once.

        Stop old Node workers first: one that takes a run after the migration makes its next
        run in the old layout again.
        """
        client = await self.client()
        legacy: list[RepeatableJob] = []
        start = 0
        while True:  # read it all first: migrating a 4.x key moves it in K:repeat
            ranked: list[tuple[str, float]] = await client.zrange(  # type: ignore[assignment]
                self.keys.key("repeat"), start, start + PAGE - 1, withscores=True
            )
            legacy += [e for e in await self._entries(ranked) if e.legacy and e.next is not None]
            if len(ranked) < PAGE:
                break
            start += PAGE
        made: list[str] = []
        for entry in legacy:
            scheduler_id = await self._migrate(entry)
            if scheduler_id is not None:
                made.append(scheduler_id)
        return made

    async def _migrate(self, entry: RepeatableJob) -> str | None:
        """Migrate one legacy entry with a pending run; the scheduler id, or ``None``."""
        assert entry.next is not None
        client = await self.client()
        base = entry.next * 4096
        candidates: list[str] = await client.zrangebyscore(  # type: ignore[assignment]
            self.keys.key("delayed"), base, base + 4095
        )
        candidates.append(f"repeat:{entry.key}:{entry.next}")  # due already (BullMQ 5 id)
        for job_id in candidates:
            fields: dict[str, str] = await client.hgetall(self.keys.job(job_id))  # type: ignore[assignment]
            if fields.get("rjk") == entry.key:
                return await _migrate_run(self, entry, fields, job_id)
        return None


def _entry_hash(fields: dict[str, str]) -> dict[str, str]:
    """An entry's hash, or ``{}`` when the key names a job's hash (a 4.x key with a ``:``
    can: ``K:repeat:<key>`` is then some iteration), not an entry's."""
    return {} if "rjk" in fields else fields


async def _migrate_run(
    queue: AsyncQueueBase,
    entry: RepeatableJob,
    run: Mapping[str, str],
    pending: str,
    now_ms: int | None = None,
) -> str | None:
    """Run migrate_repeatable.lua for ``entry`` with the template of its run ``run`` (the hash
    of job ``pending``, or of the job a worker took when ``pending`` is ``""``)."""
    legacy = LegacyRun.from_job(run, entry)
    scheduler_id = migrated_id(entry.key)
    now = clock.now_ms() if now_ms is None else now_ms
    assert entry.next is not None
    reply = int(
        await queue._run(
            _MIGRATE,
            [
                queue._job_prefix,
                entry.key,
                scheduler_id,
                entry.next,
                pending,
                now,
                legacy.name,
                legacy.data,
                legacy.opts,
                legacy.count,
                *legacy.timing,
            ],
        )
    )
    if reply == -1:
        logger.warning(
            "repeatable %s not migrated: a job scheduler %s exists already", entry.key, scheduler_id
        )
    if reply != 1:
        return None
    logger.info("repeatable %s migrated to job scheduler %s", entry.key, scheduler_id)
    return scheduler_id


async def adopt_legacy(
    queue: AsyncQueueBase, job: JobRecord, *, now_ms: int | None = None
) -> tuple[str, int] | None:
    """Migrate the legacy entry whose run ``job`` a worker just took, so that it goes on as a
    job scheduler; ``(scheduler id, run ms of job)``, or ``None`` when ``job`` is not the
    current run of a legacy entry (the entry is gone, moved on, or a scheduler already)."""
    key = job.repeat_job_key
    run_ms = job.id.rpartition(":")[2]
    if key is None or not job.id.startswith("repeat:") or not run_ms.isdigit():
        return None
    client = await queue.client()
    async with client.pipeline(transaction=False) as pipe:
        pipe.zscore(queue.keys.key("repeat"), key)
        pipe.hgetall(queue.keys.key(f"repeat:{key}"))
        pipe.hgetall(queue.keys.job(job.id))
        score, fields, run = await pipe.execute()
    if score is None or int(score) != int(run_ms) or "ic" in fields or not run:
        return None
    entry = RepeatableJob.from_entry(key, score, _entry_hash(fields))
    scheduler_id = await _migrate_run(queue, entry, run, "", now_ms)
    return None if scheduler_id is None else (scheduler_id, int(run_ms))


async def add_repeatable(
    queue: AsyncQueueSchedulers, name: str, data: Any, options: Mapping[str, Any]
) -> AsyncJob:
    """``add(name, data, repeat=..., **options)``: upsert the job scheduler BullMQ 5 would have
    named (``repeat["key"]``, else the MD5 of ``name:job_id:end_date:tz:pattern-or-every``)
    with ``(name, data, the other options)`` as its template; return its first iteration.

    Raises:
        InvalidOptionError: a bad ``repeat``, or an option a scheduler's runs cannot have.
    """
    given = dict(options)
    rep = parse_repeat(given.pop("repeat"))
    for option in REPEAT_REFUSED:
        if option in given:
            raise InvalidOptionError(
                f"{option!r} cannot be given with repeat: each run's time is the schedule's"
            )
    job_id = given.pop("job_id", None)
    if job_id is not None:
        check_text("job_id", job_id)
    check_name("job name", name)
    s = rep.schedule
    scheduler_id = rep.scheduler_id(name, job_id)
    job = await queue.upsert_job_scheduler(
        scheduler_id,
        every=None if s.every is None else s.every / 1000,
        cron=s.pattern,
        tz=s.tz,
        limit=s.limit,
        start_date=s.start_date,
        end_date=s.end_date,
        immediately=s.immediately,
        template=(name, data, given),
    )
    if job is None:  # the scheduler existed and its current run is taken or finished
        scheduler = await queue.get_job_scheduler(scheduler_id)
        if scheduler is not None and scheduler.next_run is not None:
            job = await queue.get_job(f"repeat:{scheduler_id}:{scheduler.next_run}")
    if job is None:
        raise InvalidOptionError(
            f"repeat made no run: job scheduler {scheduler_id!r} has stopped (end_date passed)"
        )
    return job
