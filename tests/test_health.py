"""Health checks: the pure decision, the sync and async calls, the ASGI app and `corral health`."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from typing import Any

import click
import pytest
import redis
from click.testing import CliRunner

from corral import AsyncQueue, Queue, Worker
from corral.cli_ops import register
from corral.clock import now_ms
from corral.errors import InvalidOptionError
from corral.health import (
    HealthReport,
    Limits,
    QueueFigures,
    asgi_app,
    check_health,
    check_health_async,
    ready_at_ms,
    unreadable,
)
from corral.job import JobRecord
from tests.conftest import free_port
from tests.faults.harness import eventually

NOW = 1_700_000_000_000


def figures(
    waiting: int = 1, ready: int | None = NOW, workers: int = 1, paused: bool = False
) -> QueueFigures:
    return QueueFigures(waiting=waiting, oldest_ready_ms=ready, workers=workers, paused=paused)


# -- the decision (pure) ---------------------------------------------------------------------


def test_no_limits_is_healthy_whatever_the_figures() -> None:
    report = Limits().evaluate("q", figures(waiting=10**6, ready=0, workers=0), NOW)
    assert report.ok and report.reasons == []
    assert report.waiting == 10**6 and report.workers == 0


def test_waiting_age_limit() -> None:
    limits = Limits.of(60, None)
    assert limits.evaluate("q", figures(ready=NOW - 60_000), NOW).ok  # at the limit: fine
    report = limits.evaluate("q", figures(ready=NOW - 75_000), NOW)
    assert not report.ok
    assert report.reasons == ["q: the oldest waiting job has waited 75.0 s, more than 60 s"]
    assert report.oldest_waiting_age == 75.0


def test_waiting_age_names_a_paused_queue() -> None:
    report = Limits.of(timedelta(seconds=1), None).evaluate(
        "q", figures(ready=NOW - 2000, paused=True), NOW
    )
    assert report.reasons == [
        "q: the oldest waiting job has waited 2.0 s, more than 1 s (the queue is paused)"
    ]
    assert report.paused is True


def test_nothing_waiting_has_no_age() -> None:
    report = Limits.of(0, None).evaluate("q", figures(waiting=0, ready=None), NOW)
    assert report.ok and report.oldest_waiting_age is None


def test_min_workers() -> None:
    limits = Limits.of(None, 2)
    assert limits.evaluate("q", figures(workers=2), NOW).ok
    report = limits.evaluate("q", figures(workers=1), NOW)
    assert report.reasons == ["q: 1 worker(s) connected, fewer than 2"]


@pytest.mark.parametrize(
    ("age", "workers", "named"),
    [(-1, None, "max_waiting_age"), ("5", None, "max_waiting_age"), (None, -1, "min_workers"),
     (None, True, "min_workers"), (None, 1.5, "min_workers")],
)  # fmt: skip
def test_bad_limits_are_refused(age: Any, workers: Any, named: str) -> None:
    with pytest.raises(InvalidOptionError, match=named):
        Limits.of(age, workers)


def test_ready_time_of_a_job() -> None:
    def job(**kw: Any) -> JobRecord:
        return JobRecord(queue_name="q", id="1", name="n", data=None, timestamp=NOW, **kw)

    assert ready_at_ms(job()) == NOW
    assert ready_at_ms(job(opts={"delay": 5000})) == NOW + 5000  # ready once its delay ended
    assert ready_at_ms(job(processed_on=NOW + 9000)) == NOW + 9000  # retried: its last start


def test_unreadable_reasons_name_the_cause() -> None:
    assert unreadable("q", redis.AuthenticationError("invalid password")).reasons == [
        "q: the server refused the credentials: invalid password"
    ]
    refused = unreadable("q", redis.ConnectionError("Error 111\nrefused"))
    assert refused.reasons == ["q: cannot reach the server: Error 111 refused"]
    assert not refused.ok and refused.waiting is None and refused.workers is None


# -- against the server ----------------------------------------------------------------------


def age_job(r: redis.Redis, queue: str, job_id: str, seconds: float) -> None:
    """Make a job look added ``seconds`` ago (its wait is read from its hash)."""
    r.hset(f"bull:{queue}:{job_id}", "timestamp", now_ms() - int(seconds * 1000))


def test_check_health_reads_the_queue(redis_url: str, r: redis.Redis) -> None:
    with Queue("emails", connection=redis_url) as q:
        assert check_health(q, max_waiting_age=60, min_workers=0).ok
        old = q.add("old", {})
        q.add("new", {})
        q.add("urgent", {}, priority=1)
        q.add("later", {}, delay=3600)  # delayed: not ready, not counted
        report = check_health(q, max_waiting_age=60)
        assert report.ok and report.waiting == 3 and report.workers == 0
        assert report.oldest_waiting_age is not None and report.oldest_waiting_age < 60
        age_job(r, "emails", old.id, 120)
        report = check_health(q, max_waiting_age=60, min_workers=1)
    assert not report.ok
    assert report.oldest_waiting_age is not None and report.oldest_waiting_age >= 120
    assert report.reasons[0].startswith("emails: the oldest waiting job has waited 12")
    assert report.reasons[1] == "emails: 0 worker(s) connected, fewer than 1"


def test_a_prioritized_job_counts_as_waiting(redis_url: str, r: redis.Redis) -> None:
    with Queue("emails", connection=redis_url) as q:
        job = q.add("urgent", {}, priority=5)
        age_job(r, "emails", job.id, 120)
        report = check_health(q, max_waiting_age=60)
    assert not report.ok and report.waiting == 1


def make_due(r: redis.Redis, queue: str, job_id: str, seconds_ago: float) -> None:
    """Make a delayed job due ``seconds_ago`` (its run time is its score, ``run_at * 4096``)."""
    r.zadd(f"bull:{queue}:delayed", {job_id: (now_ms() - int(seconds_ago * 1000)) * 4096})


def test_a_due_delayed_job_counts_as_waiting(redis_url: str, r: redis.Redis) -> None:
    with Queue("emails", connection=redis_url) as q:
        due = q.add("due", {}, delay=3600)
        q.add("later", {}, delay=3600)
        assert check_health(q, max_waiting_age=60).waiting == 0
        make_due(r, "emails", due.id, 120)  # no worker moved it to wait: it is overdue
        report = check_health(q, max_waiting_age=60)
    assert not report.ok and report.waiting == 1
    assert report.oldest_waiting_age is not None and 120 <= report.oldest_waiting_age < 200


async def test_async_a_due_delayed_job_counts_as_waiting(
    aqueue: AsyncQueue, r: redis.Redis
) -> None:
    due = await aqueue.add("due", {}, delay=3600)
    make_due(r, "emails", due.id, 120)
    report = await check_health_async(aqueue, max_waiting_age=60)
    assert not report.ok and report.waiting == 1


def test_unreachable_server_is_a_report_not_an_exception() -> None:
    with Queue("emails", connection=f"redis://127.0.0.1:{free_port()}/0") as q:
        report = check_health(q, max_waiting_age=60)
    assert not report.ok and report.waiting is None
    assert report.reasons[0].startswith("emails: cannot reach the server: ")
    assert "\n" not in report.reasons[0]


@pytest.fixture
async def aqueue(redis_url: str) -> AsyncIterator[AsyncQueue]:
    q = AsyncQueue("emails", connection=redis_url)
    yield q
    await q.close()


async def test_async_check_counts_connected_workers(aqueue: AsyncQueue, redis_url: str) -> None:
    assert (await check_health_async(aqueue, min_workers=1)).workers == 0
    worker = Worker("emails", lambda job: None, connection=redis_url)
    task = asyncio.create_task(worker.run_async())
    try:

        async def connected() -> bool:
            return (await check_health_async(aqueue, min_workers=1)).ok

        await eventually(connected, "the worker to be counted")
        report = await check_health_async(aqueue, min_workers=2)
        assert report.workers == 1 and not report.ok
    finally:
        await worker.close()
        await task


async def test_async_unreachable() -> None:
    async with AsyncQueue("emails", connection=f"redis://127.0.0.1:{free_port()}/0") as q:
        report = await check_health_async(q, min_workers=1)
    assert not report.ok and report.reasons[0].startswith("emails: cannot reach the server")


# -- the ASGI app ----------------------------------------------------------------------------


async def call(app: Any, method: str = "GET") -> tuple[int, dict[str, str], bytes]:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app({"type": "http", "method": method, "path": "/healthz"}, receive, send)
    start, body = sent
    headers = {k.decode(): v.decode() for k, v in start["headers"]}
    return start["status"], headers, body["body"]


async def test_asgi_app_answers_200_then_503(aqueue: AsyncQueue, r: redis.Redis) -> None:
    app = asgi_app([aqueue], max_waiting_age=60)
    status, headers, body = await call(app)
    assert status == 200 and headers["content-type"] == "application/json"
    doc = json.loads(body)
    assert doc == {
        "ok": True,
        "queues": [
            {
                "queue": "emails",
                "ok": True,
                "reasons": [],
                "waiting": 0,
                "oldest_waiting_age": None,
                "workers": 0,
                "paused": False,
            }
        ],
    }
    job = await aqueue.add("old", {})
    age_job(r, "emails", job.id, 120)
    status, _, body = await call(app)
    assert status == 503 and json.loads(body)["ok"] is False
    status, headers, body = await call(app, "HEAD")
    assert status == 503 and body == b"" and int(headers["content-length"]) > 0
    status, _, _ = await call(app, "POST")
    assert status == 405


async def test_asgi_app_lifespan_and_bad_limits(aqueue: AsyncQueue) -> None:
    app = asgi_app([aqueue])
    incoming = [{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return incoming.pop(0)

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app({"type": "lifespan"}, receive, send)
    assert [m["type"] for m in sent] == ["lifespan.startup.complete", "lifespan.shutdown.complete"]
    with pytest.raises(InvalidOptionError, match="min_workers"):
        asgi_app([aqueue], min_workers=-1)


# -- corral health ---------------------------------------------------------------------------


@pytest.fixture
def cli() -> Iterator[click.Group]:
    group = click.Group("corral")
    register(group)
    yield group


def run(cli: click.Group, *args: str) -> Any:
    return CliRunner().invoke(cli, ["health", *args], catch_exceptions=False)


def test_cli_healthy(cli: click.Group, redis_url: str) -> None:
    with Queue("emails", connection=redis_url) as q:
        q.add("a", {})
    result = run(cli, "-q", "emails", "-q", "pdf", "--url", redis_url, "--max-waiting-age", "60")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("ok: emails: waiting=1 oldest=")
    assert lines[1] == "ok: pdf: waiting=0 oldest=- workers=0 paused=no"


def test_cli_unhealthy_prints_one_line_per_reason(
    cli: click.Group, redis_url: str, r: redis.Redis
) -> None:
    with Queue("emails", connection=redis_url) as q:
        job = q.add("a", {})
        q.pause()
    age_job(r, "emails", job.id, 90)
    args = ["-q", "emails", "-q", "pdf", "--url", redis_url]
    result = run(cli, *args, "--max-waiting-age", "60", "--min-workers", "1")
    assert result.exit_code == 1
    lines = result.output.splitlines()
    assert len(lines) == 3, lines
    assert lines[0].startswith("unhealthy: emails: the oldest waiting job has waited 9")
    assert lines[0].endswith("more than 60 s (the queue is paused)")
    assert lines[1] == "unhealthy: emails: 0 worker(s) connected, fewer than 1"
    assert lines[2] == "unhealthy: pdf: 0 worker(s) connected, fewer than 1"


def test_cli_json(cli: click.Group, redis_url: str) -> None:
    result = run(cli, "-q", "emails", "--url", redis_url, "--min-workers", "1", "--json")
    assert result.exit_code == 1
    doc = json.loads(result.output)
    assert doc["ok"] is False
    assert doc["queues"][0]["reasons"] == ["emails: 0 worker(s) connected, fewer than 1"]
    assert set(doc["queues"][0]) == {
        "queue", "ok", "reasons", "waiting", "oldest_waiting_age", "workers", "paused"
    }  # fmt: skip


def test_cli_unreachable_is_one_line_exit_1(cli: click.Group) -> None:
    result = run(cli, "-q", "emails", "--url", f"redis://127.0.0.1:{free_port()}/0")
    assert result.exit_code == 1
    assert len(result.output.splitlines()) == 1
    assert result.output.startswith("unhealthy: emails: cannot reach the server: ")
    assert "Traceback" not in result.output


@pytest.mark.parametrize(
    ("args", "named"),
    [
        ([], "--queue"),
        (["-q", "emails", "--min-workers", "-1"], "--min-workers"),
        (["-q", "emails", "--max-waiting-age", "soon"], "--max-waiting-age"),
        (["-q", "emails", "--url", "http://example.com"], "schemes"),
        (["-q", "a:b"], "queue name"),
    ],
)
def test_cli_usage_errors_exit_2(cli: click.Group, args: list[str], named: str) -> None:
    result = CliRunner().invoke(cli, ["health", *args])
    assert result.exit_code == 2, result.output
    assert named in result.output
    assert "Traceback" not in result.output


def test_report_is_frozen() -> None:
    report = HealthReport(queue="q", ok=True)
    with pytest.raises(AttributeError):
        report.ok = False  # type: ignore[misc]
