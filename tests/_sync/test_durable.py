# Generated from tests/_async/test_durable.py by scripts/unasync.py: do not edit.
"""Durable adds: ``durable=True`` returns once a replica has the job (``WAIT``), and raises
``NotDurableError`` (the jobs written to the master attached) when none acknowledges in time.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from corral import Queue, InvalidOptionError, NotDurableError
from tests.conftest import free_port, server_binary
from tests.faults.harness import FaultServer


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[FaultServer, FaultServer]]:
    """A master and its replica, in sync."""
    binary = server_binary()
    root = tmp_path_factory.mktemp("durable")
    started: list[FaultServer] = []
    try:
        fast = ["--repl-diskless-sync-delay", "0"]
        (root / "m").mkdir()
        master = FaultServer(binary, free_port(), Path(root / "m"), fast)
        started.append(master)
        master.start()
        (root / "r").mkdir()
        of = ["--replicaof", "127.0.0.1", str(master.port)]
        replica = FaultServer(binary, free_port(), Path(root / "r"), fast + of)
        started.append(replica)
        replica.start()
        deadline = time.monotonic() + 30
        with replica.client() as r:
            while r.info("replication").get("master_link_status") != "up":
                assert time.monotonic() < deadline, "the replica did not sync"
                time.sleep(0.02)
        yield master, replica
    finally:
        for server in reversed(started):
            server.stop()


@pytest.fixture
def replicated(pair: tuple[FaultServer, FaultServer]) -> Iterator[tuple[str, redis.Redis]]:
    """The master's URL (flushed) and a client of its replica."""
    master, replica = pair
    with master.client() as m:
        m.flushall()
    with replica.client() as r:
        yield master.url, r


def test_a_durable_add_is_on_the_replica_when_it_returns(
    replicated: tuple[str, redis.Redis],
) -> None:
    url, replica = replicated
    with Queue("q", connection=url, durable=True) as queue:
        for i in range(20):
            job = queue.add("a", {"i": i})
            assert replica.hget(f"bull:q:{job.id}", "name") == "a"  # no waiting: WAIT did
        jobs = queue.add_bulk([("b", {"i": i}) for i in range(500)])
        assert replica.llen("bull:q:wait") == 520
        assert len(jobs) == 500


def test_an_add_no_replica_acknowledges_raises_with_its_jobs(
    replicated: tuple[str, redis.Redis], pair: tuple[FaultServer, FaultServer]
) -> None:
    url, _ = replicated
    _, replica = pair
    assert replica.process is not None
    os.kill(replica.process.pid, signal.SIGSTOP)  # a replica that lags (or is gone)
    try:
        with Queue("q", connection=url, durable_timeout=0.1) as queue:
            with pytest.raises(NotDurableError, match="0 of 1 replicas") as caught:
                queue.add("a", job_id="a1", durable=True)
            assert [j.id for j in caught.value.jobs] == ["a1"]
            assert (caught.value.acknowledged, caught.value.needed) == (0, 1)
            assert queue.get_job("a1") is not None  # written to the master all the same
            with pytest.raises(NotDurableError, match="3 jobs") as bulk:
                queue.add_bulk([("b", None), ("b", None), ("b", None)], durable=True)
            assert len(bulk.value.jobs) == 3
            queue.add("c")  # not durable: no wait
            assert queue.count() == 5
        more = {"durable": True, "durable_replicas": 2, "durable_timeout": 0.1}
        two = Queue("q", connection=url, **more)
        with pytest.raises(NotDurableError, match="0 of 2 replicas"):
            two.add("d")
        two.close()
    finally:
        os.kill(replica.process.pid, signal.SIGCONT)


def test_durable_options_are_checked(redis_url: str) -> None:
    with pytest.raises(InvalidOptionError, match="durable must be True or False"):
        Queue("q", connection=redis_url, durable="yes")  # type: ignore[arg-type]
    with pytest.raises(InvalidOptionError, match="durable_replicas"):
        Queue("q", connection=redis_url, durable_replicas=0)
    with pytest.raises(InvalidOptionError, match="durable_timeout"):
        Queue("q", connection=redis_url, durable_timeout=0)
    with Queue("q", connection=redis_url) as queue:
        with pytest.raises(InvalidOptionError, match="durable must be True or False"):
            queue.add("a", durable=1)  # type: ignore[arg-type]
        assert queue.count() == 0
