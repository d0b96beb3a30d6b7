"""The dashboard's live updates: queue counts pushed to browsers as server-sent events.

One :class:`LiveHub` serves every open page. It keeps ONE blocking ``XREAD`` over the events
streams of all the queues some page watches (on a connection of its own, restarted when that
set changes: a queue is watched from its first subscriber to its last), so open tabs cost the
server nothing while nothing happens: no counts are read and no command is sent but that XREAD,
sent again every :data:`BLOCK_MS` at most. When events arrive the queue is marked dirty and the
job ids are remembered; a ticker then reads the counts of the dirty queues in one pipeline, at
most once per ``interval``, and hands the update to every subscriber of those queues. A
subscriber's mailbox holds one pending update into which newer ones are merged (latest counts,
union of job ids, bounded): a slow client skips intermediate states, never grows memory, and
never holds up the others. When the server goes away the reader retries with capped backoff,
logging once per outage; subscriptions stay open, and every one gets a fresh state when the
server is back. :func:`corral.dashboard.streams.sse_response` turns a subscription into a
``text/event-stream``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import redis
import redis.asyncio

from corral import options
from corral._async.queue_getters import COUNTABLE, COUNTED_STATES, LIST_STATES
from corral._codec import text
from corral._keys import DEFAULT_PREFIX, QueueKeys
from corral._supervisor import Outage
from corral.backoff import reconnect_delay
from corral.clock import monotonic
from corral.errors import InvalidOptionError

logger = logging.getLogger("corral.dashboard")

#: Longest one XREAD blocks, in ms: an idle hub sends one command per this time, and a
#: connection lost without a word is found then.
BLOCK_MS = 30_000
#: Events read per XREAD; more are read by the next one at once.
READ_COUNT = 1000
#: Most job ids an update lists (the newest kept): a burst of events costs no more than this.
MAX_JOB_IDS = 500
#: Most queues one subscription may watch.
MAX_QUEUES = 1000
#: Name of the reader's connection in ``CLIENT LIST``.
READER_NAME = "corral:dashboard:events"

ClientFactory = Callable[[], Awaitable[redis.asyncio.Redis]]


@dataclass
class _Watch:
    """A queue some subscriber watches: the reader's place in its stream, what changed."""

    keys: QueueKeys
    last_id: str
    subscribers: int = 0
    dirty: bool = False
    jobs: dict[str, None] = field(default_factory=dict)  # an ordered set
    #: The last state read, while no event came after it (a new tab gets it without a read).
    state: dict[str, Any] | None = None


def _add_ids(into: dict[str, None], ids: Any, most: int) -> None:
    for job_id in ids:
        into.pop(job_id, None)
        into[job_id] = None
    while len(into) > most:
        del into[next(iter(into))]


class Subscription:
    """One subscriber's mailbox: at most one pending update, into which newer ones merge."""

    def __init__(self, names: tuple[str, ...], max_job_ids: int) -> None:
        self.names = names
        self._queues: dict[str, dict[str, Any]] = {}
        self._jobs: dict[str, None] = {}
        self._max_job_ids = max_job_ids
        self._pending = False
        self._wake = asyncio.Event()
        self.closed = False

    def offer(self, queues: dict[str, dict[str, Any]], jobs: list[str]) -> None:
        """Merge an update into the pending one (latest counts win, ids are joined)."""
        self._queues.update(queues)
        _add_ids(self._jobs, jobs, self._max_job_ids)
        self._pending = True
        self._wake.set()

    def end(self) -> None:
        self.closed = True
        self._wake.set()

    async def next(self, timeout: float | None = None) -> dict[str, Any] | None:
        """The pending update, waiting up to ``timeout`` s for one (``None``: none came, or
        the subscription ended: see :attr:`closed`)."""
        while not self._pending and not self.closed:
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), timeout)
            except asyncio.TimeoutError:
                return None
        if self.closed:
            return None
        update = {"queues": self._queues, "jobs": list(self._jobs)}
        self._queues, self._jobs, self._pending = {}, {}, False
        return update


class LiveHub:
    """Live counts of queues for every open dashboard page, from the queues' events streams.

    Args:
        client_factory: makes a client (redis-py asyncio, ``decode_responses=True``); called
            once for the hub's reads and once per start of the events reader.
        prefix: key prefix of the queues.
        interval: at most one update per this many seconds (coalescing).
        heartbeat: seconds between ``: ping`` comments of an idle event stream.
        max_job_ids: most job ids one update lists.

    Example::

        async def connect() -> redis.asyncio.Redis:
            return redis.asyncio.Redis.from_url(url, decode_responses=True)

        hub = LiveHub(connect)
        await hub.start()
        async for update in hub.subscribe(["emails"]):
            print(update["queues"]["emails"]["counts"]["waiting"])
    """

    def __init__(
        self,
        client_factory: ClientFactory,
        prefix: str = DEFAULT_PREFIX,
        *,
        interval: float = 0.5,
        heartbeat: float = 15.0,
        max_job_ids: int = MAX_JOB_IDS,
    ) -> None:
        for name, value in (("interval", interval), ("heartbeat", heartbeat)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise InvalidOptionError(f"{name} must be a number of seconds > 0, got {value!r}")
        self._factory = client_factory
        self.prefix = options.check_prefix(prefix)
        self.interval = float(interval)
        self.heartbeat = float(heartbeat)
        self._max_job_ids = max_job_ids
        self._client: redis.asyncio.Redis | None = None
        self._watches: dict[str, _Watch] = {}
        self._subscriptions: set[Subscription] = set()
        self._wake = asyncio.Event()
        self._ticker: asyncio.Task[None] | None = None
        self._reader: asyncio.Task[None] | None = None
        #: Counts the reader's restarts: a reader of an older set stops at once.
        self._reader_generation = 0
        #: The client of each reader still running, by generation (closed when it is cut).
        self._reader_clients: dict[int, redis.asyncio.Redis] = {}
        self._dropping: set[asyncio.Task[None]] = set()
        self._reader_outage = Outage("dashboard events reader", logger)
        self._read_outage = Outage("dashboard counts", logger)
        self._started = False
        self._closed = False

    # -- life cycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        """Start the ticker (the reader starts with the first subscriber)."""
        if self._closed:
            raise RuntimeError("this LiveHub is closed")
        if not self._started:
            self._started = True
            self._ticker = asyncio.create_task(self._tick(), name="corral-dashboard-ticker")

    async def close(self) -> None:
        """End every subscription (their streams finish cleanly), stop reading, disconnect."""
        self._closed = True
        for sub in list(self._subscriptions):
            sub.end()
        self._subscriptions.clear()
        self._watches.clear()
        for task in (self._ticker, self._reader):
            if task is not None:
                task.cancel()
        for generation in list(self._reader_clients):
            await _drop(self._reader_clients.pop(generation))
        for task in (self._ticker, self._reader, *self._dropping):
            if task is not None:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await asyncio.wait_for(task, 5)
        self._ticker = self._reader = None
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def __aenter__(self) -> LiveHub:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- subscriptions ------------------------------------------------------------------------

    def check_names(self, queue_names: Any) -> tuple[str, ...]:
        """The queue names, checked, without repeats.

        Raises:
            InvalidOptionError: not a list of queue names, or more than :data:`MAX_QUEUES`.
        """
        if isinstance(queue_names, str) or not isinstance(queue_names, (list, tuple)):
            raise InvalidOptionError(
                f"queue_names must be a list of queue names, got {type(queue_names).__name__}"
            )
        if len(queue_names) > MAX_QUEUES:
            raise InvalidOptionError(f"at most {MAX_QUEUES} queues, got {len(queue_names)}")
        names = [options.check_name("queue name", n, colon=False) for n in queue_names]
        return tuple(dict.fromkeys(names))

    async def subscribe(self, queue_names: list[str]) -> AsyncIterator[dict[str, Any]]:
        """The state of the queues at once, then an update whenever they change (at most one
        per ``interval``): ``{"queues": {name: {"counts": {state: n}, "paused": bool}},
        "jobs": [ids of jobs that changed]}``. Ends when the hub closes; leaving the loop (or
        closing the iterator) releases the subscription."""
        sub = await self.open(queue_names)
        try:
            while True:
                update = await sub.next()
                if update is None:
                    return
                yield update
        finally:
            self.release(sub)

    async def open(self, queue_names: list[str]) -> Subscription:
        """A subscription whose first update, the current state, is pending already; give it
        back with :meth:`release`. The building block of :meth:`subscribe`."""
        names = self.check_names(queue_names)
        if self._closed:
            sub = Subscription(names, self._max_job_ids)
            sub.end()
            return sub
        await self.start()
        client = await self._commands()
        new = [n for n in names if n not in self._watches]
        pinned: list[str] = []
        if new:
            # Pin each new stream's position before the state is read: no event after the read
            # can be missed, and a restart of the reader does not skip any.
            try:
                async with client.pipeline(transaction=False) as pipe:
                    for name in new:
                        pipe.xrevrange(QueueKeys(name, self.prefix).events, count=1)
                    newest = await pipe.execute()
                pinned = [text(entries[0][0]) if entries else "0-0" for entries in newest]
            except Exception as exc:  # the server is away: the reader catches up from "$"
                self._read_outage.failed("pin events", exc)
                pinned = ["$"] * len(new)
        sub = Subscription(names, self._max_job_ids)
        changed = False
        for name, last_id in zip(new, pinned, strict=True):
            if name not in self._watches:  # another subscriber may have come meanwhile
                self._watches[name] = _Watch(QueueKeys(name, self.prefix), last_id)
                changed = True
        for name in names:
            self._watches[name].subscribers += 1
        self._subscriptions.add(sub)
        if self._closed:
            sub.end()
            return sub
        if changed:
            self._restart_reader()
        try:
            sub.offer(await self._states(names), [])
        except Exception as exc:  # away: the ticker sends the state once it is back
            self._read_outage.failed("read counts", exc)
            for name in names:
                self._watches[name].dirty = True
            self._wake.set()
        return sub

    def release(self, sub: Subscription) -> None:
        """End a subscription; a queue nobody watches any more is no longer read. Idempotent."""
        if sub not in self._subscriptions:
            return
        self._subscriptions.discard(sub)
        sub.end()
        changed = False
        for name in sub.names:
            watch = self._watches.get(name)
            if watch is not None:
                watch.subscribers -= 1
                if watch.subscribers <= 0:
                    del self._watches[name]
                    changed = True
        if changed and not self._closed:
            self._restart_reader()

    @property
    def watched(self) -> list[str]:
        """The queues some subscriber watches."""
        return list(self._watches)

    # -- reading ------------------------------------------------------------------------------

    async def _commands(self) -> redis.asyncio.Redis:
        if self._client is None:
            self._client = await self._factory()
        return self._client

    async def _states(self, names: tuple[str, ...] | list[str]) -> dict[str, dict[str, Any]]:
        """The state of each queue: cached while no event came since it was read, else read
        (all of them in one pipeline)."""
        found: dict[str, dict[str, Any]] = {}
        wanted = []
        for name in names:
            watch = self._watches.get(name)
            if watch is not None and watch.state is not None and not watch.dirty:
                found[name] = watch.state
            else:
                wanted.append(name)
        if wanted:
            found.update(await self._read_states(wanted))
        return {name: found[name] for name in names if name in found}

    async def _read_states(self, names: list[str]) -> dict[str, dict[str, Any]]:
        try:
            return await self._read_states_once(names)
        except (redis.ConnectionError, redis.TimeoutError):
            # Once more at once: after a restart the pooled connection is a dead one, and
            # only the first call on it finds out.
            return await self._read_states_once(names)

    async def _read_states_once(self, names: list[str]) -> dict[str, dict[str, Any]]:
        client = await self._commands()
        async with client.pipeline(transaction=False) as pipe:
            for name in names:
                keys = QueueKeys(name, self.prefix)
                for state in COUNTED_STATES:
                    key = keys.key(COUNTABLE[state])
                    if state in LIST_STATES:
                        pipe.llen(key)
                    else:
                        pipe.zcard(key)
                pipe.hexists(keys.meta, "paused")
            replies = await pipe.execute()
        states: dict[str, dict[str, Any]] = {}
        width = len(COUNTED_STATES) + 1
        for i, name in enumerate(names):
            row = replies[i * width : (i + 1) * width]
            counts = {state: int(n) for state, n in zip(COUNTED_STATES, row, strict=False)}
            states[name] = {"counts": counts, "paused": bool(row[-1])}
        return states

    def _restart_reader(self) -> None:
        # One XREAD over every watched stream: it is cut short (its connection closed) and
        # sent again with the new set, from the positions reached.
        if self._reader is not None:
            self._reader.cancel()
        # A cancel can reach redis-py at a point where it is lost (the XREAD then runs its
        # BLOCK out): closing the connection ends the read whatever.
        old = self._reader_clients.pop(self._reader_generation, None)
        if old is not None:
            task = asyncio.create_task(_drop(old))
            self._dropping.add(task)
            task.add_done_callback(self._dropping.discard)
        self._reader = None
        self._reader_generation += 1
        if self._watches and not self._closed:
            self._reader = asyncio.create_task(
                self._read_events(self._reader_generation), name="corral-dashboard-events"
            )

    async def _reader_client(self) -> redis.asyncio.Redis:
        """A client of the reader's own, whose connections block for as long as its XREAD:
        redis-py gives up a read after the socket timeout (5 s by default), blocking or not."""
        client = await self._factory()
        kwargs = client.connection_pool.connection_kwargs
        kwargs["socket_timeout"] = BLOCK_MS / 1000 + 10
        kwargs["client_name"] = READER_NAME
        await client.connection_pool.disconnect()  # any connection made with other settings
        return client

    async def _read_events(self, generation: int) -> None:
        client: redis.asyncio.Redis | None = None
        try:
            while not self._closed and self._watches:
                streams = {w.keys.events: w.last_id for w in self._watches.values()}
                names = {w.keys.events: name for name, w in self._watches.items()}
                try:
                    if client is None:
                        client = await self._reader_client()
                        self._reader_clients[generation] = client
                    if self._reader_outage.down:
                        await client.ping()
                        self._reader_outage.succeeded()
                        self._refresh_all()
                    reply = await client.xread(
                        streams,  # type: ignore[arg-type]
                        count=READ_COUNT,
                        block=BLOCK_MS,
                    )
                except Exception as exc:
                    # A cancel (the set changed) may reach redis-py as a timeout: not an outage.
                    if self._closed or generation != self._reader_generation:
                        return
                    self._reader_outage.failed("read", exc)
                    await asyncio.sleep(reconnect_delay(self._reader_outage.failures, cap=2.0))
                    continue
                if generation != self._reader_generation:
                    return
                self._absorb(reply, names)
        finally:
            if self._reader_clients.get(generation) is client:
                del self._reader_clients[generation]
            if client is not None:
                await _drop(client)

    def _absorb(self, reply: Any, names: dict[str, str]) -> None:
        items = reply.items() if isinstance(reply, dict) else (reply or ())
        woke = False
        for stream, entries in items:
            watch = self._watches.get(names.get(text(stream), ""))
            if watch is None or not entries:
                continue
            watch.last_id = text(entries[-1][0])
            watch.dirty, watch.state, woke = True, None, True
            ids = (fields.get("jobId") for _, fields in entries if fields)
            _add_ids(watch.jobs, (text(i) for i in ids if i), self._max_job_ids)
        if woke:
            self._wake.set()

    def _refresh_all(self) -> None:
        """After an outage: everything may have changed (the server may even be a new one)."""
        for watch in self._watches.values():
            watch.dirty, watch.state = True, None
        self._wake.set()

    async def _tick(self) -> None:
        last = -self.interval
        while not self._closed:
            await self._wake.wait()
            wait = last + self.interval - monotonic()
            if wait > 0:
                await asyncio.sleep(wait)  # coalescing: events of the wait join this update
            self._wake.clear()
            dirty = {name: w for name, w in self._watches.items() if w.dirty}
            if not dirty:
                continue
            jobs: dict[str, list[str]] = {}
            for name, taken in dirty.items():
                jobs[name] = list(taken.jobs)
                taken.dirty, taken.jobs = False, {}
            last = monotonic()
            try:
                states = await self._read_states(list(dirty))
            except Exception as exc:
                for name, ids in jobs.items():
                    watch = self._watches.get(name)
                    if watch is not None:
                        watch.dirty = True
                        _add_ids(watch.jobs, ids, self._max_job_ids)
                await asyncio.sleep(self._read_outage.failed("read counts", exc))
                self._wake.set()
                continue
            self._read_outage.succeeded()
            for name, state in states.items():
                watch = self._watches.get(name)
                if watch is not None and not watch.dirty:
                    watch.state = state
            for sub in list(self._subscriptions):
                mine = {n: states[n] for n in sub.names if n in states}
                if mine:
                    ids = [i for n in sub.names for i in jobs.get(n, ())]
                    sub.offer(mine, ids)


async def _drop(client: redis.asyncio.Redis) -> None:
    """Close a client's connections, the one blocked in a read included."""
    with contextlib.suppress(Exception):
        await client.connection_pool.disconnect()
        await client.aclose()
