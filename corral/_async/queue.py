"""``AsyncQueue``: add jobs and read a queue's state (BullMQ's ``Queue``)."""

from __future__ import annotations

from typing import Any

from corral import _codec, _scripts, options
from corral._async.job import AsyncJob
from corral._async.queue_admin import AsyncQueueAdmin
from corral.clock import now_ms
from corral.job import JobState
from corral.options import Duration, JobOptions, Retention

#: The states ``get_job_counts()`` reports when none are named, in BullMQ's order.
COUNTED_STATES = (
    "active",
    "completed",
    "delayed",
    "failed",
    "prioritized",
    "waiting",
    "waiting-children",
)


class AsyncQueue(AsyncQueueAdmin):
    """A queue in BullMQ 6.x's layout, for asyncio code.

    Args:
        name: the queue's name (no ``:``).
        connection: a URL, a redis-py asyncio client made with ``decode_responses=True``, or
            ``None`` for ``CORRAL_REDIS_URL`` / ``REDIS_URL`` / the embedded server.
        prefix: key prefix, ``bull`` by default (what Node BullMQ and bull-board read).
        strict: refuse, rather than warn about, a server whose maxmemory-policy evicts keys.

    Example::

        async with AsyncQueue("emails") as queue:
            job = await queue.add("welcome", {"to": "ada@example.com"})
    """

    async def add(
        self,
        name: str,
        data: Any = None,
        *,
        job_id: str | None = None,
        delay: Duration | None = None,
        priority: int | None = None,
        lifo: bool = False,
        attempts: int | None = None,
        remove_on_complete: Retention | None = None,
        remove_on_fail: Retention | None = None,
        timestamp: int | None = None,
    ) -> AsyncJob:
        """Add a job and return it.

        Adding a ``job_id`` that exists already writes nothing (a ``duplicated`` event) and
        returns the existing job, as BullMQ does.

        Raises:
            InvalidOptionError: an option or the data was refused; nothing was written.
        """
        options.check_name("job name", name)
        opts = JobOptions.build(
            job_id=job_id,
            delay=delay,
            priority=priority,
            lifo=lifo,
            attempts=attempts,
            remove_on_complete=remove_on_complete,
            remove_on_fail=remove_on_fail,
            timestamp=timestamp,
        )
        encoded = _codec.encode_data(data)
        ts = opts.timestamp if opts.timestamp is not None else now_ms()
        opts_json = _codec.dumps(opts.to_opts(ts))
        reply = await self._run(
            _scripts.ADD_JOB,
            [
                self._job_prefix,
                opts.job_id or "",
                name,
                encoded,
                opts_json,
                ts,
                opts.delay_ms,
                opts.priority,
                "1" if opts.lifo else "0",
            ],
        )
        new_id = _codec.text(reply[0])
        if int(reply[1]) == 0:
            existing = await self.get_job(new_id)
            if existing is not None:
                return existing
        job = AsyncJob(
            queue_name=self.name,
            id=new_id,
            name=name,
            data=_codec.loads(encoded),
            opts=_codec.loads(opts_json),
            timestamp=ts,
            delay=opts.delay_ms,
            priority=opts.priority,
        )
        job.queue = self
        return job

    async def get_job_counts(self, *states: str) -> dict[str, int]:
        """How many jobs are in each state (all of BullMQ's states when none are named)."""
        wanted = [JobState(s).value for s in states] or list(COUNTED_STATES)
        client = await self.client()
        async with client.pipeline(transaction=False) as pipe:
            for state in wanted:
                if state in ("waiting", "active"):
                    pipe.llen(self.keys.wait if state == "waiting" else self.keys.active)
                else:
                    pipe.zcard(self.keys.key(state))
            counts = await pipe.execute()
        return {state: int(n) for state, n in zip(wanted, counts, strict=True)}

    async def __aenter__(self) -> AsyncQueue:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
