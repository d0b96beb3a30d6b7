"""Fixtures of the dashboard's real-browser tests: the app served by uvicorn, and Chromium.

The browser is Debian's ``chromium`` (``$CORRAL_CHROMIUM``, else ``/usr/bin/chromium``;
``make test`` installs it where it can), driven by playwright's bundled driver: never
``playwright install``, which downloads a browser of its own. When the browser or Node is
missing the tests skip with the reason, except under CI (``$CI`` set), where they fail: CI
must run them.

playwright's sync API keeps an event loop running on the main thread, where corral's sync
API (``Worker.run`` starts an event loop) cannot run: the fixtures call corral in a thread
(:func:`in_thread`).

Each test gets its own dashboard (uvicorn in a thread, on a free port, against the test
server flushed and seeded for it) and a fresh browser context logged in through the login
page. The browser itself is started once per session, in a fresh temporary profile.
"""

from __future__ import annotations

import math
import os
import shutil
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest
import redis
import uvicorn

from corral import FlowJob, FlowProducer, Queue, Worker
from corral._keys import QueueKeys
from corral.dashboard import create_app
from tests.conftest import free_port
from tests.dashboard.conftest import TOKEN, XSS, _reports
from tests.interop.conftest import HERE as INTEROP_DIR
from tests.interop.conftest import Node

T = TypeVar("T")


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() not in ("", "0", "false", "no")


try:
    from playwright.sync_api import (
        Browser,
        BrowserContext,
        Page,
        ViewportSize,
        expect,
        sync_playwright,
    )
except ImportError:
    if in_ci():
        raise
    pytest.skip("playwright is not installed: pip install -e '.[dev]'", allow_module_level=True)

__all__ = ["TOKEN", "XSS"]

#: Flags for a headless Chromium on a machine with no network: without the
#: background-networking ones it waits on refused connections at start.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
#: The viewport of every page (and so of the screenshots in docs/images).
VIEWPORT: ViewportSize = {"width": 1280, "height": 800}
#: Longest wait for anything in the browser, in ms (a loaded 2-core machine).
TIMEOUT_MS = 15_000


def missing(reason: str) -> None:
    """Skip the test for ``reason``, or fail it under CI, where these tests must run."""
    if in_ci():
        pytest.fail(f"{reason} (CI must run the browser tests)")
    pytest.skip(reason)


def chromium_path() -> str:
    return os.environ.get("CORRAL_CHROMIUM") or "/usr/bin/chromium"


# Module scope, not session: while playwright's sync API is started, the main thread has a
# running event loop, and the tests collected after these (asyncio.run) would fail.
@pytest.fixture(scope="module")
def chromium() -> Iterator[Browser]:
    path = chromium_path()
    if not os.access(path, os.X_OK):
        missing(
            f"no Chromium at {path}: run `make test` (apt-get install chromium) "
            "or set CORRAL_CHROMIUM"
        )
    expect.set_options(timeout=TIMEOUT_MS)
    with sync_playwright() as pw:
        # launch() runs the browser in a fresh temporary profile, removed when it closes.
        browser = pw.chromium.launch(executable_path=path, headless=True, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


def in_thread(fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` run in a thread of its own (no event loop there), its result or error."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(fn, *args).result(timeout=60)


def _seed(url: str) -> None:
    """The seed of the HTTP tests (that of tests/dashboard/conftest.py, whose fixture runs
    ``Worker.run`` on the main thread, so cannot be reused here): ``emails``: 3 waiting,
    1 delayed, 1 prioritized, a scheduler; ``reports``: ``bad`` failed after two attempts,
    ``good`` completed, ``xss`` failed with script in its name, data, logs and stack;
    ``books``: a flow parent ``book`` whose three children wait in ``pages``."""
    with Queue("emails", connection=url) as queue:
        for i in range(3):
            queue.add("send", {"to": f"user{i}@example.com"}, job_id=f"w{i}")
        queue.add("send", {"to": "later@example.com"}, delay=3600, job_id="later")
        queue.add("send", {"to": "VIP@example.com"}, priority=1, job_id="vip")
        queue.upsert_job_scheduler(
            "nightly", cron="0 3 * * *", tz="UTC", template={"name": "digest", "data": {"k": 1}}
        )
    with Queue("reports", connection=url) as queue:
        queue.add("nightly", {"day": "bad"}, attempts=2, job_id="bad")
        queue.add("nightly", {"day": "good"}, job_id="good")
        queue.add(XSS[0] + XSS[1], {"day": "xss", "html": XSS}, job_id="xss")
    summary = Worker("reports", _reports, connection=url, metrics_max_data_points=60).run(
        burst=True
    )
    assert (summary.completed, summary.failed) == (1, 2)
    with FlowProducer(connection=url) as flows:
        flows.add(
            FlowJob(
                "book",
                "books",
                {"title": "pangram"},
                options={"job_id": "book"},
                children=[
                    FlowJob("page", "pages", {"n": n}, options={"job_id": f"p{n}"})
                    for n in range(3)
                ],
            )
        )


@pytest.fixture
def seeded(redis_url: str) -> str:
    in_thread(_seed, redis_url)
    return redis_url


@dataclass
class Dashboard:
    """A dashboard served for one test."""

    url: str
    redis_url: str


@contextmanager
def serve(app: Any, name: str) -> Iterator[str]:
    """Serve the ASGI ``app`` with uvicorn in a thread on a free port; yield its base URL."""
    port = free_port()
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=port,
        log_level="warning",
        lifespan="on",
        access_log=False,
        ws="none",
        timeout_graceful_shutdown=2,
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name=name, daemon=True)
    thread.start()
    ticks = threading.Event()  # never set: its wait() is the poll interval
    while not server.started and thread.is_alive():
        ticks.wait(0.01)
    assert server.started, f"{name} did not start"
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(15)


@pytest.fixture
def dashboard(seeded: str) -> Iterator[Dashboard]:
    """The dashboard of the seeded test server, served by uvicorn on a free port."""
    with serve(create_app(connection=seeded, auth=TOKEN), "dashboard") as base:
        yield Dashboard(base, seeded)


@pytest.fixture
def context(chromium: Browser, dashboard: Dashboard) -> Iterator[BrowserContext]:
    """A fresh browser context, logged in through the dashboard's login page."""
    ctx = chromium.new_context(
        viewport=VIEWPORT, locale="en-US", timezone_id="UTC", base_url=dashboard.url
    )
    ctx.set_default_timeout(TIMEOUT_MS)
    try:
        page = ctx.new_page()
        page.goto("/login")
        page.get_by_test_id("login-token").fill(TOKEN)
        page.get_by_test_id("login-submit").click()
        page.wait_for_url(f"{dashboard.url}/")
        page.get_by_test_id("queues").wait_for()
        page.close()
        yield ctx
    finally:
        ctx.close()


@pytest.fixture
def page(context: BrowserContext) -> Page:
    return context.new_page()


@pytest.fixture
def node(redis_url: str) -> Node:
    """Node BullMQ against the test server (see tests/interop)."""
    if shutil.which("node") is None or not (INTEROP_DIR / "node_modules" / "bullmq").is_dir():
        missing(
            "Node BullMQ is not installed: run `make test`, or "
            "`npm install --prefix tests/interop --no-package-lock`"
        )
    return Node(redis_url)


@pytest.fixture
def node_jobs(seeded: str, node: Node) -> list[str]:
    """``node-mail``: 4 jobs added by Node BullMQ; their ids. A test asks for it before
    ``page`` (fixtures start in the order of the arguments): the dashboard caches the list of
    queues for a few seconds, from the login on."""
    added = node.run("add_jobs.mjs", "node-mail", 4)
    return [str(job_id) for job_id in added["ids"]]


def _typeset(job: Any) -> str:
    return f"{job.id}.pdf"


def _render(job: Any) -> dict[str, int]:
    chapter = job.data["chapter"]
    job.log(f"chapter {chapter}: {len(job.get_children_values())} pages typeset")
    if chapter == 2:
        raise ValueError(f"chapter {chapter}: font 'Garamond' not found")
    return {"pages": 2}


#: The last hour of a queue's per-minute metrics, oldest first (made up, but deterministic:
#: the charts of the screenshots are not empty).
HOUR = [20 + round(15 * math.sin(minute / 6)) + minute % 7 for minute in range(60)]


def _seed_flow(url: str) -> None:
    with FlowProducer(connection=url) as flows:
        flows.add(
            FlowJob(
                "annual-report",
                "exports",
                {"year": 2024},
                options={"job_id": "annual"},
                children=[
                    FlowJob(
                        "render",
                        "renders",
                        {"chapter": n},
                        options={"job_id": f"chapter{n}", "attempts": 2},
                        children=[
                            FlowJob(
                                "typeset",
                                "typeset",
                                {"page": p},
                                options={"job_id": f"c{n}-page{p}"},
                            )
                            for p in (1, 2)
                        ],
                    )
                    for n in (1, 2, 3)
                ],
            )
        )
    assert Worker("typeset", _typeset, connection=url).run(burst=True).completed == 6
    summary = Worker("renders", _render, connection=url, metrics_max_data_points=60).run(burst=True)
    assert (summary.completed, summary.failed) == (2, 1)
    with redis.Redis.from_url(url) as client, client.pipeline() as pipe:
        for name in ("renders", "reports"):
            for kind, scale in (("completed", 1), ("failed", 7)):
                data = QueueKeys(name).key(f"metrics:{kind}:data")
                pipe.delete(data)
                pipe.lpush(data, *[n // scale for n in HOUR])
        pipe.execute()
    with Queue("emails", connection=url) as queue:
        queue.upsert_job_scheduler("heartbeat", every=300, template={"name": "ping"})


@pytest.fixture
def flow_with_failure(seeded: str) -> str:
    """For the screenshots: ``exports``: a flow parent ``annual`` whose children are
    chapters in ``renders``, each the parent of two pages in ``typeset`` (done); chapters 1
    and 3 rendered, chapter 2 failed twice (a log, two stack traces); an hour of metrics
    for ``renders`` and ``reports``; a second scheduler of ``emails``, every 5 minutes.
    Returns the server URL."""
    in_thread(_seed_flow, seeded)
    return seeded


def _add(url: str, name: str, count: int) -> None:
    with Queue(name, connection=url) as queue:
        for i in range(count):
            queue.add("extra", {"i": i})


@pytest.fixture
def add_jobs(redis_url: str) -> Callable[[str, int], None]:
    """``add_jobs(queue, n)``: add ``n`` waiting jobs from Python."""
    return lambda name, count: in_thread(_add, redis_url, name, count)


#: Where the screenshots go (docs/dashboard.md shows them).
IMAGES = Path(__file__).resolve().parents[2] / "docs" / "images"
