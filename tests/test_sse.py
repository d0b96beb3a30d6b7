"""corral.sse.job_events through a real HTTP server (uvicorn) and an HTTP client (httpx)."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx
import orjson
import pytest
import redis
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from corral import AsyncJob, AsyncQueue, InvalidOptionError, Worker
from corral.sse import job_events
from tests.test_queue_events_live import blocked_in_xread


@pytest.fixture
async def queue(redis_url: str) -> Any:
    q = AsyncQueue("q", connection=redis_url)
    yield q
    await q.close()


async def until(check: Callable[[], Awaitable[bool]], what: str) -> None:
    deadline = asyncio.get_running_loop().time() + 30
    while not await check():
        assert asyncio.get_running_loop().time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


@asynccontextmanager
async def serving(queue: AsyncQueue, heartbeat: float = 15.0, **options: Any) -> AsyncIterator[str]:
    """A uvicorn server on a free port with the job's events at ``/jobs/<id>/events``."""

    async def events(request: Request) -> Response:
        job_id = request.path_params["job_id"]
        return job_events(queue, job_id, request, heartbeat=heartbeat, **options)

    app = Starlette(routes=[Route("/jobs/{job_id}/events", events)])
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off", ws="none"))
    task = asyncio.create_task(server.serve(sockets=[sock]))

    async def started() -> bool:
        return bool(server.started)

    await until(started, "uvicorn started")
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task
        sock.close()


class Events:
    """The events of an SSE response, as ``(event, id, data)``; a ping is ``("ping", ...)``."""

    def __init__(self, response: httpx.Response) -> None:
        self._lines = response.aiter_lines()
        self.retry: int | None = None

    async def next(self) -> tuple[str, str | None, Any]:
        event, event_id, data = "message", None, None
        async for line in self._lines:
            if line.startswith("retry: "):
                self.retry = int(line[7:])
            elif line == ": ping":
                return "ping", None, None
            elif line.startswith("id: "):
                event_id = line[4:]
            elif line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: "):
                data = orjson.loads(line[6:])
            elif line == "" and data is not None:
                return event, event_id, data
        raise EOFError

    async def rest(self) -> list[tuple[str, str | None, Any]]:
        out = []
        while True:
            try:
                out.append(await self.next())
            except EOFError:
                return out


def worker(redis_url: str, process: Callable[[AsyncJob], Awaitable[Any]]) -> Worker:
    return Worker("q", process, connection=redis_url)


async def test_chunks_then_end_with_ids(queue: AsyncQueue, redis_url: str) -> None:
    async def process(job: AsyncJob) -> dict[str, str]:
        for word in ("hello", " ", "world"):
            await job.stream(word)
        return {"text": "hello world"}

    job = await queue.add("gen", {})
    async with (
        serving(queue) as base,
        httpx.AsyncClient(timeout=30) as http,
        http.stream("GET", f"{base}/jobs/{job.id}/events") as resp,
    ):
        assert resp.status_code == 200
        assert resp.headers["content-type"].startswith("text/event-stream")
        events = Events(resp)
        await blocked_in_xread(redis_url)
        w = worker(redis_url, process)
        running = asyncio.create_task(w.run_async())
        got = await asyncio.wait_for(events.rest(), 30)
        await w.close()
        await running
    assert events.retry == 2000
    assert [(e, d) for e, _, d in got] == [
        ("chunk", "hello"),
        ("chunk", " "),
        ("chunk", "world"),
        ("end", {"state": "completed", "value": {"text": "hello world"}}),
    ]
    ids = [i for _, i, _ in got[:3]]
    assert all(ids) and len(set(ids)) == 3 and got[3][1] is None


async def test_a_dropped_client_resumes_with_last_event_id_and_gets_the_rest_once(
    queue: AsyncQueue, redis_url: str, r: redis.Redis
) -> None:
    release = asyncio.Event()

    async def process(job: AsyncJob) -> str:
        await job.stream(1)
        await job.stream(2)
        await release.wait()
        await job.stream(3)
        raise ValueError("tool call failed")

    job = await queue.add("gen", {})
    w = worker(redis_url, process)
    running = asyncio.create_task(w.run_async())
    try:
        async with serving(queue) as base, httpx.AsyncClient(timeout=30) as http:
            url = f"{base}/jobs/{job.id}/events"
            async with http.stream("GET", url) as resp:
                events = Events(resp)
                first = [await events.next(), await events.next()]

            # The client dropped: the server's reader stops too (no XREAD left blocked).
            async def no_reader() -> bool:
                return not [c for c in r.client_list() if c["cmd"] == "xread"]

            await until(no_reader, "the reader to stop")
            release.set()
            last_id = first[-1][1]
            assert last_id is not None
            async with http.stream("GET", url, headers={"Last-Event-ID": last_id}) as resp:
                rest = await asyncio.wait_for(Events(resp).rest(), 30)
    finally:
        await w.close()
        await running
    assert [d for _, _, d in first] == [1, 2]
    assert [e for e, _, _ in rest] == ["chunk", "end"]
    assert rest[0][2] == 3
    end = rest[1][2]
    assert end["state"] == "failed" and "tool call failed" in end["value"]


async def test_heartbeats_while_nothing_comes(queue: AsyncQueue) -> None:
    job = await queue.add("gen", {})  # no worker: it waits
    async with (
        serving(queue, heartbeat=0.05, retry_ms=250) as base,
        httpx.AsyncClient(timeout=30) as http,
        http.stream("GET", f"{base}/jobs/{job.id}/events") as resp,
    ):
        events = Events(resp)
        for _ in range(3):
            assert (await events.next())[0] == "ping"
        assert events.retry == 250  # the reconnect hint asked for


@pytest.mark.parametrize(
    "options, problem",
    [
        ({"retry_ms": -1}, "retry_ms"),
        ({"retry_ms": 1.5}, "retry_ms"),
        ({"retry_ms": True}, "retry_ms"),
        ({"retry_ms": 3_600_001}, "retry_ms"),
        ({"heartbeat": 0}, "heartbeat"),
    ],
)
async def test_bad_options_are_refused_by_name(
    queue: AsyncQueue, options: dict[str, Any], problem: str
) -> None:
    with pytest.raises(InvalidOptionError, match=problem):
        job_events(queue, "1", **options)


async def test_missing_jobs_and_bad_ids_are_plain_errors(queue: AsyncQueue) -> None:
    job = await queue.add("gen", {})
    async with serving(queue) as base, httpx.AsyncClient(timeout=30) as http:
        resp = await http.get(f"{base}/jobs/nope/events")
        assert resp.status_code == 404 and "nope" in resp.text
        resp = await http.get(f"{base}/jobs/wait/events")  # a queue key's name is no job
        assert resp.status_code == 404
        resp = await http.get(
            f"{base}/jobs/{job.id}/events", headers={"Last-Event-ID": "not-an-id"}
        )
        assert resp.status_code == 400 and "Last-Event-ID" in resp.text
