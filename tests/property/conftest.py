"""Fixtures and the hypothesis profile of the property suite.

The profile keeps the whole directory under about a minute on a 2-core machine and makes runs
reproducible: examples are derived from each test's name (``derandomize``), nothing is kept
between runs (``database=None``), and there is no per-example deadline (a loaded CI machine
would make one flaky). ``max_examples`` is set per test with ``@settings``; the default here
is for tests that name none.

Function-scoped fixtures (a queue, a raw client) are built once per test and shared by its
examples, so every example starts by flushing the server (``support.fresh``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import redis
from hypothesis import HealthCheck, settings

from corral import AsyncFlowProducer, AsyncQueue
from tests.property.support import SCALE

settings.register_profile(
    "corral-property",
    deadline=None,
    max_examples=25,
    derandomize=SCALE == 1,  # a scaled run explores (support.SCALE)
    database=None,
    print_blob=False,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.filter_too_much,
        HealthCheck.large_base_example,
    ],
)
settings.load_profile("corral-property")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # A megabyte input makes hypothesis warn that its repr is large (in the explanation of an
    # example); that is the input meant, not a problem of the test.
    here = Path(__file__).parent
    for item in items:
        if here in Path(item.path).parents:
            item.add_marker(pytest.mark.filterwarnings("ignore:Generating overly large repr"))


@pytest.fixture
def raw(redis_url: str) -> Iterator[redis.Redis]:
    """A client that reads bytes (DUMP, and keys that are not UTF-8), for snapshots."""
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


@pytest.fixture
async def queue(redis_url: str) -> AsyncIterator[AsyncQueue]:
    q = AsyncQueue("q", connection=redis_url)
    yield q
    await q.close()


@pytest.fixture
async def flows(redis_url: str) -> AsyncIterator[AsyncFlowProducer]:
    producer = AsyncFlowProducer(connection=redis_url)
    yield producer
    await producer.close()
