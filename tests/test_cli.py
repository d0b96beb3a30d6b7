"""`corral worker` as a user runs it: a process that works a queue until SIGTERM."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from corral import Queue

ROOT = Path(__file__).resolve().parent.parent


def corral(*args: str) -> list[str]:
    return [sys.executable, "-c", "from corral.cli import main; main()", *args]


def run_corral(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        corral(*args), cwd=ROOT, capture_output=True, text=True, timeout=30, check=False
    )


@pytest.mark.timeout(60)
def test_worker_command_processes_jobs_and_stops_on_sigterm(redis_url: str) -> None:
    with Queue("cli", connection=redis_url) as queue:
        for i in range(10):
            queue.add("shout", {"text": f"hello {i}"})
        proc = subprocess.Popen(
            corral(
                "worker",
                "tests.fixtures.processors:shout",
                "--queue",
                "cli",
                "--concurrency",
                "3",
                "--url",
                redis_url,
                "--name",
                "cli-worker",
            ),
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            deadline = time.monotonic() + 30
            while queue.get_job_counts("completed")["completed"] < 10:
                assert proc.poll() is None, proc.communicate()[0]
                assert time.monotonic() < deadline, "worker did not finish the jobs"
                time.sleep(0.05)
            proc.send_signal(signal.SIGTERM)
            out, _ = proc.communicate(timeout=20)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        assert proc.returncode == 0, out
        assert "queue=cli concurrency=3" in out
        job = queue.get_job("10")
        assert job is not None
        assert job.returnvalue == {"shouted": "HELLO 9"}
        assert job.processed_by == "cli-worker"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("no_colon", "must be 'package.module:function'"),
        ("tests.fixtures.nope:f", "cannot import 'tests.fixtures.nope': ModuleNotFoundError"),
        ("tests.fixtures.processors:missing", "has no attribute 'missing'"),
        ("tests.fixtures.processors:not_callable", "not a function"),
    ],
)
def test_worker_command_refuses_bad_processor(spec: str, message: str) -> None:
    proc = run_corral("worker", spec, "--queue", "q", "--url", "redis://127.0.0.1:1/0")
    assert proc.returncode == 2
    assert message in proc.stderr


def test_worker_command_needs_a_queue() -> None:
    proc = run_corral("worker", "tests.fixtures.processors:shout")
    assert proc.returncode == 2
    assert "Missing option '--queue'" in proc.stderr
