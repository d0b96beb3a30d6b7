"""Fixtures of the fault-injection suite: each test gets servers of its own (faults such as
``CONFIG SET maxmemory`` or ``REPLICAOF`` must not reach other tests), stopped at teardown
whatever happened, and every log line of corral, DEBUG included, for the traceback check."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest
import redis

from corral import AsyncQueue
from tests.conftest import free_port, server_binary
from tests.faults.harness import FaultServer, Fleet
from tests.interop.conftest import node_ready  # noqa: F401  (the fixture, for Node's data)


@pytest.fixture(autouse=True)
def corral_logs(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="corral")


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[Callable[..., FaultServer]]:
    """``servers(*extra_args)`` starts one more server; all are stopped at teardown."""
    started: list[FaultServer] = []

    def start(*extra: str) -> FaultServer:
        workdir = tmp_path / f"server-{len(started)}"
        workdir.mkdir()
        srv = FaultServer(server_binary(), free_port(), workdir, list(extra))
        started.append(srv)
        srv.start()
        return srv

    yield start
    for srv in started:
        srv.stop()


@pytest.fixture
def server(servers: Callable[..., FaultServer]) -> FaultServer:
    return servers()


@pytest.fixture
def r(server: FaultServer) -> Iterator[redis.Redis]:
    client = server.client()
    yield client
    client.close()


@pytest.fixture
async def queue(server: FaultServer) -> AsyncIterator[AsyncQueue]:
    q = AsyncQueue("q", connection=server.url)
    yield q
    await q.close()


@pytest.fixture
async def fleet(server: FaultServer) -> AsyncIterator[Fleet]:
    async with Fleet(server.url) as f:
        yield f
