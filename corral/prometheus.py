"""Prometheus export: how many jobs each queue holds per state (``corral[prometheus]``).

Counts are read from the server at scrape time, so every process (or a sidecar) can export
them; there is nothing to keep in step.

Example::

    from prometheus_client import REGISTRY, start_http_server
    from corral import Queue
    from corral.prometheus import QueueCollector

    REGISTRY.register(QueueCollector([Queue("emails"), Queue("reports")]))
    start_http_server(9100)
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from corral._async.queue_getters import COUNTED_STATES
from corral._sync.queue import Queue

try:
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.core import GaugeMetricFamily
    from prometheus_client.registry import Collector
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "corral.prometheus needs prometheus-client: pip install 'corral[prometheus]'"
    ) from exc


class QueueCollector(Collector):
    """A collector of ``corral_queue_jobs{queue, state}`` and ``corral_queue_paused{queue}``."""

    def __init__(self, queues: Iterable[Queue]) -> None:
        self.queues = list(queues)

    def collect(self) -> Iterator[Any]:
        jobs = GaugeMetricFamily(
            "corral_queue_jobs", "Jobs in the queue, by state.", labels=["queue", "state"]
        )
        paused = GaugeMetricFamily(
            "corral_queue_paused", "1 while the queue is paused.", labels=["queue"]
        )
        for queue in self.queues:
            for state, count in queue.get_job_counts(*COUNTED_STATES).items():
                jobs.add_metric([queue.name, state], count)
            paused.add_metric([queue.name], 1 if queue.is_paused() else 0)
        yield jobs
        yield paused


def export_text(queues: Iterable[Queue]) -> str:
    """The Prometheus text exposition of the queues' job counts."""
    registry = CollectorRegistry()
    registry.register(QueueCollector(queues))
    return generate_latest(registry).decode()
