"""TLS and ACL: a real server of this directory, and a TLS endpoint in front of it.

The bundled ``valkey-server`` is built without TLS ("Failed finding TLS support" for
``--tls-port``), so :class:`TlsProxy` terminates TLS in the test process and forwards the
plain bytes to the server: a real handshake with real certificates (``trustme``: a CA, a
server certificate for 127.0.0.1 and localhost, a client certificate, and an unrelated second
CA), client certificates required or not. It drives OpenSSL through memory buffers rather than
asyncio's TLS transport, so that a refused handshake sends its alert to the client, as a TLS
server does (asyncio's drops the connection without it, and the client could not tell a
missing certificate from an outage).
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import ssl
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest
import redis
import trustme

from tests.conftest import ServerProcess, running_server

#: Longest a client may take over its half of a handshake.
HANDSHAKE_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Certs:
    """The certificate files of this directory's tests (PEM, in a temp dir)."""

    ca: Path
    other_ca: Path
    client_cert: Path
    client_key: Path
    #: Issued by ``ca`` for 127.0.0.1 and localhost, and for another name only.
    server: trustme.LeafCert
    server_elsewhere: trustme.LeafCert
    #: For 127.0.0.1, issued by the other CA (a server moved to a CA its clients do not trust).
    server_other_ca: trustme.LeafCert
    authority: trustme.CA


@pytest.fixture(scope="session")
def certs() -> Iterator[Certs]:
    workdir = Path(tempfile.mkdtemp(prefix="corral-certs-"))
    ca, other = trustme.CA(), trustme.CA()
    client = ca.issue_cert("corral-worker@example.com")
    ca.cert_pem.write_to_path(str(workdir / "ca.pem"))
    other.cert_pem.write_to_path(str(workdir / "other-ca.pem"))
    client.cert_chain_pems[0].write_to_path(str(workdir / "client.crt"))
    client.private_key_pem.write_to_path(str(workdir / "client.key"))
    try:
        yield Certs(
            ca=workdir / "ca.pem",
            other_ca=workdir / "other-ca.pem",
            client_cert=workdir / "client.crt",
            client_key=workdir / "client.key",
            server=ca.issue_cert("127.0.0.1", "localhost"),
            server_elsewhere=ca.issue_cert("redis.example.com"),
            server_other_ca=other.issue_cert("127.0.0.1"),
            authority=ca,
        )
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


class TlsProxy:
    """``127.0.0.1:<port>`` in TLS, forwarded in plain to ``127.0.0.1:<target_port>``.

    Runs its own asyncio loop in a daemon thread, so sync and async tests (and other
    processes) use it alike. ``handshakes`` counts the accepted handshakes, ``refused`` holds
    the errors of the refused ones.
    """

    def __init__(
        self, target_port: int, cert: trustme.LeafCert, ca: trustme.CA, *, client_certs: bool
    ) -> None:
        self.target_port = target_port
        self._ca = ca
        self._client_certs = client_certs
        self.context = self._context(cert)
        self.port = 0
        self.handshakes = 0
        self.refused: list[str] = []
        self._writers: set[asyncio.StreamWriter] = set()
        self._loop = asyncio.new_event_loop()
        self._loop.set_exception_handler(lambda loop, context: None)
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.base_events.Server | None = None

    def _context(self, cert: trustme.LeafCert) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        cert.configure_cert(context)
        if self._client_certs:
            self._ca.configure_trust(context)
            context.verify_mode = ssl.CERT_REQUIRED
        return context

    def start(self) -> TlsProxy:
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._accept, "127.0.0.1", 0), self._loop
        ).result(10)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    def stop(self) -> None:
        async def shut() -> None:
            if self._server is not None:
                self._server.close()
            # The connections' tasks close their sockets as they end; every socket is closed
            # before the loop is (one left to the garbage collector is a ResourceWarning).
            writers = list(self._writers)
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            for writer in writers:
                writer.transport.abort()  # closed now, unsent bytes or not
            await asyncio.sleep(0)  # the transports' own close callbacks
            if self._server is not None:
                await self._server.wait_closed()

        asyncio.run_coroutine_threadsafe(shut(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    def present(self, cert: trustme.LeafCert) -> None:
        """Present ``cert`` from now on, and drop every open connection (a server whose
        certificate was replaced, then restarted)."""
        self.context = self._context(cert)

        async def drop() -> None:
            for writer in list(self._writers):
                writer.close()

        asyncio.run_coroutine_threadsafe(drop(), self._loop).result(10)

    def url(self, host: str = "127.0.0.1", **options: Any) -> str:
        query = urlencode({k: str(v) for k, v in options.items()})
        return f"rediss://{host}:{self.port}/0" + (f"?{query}" if query else "")

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            await self._serve(reader, writer)
        except (OSError, ssl.SSLError, asyncio.TimeoutError):
            pass
        finally:
            self._writers.discard(writer)
            writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        tls = self.context.wrap_bio(incoming, outgoing, server_side=True)

        def flush() -> None:
            data = outgoing.read()
            if data:
                writer.write(data)

        try:
            await asyncio.wait_for(
                self._handshake(tls, reader, writer, incoming, flush), HANDSHAKE_TIMEOUT_S
            )
        except ssl.SSLError as exc:
            self.refused.append(str(exc))
            flush()  # the alert: the client learns why
            await writer.drain()
            return
        if not tls.version():
            return
        self.handshakes += 1
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        self._writers.add(up_writer)

        async def to_server() -> None:
            while True:
                while True:  # what the client sent with its handshake, then each read
                    try:
                        plain = tls.read(65536)
                    except ssl.SSLWantReadError:
                        break
                    if not plain:
                        return
                    up_writer.write(plain)
                flush()
                await up_writer.drain()
                data = await reader.read(65536)
                if not data:
                    return
                incoming.write(data)

        async def to_client() -> None:
            while data := await up_reader.read(65536):
                tls.write(data)
                flush()
                await writer.drain()

        try:
            done, pending = await asyncio.wait(
                [asyncio.ensure_future(to_server()), asyncio.ensure_future(to_client())],
                return_when=asyncio.FIRST_COMPLETED,
            )
            for task in pending:
                task.cancel()
            for task in done:
                with contextlib.suppress(OSError, ssl.SSLError):
                    task.result()
        finally:
            self._writers.discard(up_writer)
            up_writer.close()

    @staticmethod
    async def _handshake(
        tls: ssl.SSLObject,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        incoming: ssl.MemoryBIO,
        flush: Any,
    ) -> None:
        while True:
            try:
                tls.do_handshake()
                flush()
                return
            except ssl.SSLWantReadError:
                flush()
                await writer.drain()
                data = await reader.read(65536)
                if not data:
                    return  # the client gave up (tls.version() stays None)
                incoming.write(data)


@pytest.fixture(scope="session")
def backend() -> Iterator[ServerProcess]:
    """The plain server behind the TLS endpoints (ACL users are made on it too)."""
    yield from running_server("security")


@pytest.fixture
def backend_url(backend: ServerProcess) -> Iterator[str]:
    """The server's plain URL, flushed and with no ACL user but the default one."""
    with redis.Redis(port=backend.port, decode_responses=True) as client:
        client.flushall()
        for user in client.acl_users():
            if user != "default":
                client.acl_deluser(user)
    yield backend.url


@pytest.fixture(scope="session")
def tls_proxy(backend: ServerProcess, certs: Certs) -> Iterator[TlsProxy]:
    """TLS with client certificates required (signed by ``certs.ca``)."""
    proxy = TlsProxy(backend.port, certs.server, certs.authority, client_certs=True).start()
    yield proxy
    proxy.stop()


@pytest.fixture
def tls_url(tls_proxy: TlsProxy, certs: Certs, backend_url: str) -> str:
    """A ``rediss://`` URL that verifies the server against the CA and presents the client
    certificate."""
    return tls_proxy.url(
        ssl_ca_certs=certs.ca,
        ssl_certfile=certs.client_cert,
        ssl_keyfile=certs.client_key,
        ssl_cert_reqs="required",
    )
