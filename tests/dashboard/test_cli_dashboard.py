"""``corral dashboard``: its help, its one-line usage errors, and a real run (a subprocess
on a free port) that serves pages and the live stream with the printed token, then exits 0
on SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import pytest
from click.testing import CliRunner, Result

from corral import Queue
from corral.cli import main
from tests.conftest import free_port


def cli(*args: str, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(main, list(args), env=env)


def one_line_error(result: Result, code: int) -> str:
    assert result.exit_code == code, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_help() -> None:
    result = cli("dashboard", "--help")
    assert result.exit_code == 0
    for flag in (
        "--host",
        "--port",
        "--queues",
        "--prefix",
        "--url",
        "--read-only",
        "--no-auth",
        "--basic-auth",
    ):
        assert flag in result.stdout


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--port", "70000"], "--port"),
        (["--bogus"], "--bogus"),
        (["--no-auth", "--host", "0.0.0.0"], "--no-auth is refused on host '0.0.0.0'"),
        (["--no-auth", "--host", "192.168.1.10"], "loopback"),
        (["--no-auth", "--basic-auth", "a:b"], "cannot be used together"),
        (["--basic-auth", "nocolon"], "USER:PASS"),
        (["--queues", ","], "--queues"),
    ],
)
def test_usage_errors_are_one_line_exit_2(redis_url: str, args: list[str], says: str) -> None:
    line = one_line_error(cli("dashboard", "--url", redis_url, *args), 2)
    assert says in line


def test_an_unreachable_server_is_one_line_exit_1() -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"
    line = one_line_error(cli("dashboard", "--url", url, "--port", str(free_port())), 1)
    assert "cannot reach the server" in line


def test_a_port_in_use_is_one_line_exit_1(redis_url: str) -> None:
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        line = one_line_error(cli("dashboard", "--url", redis_url, "--port", str(port)), 1)
    assert f"cannot listen on 127.0.0.1:{port}" in line


@pytest.fixture
def served(redis_url: str) -> Iterator[tuple[subprocess.Popen[str], str, str]]:
    """``corral dashboard`` running on a free port: the process, its URL and its token."""
    with Queue("emails", connection=redis_url) as queue:
        queue.add("send", {"to": "ada@example.com"}, job_id="a1")
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "CORRAL_DASHBOARD_TOKEN"}
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "corral.cli",
            "dashboard",
            "--url",
            redis_url,
            "--port",
            str(port),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert process.stdout is not None
        lines = [process.stdout.readline() for _ in range(3)]  # URL, redis, token
        assert lines[0].strip() == f"corral dashboard on http://127.0.0.1:{port}/", lines
        assert lines[1].startswith("redis: redis://127.0.0.1:")
        assert lines[2].startswith("token: ")
        token = lines[2].split()[1]
        yield process, f"http://127.0.0.1:{port}", token
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        for stream in (process.stdout, process.stderr):
            if stream is not None:
                stream.close()


def _get_when_up(url: str, **kwargs: object) -> httpx.Response:
    """GET ``url`` once the server listens (it binds before it prints; uvicorn may still be
    starting its loop)."""
    deadline = time.monotonic() + 30
    while True:
        try:
            return httpx.get(url, timeout=10, **kwargs)  # type: ignore[arg-type]
        except httpx.TransportError:
            if time.monotonic() > deadline:
                raise


def test_serves_pages_with_the_printed_token_and_stops_on_sigterm(
    served: tuple[subprocess.Popen[str], str, str],
) -> None:
    process, base, token = served
    assert _get_when_up(base + "/").status_code == 401
    bearer = {"Authorization": f"Bearer {token}"}
    page = _get_when_up(base + "/", headers=bearer)
    assert page.status_code == 200 and 'data-queue="emails"' in page.text
    assert page.headers["x-frame-options"] == "DENY"
    job = httpx.get(base + "/queues/emails/jobs/a1", headers=bearer, timeout=10)
    assert job.status_code == 200 and "ada@example.com" in job.text
    # The live stream of the queue: its first update has the queue's counts.
    with httpx.stream("GET", base + "/queues/emails/live", headers=bearer, timeout=10) as stream:
        assert stream.status_code == 200
        assert stream.headers["content-type"].startswith("text/event-stream")
        event = None
        for line in stream.iter_lines():
            if line.startswith("event:"):
                event = line.split(":", 1)[1].strip()
            if line.startswith("data:") and event == "update":
                update = json.loads(line.split(":", 1)[1])
                assert update["queues"]["emails"]["counts"]["waiting"] == 1
                break
    process.send_signal(signal.SIGTERM)
    assert process.wait(30) == 0


def test_read_only_and_no_auth_on_loopback(redis_url: str) -> None:
    port = free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "corral.cli",
            "dashboard",
            "--url",
            redis_url,
            "--port",
            str(port),
            "--no-auth",
            "--read-only",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert process.stdout is not None
        lines = [process.stdout.readline() for _ in range(4)]
        assert lines[2].strip() == "auth: none (loopback only)", lines
        assert lines[3].startswith("read-only")
        page = _get_when_up(f"http://127.0.0.1:{port}/")
        assert page.status_code == 200 and 'data-testid="read-only"' in page.text
        refused = httpx.post(f"http://127.0.0.1:{port}/queues/x/pause", timeout=10)
        assert refused.status_code == 403
        process.send_signal(signal.SIGTERM)
        assert process.wait(30) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        if process.stdout is not None:
            process.stdout.close()
