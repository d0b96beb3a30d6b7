"""``corral demo`` end to end: its own server, a summary, and nothing left running after."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from corral import server

needs_binary = pytest.mark.skipif(
    server.find_binary() is None, reason="no valkey-server/redis-server binary available"
)

# A fresh interpreter, whether or not the `corral` script is installed.
CLI = [sys.executable, "-c", "from corral.cli import main; main()"]
JOB_NAMES = ("send-email", "resize-image", "generate-report", "charge-card", "sync-crm")


def _demo_servers() -> list[int]:
    """Pids of live (non-zombie) server processes started for a demo data dir."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # exited while we looked
        # An exited daemon may linger as a zombie until pid 1 reaps it: it is not running.
        if stat.rpartition(")")[2].split()[:1] == ["Z"]:
            continue
        if b"corral-demo-" in cmdline and (
            b"valkey-server" in cmdline or b"redis-server" in cmdline
        ):
            found.append(int(entry.name))
    return found


@needs_binary
@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs /proc")
def test_demo_runs_and_stops_its_server() -> None:
    before = set(_demo_servers())
    proc = subprocess.run(
        [*CLI, "demo", "--jobs", "60", "--concurrency", "10"],
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    assert "corral-demo-" in out  # the server line: it ran in a temp dir of its own
    for name in JOB_NAMES:
        assert name in out
    m = re.search(r"(\d+) jobs: (\d+) completed, (\d+) failed", out)
    assert m is not None, out
    total, completed, failed = (int(g) for g in m.groups())
    assert total == 60 == completed + failed
    assert failed > 0  # the seeded batch has declined cards and bounced emails
    assert re.search(r"total\s*│\s*60\s*│", out), out  # the table's total row
    assert "failed jobs, for example:" in out
    # Not animated when stdout is a pipe: no cursor movement escapes.
    assert "\x1b[" not in out
    assert set(_demo_servers()) <= before


def test_demo_rejects_bad_options() -> None:
    proc = subprocess.run(
        [*CLI, "demo", "--jobs", "0"], capture_output=True, text=True, timeout=30, check=False
    )
    assert proc.returncode == 2
    assert "--jobs" in proc.stderr


def test_demo_without_server_binary_fails_clearly() -> None:
    env = {"CORRAL_SERVER_BIN": "/nonexistent/valkey-server", "PATH": "/usr/bin:/bin"}
    proc = subprocess.run(
        [*CLI, "demo"], capture_output=True, text=True, timeout=30, check=False, env=env
    )
    assert proc.returncode == 1
    assert proc.stderr.startswith("Error: corral demo needs a valkey-server binary")
    assert proc.stderr.count("\n") == 1  # one line


@needs_binary
@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs /proc")
@pytest.mark.timeout(90)
def test_demo_stopped_by_sigterm_stops_its_server() -> None:
    import signal

    before = set(_demo_servers())
    with subprocess.Popen(
        [*CLI, "demo", "--jobs", "300", "--concurrency", "2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    ) as proc:
        try:
            assert proc.stdout is not None
            seen = []
            for line in proc.stdout:  # wait until the jobs are in and the worker runs
                seen.append(line)
                if line.startswith("enqueued"):
                    break
            assert set(_demo_servers()) - before, "".join(seen)
            proc.send_signal(signal.SIGTERM)
            rest = proc.stdout.read()
            proc.wait(60)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode != 0, rest
    assert set(_demo_servers()) <= before, "SIGTERM left the demo's server running"
