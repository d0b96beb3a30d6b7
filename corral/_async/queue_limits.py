"""Queue settings kept in ``K:meta`` and the limiter: events cap, global concurrency and rate
limit, and the manual rate limit that makes every worker wait.

A layer of :class:`AsyncQueue`. It only writes and reads the settings; the fetch script is
what honours them (``meta.concurrency`` and ``meta.max``/``duration`` at every fetch).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from corral._async.queue_getters import AsyncQueueGetters, check_int
from corral._codec import encode_data
from corral.bounds import check_text
from corral.errors import InvalidOptionError
from corral.events import EVENT_TYPES
from corral.options import Duration, check_name, duration_ms

#: Fields of ``K:meta`` that hold integers; :meth:`AsyncQueueLimits.get_meta` converts them.
META_INT_FIELDS = ("opts.maxLenEvents", "concurrency", "max", "duration")

#: What ``rate_limit()`` writes to ``K:limiter`` (BullMQ's ``Number.MAX_SAFE_INTEGER``): no
#: limiter max reaches it, so every fetch waits for the key's TTL.
RATE_LIMITED = 9_007_199_254_740_991


def _positive_ms(name: str, value: Duration) -> int:
    ms = duration_ms(name, value)
    if ms < 1:
        raise InvalidOptionError(f"{name} must be at least 1 ms, got {value!r}")
    return ms


class AsyncQueueLimits(AsyncQueueGetters):
    """Methods that read or change the queue's settings and limits."""

    async def get_meta(self) -> dict[str, Any]:
        """The queue's ``K:meta`` hash, with the integer fields as ``int`` and ``paused`` a bool.

        Field names are BullMQ's (``opts.maxLenEvents``, ``version``, ``concurrency``, ``max``,
        ``duration``); ``paused`` is always present.
        """
        client = await self.client()
        raw = cast(dict[str, str], await client.hgetall(self.keys.meta))
        meta: dict[str, Any] = dict(raw)
        for field in META_INT_FIELDS:
            value = raw.get(field)
            if value is not None and value.lstrip("-").isdigit():
                meta[field] = int(value)
        meta["paused"] = "paused" in raw
        return meta

    async def set_max_len_events(self, max_len: int) -> None:
        """Cap the events stream at about ``max_len`` entries (``opts.maxLenEvents``).

        Every script trims ``K:events`` to it as it writes (``XADD MAXLEN ~``).

        Raises:
            InvalidOptionError: ``max_len`` is not an integer >= 0.
        """
        check_int("max_len", max_len)
        client = await self.client()
        await client.hset(self.keys.meta, "opts.maxLenEvents", max_len)

    async def trim_events(self, max_len: int, *, approximate: bool = True) -> int:
        """Trim the events stream to ``max_len`` entries; returns how many were removed.

        Args:
            max_len: entries to keep.
            approximate: ``XTRIM MAXLEN ~`` as BullMQ does: cheap, but whole stream nodes
                (100 entries by default) go at once, so up to a node more may stay.
                ``False`` trims to exactly ``max_len``.

        Raises:
            InvalidOptionError: ``max_len`` is not an integer >= 0.
        """
        check_int("max_len", max_len)
        client = await self.client()
        removed: int = await client.xtrim(self.keys.events, maxlen=max_len, approximate=approximate)
        return removed

    async def publish_event(self, name: str, fields: Mapping[str, Any] | None = None) -> str:
        """Add a custom event to the queue's events stream; returns its event id.

        Listeners (corral's ``QueueEvents``, Node's ``QueueEvents``) receive it beside the
        queue's own events; corral yields it as :class:`~corral.events.CustomEvent`. Values
        that are not strings are stored as JSON.

        Raises:
            InvalidOptionError: an empty name, or the name of one of BullMQ's own events.
        """
        check_name("event name", name)
        if name in EVENT_TYPES:
            raise InvalidOptionError(f"event name {name!r} is one of BullMQ's own events")
        if fields is not None and not isinstance(fields, Mapping):
            raise InvalidOptionError(f"fields must be a dict, got {type(fields).__name__}")
        entry: dict[str, str] = {"event": name}  # BullMQ's entries start with `event`
        for key, value in (fields or {}).items():
            check_name("fields key", key)
            if key == "event":
                raise InvalidOptionError("fields must not contain 'event'")
            try:
                if not isinstance(value, str):
                    value = encode_data(value)
                elif value:  # an empty value is fine; a lone surrogate is not
                    check_text("value", value)
                entry[key] = value
            except InvalidOptionError as exc:
                raise InvalidOptionError(f"fields[{key!r}]: {exc}") from None
        client = await self.client()
        max_len = int(await client.hget(self.keys.meta, "opts.maxLenEvents") or 10_000)
        event_id = await client.xadd(
            self.keys.events,
            entry,  # type: ignore[arg-type]
            maxlen=max_len,
            approximate=True,
        )
        return str(event_id)

    async def set_global_concurrency(self, concurrency: int) -> None:
        """Let at most ``concurrency`` jobs of this queue be active at once, over all workers.

        Raises:
            InvalidOptionError: ``concurrency`` is not an integer >= 1.
        """
        check_int("concurrency", concurrency, 1)
        client = await self.client()
        await client.hset(self.keys.meta, "concurrency", concurrency)

    async def get_global_concurrency(self) -> int | None:
        """The global concurrency, or ``None`` when there is none."""
        client = await self.client()
        value = cast("str | None", await client.hget(self.keys.meta, "concurrency"))
        return None if value is None else int(value)

    async def remove_global_concurrency(self) -> None:
        """Remove the global concurrency limit."""
        client = await self.client()
        await client.hdel(self.keys.meta, "concurrency")

    async def set_global_rate_limit(self, max_jobs: int, duration: Duration) -> None:
        """Let the workers take at most ``max_jobs`` jobs per ``duration``, all together.

        Args:
            max_jobs: jobs per window.
            duration: the window, seconds or a ``timedelta`` (stored in ms as ``duration``).

        Raises:
            InvalidOptionError: ``max_jobs`` < 1 or ``duration`` under 1 ms.
        """
        check_int("max_jobs", max_jobs, 1)
        ms = _positive_ms("duration", duration)
        client = await self.client()
        await client.hset(self.keys.meta, mapping={"max": max_jobs, "duration": ms})

    async def get_global_rate_limit(self) -> tuple[int, int] | None:
        """``(max jobs, window ms)`` of the global rate limit, or ``None`` when there is none."""
        client = await self.client()
        max_jobs, duration = await client.hmget(self.keys.meta, ["max", "duration"])
        if max_jobs is None or duration is None:
            return None
        return int(max_jobs), int(duration)

    async def remove_global_rate_limit(self) -> None:
        """Remove the global rate limit."""
        client = await self.client()
        await client.hdel(self.keys.meta, "max", "duration")

    async def rate_limit(self, duration: Duration) -> None:
        """Make every worker of the queue wait ``duration`` before it takes another job.

        Jobs already active run on. Typically called from a job that hit an external limit,
        which then raises :class:`~corral.errors.RateLimitError` to go back to wait.

        Raises:
            InvalidOptionError: ``duration`` under 1 ms.
        """
        ms = _positive_ms("duration", duration)
        client = await self.client()
        await client.set(self.keys.limiter, RATE_LIMITED, px=ms)

    async def get_rate_limit_ttl(self, max_jobs: int | None = None) -> int:
        """Milliseconds until the queue's rate limit ends, as BullMQ's ``getRateLimitTtl``.

        Without ``max_jobs`` this is the limiter key's ``PTTL`` as is: -2 when the queue
        is not limited (no key), -1 for a key with no expiry.

        Args:
            max_jobs: count the queue as limited only when its window counter has reached
                this (a worker's limiter ``max``): 0 when it has not, or when the key is
                missing or has no expiry.

        Raises:
            InvalidOptionError: ``max_jobs`` is not an integer >= 1.
        """
        if max_jobs is not None:
            check_int("max_jobs", max_jobs, 1)
        client = await self.client()
        async with client.pipeline(transaction=True) as pipe:
            pipe.get(self.keys.limiter)
            pipe.pttl(self.keys.limiter)
            counter, ttl = await pipe.execute()
        if max_jobs is None:
            return int(ttl)
        if int(counter or 0) < max_jobs:
            return 0
        # PTTL is -2 without the key and -1 for a key with no TTL: neither is a wait.
        return max(int(ttl), 0)
