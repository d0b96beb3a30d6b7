"""``AsyncQueue``: add jobs and read a queue's state (BullMQ's ``Queue``)."""

from __future__ import annotations

from typing import Any

from redis.asyncio import Redis

from corral import _codec, _scripts, options
from corral._async._redis import check_server, open_client, run_script
from corral._keys import DEFAULT_PREFIX, QueueKeys
from corral.clock import now_ms
from corral.job import Job, JobState
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


class AsyncQueue:
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

    def __init__(
        self,
        name: str,
        *,
        connection: str | Redis | None = None,
        prefix: str = DEFAULT_PREFIX,
        strict: bool = False,
    ) -> None:
        self.name = options.check_name("queue name", name, colon=False)
        self.prefix = options.check_name("prefix", prefix)
        self.keys = QueueKeys(name, prefix)
        self._script_keys = self.keys.script_keys()
        self._job_prefix = self.keys.base + ":"
        self._connection = connection
        self._strict = strict
        self._client: Redis | None = None

    async def client(self) -> Redis:
        """The redis-py client, opened and checked on first use."""
        if self._client is None:
            client = open_client(self._connection)
            await check_server(client, strict=self._strict, owned=client is not self._connection)
            self._client = client
        return self._client

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
    ) -> Job:
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
        client = await self.client()
        reply = await run_script(
            client,
            _scripts.ADD_JOB,
            self._script_keys,
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
        return Job(
            queue_name=self.name,
            id=new_id,
            name=name,
            data=_codec.loads(encoded),
            opts=_codec.loads(opts_json),
            timestamp=ts,
            delay=opts.delay_ms,
            priority=opts.priority,
        )

    async def get_job(self, job_id: str) -> Job | None:
        """The job with this id, or ``None`` when there is none."""
        client = await self.client()
        fields: dict[str, str] = await client.hgetall(self.keys.job(job_id))  # type: ignore[assignment]
        if not fields:
            return None
        return Job.from_hash(self.name, job_id, fields)

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

    async def close(self) -> None:
        """Close the client, unless it was given by the caller."""
        if self._client is not None and self._client is not self._connection:
            await self._client.aclose()
        self._client = None

    async def __aenter__(self) -> AsyncQueue:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
