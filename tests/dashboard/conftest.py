"""Fixtures of the dashboard's HTTP tests: a seeded server, the app, and clients of it.

The app runs in Starlette's ``TestClient`` (one event loop for the whole ``with`` block, so
the app's shared client lives on it) against the session's real server.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from starlette.applications import Starlette

with warnings.catch_warnings():
    # Starlette 1.x warns, at import, that its TestClient would rather run on httpx2 (a
    # fork); on httpx it works the same.
    warnings.simplefilter("ignore", UserWarning)
    from starlette.testclient import TestClient

from corral import FlowJob, FlowProducer, Queue, Worker
from corral.dashboard import create_app

#: The token of the app under test.
TOKEN = "test-token-0123456789"
#: Text an attacker would like the dashboard to run: it must show as text.
XSS = ["<script>alert(1)</script>", '"><img src=x onerror=alert(1)>']


def _reports(job: Any) -> dict[str, int]:
    job.log(f"attempt {job.attempts_made + 1} of day {job.data['day']}")
    if job.data["day"] == "bad":
        raise RuntimeError("disk full")
    if job.data["day"] == "xss":
        job.log(XSS[0] + " " + XSS[1])
        raise RuntimeError(f"boom {XSS[0]} {XSS[1]}")
    return {"rows": 42}


@pytest.fixture
def seeded(redis_url: str) -> str:
    """``emails``: 3 waiting, 1 delayed, 1 prioritized, a scheduler; ``reports``: ``bad``
    failed after two attempts (logs, two stack traces), ``good`` completed, ``xss`` failed
    with script in its name, data, logs and stack; ``books``: a flow parent ``book`` whose
    three children are in ``pages`` (waiting)."""
    with Queue("emails", connection=redis_url) as queue:
        for i in range(3):
            queue.add("send", {"to": f"user{i}@example.com"}, job_id=f"w{i}")
        queue.add("send", {"to": "later@example.com"}, delay=3600, job_id="later")
        queue.add("send", {"to": "VIP@example.com"}, priority=1, job_id="vip")
        queue.upsert_job_scheduler(
            "nightly", cron="0 3 * * *", tz="UTC", template={"name": "digest", "data": {"k": 1}}
        )
    with Queue("reports", connection=redis_url) as queue:
        queue.add("nightly", {"day": "bad"}, attempts=2, job_id="bad")
        queue.add("nightly", {"day": "good"}, job_id="good")
        queue.add(XSS[0] + XSS[1], {"day": "xss", "html": XSS}, job_id="xss")
    summary = Worker("reports", _reports, connection=redis_url, metrics_max_data_points=60).run(
        burst=True
    )
    assert (summary.completed, summary.failed) == (1, 2)
    with FlowProducer(connection=redis_url) as flows:
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
    return redis_url


@pytest.fixture
def make_client(redis_url: str) -> Iterator[Callable[..., TestClient]]:
    """``make_client(**create_app kwargs)``: a started TestClient of a new app (closed at
    the end of the test); ``headers=`` go with every request."""
    opened: list[TestClient] = []

    def make(headers: dict[str, str] | None = None, **kwargs: Any) -> TestClient:
        kwargs.setdefault("connection", redis_url)
        kwargs.setdefault("auth", TOKEN)
        app: Starlette = create_app(**kwargs)
        client = TestClient(app, headers=headers, follow_redirects=False)
        client.__enter__()
        opened.append(client)
        return client

    yield make
    for client in opened:
        client.__exit__(None, None, None)


@pytest.fixture
def api(seeded: str, make_client: Callable[..., TestClient]) -> TestClient:
    """A bearer-token client of the seeded server (no CSRF needed)."""
    return make_client(headers={"Authorization": f"Bearer {TOKEN}"})


def csrf_of(html: str) -> str:
    found = re.search(r'name="csrf_token" value="([^"]+)"', html)
    assert found, "no CSRF field in the page"
    return found.group(1)


def log_in(client: TestClient, root: str = "") -> str:
    """Log ``client`` in through the login form; return the session's CSRF token."""
    page = client.get(f"{root}/login")
    assert page.status_code == 200
    response = client.post(
        f"{root}/login", data={"token": TOKEN, "csrf_token": csrf_of(page.text), "next": ""}
    )
    assert response.status_code == 303, response.text
    return csrf_of(client.get(f"{root}/").text)


@pytest.fixture
def browser(seeded: str, make_client: Callable[..., TestClient]) -> tuple[TestClient, str]:
    """A client logged in with the session cookie, and its CSRF token."""
    client = make_client()
    return client, log_in(client)
