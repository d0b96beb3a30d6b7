"""Fixtures of the queue-level tests: queues ``q``, ``pq``, ``cq`` and a flow producer."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from corral import AsyncFlowProducer, AsyncQueue


@pytest.fixture
async def queue(redis_url: str) -> AsyncIterator[AsyncQueue]:
    q = AsyncQueue("q", connection=redis_url)
    yield q
    await q.close()


@pytest.fixture
async def pq(redis_url: str) -> AsyncIterator[AsyncQueue]:
    q = AsyncQueue("pq", connection=redis_url)
    yield q
    await q.close()


@pytest.fixture
async def cq(redis_url: str) -> AsyncIterator[AsyncQueue]:
    q = AsyncQueue("cq", connection=redis_url)
    yield q
    await q.close()


@pytest.fixture
async def flows(redis_url: str) -> AsyncIterator[AsyncFlowProducer]:
    producer = AsyncFlowProducer(connection=redis_url)
    yield producer
    await producer.close()
