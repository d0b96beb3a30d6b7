"""Prometheus: workers and waiting age per queue, job time histograms fed by a worker, the
ASGI endpoint and `corral metrics`; the text is read back with prometheus-client's parser."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from corral import AsyncQueue, Job, Queue, Worker
from corral.clock import now_ms
from corral.prometheus import JobTimes, export_text, metrics_asgi_app, queue_registry
from tests.conftest import free_port
from tests.faults.harness import eventually

#: (metric sample name, labels as sorted tuple) -> value
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def samples(text: str) -> Samples:
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def value(found: Samples, name: str, **labels: str) -> float:
    return found[(name, tuple(sorted(labels.items())))]


def test_workers_oldest_age_and_up(redis_url: str, r: redis.Redis) -> None:
    with (
        Queue("emails", connection=redis_url) as emails,
        Queue("pdf", connection=redis_url) as pdf,
        redis.Redis.from_url(redis_url) as fake_node_worker,
    ):
        job = emails.add("a", {})
        emails.add("b", {})
        r.hset(f"bull:emails:{job.id}", "timestamp", now_ms() - 300_000)
        # A worker is known by its connection's name (what Node BullMQ's workers set too).
        fake_node_worker.client_setname("bull:ZW1haWxz:w:node-1")  # base64("emails")
        found = samples(export_text([emails, pdf]))
    assert value(found, "corral_queue_workers", queue="emails") == 1
    assert value(found, "corral_queue_workers", queue="pdf") == 0
    assert value(found, "corral_queue_oldest_waiting_age_seconds", queue="emails") >= 300
    assert value(found, "corral_queue_oldest_waiting_age_seconds", queue="pdf") == 0
    assert value(found, "corral_queue_up", queue="emails") == 1
    assert value(found, "corral_queue_jobs", queue="emails", state="waiting") == 2


def test_an_unreachable_queue_is_down_and_the_others_still_export(redis_url: str) -> None:
    gone = f"redis://127.0.0.1:{free_port()}/0"
    with Queue("emails", connection=redis_url) as ok, Queue("lost", connection=gone) as lost:
        found = samples(export_text([lost, ok]))
    assert value(found, "corral_queue_up", queue="lost") == 0
    assert value(found, "corral_queue_up", queue="emails") == 1
    assert ("corral_queue_workers", (("queue", "lost"),)) not in found
    assert value(found, "corral_queue_workers", queue="emails") == 0


class Flaky:
    """Fails the first attempt of jobs named ``flaky``."""

    def __call__(self, job: Job) -> str:
        if job.name == "flaky" and job.attempts_made == 0:
            raise RuntimeError("first attempt fails")
        if job.name == "bad":
            raise ValueError("always fails")
        return "ok"


async def test_job_times_histograms(redis_url: str, r: redis.Redis) -> None:
    registry = CollectorRegistry()
    times = JobTimes(registry)
    async with AsyncQueue("q", connection=redis_url) as queue:
        await queue.pause()  # the jobs are aged before any worker can take them
        old = await queue.add("ok", {})
        await queue.add("flaky", {}, attempts=2)
        await queue.add("bad", {})
        r.hset(f"bull:q:{old.id}", "timestamp", now_ms() - 120_000)
        await queue.resume()
        worker = Worker("q", Flaky(), connection=redis_url)
        times.attach(worker)
        task = asyncio.create_task(worker.run_async())
        try:

            async def finished() -> bool:
                counts = await queue.get_job_counts("completed", "failed")
                return counts == {"completed": 2, "failed": 1}

            await eventually(finished, "the three jobs to end")
        finally:
            await worker.close()
            await task
    found = samples(generate_latest(registry).decode())
    processing = "corral_job_processing_seconds_count"
    assert value(found, processing, queue="q", outcome="completed") == 2
    assert value(found, processing, queue="q", outcome="failed") == 2  # flaky once, bad once
    # One wait per job: a retry's wait is not measured.
    assert value(found, "corral_job_waiting_seconds_count", queue="q") == 3
    assert value(found, "corral_job_waiting_seconds_sum", queue="q") >= 120
    assert value(found, "corral_job_waiting_seconds_bucket", queue="q", le="60.0") == 2
    assert value(found, "corral_job_processing_seconds_sum", queue="q", outcome="completed") >= 0


def test_job_times_ignore_a_job_that_never_started() -> None:
    registry = CollectorRegistry()
    times = JobTimes(registry)
    job: Any = Job(queue_name="q", id="1", name="n", data=None, timestamp=now_ms())
    times.started(job)
    times.ended(job, "failed")
    text = generate_latest(registry).decode()
    assert "corral_job_waiting_seconds_count" not in text  # no labelled series yet


async def test_metrics_asgi_app(redis_url: str) -> None:
    with Queue("emails", connection=redis_url) as q:
        q.add("a", {})
        app = metrics_asgi_app(queue_registry([q]))
        sent: list[dict[str, Any]] = []

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        await app({"type": "http", "method": "GET", "path": "/metrics"}, receive, send)
    start, body = sent
    assert start["status"] == 200
    assert dict(start["headers"])[b"content-type"].startswith(b"text/plain")
    found = samples(body["body"].decode())
    assert value(found, "corral_queue_jobs", queue="emails", state="waiting") == 1


@pytest.fixture
def metrics_process(redis_url: str) -> Iterator[subprocess.Popen[str]]:
    script = (
        "import click, corral.cli_ops as ops\n"
        "group = click.Group('corral')\n"
        "ops.register(group)\n"
        "group()\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script, "metrics", "--port", "0", "-q", "emails"],
        env={**os.environ, "CORRAL_REDIS_URL": redis_url},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_corral_metrics_serves_until_sigterm(
    metrics_process: subprocess.Popen[str], redis_url: str
) -> None:
    with Queue("emails", connection=redis_url) as q:
        q.add("a", {}, delay=60)
    assert metrics_process.stdout is not None
    banner = metrics_process.stdout.readline()
    assert banner.startswith("corral metrics: serving emails on http://127.0.0.1:"), banner
    url = banner.split(" on ")[1].strip()
    with urllib.request.urlopen(url, timeout=30) as response:
        found = samples(response.read().decode())
    assert value(found, "corral_queue_jobs", queue="emails", state="delayed") == 1
    assert value(found, "corral_queue_up", queue="emails") == 1
    metrics_process.send_signal(signal.SIGTERM)
    out, err = metrics_process.communicate(timeout=30)
    assert metrics_process.returncode == 0, err
    assert out.strip() == "corral metrics: stopped"


def test_corral_metrics_port_in_use(redis_url: str) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        script = "import click, corral.cli_ops as o\ng = click.Group()\no.register(g)\ng()\n"
        proc = subprocess.run(
            [sys.executable, "-c", script, "metrics", "--port", str(port), "-q", "emails"],
            env={**os.environ, "CORRAL_REDIS_URL": redis_url},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert proc.returncode == 1
    assert proc.stderr.startswith(f"Error: cannot listen on 127.0.0.1:{port}: ")
    assert len(proc.stderr.splitlines()) == 1 and "Traceback" not in proc.stderr
