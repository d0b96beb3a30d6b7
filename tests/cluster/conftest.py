"""A Redis Cluster of the tests' own: 3 masters and 3 replicas, all from the bundled server
binary on loopback ports in a temp dir, joined with ``valkey-cli --cluster create`` and
stopped at teardown (only the processes started here).

Nodes run with a short ``cluster-node-timeout`` so that a killed master is failed over to its
replica within seconds. One cluster serves a module (making one takes seconds); each test
starts on empty masters. A test that kills a node asks for ``fresh_cluster`` instead.
"""

from __future__ import annotations

import logging
import random
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis

from tests.conftest import server_binary
from tests.faults.harness import FaultServer

#: How long a node waits before it calls an unanswering peer failed (ms).
NODE_TIMEOUT_MS = 1000


def cluster_port() -> int:
    """A free port whose cluster bus port (port + 10000) is free too."""
    for _ in range(200):
        port = random.randint(20000, 45000)
        try:
            with socket.socket() as a, socket.socket() as b:
                a.bind(("127.0.0.1", port))
                b.bind(("127.0.0.1", port + 10000))
            return port
        except OSError:
            continue
    raise RuntimeError("no free pair of ports for a cluster node")


def cli_binary() -> str:
    binary = Path(server_binary())
    cli = binary.with_name(binary.name.replace("server", "cli"))
    if not cli.exists():
        pytest.skip(f"no {cli.name} beside {binary}")
    return str(cli)


@dataclass
class Cluster:
    """The nodes of one test module's cluster."""

    nodes: list[FaultServer]

    @property
    def url(self) -> str:
        hosts = ",".join(f"127.0.0.1:{n.port}" for n in self.nodes[:3])
        return f"redis+cluster://{hosts}"

    def node(self, port: int) -> FaultServer:
        return next(n for n in self.nodes if n.port == port)

    def live(self) -> list[FaultServer]:
        return [n for n in self.nodes if n.process is not None]

    def ask(self) -> redis.Redis:
        """A plain client of the first live node (for CLUSTER commands)."""
        return self.live()[0].client(socket_timeout=5)

    def masters(self) -> list[FaultServer]:
        """The live nodes that are masters now."""
        found = []
        for node in self.live():
            with node.client(socket_timeout=5) as c:
                if c.info("replication")["role"] == "master":
                    found.append(node)
        return found

    def owner(self, slot: int) -> FaultServer:
        """The master serving ``slot``, as a live node sees it."""
        with self.ask() as c:
            for start, end, master, *_ in c.execute_command("CLUSTER", "SLOTS"):
                if start <= slot <= end:
                    return self.node(int(master[1]))
        raise AssertionError(f"no node serves slot {slot}")

    def replica_of(self, master: FaultServer) -> FaultServer:
        for node in self.live():
            with node.client(socket_timeout=5) as c:
                info = c.info("replication")
                if info["role"] == "slave" and int(info["master_port"]) == master.port:
                    return node
        raise AssertionError(f"no replica of {master.port}")

    def ready(self) -> bool:
        """Every live node says the cluster is ok, every master has a replica, and every replica
        is in sync."""
        try:
            for node in self.live():
                with node.client(socket_timeout=2) as c:
                    if "cluster_state:ok" not in c.execute_command("CLUSTER", "INFO"):
                        return False
                    info = c.info("replication")
                    if info["role"] == "slave" and info.get("master_link_status") != "up":
                        return False
            with self.ask() as c:
                ranges = c.execute_command("CLUSTER", "SLOTS")
            # [start, end, master, replica...]: each range must list a replica.
            return len(ranges) == 3 and all(len(r) >= 4 for r in ranges)
        except (redis.ConnectionError, redis.ResponseError, redis.TimeoutError):
            return False

    def flush(self) -> None:
        for node in self.masters():
            with node.client(socket_timeout=5) as c:
                c.flushall()

    def stop(self) -> None:
        for node in reversed(self.nodes):
            node.stop()


def wait_for(check: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def start_cluster(workdir: Path) -> Cluster:
    binary = server_binary()
    cluster = Cluster([])
    try:
        for i in range(6):
            port = cluster_port()
            node_dir = workdir / f"node-{i}"
            node_dir.mkdir()
            extra = [
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                str(node_dir / "nodes.conf"),
                "--cluster-node-timeout",
                str(NODE_TIMEOUT_MS),
                "--repl-diskless-sync-delay",
                "0",
            ]
            node = FaultServer(binary, port, node_dir, extra)
            cluster.nodes.append(node)
            node.start()
        # The first three become the masters (slots 0-5460, 5461-10922, 10923-16383).
        subprocess.run(
            [
                cli_binary(),
                "--cluster",
                "create",
                *(f"127.0.0.1:{n.port}" for n in cluster.nodes),
                "--cluster-replicas",
                "1",
                "--cluster-yes",
            ],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            timeout=60,
        )
        wait_for(cluster.ready, "the cluster to be ok with every replica in sync")
        return cluster
    except BaseException:
        cluster.stop()
        raise


@pytest.fixture(autouse=True)
def corral_logs(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="corral")


@pytest.fixture(scope="module")
def shared_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    cluster = start_cluster(tmp_path_factory.mktemp("cluster"))
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def cluster(shared_cluster: Cluster) -> Cluster:
    """The module's cluster, emptied."""
    shared_cluster.flush()
    return shared_cluster


@pytest.fixture
def fresh_cluster(tmp_path: Path) -> Iterator[Cluster]:
    """A cluster of this test alone (it may kill nodes)."""
    cluster = start_cluster(tmp_path)
    try:
        yield cluster
    finally:
        cluster.stop()
