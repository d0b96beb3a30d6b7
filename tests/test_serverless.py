"""The examples of docs/serverless.md, run as written: the function handler, the Kubernetes
CronJob's command and the container's CMD, each against the test server."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from corral import Queue

HERE = Path(__file__).resolve().parent.parent / "docs" / "examples" / "serverless"


def add_emails(redis_url: str, *addresses: str) -> None:
    with Queue("emails", connection=redis_url) as queue:
        for to in addresses:
            queue.add("send", {"to": to})


def run_here(redis_url: str, args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args,
        cwd=HERE,
        env={**os.environ, "CORRAL_REDIS_URL": redis_url},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_function_handler_drains_and_returns_a_summary(redis_url: str) -> None:
    add_emails(redis_url, "ada@example.com", "alan@example.com", "not-an-address")
    code = (
        "import json\n"
        "from handler import handler\n"
        "class Context:\n"
        "    def get_remaining_time_in_millis(self): return 60_000\n"
        "print(json.dumps(handler({}, Context())))\n"
    )
    done = run_here(redis_url, [sys.executable, "-c", code])
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result == {"completed": 2, "failed": 1, "retried": 0, "stopped": "drained"}


def command_of(text: str, pattern: str) -> list[str]:
    match = re.search(pattern, text, re.MULTILINE)
    assert match, f"no {pattern!r}"
    command: list[str] = json.loads(match.group(1))
    assert command[0] == "corral"
    return [sys.executable, "-m", "corral.cli", *command[1:]]


@pytest.mark.parametrize(
    ("file", "pattern"),
    [("cronjob.yaml", r"^\s+command: (\[.*\])$"), ("Dockerfile", r"^CMD (\[.*\])$")],
)
def test_the_scheduled_container_drains_and_reports_failures(
    redis_url: str, file: str, pattern: str
) -> None:
    command = command_of((HERE / file).read_text(), pattern)
    add_emails(redis_url, "ada@example.com", "grace@example.com")
    done = run_here(redis_url, command)
    assert done.returncode == 0, done.stderr
    assert "drained: 2 completed, 0 failed" in done.stdout

    add_emails(redis_url, "nobody")
    done = run_here(redis_url, command)
    assert done.returncode == 1, done.stderr  # --fail-on-job-failure
    assert "drained: 0 completed, 1 failed" in done.stdout
    with Queue("emails", connection=redis_url) as queue:
        assert queue.get_job_counts("completed", "failed", "waiting") == {
            "completed": 2,
            "failed": 1,
            "waiting": 0,
        }
