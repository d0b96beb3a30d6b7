"""Prometheus export (``corral[prometheus]``): what each queue holds, and how long jobs take.

:class:`QueueCollector` reads its figures from the server at scrape time (jobs per state,
paused, workers connected, the age of the oldest waiting job), so every process (or a
sidecar, ``corral metrics``) can export them; there is nothing to keep in step.
:class:`JobTimes` is fed by a worker's ``active``, ``completed`` and ``failed`` events:
histograms of processing time (per attempt) and of waiting time (from ready to the first
attempt's start), read from the job's own timestamps, in the worker's process.
:class:`BreakerCollector` reads circuit breakers (``corral.Breaker``) at scrape time.
:func:`metrics_asgi_app` serves a registry as a mountable ASGI endpoint.

Example::

    from prometheus_client import REGISTRY, start_http_server
    from corral import Queue, Worker
    from corral.prometheus import JobTimes, QueueCollector

    REGISTRY.register(QueueCollector([Queue("emails"), Queue("reports")]))
    worker = Worker("emails", send_email)
    JobTimes().attach(worker)
    start_http_server(9100)
    worker.run()
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from corral import clock
from corral._async.queue_getters import COUNTED_STATES
from corral._sync.queue import Queue
from corral.breaker import Breaker
from corral.health import (
    READ_ERRORS,
    ASGIApp,
    Receive,
    Scope,
    Send,
    first_ready_ms,
    lifespan,
    read_figures,
    respond,
)
from corral.job import JobRecord

try:
    from prometheus_client import REGISTRY, CollectorRegistry, Histogram, generate_latest
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
    from prometheus_client.exposition import CONTENT_TYPE_LATEST
    from prometheus_client.registry import Collector
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "corral.prometheus needs prometheus-client: pip install 'corral[prometheus]'"
    ) from exc

logger = logging.getLogger("corral.prometheus")

#: Histogram buckets in seconds: jobs take from milliseconds to an hour.
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600,
           1800, 3600)  # fmt: skip


class QueueCollector(Collector):
    """A collector of ``corral_queue_jobs{queue, state}``, ``corral_queue_paused{queue}``,
    ``corral_queue_workers{queue}``, ``corral_queue_oldest_waiting_age_seconds{queue}`` (0
    when nothing waits; see :mod:`corral.health` for what "waiting" means) and
    ``corral_queue_up{queue}`` (0 when the queue could not be read: its other figures are
    then left out of the scrape)."""

    def __init__(self, queues: Iterable[Queue]) -> None:
        self.queues = list(queues)

    def collect(self) -> Iterator[Any]:
        jobs = GaugeMetricFamily(
            "corral_queue_jobs", "Jobs in the queue, by state.", labels=["queue", "state"]
        )
        paused = GaugeMetricFamily(
            "corral_queue_paused", "1 while the queue is paused.", labels=["queue"]
        )
        workers = GaugeMetricFamily(
            "corral_queue_workers", "Worker connections of the queue.", labels=["queue"]
        )
        oldest = GaugeMetricFamily(
            "corral_queue_oldest_waiting_age_seconds",
            "How long the job at the front of the line has been ready to run (0: none).",
            labels=["queue"],
        )
        up = GaugeMetricFamily(
            "corral_queue_up", "1 when the queue could be read at this scrape.", labels=["queue"]
        )
        for queue in self.queues:
            try:
                counts = queue.get_job_counts(*COUNTED_STATES)
                figures = read_figures(queue)
            except READ_ERRORS as exc:
                # One queue out of reach must not hide the others: its figures are left
                # out and corral_queue_up says so (alert on it). One line, not a traceback
                # at every scrape of an outage.
                logger.warning("prometheus: queue %s could not be read: %s", queue.name, exc)
                up.add_metric([queue.name], 0)
                continue
            up.add_metric([queue.name], 1)
            for state, count in counts.items():
                jobs.add_metric([queue.name, state], count)
            paused.add_metric([queue.name], 1 if figures.paused else 0)
            workers.add_metric([queue.name], figures.workers)
            oldest.add_metric([queue.name], figures.oldest_waiting_age(clock.now_ms()) or 0.0)
        yield jobs
        yield paused
        yield workers
        yield oldest
        yield up


class BreakerCollector(Collector):
    """A collector of ``corral_breaker_state{breaker, state}`` (1 for the breaker's state now,
    0 for the other two of ``closed``, ``open``, ``half_open``),
    ``corral_breaker_recent_failures{breaker}`` (failures within its window, while closed) and
    ``corral_breaker_opened_total{breaker}`` (times it opened, over every process: the count
    is kept in the breaker's key). A breaker that cannot be read is left out of the scrape."""

    def __init__(self, breakers: Iterable[Breaker]) -> None:
        self.breakers = list(breakers)

    def collect(self) -> Iterator[Any]:
        state = GaugeMetricFamily(
            "corral_breaker_state",
            "1 for the breaker's current state.",
            labels=["breaker", "state"],
        )
        failures = GaugeMetricFamily(
            "corral_breaker_recent_failures",
            "Failures counted within the breaker's window (closed).",
            labels=["breaker"],
        )
        opened = CounterMetricFamily(
            "corral_breaker_opened", "Times the breaker opened.", labels=["breaker"]
        )
        for breaker in self.breakers:
            try:
                now = breaker.state_sync()
            except READ_ERRORS as exc:
                logger.warning("prometheus: breaker %s could not be read: %s", breaker.name, exc)
                continue
            for name in ("closed", "open", "half_open"):
                state.add_metric([breaker.name, name], 1 if now.state == name else 0)
            failures.add_metric([breaker.name], now.recent_failures)
            opened.add_metric([breaker.name], now.opens)
        yield state
        yield failures
        yield opened


class JobTimes:
    """Histograms fed by workers' events: ``corral_job_processing_seconds{queue, outcome}``
    (each attempt, ``outcome`` ``completed`` or ``failed``; a failed attempt that is retried
    counts as failed) and ``corral_job_waiting_seconds{queue}`` (from when the job was ready
    to the start of its first attempt; a retry's wait is not in the job's hash).

    Args:
        registry: where the histograms are registered (the default registry by default); one
            ``JobTimes`` per registry, attached to as many workers as wanted.
        buckets: the histograms' buckets, in seconds.
    """

    def __init__(
        self, registry: CollectorRegistry = REGISTRY, buckets: Sequence[float] = BUCKETS
    ) -> None:
        self.processing = Histogram(
            "corral_job_processing_seconds",
            "Time an attempt ran, from its start to its end.",
            ["queue", "outcome"],
            registry=registry,
            buckets=buckets,
        )
        self.waiting = Histogram(
            "corral_job_waiting_seconds",
            "Time a job was ready before its first attempt started.",
            ["queue"],
            registry=registry,
            buckets=buckets,
        )

    def attach(self, worker: Any) -> None:
        """Observe the attempts of ``worker`` (a :class:`~corral.Worker`)."""
        worker.on("active", self.started)
        worker.on("completed", lambda job, _result: self.ended(job, "completed"))
        worker.on("failed", lambda job, _error: self.ended(job, "failed"))

    def started(self, job: JobRecord) -> None:
        """Record the waiting time of a job whose first attempt starts."""
        if job.processed_on is not None and job.attempts_started <= 1:
            waited = max(0, job.processed_on - first_ready_ms(job)) / 1000
            self.waiting.labels(job.queue_name).observe(waited)

    def ended(self, job: JobRecord, outcome: str) -> None:
        """Record the processing time of an attempt that ended with ``outcome``."""
        if job.processed_on is not None:
            end = job.finished_on or clock.now_ms()  # the worker's copy may not carry it yet
            self.processing.labels(job.queue_name, outcome).observe(
                max(0, end - job.processed_on) / 1000
            )


def queue_registry(queues: Iterable[Queue]) -> CollectorRegistry:
    """A new registry holding a :class:`QueueCollector` of ``queues``."""
    registry = CollectorRegistry()
    registry.register(QueueCollector(queues))
    return registry


def export_text(queues: Iterable[Queue]) -> str:
    """The Prometheus text exposition of the queues' figures."""
    return generate_latest(queue_registry(queues)).decode()


def metrics_asgi_app(registry: CollectorRegistry = REGISTRY) -> ASGIApp:
    """An ASGI app answering every ``GET`` with the text exposition of ``registry``; mount it
    at ``/metrics``. The collectors read the server in a thread, off the event loop."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            return await lifespan(receive, send)
        if scope["type"] != "http":
            return None
        if scope["method"] not in ("GET", "HEAD"):
            return await respond(send, 405, b"method not allowed\n", b"text/plain")
        body = await asyncio.to_thread(generate_latest, registry)
        content_type = CONTENT_TYPE_LATEST.encode()
        await respond(send, 200, body, content_type, head=scope["method"] == "HEAD")

    return app
