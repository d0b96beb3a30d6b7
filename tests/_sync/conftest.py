# Generated from tests/_async/conftest.py by scripts/unasync.py: do not edit.
"""Fixtures of the queue-level tests: queues ``q``, ``pq``, ``cq`` and a flow producer."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from corral import FlowProducer, Queue


@pytest.fixture
def queue(redis_url: str) -> Iterator[Queue]:
    q = Queue("q", connection=redis_url)
    yield q
    q.close()


@pytest.fixture
def pq(redis_url: str) -> Iterator[Queue]:
    q = Queue("pq", connection=redis_url)
    yield q
    q.close()


@pytest.fixture
def cq(redis_url: str) -> Iterator[Queue]:
    q = Queue("cq", connection=redis_url)
    yield q
    q.close()


@pytest.fixture
def flows(redis_url: str) -> Iterator[FlowProducer]:
    producer = FlowProducer(connection=redis_url)
    yield producer
    producer.close()
