"""The dashboard's live updates (corral/dashboard/live.py) on a real server: coalescing, no
reads while idle, one reader refcounted over the subscribers, slow subscribers, a server
restart, close(), and the event stream served by a real uvicorn."""

from __future__ import annotations

import asyncio
import itertools
import logging
import shutil
import socket
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import redis
import redis.asyncio
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from corral import AsyncQueue
from corral.dashboard.live import READER_NAME, LiveHub
from corral.dashboard.streams import sse_response
from corral.errors import InvalidOptionError
from tests.conftest import ServerProcess, free_port, server_binary

#: Commands that read a queue's state: none may run while nothing happens.
STATE_READS = ("llen", "zcard", "hexists", "hmget", "hgetall", "xrevrange", "evalsha", "lrange")


async def eventually(check: Callable[[], Any], what: str, timeout: float = 30.0) -> None:
    """Poll ``check`` until true (a generous bound for a loaded machine, not a measurement)."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if asyncio.iscoroutine(result):
            result = await result
        if result:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


def factory(url: str) -> Callable[[], Awaitable[redis.asyncio.Redis]]:
    async def connect() -> redis.asyncio.Redis:
        return redis.asyncio.Redis.from_url(url, decode_responses=True)

    return connect


@pytest.fixture
async def queue(redis_url: str) -> AsyncIterator[AsyncQueue]:
    async with AsyncQueue("q", connection=redis_url) as q:
        yield q


def readers(r: redis.Redis) -> int:
    return sum(1 for c in r.client_list() if c.get("name") == READER_NAME)


def state_reads(r: redis.Redis) -> dict[str, int]:
    stats = r.info("commandstats")
    return {c: int(stats.get(f"cmdstat_{c}", {}).get("calls", 0)) for c in STATE_READS}


async def test_the_first_state_at_once_then_bursts_coalesced(
    redis_url: str, queue: AsyncQueue
) -> None:
    async with LiveHub(factory(redis_url), interval=0.3) as hub:
        updates = hub.subscribe(["q"])
        first = await updates.__anext__()
        assert first == {
            "queues": {
                "q": {
                    "counts": {
                        "active": 0,
                        "completed": 0,
                        "delayed": 0,
                        "failed": 0,
                        "prioritized": 0,
                        "waiting": 0,
                        "waiting-children": 0,
                    },
                    "paused": False,
                }
            },
            "jobs": [],
        }
        # 10 bursts of 50 adds: 1000 events.
        for start in range(0, 500, 50):
            await queue.add_bulk([("job", {"i": i}) for i in range(start, start + 50)])
        seen: list[dict[str, Any]] = []
        ids: set[str] = set()
        while not seen or seen[-1]["queues"]["q"]["counts"]["waiting"] < 500:
            seen.append(await updates.__anext__())
            ids.update(seen[-1]["jobs"])
        assert len(seen) <= 5  # 1000 events, a handful of updates
        assert ids == {str(i) for i in range(1, 501)}
        await queue.pause()
        while True:
            update = await updates.__anext__()
            if update["queues"]["q"]["paused"]:
                break
        await updates.aclose()


async def test_updates_are_at_least_an_interval_apart(redis_url: str, queue: AsyncQueue) -> None:
    interval = 0.25
    async with LiveHub(factory(redis_url), interval=interval) as hub:
        sub = await hub.open(["q"])
        assert await sub.next() is not None
        times = []
        for i in range(4):
            await queue.add("job", {"i": i})
            update = await sub.next()
            assert update is not None and update["jobs"] == [str(i + 1)]
            times.append(time.monotonic())
        gaps = [b - a for a, b in itertools.pairwise(times)]
        assert min(gaps) >= interval * 0.95, gaps
        hub.release(sub)


@asynccontextmanager
async def serving(hub: LiveHub) -> AsyncIterator[str]:
    """A real uvicorn server on a free port, with the event stream at ``/live?q=a,b``."""

    async def live(request: Request) -> Response:
        names = [n for n in request.query_params.get("q", "").split(",") if n]
        return sse_response(hub, names, request)

    app = Starlette(routes=[Route("/live", live)])
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, log_level="warning", lifespan="off", ws="none")
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    await eventually(lambda: server.started, "uvicorn started")
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task
        sock.close()


class Events:
    """The parsed lines of an SSE response: updates, pings and the retry hint."""

    def __init__(self, response: httpx.Response) -> None:
        self._lines = response.aiter_lines()
        self.retry: int | None = None

    async def next(self) -> tuple[str, Any]:
        """The next ``("update", data)`` or ``("ping", None)``."""
        event = ""
        async for line in self._lines:
            if line.startswith("retry: "):
                self.retry = int(line[7:])
            elif line == ": ping":
                return "ping", None
            elif line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: "):
                assert event == "update"
                return "update", orjson.loads(line[6:])
        raise EOFError


async def test_idle_streams_cost_no_reads(
    redis_url: str, queue: AsyncQueue, r: redis.Redis
) -> None:
    async with (
        LiveHub(factory(redis_url), interval=0.05, heartbeat=0.2) as hub,
        serving(hub) as base,
        httpx.AsyncClient(timeout=30) as http,
    ):
        streams = [http.stream("GET", f"{base}/live?q=q") for _ in range(5)]
        responses = [await s.__aenter__() for s in streams]
        events = [Events(resp) for resp in responses]
        for resp, ev in zip(responses, events, strict=True):
            assert resp.headers["content-type"].startswith("text/event-stream")
            kind, data = await ev.next()
            assert kind == "update" and data["queues"]["q"]["counts"]["waiting"] == 0
            assert ev.retry == 2000
        r.config_resetstat()
        # Three heartbeats on every stream: over half a second of quiet, many ticks of 50 ms.
        for ev in events:
            for _ in range(3):
                assert await ev.next() == ("ping", None)
        assert state_reads(r) == dict.fromkeys(STATE_READS, 0)
        # The same counter does see the reads once something happens.
        await queue.add("job", {})
        for ev in events:
            while True:
                kind, data = await ev.next()
                if kind == "update":
                    assert data["jobs"] == ["1"]
                    assert data["queues"]["q"]["counts"]["waiting"] == 1
                    break
        reads = state_reads(r)
        assert reads["llen"] > 0 and reads["zcard"] > 0
        for s in streams:
            await s.__aexit__(None, None, None)
        # The streams' ends release their subscriptions: the reader goes with the last.
        await eventually(lambda: not hub.watched, "subscriptions released")
        await eventually(lambda: readers(r) == 0, "reader connection closed")


async def test_one_reader_for_all_subscribers_stopped_with_the_last(
    redis_url: str, r: redis.Redis
) -> None:
    async with LiveHub(factory(redis_url), interval=0.05) as hub:
        a = await hub.open(["q", "other"])
        b = await hub.open(["q"])
        c = await hub.open(["third"])
        await eventually(lambda: readers(r) == 1, "one reader")
        assert sorted(hub.watched) == ["other", "q", "third"]
        hub.release(a)
        hub.release(a)  # twice is harmless
        assert sorted(hub.watched) == ["q", "third"]
        # The reader restarted over the smaller set, and still hears q.
        async with AsyncQueue("q", connection=redis_url) as q:
            await q.add("job", {})
        jobs: list[str] = []
        while not jobs:  # the first state, then the add (or both merged into one update)
            update = await b.next(timeout=30)
            assert update is not None
            jobs = update["jobs"]
        assert jobs == ["1"] and update["queues"]["q"]["counts"]["waiting"] == 1
        await eventually(lambda: readers(r) == 1, "still one reader")
        hub.release(b)
        hub.release(c)
        assert hub.watched == []
        await eventually(lambda: readers(r) == 0, "reader connection closed")


async def test_a_slow_subscriber_holds_one_merged_update(redis_url: str, queue: AsyncQueue) -> None:
    async with LiveHub(factory(redis_url), interval=0.02, max_job_ids=5) as hub:
        slow = await hub.open(["q"])
        fast = await hub.open(["q"])
        assert await fast.next() is not None
        for i in range(1, 21):
            await queue.add("job", {"i": i})
            while True:  # the fast one keeps up, whatever the slow one does
                update = await fast.next()
                assert update is not None
                if update["queues"]["q"]["counts"]["waiting"] == i:
                    break
        # The slow one reads now: one update, the latest counts, the newest ids only.
        update = await slow.next()
        assert update is not None
        assert update["queues"]["q"]["counts"]["waiting"] == 20
        assert update["jobs"] == ["16", "17", "18", "19", "20"]
        assert await slow.next(timeout=0.01) is None  # nothing else pending


@pytest.fixture
def own_server() -> Iterator[ServerProcess]:
    workdir = Path(tempfile.mkdtemp(prefix="corral-live-"))
    srv = ServerProcess(server_binary(), free_port(), workdir)
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()
        shutil.rmtree(workdir, ignore_errors=True)


async def test_a_server_restart_keeps_subscriptions_and_sends_a_fresh_state(
    own_server: ServerProcess, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="corral.dashboard")
    async with AsyncQueue("q", connection=own_server.url) as queue:
        await queue.add_bulk([("job", {"i": i}) for i in range(3)])
    async with LiveHub(factory(own_server.url), interval=0.05) as hub:
        sub = await hub.open(["q"])
        first = await sub.next()
        assert first is not None and first["queues"]["q"]["counts"]["waiting"] == 3
        await asyncio.to_thread(own_server.stop)
        await eventually(lambda: "retrying until the server is back" in caplog.text, "outage")
        await asyncio.to_thread(own_server.start)  # same port, no data: a new server
        update = await sub.next(timeout=30)
        assert update is not None and update["queues"]["q"]["counts"]["waiting"] == 0
        assert not sub.closed
        warnings = [rec for rec in caplog.records if "retrying" in rec.getMessage()]
        assert len(warnings) == 1  # logged once for the outage, not per retry
        assert all(rec.exc_info is None for rec in caplog.records)
        # And it goes on reading the new server's events.
        async with AsyncQueue("q", connection=own_server.url) as queue:
            await queue.add("job", {})
        update = await sub.next(timeout=30)
        assert update is not None and update["queues"]["q"]["counts"]["waiting"] == 1


async def test_close_ends_every_subscription(redis_url: str, r: redis.Redis) -> None:
    hub = LiveHub(factory(redis_url), heartbeat=60)
    await hub.start()
    async with (
        serving(hub) as base,
        httpx.AsyncClient(timeout=30) as http,
        http.stream("GET", f"{base}/live?q=q") as resp,
    ):
        events = Events(resp)
        assert (await events.next())[0] == "update"
        updates = hub.subscribe(["q"])
        assert (await updates.__anext__())["queues"]["q"]["paused"] is False
        pending = asyncio.ensure_future(updates.__anext__())
        await hub.close()
        with pytest.raises(StopAsyncIteration):
            await pending
        with pytest.raises(EOFError):  # the HTTP stream ended cleanly
            await events.next()
    await eventually(lambda: readers(r) == 0, "reader connection closed")
    # A subscription after close ends at once.
    assert [u async for u in hub.subscribe(["q"])] == []


async def test_bad_arguments_are_refused(redis_url: str) -> None:
    with pytest.raises(InvalidOptionError, match="interval"):
        LiveHub(factory(redis_url), interval=0)
    with pytest.raises(InvalidOptionError, match="heartbeat"):
        LiveHub(factory(redis_url), heartbeat=-1)
    async with LiveHub(factory(redis_url)) as hub:
        with pytest.raises(InvalidOptionError, match="list of queue names"):
            await hub.open("q")  # type: ignore[arg-type]
        with pytest.raises(InvalidOptionError, match="queue name"):
            await hub.open(["a:b"])
        assert hub.watched == []
