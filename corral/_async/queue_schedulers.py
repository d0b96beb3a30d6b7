"""Job schedulers: jobs made on a schedule, BullMQ 6.x's ``upsertJobScheduler`` and friends.

A layer of :class:`AsyncQueue` over the admin methods. A scheduler is the hash
``K:repeat:<id>`` (its timing and job template), scored in the zset ``K:repeat`` at its next
run. It has one pending iteration at a time: an ordinary job ``repeat:<id>:<run ms>`` whose
hash carries ``rjk = <id>``. When a worker takes that job it calls
:func:`schedule_next_iteration`, which creates the next one; the timing math is pure
(``corral.schedule``). Every write is one script, so any number of processes may upsert and
work the same scheduler at once, Node BullMQ's included.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from corral import _codec, _scripts, clock
from corral._async._queue_base import AsyncQueueBase
from corral._async.job import AsyncJob
from corral._async.queue_admin import AsyncQueueAdmin
from corral._async.queue_getters import check_int
from corral._async.queue_repeatable import adopt_legacy
from corral._provenance import PROVENANCE_KEY, stamp
from corral.bounds import MAX_TIMESTAMP_MS
from corral.errors import InvalidOptionError
from corral.job import JobRecord
from corral.options import Duration, JobOptions, check_name
from corral.schedule import TIMING_FIELDS, DateLike, JobScheduler, Schedule

logger = logging.getLogger("corral.schedulers")

_UPSERT = _scripts.load("upsert_job_scheduler")
_NEXT = _scripts.load("next_iteration")
_REMOVE = _scripts.load("remove_job_scheduler")

#: Options of ``add`` a template cannot carry: each iteration's id and run time are the
#: scheduler's (BullMQ's ``JobSchedulerTemplateOptions`` leaves out ``jobId`` and ``delay``).
TEMPLATE_REFUSED = ("job_id", "delay", "timestamp")

#: A job template: ``(name, data)``, ``(name, data, options)`` or
#: ``{"name": ..., "data": ..., "opts": {...}}``; options are ``add``'s keyword options.
Template = Sequence[Any] | Mapping[str, Any]


def _split_template(scheduler_id: str, template: Template | None) -> tuple[str, Any, Any]:
    if template is None:
        return scheduler_id, None, {}
    if isinstance(template, Mapping):
        unknown = set(template) - {"name", "data", "opts"}
        if unknown:
            raise InvalidOptionError(
                f"template takes 'name', 'data' and 'opts', got {sorted(unknown)[0]!r}"
            )
        return template.get("name") or scheduler_id, template.get("data"), template.get("opts")
    if isinstance(template, Sequence) and not isinstance(template, str) and len(template) in (2, 3):
        opts = template[2] if len(template) == 3 else {}
        return template[0], template[1], opts
    raise InvalidOptionError(
        f"template must be (name, data), (name, data, opts) or a dict, got {template!r}"
    )


class AsyncQueueSchedulers(AsyncQueueAdmin):
    """Methods that manage the queue's job schedulers."""

    def _template_args(self, scheduler_id: str, template: Template | None) -> list[str]:
        """``[name, data JSON or "", opts JSON or ""]`` for the upsert script."""
        name, data, given = _split_template(scheduler_id, template)
        check_name("template name", name)
        if given is None:
            given = {}
        if not isinstance(given, Mapping):
            raise InvalidOptionError(f"template opts must be a dict, got {given!r}")
        for option in TEMPLATE_REFUSED:
            if option in given:
                raise InvalidOptionError(
                    f"template opts cannot set {option!r}: each iteration's is the scheduler's"
                )
        # The queue's defaults apply, as to add(); those that make no sense here are dropped.
        defaults = {
            k: v
            for k, v in (getattr(self, "default_job_options", None) or {}).items()
            if k not in TEMPLATE_REFUSED
        }
        opts = JobOptions.build(
            given, defaults=defaults, backoff_types=getattr(self, "backoff_types", ())
        )
        encoded = "" if data is None else _codec.encode_data(data)
        opts.check_size(encoded)
        # BullMQ stores template opts only when some were given. The record of the scope
        # upserting goes into the template, so every iteration carries the creator's.
        prov = stamp(self.name)
        stored = opts.to_opts(0) if (given or defaults) else {}
        if prov is not None:
            stored[PROVENANCE_KEY] = prov
        opts_json = _codec.dumps(stored) if stored else ""
        return [name, encoded, opts_json]

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
        """Create the scheduler ``scheduler_id``, or replace its settings; return its pending
        iteration (BullMQ's ``upsertJobScheduler``).

        Give ``every`` or ``cron``. An ``every`` scheduler runs first now (or at
        ``start_date``), then every ``every``; a cron one at the pattern's next tick (now too
        with ``immediately``). Upserting again with the same timing keeps the pending
        iteration's run time and rewrites it from the new template; new timing replaces it.
        The iteration count is kept either way.

        Args:
            scheduler_id: the scheduler's id; its iterations are ``repeat:<id>:<run ms>``.
            every: seconds or a ``timedelta`` between runs.
            cron: a cron pattern, 5 fields or 6 with seconds first (``"*/10 * * * * *"``).
            tz: IANA time zone the pattern is read in (default: local time, as in Node).
            limit: at most this many runs.
            start_date: no run before (``datetime`` or epoch ms).
            end_date: no run after (``datetime`` or epoch ms).
            immediately: with ``cron``, run once now too.
            template: each iteration's ``(name, data)`` or ``(name, data, opts)``, or
                ``{"name":, "data":, "opts":}``; ``opts`` are :meth:`add`'s keyword options
                except ``job_id``, ``delay`` and ``timestamp``. The name defaults to the id.
            now_ms: the time to schedule from (epoch ms), by default now.

        Returns:
            The pending iteration, or ``None`` when there is none (the scheduler had
            stopped at its ``end_date``).

        Raises:
            InvalidOptionError: a bad argument (naming it); nothing was written.
        """
        check_name("scheduler id", scheduler_id, colon=False)
        schedule = Schedule.build(
            every=every,
            cron=cron,
            tz=tz,
            limit=limit,
            start_date=start_date,
            end_date=end_date,
            immediately=immediately,
        )
        template_args = self._template_args(scheduler_id, template)
        now = clock.now_ms() if now_ms is None else check_int("now_ms", now_ms, 0, MAX_TIMESTAMP_MS)
        first = schedule.check_runs(now)
        timing = schedule.fields()
        reply = await self._run(
            _UPSERT,
            [
                self._job_prefix,
                scheduler_id,
                now,
                first,
                schedule.restart_run(now),
                *template_args,
                *(timing.get(name, "") for name in TIMING_FIELDS),
            ],
        )
        await self._stamp_meta()
        job_id = _codec.text(reply[0])
        return await self.get_job(job_id) if job_id else None

    async def get_job_scheduler(self, scheduler_id: str) -> JobScheduler | None:
        """The scheduler with this id, or ``None``."""
        check_name("scheduler id", scheduler_id)
        client = await self.client()
        async with client.pipeline(transaction=True) as pipe:
            pipe.hgetall(self.keys.key(f"repeat:{scheduler_id}"))
            pipe.zscore(self.keys.key("repeat"), scheduler_id)
            fields, score = await pipe.execute()
        if not fields:
            return None
        return JobScheduler.from_hash(scheduler_id, fields, score)

    async def get_job_schedulers(
        self, start: int = 0, end: int = -1, asc: bool = False
    ) -> list[JobScheduler]:
        """Schedulers ordered by next run, latest first (``asc=True``: soonest first);
        ``start``/``end`` are inclusive indexes into that order, as in BullMQ."""
        check_int("start", start, None)
        check_int("end", end, None)
        client = await self.client()
        ranked: list[tuple[str, float]] = await client.zrange(  # type: ignore[assignment]
            self.keys.key("repeat"), start, end, desc=not asc, withscores=True
        )
        if not ranked:
            return []
        async with client.pipeline(transaction=False) as pipe:
            for scheduler_id, _ in ranked:
                pipe.hgetall(self.keys.key(f"repeat:{scheduler_id}"))
            hashes = await pipe.execute()
        return [
            JobScheduler.from_hash(scheduler_id, fields, score)
            for (scheduler_id, score), fields in zip(ranked, hashes, strict=True)
            if fields  # legacy (BullMQ < 6) repeatable entries have no hash of this shape
        ]

    async def count_job_schedulers(self) -> int:
        """How many schedulers the queue has."""
        client = await self.client()
        return int(await client.zcard(self.keys.key("repeat")))

    async def remove_job_scheduler(self, scheduler_id: str) -> bool:
        """Delete a scheduler and its pending iteration; ``False`` when there was none.

        An iteration that is running finishes; no other is created.
        """
        check_name("scheduler id", scheduler_id)
        return int(await self._run(_REMOVE, [self._job_prefix, scheduler_id])) == 1


def _run_ms(job: JobRecord) -> int | None:
    """The run time in an iteration's id ``repeat:<scheduler id>:<ms>``."""
    prefix = f"repeat:{job.repeat_job_key}:"
    rest = job.id[len(prefix) :] if job.id.startswith(prefix) else ""
    return int(rest) if rest.isdigit() else None


async def schedule_next_iteration(
    queue: AsyncQueueBase, job: JobRecord, *, now_ms: int | None = None
) -> str | None:
    """Create the iteration that follows ``job``, a scheduler's iteration a worker just took.

    Workers call this as they take a job whose hash has ``rjk``. It does nothing (returns
    ``None``) when ``job`` is no longer its scheduler's current iteration (taken again after
    a stall, replaced by an upsert), when the scheduler is gone, or when its ``limit`` or
    ``end_date`` stops it; so calling it twice creates one iteration. A run of a repeatable
    job an older BullMQ added (``rjk`` names a legacy entry) first makes that entry a
    scheduler (``queue_repeatable.adopt_legacy``), so it goes on with the job's data.

    Returns:
        The id of the iteration created, or ``None``.
    """
    scheduler_id = job.repeat_job_key
    prev = _run_ms(job) if scheduler_id else None
    if scheduler_id is None:
        return None
    client = await queue.client()
    key = queue.keys.key(f"repeat:{scheduler_id}")
    for _ in range(3):  # again only if an upsert changed the timing meanwhile
        fields: dict[str, str] = await client.hgetall(key)  # type: ignore[assignment]
        if "ic" not in fields:
            # No scheduler hash (every 6.x one has ic): maybe a repeatable job an older
            # BullMQ added, whose next run its workers made. It goes on as a scheduler.
            adopted = await adopt_legacy(queue, job, now_ms=now_ms)
            if adopted is None:
                return None
            scheduler_id, prev = adopted
            key = queue.keys.key(f"repeat:{scheduler_id}")
            fields = await client.hgetall(key)  # type: ignore[assignment]
            if "ic" not in fields:
                return None
        if prev is None:
            return None
        schedule = Schedule.from_fields(fields)
        repeat = job.opts.get("repeat")
        count = repeat.get("count") if isinstance(repeat, dict) else None
        count = (int(count) if count else int(fields.get("ic") or 0)) + 1
        if schedule.limit is not None and count > schedule.limit:
            return None
        now = clock.now_ms() if now_ms is None else now_ms
        try:
            nxt = schedule.next_run(prev, now)
        except (ValueError, KeyError) as exc:  # a pattern croniter cannot read
            logger.warning("scheduler %s: no next run: %s", scheduler_id, exc)
            return None
        if nxt is None:
            return None
        timing = [fields.get(name, "") for name in TIMING_FIELDS]
        reply = int(
            await queue._run(
                _NEXT, [queue._job_prefix, scheduler_id, prev, nxt, now, count, *timing]
            )
        )
        if reply >= 0:
            return f"repeat:{scheduler_id}:{nxt}" if reply == 1 else None
    return None
