"""A Redis Cluster over TLS (``rediss+cluster://``): the map's probes, every queue's client and
a worker's connections speak TLS to every node, with CA verification and a client certificate.

The bundled server has no TLS, so each node gets a TLS endpoint in front of it (the one of
tests/security) and announces that endpoint's port to clients (``cluster-announce-port``):
the cluster's map, and its ``MOVED`` replies, then name only TLS ports, as a TLS cluster's
do. The cluster is this module's own: announcing other ports breaks its replication, which
these tests do not need.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlencode

import pytest
from redis.crc import key_slot

from corral import AsyncJob, AsyncQueue, ConfigurationError, InvalidOptionError, Queue, Worker
from tests.cluster.conftest import Cluster, start_cluster, wait_for
from tests.security.conftest import Certs, TlsProxy
from tests.security.conftest import certs as certs  # the fixture, shared


@pytest.fixture(scope="module")
def tls_cluster(
    tmp_path_factory: pytest.TempPathFactory, certs: Certs
) -> Iterator[tuple[Cluster, list[TlsProxy]]]:
    cluster = start_cluster(Path(tmp_path_factory.mktemp("tls-cluster")))
    proxies: list[TlsProxy] = []
    try:
        for node in cluster.nodes:
            proxy = TlsProxy(node.port, certs.server, certs.authority, client_certs=True).start()
            proxies.append(proxy)
            with node.client() as r:
                r.config_set("cluster-announce-bus-port", node.port + 10000)
                r.config_set("cluster-announce-port", proxy.port)
        tls_ports = {p.port for p in proxies}

        def announced() -> bool:
            with cluster.ask() as r:
                ranges = r.execute_command("CLUSTER", "SLOTS")
            return all(int(node[1]) in tls_ports for _, _, *nodes in ranges for node in nodes)

        wait_for(announced, "every node to announce its TLS port")
        yield cluster, proxies
    finally:
        for proxy in proxies:
            proxy.stop()
        cluster.stop()


def url_of(proxies: list[TlsProxy], certs: Certs, **extra: str) -> str:
    options = {
        "ssl_ca_certs": str(certs.ca),
        "ssl_certfile": str(certs.client_cert),
        "ssl_keyfile": str(certs.client_key),
        **extra,
    }
    return f"rediss+cluster://127.0.0.1:{proxies[0].port}?{urlencode(options)}"


async def test_a_worker_drains_a_queue_over_tls_to_its_slot_master(
    tls_cluster: tuple[Cluster, list[TlsProxy]], certs: Certs
) -> None:
    cluster, proxies = tls_cluster
    url = url_of(proxies, certs)
    slot = int(key_slot(b"t"))
    with cluster.ask() as r:  # the map names the TLS ports now
        port = next(int(ns[0][1]) for lo, hi, *ns in r.cluster("SLOTS") if lo <= slot <= hi)
    proxy = next(p for p in proxies if p.port == port)
    before = proxy.handshakes

    def plain(job: object) -> str:  # its Job is on the blocking twin: over TLS too
        return "done"

    async def process(job: AsyncJob) -> str:
        return "done"

    async with AsyncQueue("{t}", connection=url) as queue:
        await queue.add_bulk([("job", {"i": i}) for i in range(40)])
        client = await queue.client()
        assert client.connection_pool.master == ("127.0.0.1", proxy.port)  # the TLS port
        for processor in (process, plain):
            worker = Worker("{t}", processor, connection=url, concurrency=4)
            summary = await asyncio.wait_for(worker.run_async(burst=True, max_jobs=20), 60)
            assert summary.completed == 20
        assert await queue.get_job_counts("completed") == {"completed": 40}
    # The slot's master was reached through its TLS port (the replicas' plain replication
    # attempts are all the endpoint refuses).
    assert proxy.handshakes > before


def test_a_wrong_ca_is_a_clear_error(
    tls_cluster: tuple[Cluster, list[TlsProxy]], certs: Certs
) -> None:
    _, proxies = tls_cluster
    url = url_of(proxies, certs, ssl_ca_certs=str(certs.other_ca))
    with Queue("{t}", connection=url) as queue, pytest.raises(ConfigurationError, match="TLS"):
        queue.add("a")


def test_tls_options_are_checked_when_given(certs: Certs) -> None:
    with pytest.raises(InvalidOptionError, match="use rediss\\+cluster://"):
        Queue("{t}", connection=f"redis+cluster://h:1?ssl_ca_certs={certs.ca}")
    with pytest.raises(InvalidOptionError, match="ssl_certfile: no such file"):
        Queue("{t}", connection="rediss+cluster://h:1?ssl_certfile=/nope")
