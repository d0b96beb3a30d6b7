"""``rediss://`` for every connection corral opens, against a real TLS endpoint.

The endpoint requires a client certificate and the URL verifies the server's against the CA,
so a connection that went around TLS, or a TLS without the URL's settings, fails the test:
queues (async and blocking), a worker (its script connection, its blocking and cancel
connections, the blocking twin of plain-function processors), events, flows, the CLI and a
worker with child processes. Then what a wrong CA, a missing client certificate or a wrong
host name give, and the options refused at construction.
"""

from __future__ import annotations

import asyncio
import os
import ssl
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.asyncio as aioredis

from corral import (
    AsyncFlowProducer,
    AsyncJob,
    AsyncQueue,
    AsyncQueueEvents,
    ConfigurationError,
    FlowJob,
    FlowProducer,
    InvalidOptionError,
    Job,
    Queue,
    QueueEvents,
    Worker,
)
from corral._tls import explain
from corral._wire import AsyncWire, pack, params_of
from corral.errors import server_error_kind
from corral.events import Completed
from tests.faults.harness import eventually
from tests.security.conftest import Certs, TlsProxy
from tests.test_worker import drive, finished

ROOT = Path(__file__).resolve().parents[2]


async def test_a_queue_connects_over_tls_with_ca_verification_and_a_client_certificate(
    tls_url: str, tls_proxy: TlsProxy
) -> None:
    before = tls_proxy.handshakes
    async with AsyncQueue("q", connection=tls_url) as queue:
        job = await queue.add("hello", {"n": 1})
        assert (await queue.get_job(job.id)) is not None
    with Queue("q", connection=tls_url) as sync_queue:
        assert sync_queue.get_job_counts("waiting") == {"waiting": 1}
    assert tls_proxy.handshakes > before


async def test_script_calls_take_the_pipelined_connection_over_tls(tls_url: str) -> None:
    async with AsyncQueue("q", connection=tls_url) as queue:
        await queue.add("x")
        wire = queue._caller._wire if queue._caller is not None else None
        assert wire is not None and wire._protocol is not None  # not redis-py's pool
        assert wire._protocol.transport is not None
        tls = wire._protocol.transport.get_extra_info("ssl_object")
        assert tls is not None and tls.version().startswith("TLS")
        # redis-py's own context for the URL: CA verification and the host name checked.
        assert wire._params.tls is not None
        assert wire._params.tls.verify_mode is ssl.CERT_REQUIRED
        assert wire._params.tls.check_hostname


async def test_the_pipelined_connection_reports_a_refused_client_certificate(
    tls_proxy: TlsProxy, certs: Certs, backend_url: str
) -> None:
    client = aioredis.Redis.from_url(tls_proxy.url(ssl_ca_certs=certs.ca), decode_responses=True)
    params = params_of(client)
    assert params is not None
    wire = AsyncWire(params)
    try:
        with pytest.raises(redis.ConnectionError) as caught:
            await wire.call(pack(["PING"]))
        assert server_error_kind(caught.value) == "configuration"
        assert "client certificate" in (explain(caught.value) or "")
    finally:
        wire.close()
        await client.aclose()


async def test_a_worker_drains_over_tls_and_hears_events_flows_and_a_cancel(
    tls_url: str, tls_proxy: TlsProxy
) -> None:
    started = asyncio.Event()

    async def process(job: AsyncJob) -> Any:
        if job.name == "long":
            started.set()
            await asyncio.sleep(3600)  # until cancelled
        return (job.data or {}).get("n", 0) * 2

    refused_before = len(tls_proxy.refused)
    async with (
        AsyncQueue("q", connection=tls_url) as queue,
        AsyncFlowProducer(connection=tls_url) as flows,
        AsyncQueueEvents("q", connection=tls_url, last_event_id="0") as events,
    ):
        jobs = await queue.add_bulk([("n", {"n": i}, {}) for i in range(20)])
        node = await flows.add(FlowJob("parent", "q", children=[FlowJob("child", "q", {"n": 1})]))
        long = await queue.add("long", {})
        worker = Worker("q", process, connection=tls_url, concurrency=4)

        async def cancel_the_long_one() -> bool:
            if started.is_set():
                await queue.cancel(long.id, "over tls")
                return True
            return False

        async def all_done() -> bool:
            return await finished(queue, 23)()

        async def both() -> bool:
            return started.is_set() and await all_done()

        task = asyncio.ensure_future(eventually(cancel_the_long_one, "the long job to start"))
        await drive(worker, both, timeout=60)
        await task
        completed: set[str] = set()
        while len(completed) < 22:
            event = await asyncio.wait_for(events.next_event(), 30)
            if isinstance(event, Completed):
                completed.add(event.job_id)
        assert {j.id for j in jobs} | {node.job.id, node.children[0].job.id} == completed
        assert (await queue.get_job(jobs[3].id)).returnvalue == 6  # type: ignore[union-attr]
        failed = await queue.get_job(long.id)
        assert failed is not None and failed.failed_reason == "cancelled: over tls"
    assert len(tls_proxy.refused) == refused_before


def test_a_plain_function_worker_uses_tls_for_its_blocking_client_too(tls_url: str) -> None:
    def process(job: Job) -> int:
        job.log(f"seen {job.data['n']}")  # the worker's blocking twin of its client
        job.update_progress(50)
        return int(job.data["n"]) + 1

    with Queue("q", connection=tls_url) as queue:
        added = queue.add_bulk([("n", {"n": i}, {}) for i in range(5)])
        worker = Worker("q", process, connection=tls_url)
        summary = worker.run(max_jobs=5)
        assert summary.completed == 5
        for job in added:
            assert queue.get_job_logs(job.id)[0] == [f"seen {job.data['n']}"]
            done = queue.get_job(job.id)
            assert done is not None and done.returnvalue == job.data["n"] + 1


def corral(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("CORRAL_REDIS_URL", None)
    env.pop("REDIS_URL", None)
    return subprocess.run(
        [sys.executable, "-m", "corral.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=ROOT,
    )


def test_the_cli_enqueues_cancels_and_works_with_child_processes_over_tls(tls_url: str) -> None:
    ids = []
    for n in (0, 2):
        done = corral("enqueue", "q", "n", "--data", f'{{"n": {n}}}', "--url", tls_url)
        assert done.returncode == 0, done.stderr
        ids.append(done.stdout.strip())
    cancelled = corral("cancel", "q", ids[0], "--reason", "cli", "--url", tls_url)
    assert cancelled.returncode == 0, cancelled.stderr
    # Child processes get their jobs through the worker (they open no connection of their own).
    worked = corral(
        "worker", "tests.security.processors:double", "-q", "q", "-p", "1", "--burst",
        "--url", tls_url,
    )  # fmt: skip
    assert worked.returncode == 0, worked.stderr
    with Queue("q", connection=tls_url) as queue:
        values = [queue.get_job(i) for i in ids]
    assert values[0] is not None and values[0].failed_reason == "cancelled: cli"
    assert values[1] is not None and values[1].returnvalue == 4


# -- refused handshakes -----------------------------------------------------------------------


def tls_error(url: str) -> ConfigurationError:
    with pytest.raises(ConfigurationError) as caught, Queue("q", connection=url) as queue:
        queue.add("x")
    assert server_error_kind(caught.value.__cause__) == "configuration"  # type: ignore[arg-type]
    return caught.value


def test_a_wrong_ca_is_a_configuration_error_naming_tls_and_the_fix(
    tls_proxy: TlsProxy, certs: Certs
) -> None:
    url = tls_proxy.url(
        ssl_ca_certs=certs.other_ca, ssl_certfile=certs.client_cert, ssl_keyfile=certs.client_key
    )
    message = str(tls_error(url))
    assert message.startswith("TLS: the server's certificate was refused")
    assert "point ssl_ca_certs at the CA that signed the server's certificate" in message


def test_a_missing_client_certificate_is_a_configuration_error(
    tls_proxy: TlsProxy, certs: Certs
) -> None:
    message = str(tls_error(tls_proxy.url(ssl_ca_certs=certs.ca)))
    assert "the server requires a client certificate: give ssl_certfile and ssl_keyfile" in message


@pytest.fixture(scope="module")
def elsewhere(tls_proxy: TlsProxy, certs: Certs) -> Any:
    """An endpoint whose certificate is for redis.example.com only (no client certificate)."""
    proxy = TlsProxy(
        tls_proxy.target_port, certs.server_elsewhere, certs.authority, client_certs=False
    ).start()
    yield proxy
    proxy.stop()


def test_a_host_name_the_certificate_does_not_list_is_refused_unless_unchecked(
    elsewhere: TlsProxy, certs: Certs, backend_url: str
) -> None:
    message = str(tls_error(elsewhere.url(ssl_ca_certs=certs.ca)))
    assert "IP address mismatch" in message and "ssl_check_hostname=false" in message
    with Queue(
        "q", connection=elsewhere.url(ssl_ca_certs=certs.ca, ssl_check_hostname="false")
    ) as q:
        assert q.add("x").id == "1"
    # No verification at all (ssl_cert_reqs=none) needs no CA.
    with Queue("q", connection=elsewhere.url(ssl_cert_reqs="none")) as q:
        assert q.add("x").id == "2"


async def test_a_worker_given_a_wrong_ca_stops_with_a_configuration_error(
    tls_proxy: TlsProxy, certs: Certs, backend_url: str
) -> None:
    async def process(job: AsyncJob) -> None:
        raise AssertionError("no job can be fetched")

    url = tls_proxy.url(
        ssl_ca_certs=certs.other_ca, ssl_certfile=certs.client_cert, ssl_keyfile=certs.client_key
    )
    worker = Worker("q", process, connection=url)
    # A generous bound, not a measurement: a retried certificate failure would never end.
    with pytest.raises(ConfigurationError, match="TLS: the server's certificate was refused"):
        await asyncio.wait_for(worker.run_async(), 30)
    await worker.close()


# -- options refused at construction ----------------------------------------------------------


def bad_urls(certs_dir: Path) -> list[tuple[str, str]]:
    ca = certs_dir / "ca.pem"
    missing = certs_dir / "nope.pem"
    return [
        (f"rediss://127.0.0.1:1/0?ssl_cert_reqs=sometimes&ssl_ca_certs={ca}", "ssl_cert_reqs"),
        (f"rediss://127.0.0.1:1/0?ssl_ca_certs={missing}", "ssl_ca_certs"),
        (f"rediss://127.0.0.1:1/0?ssl_ca_certs={ca}&ssl_certfile={missing}", "ssl_certfile"),
        (f"rediss://127.0.0.1:1/0?ssl_certfile={ca}&ssl_keyfile={missing}", "ssl_keyfile"),
        (f"rediss://127.0.0.1:1/0?ssl_keyfile={ca}", "ssl_keyfile is given without ssl_certfile"),
        (f"redis://127.0.0.1:1/0?ssl_ca_certs={ca}", "ssl_ca_certs is a TLS option"),
        ("rediss://127.0.0.1:1/0?ssl_check_hostname=perhaps", "ssl_check_hostname"),
        ("rediss://127.0.0.1:1/0?ssl_ca_cert=/x.pem", "unknown TLS option ssl_ca_cert"),
        ("rediss://127.0.0.1:1/0?ssl_ca_path=/nonexistent-dir", "ssl_ca_path"),
    ]


def test_bad_tls_options_are_refused_at_construction_naming_the_option(certs: Certs) -> None:
    def build(url: str) -> list[Any]:
        return [
            lambda: AsyncQueue("q", connection=url),
            lambda: Queue("q", connection=url),
            lambda: AsyncQueueEvents("q", connection=url),
            lambda: QueueEvents("q", connection=url),
            lambda: AsyncFlowProducer(connection=url),
            lambda: FlowProducer(connection=url),
            lambda: Worker("q", lambda job: None, connection=url),
        ]

    for url, named in bad_urls(certs.ca.parent):
        for make in build(url):
            with pytest.raises(InvalidOptionError, match=named):
                make()


def test_the_cli_refuses_bad_tls_options_in_one_line(certs: Certs) -> None:
    done = corral("enqueue", "q", "x", "--url", f"rediss://127.0.0.1:1/0?ssl_ca_certs={certs.ca}x")
    assert done.returncode == 2  # a usage error: the URL's options
    assert done.stderr.startswith("Error: --url: ssl_ca_certs: no such file")


async def test_a_certificate_refused_on_reconnect_stops_a_running_worker(
    certs: Certs, backend: Any, backend_url: str
) -> None:
    """The server's certificate is replaced by one of a CA the worker does not trust, and its
    connections drop: the worker's loops meet the refusal on reconnecting, and the worker stops
    with a configuration error instead of retrying it as an outage."""
    proxy = TlsProxy(backend.port, certs.server, certs.authority, client_certs=True).start()
    try:
        url = proxy.url(
            ssl_ca_certs=certs.ca, ssl_certfile=certs.client_cert, ssl_keyfile=certs.client_key
        )
        done = asyncio.Event()

        async def process(job: AsyncJob) -> None:
            done.set()

        async with AsyncQueue("q", connection=url) as queue:
            await queue.add("first")
            worker = Worker("q", process, connection=url)
            run = asyncio.ensure_future(worker.run_async())
            await eventually(done.is_set, "the first job")
            proxy.present(certs.server_other_ca)
            # A generous bound, not a measurement: retried as an outage, it would never end.
            with pytest.raises(ConfigurationError, match="server's certificate was refused"):
                await asyncio.wait_for(run, 30)
            await worker.close()
    finally:
        proxy.stop()
