"""A Sentinel deployment of each test's own: 1 master, 1 replica and 3 sentinels, all from the
bundled server binary on free loopback ports in the test's temp dir, stopped at teardown (only
the processes started here). Sentinels run with a short ``down-after-milliseconds`` so that a
killed master is failed over within seconds."""

from __future__ import annotations

import logging
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import redis

from tests.conftest import free_port, server_binary, stop_process
from tests.faults.harness import FaultServer

SERVICE = "mymaster"
#: How long a sentinel waits before it calls an unanswering master down (ms).
DOWN_AFTER_MS = 1000


@dataclass
class SentinelProcess:
    """One sentinel (``valkey-server sentinel.conf --sentinel``) of a test."""

    binary: str
    port: int
    workdir: Path
    master_port: int
    process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        conf = self.workdir / "sentinel.conf"
        conf.write_text(
            f"port {self.port}\n"
            "bind 127.0.0.1\n"
            f"dir {self.workdir}\n"
            f"sentinel monitor {SERVICE} 127.0.0.1 {self.master_port} 2\n"
            f"sentinel down-after-milliseconds {SERVICE} {DOWN_AFTER_MS}\n"
            f"sentinel failover-timeout {SERVICE} 10000\n"
            f"sentinel parallel-syncs {SERVICE} 1\n"
        )
        self.process = subprocess.Popen(
            [self.binary, str(conf), "--sentinel"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.port, decode_responses=True, socket_timeout=5)

    def stop(self) -> None:
        stop_process(self.process)
        self.process = None


@dataclass
class Deployment:
    """The servers and sentinels of one test."""

    servers: list[FaultServer]
    sentinels: list[SentinelProcess] = field(default_factory=list)

    @property
    def url(self) -> str:
        hosts = ",".join(f"127.0.0.1:{s.port}" for s in self.sentinels)
        return f"redis+sentinel://{hosts}/{SERVICE}"

    def master_port(self) -> int:
        """The master's port as the first sentinel that answers sees it."""
        for sentinel in self.sentinels:
            try:
                with sentinel.client() as c:
                    _host, port = c.sentinel_get_master_addr_by_name(SERVICE)
                return int(port)
            except redis.ConnectionError:
                continue
        raise AssertionError("no sentinel answers")

    def server(self, port: int) -> FaultServer:
        return next(s for s in self.servers if s.port == port)

    def master(self) -> FaultServer:
        return self.server(self.master_port())

    def replica(self) -> FaultServer:
        master = self.master_port()
        return next(s for s in self.servers if s.port != master)

    def ready(self) -> bool:
        """Every sentinel sees the master, its replica and the two other sentinels (a failover
        needs them: a quorum of 2 and a majority to elect the leader); the replica is in
        sync."""
        try:
            for sentinel in self.sentinels:
                with sentinel.client() as c:
                    state = c.sentinel_master(SERVICE)
                    if state["num-other-sentinels"] < 2 or state["num-slaves"] < 1:
                        return False
                    if not state.get("is_master") or state.get("is_sdown"):
                        return False
                    replicas = c.sentinel_slaves(SERVICE)
                    if not any(not r["is_sdown"] for r in replicas):
                        return False
            with self.replica().client() as c:
                return bool(c.info("replication").get("master_link_status") == "up")
        except (redis.ConnectionError, redis.ResponseError):
            return False


def wait_for(check: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


@pytest.fixture(autouse=True)
def corral_logs(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="corral")


@pytest.fixture
def deployment(tmp_path: Path) -> Iterator[Deployment]:
    binary = server_binary()
    started: list[FaultServer | SentinelProcess] = []
    try:
        # A full sync starts at once (not after the default 5 s), both ways.
        fast_sync = ["--repl-diskless-sync-delay", "0"]
        (tmp_path / "master").mkdir()
        master = FaultServer(binary, free_port(), tmp_path / "master", fast_sync)
        started.append(master)
        master.start()
        (tmp_path / "replica").mkdir()
        replica_of = ["--replicaof", "127.0.0.1", str(master.port)]
        replica = FaultServer(binary, free_port(), tmp_path / "replica", fast_sync + replica_of)
        started.append(replica)
        replica.start()
        deployment = Deployment([master, replica])
        for i in range(3):
            workdir = tmp_path / f"sentinel-{i}"
            workdir.mkdir()
            sentinel = SentinelProcess(binary, free_port(), workdir, master.port)
            started.append(sentinel)
            sentinel.start()
            deployment.sentinels.append(sentinel)
        wait_for(deployment.ready, "the sentinels to see the master, replica and each other")
        yield deployment
    finally:
        for process in reversed(started):
            process.stop()
