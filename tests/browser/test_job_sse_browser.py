"""corral.sse.job_events read by a real headless Chromium ``EventSource`` that loses its
connection mid-stream and reconnects by itself (issue 15).

The server ends the first response after its 3rd chunk (a closed connection, as a proxy or a
restart would close it). The browser reconnects after the helper's ``retry:`` hint with
``Last-Event-ID``; the page must then show every chunk once, in order, and the end.
"""

from __future__ import annotations

import json
import threading
from collections.abc import AsyncGenerator, AsyncIterable, AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response, StreamingResponse
from starlette.routing import Route

from corral import AsyncQueue, Job, Queue, Worker
from corral.sse import job_events
from tests.browser.conftest import TIMEOUT_MS, in_thread, serve

#: The chunks the job streams, and after which one the server drops the first connection.
CHUNKS = 10
CUT_AFTER = 3
#: The processor waits this long at most for the browser (then the asserts say what is missing).
WAIT_S = 30.0

PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>job events</title></head>
<body>
<ol id="chunks" data-testid="chunks"></ol>
<p>opened: <span id="opens" data-testid="opens">0</span></p>
<p id="end" data-testid="end" hidden></p>
<script src="/app.js"></script>
</body></html>
"""

# The way docs/streaming.md tells a page to read the helper: one <li> per chunk, with the
# event's lastEventId, and close on "end" (else the EventSource reconnects and gets it again).
SCRIPT = """
const job = new URLSearchParams(location.search).get("job");
const chunks = document.getElementById("chunks");
const opens = document.getElementById("opens");
const es = new EventSource(`/jobs/${encodeURIComponent(job)}/events`);
es.addEventListener("open", () => { opens.textContent = String(Number(opens.textContent) + 1); });
es.addEventListener("chunk", (e) => {
  const li = document.createElement("li");
  li.dataset.id = e.lastEventId;
  li.textContent = e.data;
  chunks.append(li);
});
es.addEventListener("end", (e) => {
  es.close();
  const end = document.getElementById("end");
  end.textContent = e.data;
  end.hidden = false;
});
"""


@dataclass
class Server:
    """The app of one test: what it saw, and the signals the job's processor waits on."""

    url: str
    #: The ``Last-Event-ID`` of each request to the events route (``None``: none sent).
    connections: list[str | None] = field(default_factory=list)
    #: Set once the first response has ended after its 3rd chunk.
    cut: threading.Event = field(default_factory=threading.Event)
    #: Set once a request came back with ``Last-Event-ID``.
    resumed: threading.Event = field(default_factory=threading.Event)


async def cut_after(
    body: AsyncIterable[Any], chunks: int, cut: threading.Event
) -> AsyncIterator[Any]:
    """``body`` up to and including its ``chunks``-th chunk event; then the response ends."""
    seen = 0
    try:
        async for part in body:
            yield part
            if b"\nevent: chunk\n" in bytes(part):
                seen += 1
                if seen == chunks:
                    break
    finally:
        if isinstance(body, AsyncGenerator):
            await body.aclose()
    cut.set()


def app(redis_url: str, server: Server) -> Starlette:
    queue: list[AsyncQueue] = []  # made in uvicorn's event loop, by the lifespan

    @asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        queue.append(AsyncQueue("q", connection=redis_url))
        try:
            yield
        finally:
            await queue[0].close()

    async def index(_: Request) -> Response:
        return HTMLResponse(PAGE)

    async def script(_: Request) -> Response:
        return Response(SCRIPT, media_type="text/javascript")

    async def events(request: Request) -> Response:
        resume = request.headers.get("last-event-id")
        server.connections.append(resume)
        response = job_events(queue[0], request.path_params["job_id"], request)
        if resume is None and isinstance(response, StreamingResponse):
            response.body_iterator = cut_after(response.body_iterator, CUT_AFTER, server.cut)
            # uvicorn closes the TCP connection after this response: a real drop.
            response.headers["connection"] = "close"
        elif resume is not None:
            server.resumed.set()
        return response

    return Starlette(
        routes=[
            Route("/", index),
            Route("/app.js", script),
            Route("/jobs/{job_id}/events", events),
        ],
        lifespan=lifespan,
    )


@pytest.fixture
def server(redis_url: str) -> Iterator[Server]:
    """The app, served by uvicorn in a thread on a free port."""
    served = Server("")
    with serve(app(redis_url, served), "sse-app") as base:
        served.url = base
        yield served


@pytest.fixture
def page(chromium: Browser, server: Server) -> Iterator[Page]:
    ctx = chromium.new_context(base_url=server.url)
    ctx.set_default_timeout(TIMEOUT_MS)
    try:
        yield ctx.new_page()
    finally:
        ctx.close()


def add_job(redis_url: str) -> str:
    with Queue("q", connection=redis_url) as queue:
        return queue.add("generate", {"prompt": "count"}).id


def work(redis_url: str, server: Server) -> tuple[int, int]:
    """Run the job: it streams ``CHUNKS`` chunks; after the 3rd it waits for the cut (so the
    first connection is dropped mid-stream), after the 6th for the reconnect (so the chunks
    after it come live on the second connection, those before it from the stream)."""

    def process(job: Job) -> dict[str, int]:
        for n in range(1, CHUNKS + 1):
            job.stream({"n": n, "text": f"token {n}"})
            if n == CUT_AFTER:
                assert server.cut.wait(WAIT_S), "the first connection was not cut"
            elif n == 6:
                assert server.resumed.wait(WAIT_S), "the browser did not reconnect"
        return {"chunks": CHUNKS}

    summary = Worker("q", process, connection=redis_url).run(burst=True)
    return summary.completed, summary.failed


def test_event_source_reconnects_with_last_event_id_and_gets_every_chunk_once(
    page: Page, server: Server, redis_url: str
) -> None:
    job_id = in_thread(add_job, redis_url)
    page.goto(f"/?job={job_id}")
    # The browser is reading before the job starts: the chunks come live.
    expect(page.get_by_test_id("opens")).to_have_text("1")
    with ThreadPoolExecutor(1) as pool:
        worker = pool.submit(work, redis_url, server)
        expect(page.get_by_test_id("end")).to_be_visible(timeout=TIMEOUT_MS * 2)
        assert worker.result(timeout=60) == (1, 0)

    items = page.locator("#chunks li")
    values = [json.loads(text) for text in items.all_inner_texts()]
    ids = [items.nth(i).get_attribute("data-id") for i in range(items.count())]
    assert [v["n"] for v in values] == list(range(1, CHUNKS + 1))
    assert values[0] == {"n": 1, "text": "token 1"}
    assert all(ids) and len(set(ids)) == CHUNKS
    # Stream ids ("<ms>-<seq>") in the order the job wrote them.
    assert ids == sorted(ids, key=lambda i: tuple(map(int, str(i).split("-"))))
    end = json.loads(page.get_by_test_id("end").inner_text())
    assert end == {"state": "completed", "value": {"chunks": CHUNKS}}
    # Two connections: the first without Last-Event-ID, cut after the 3rd chunk; the
    # browser's own reconnect, resuming after that chunk.
    expect(page.get_by_test_id("opens")).to_have_text("2")
    assert server.connections == [None, ids[CUT_AFTER - 1]]
