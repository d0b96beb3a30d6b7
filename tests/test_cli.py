"""`corral worker` as a user runs it: a process that works a queue until SIGTERM; `corral
server start` refusing a data directory it cannot use. The helpers here are shared by the
other CLI tests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from corral import Queue
from corral.cli import main

ROOT = Path(__file__).resolve().parent.parent


def corral(*args: str) -> list[str]:
    return [sys.executable, "-c", "from corral.cli import main; main()", *args]


def run_corral(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        corral(*args),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
        input=stdin,
    )


def cli(*args: str, env: dict[str, str] | None = None, stdin: str | None = None) -> Result:
    """``corral ARGS`` in this process (click's runner: stdout and stderr apart)."""
    return CliRunner().invoke(main, list(args), env=env, input=stdin)


def one_line_error(result: Result | subprocess.CompletedProcess[str], code: int) -> str:
    """The error line, after checking the exit status and that it is alone on stderr (no
    traceback), with nothing on stdout."""
    status = result.exit_code if isinstance(result, Result) else result.returncode
    assert status == code, (result.stdout, result.stderr)
    assert result.stdout == ""
    assert "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("Error: ")
    return lines[0]


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


def test_server_start_with_an_unusable_data_directory_is_one_line(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    line = one_line_error(run_corral("server", "start", "--data-dir", str(blocker / "data")), 1)
    assert line == f"Error: cannot use the data directory '{blocker / 'data'}': Not a directory"
    line = one_line_error(cli("server", "start", "--data-dir", str(blocker)), 2)
    assert "'--data-dir'" in line and "is a file" in line
    assert "No such command 'begin'" in one_line_error(cli("server", "begin"), 2)


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only directory")
def test_server_start_in_a_read_only_directory_is_one_line(tmp_path: Path) -> None:
    tmp_path.chmod(0o500)
    try:
        line = one_line_error(cli("server", "start", "--data-dir", str(tmp_path / "d")), 1)
    finally:
        tmp_path.chmod(0o700)
    assert line.endswith(": Permission denied")


def test_rename_options_names_the_flags_and_keeps_the_value() -> None:
    from corral._cli_errors import rename_options
    from corral._cli_options import JOB_OPTION_NAMES

    message = "soft_timeout must be less than timeout, got 'timeout delay'"
    assert rename_options(message, JOB_OPTION_NAMES) == (
        "--soft-timeout must be less than --timeout, got 'timeout delay'"
    )
    assert rename_options("backoff delay must be > 0", JOB_OPTION_NAMES) == (
        "--backoff delay must be > 0"
    )
    assert rename_options("job_id 'delay' is taken", JOB_OPTION_NAMES) == (
        "--job-id 'delay' is taken"
    )
    assert rename_options("priorityx is not", JOB_OPTION_NAMES) == "priorityx is not"
