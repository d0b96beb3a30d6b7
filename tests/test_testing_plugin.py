"""corral.testing, the pytest plugin, as a project uses it: tests/fixtures/plugin_project run with
``pytest -p corral.testing`` in a subprocess, once on this suite's server (CORRAL_REDIS_URL)
and once on the embedded server the plugin starts and stops itself."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import redis

from corral import server as corral_server
from corral.testing import unique_queue_name
from tests.test_examples import DOCS, python_blocks

PROJECT = Path(__file__).resolve().parent / "fixtures" / "plugin_project"
#: What check_failing.py's tests must say (each fails on purpose); ``*`` is a queue's suffix.
FAILURES = [
    "E       AssertionError: job 1 (welcome) of queue test_expects_a_failure_but_it_completed-* "
    "did not fail: it is completed, returning {'sent': 'ada@example.com'}",
    "E       AssertionError: job 1 (welcome) of queue test_expects_another_return_value-* "
    "completed with {'sent': 'ada@example.com'}, expected {'sent': 'bob@example.com'}",
    "E       AssertionError: job 1 (charge) of queue test_expects_another_reason-* failed with "
    "'amount must be positive, got 0', which does not contain 'card declined'",
    "E       AssertionError: job 1 (welcome) of queue test_forgot_to_run_a_worker-* did not "
    "complete: it is waiting: it has not run (run a worker: run_until_idle or drain)",
    "E       AssertionError: job 1 (mail) of queue "
    "test_expects_a_failure_but_it_is_being_retried-* did not fail: it is delayed, to be "
    "retried after 1 failed attempt(s): 'mail server away' "
    "(give run_until_idle/drain burst_wait= to run the retry)",
]


def said(message: str, output: str) -> bool:
    pattern = re.escape(message).replace(r"\*", "[0-9a-f]{10}")
    return re.search(f"^{pattern}$", output, re.M) is not None


def run_project(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "corral.testing",
            "-p",
            "no:cacheprovider",
            "--rootdir",
            str(PROJECT),
            "-c",
            str(PROJECT / "pytest.ini"),
            "-rA",
            *args,
        ],
        cwd=PROJECT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def outcomes(proc: subprocess.CompletedProcess[str]) -> dict[str, list[str]]:
    """Test names by outcome, from the ``-rA`` summary lines."""
    found: dict[str, list[str]] = {}
    for outcome, test in re.findall(r"^(PASSED|FAILED|ERROR) \S+::(\w+)", proc.stdout, re.M):
        found.setdefault(outcome, []).append(test)
    return found


def base_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("CORRAL_REDIS_URL", "REDIS_URL")}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


CHECKS = sorted(
    re.findall(r"^(?:async )?def (test_\w+)", (PROJECT / "check_signup.py").read_text(), re.M)
)
FAILING = sorted(re.findall(r"^def (test_\w+)", (PROJECT / "check_failing.py").read_text(), re.M))


def test_the_project_passes_on_the_given_server_and_cleans_up(redis_url: str) -> None:
    # Autoloading off: -p corral.testing alone brings the plugin (and -p pytest-asyncio's).
    env = {**base_env(), "CORRAL_REDIS_URL": redis_url, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    proc = run_project("-p", "pytest_asyncio.plugin", env=env)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    found = outcomes(proc)
    assert sorted(found.get("PASSED", [])) == CHECKS, proc.stdout
    assert sorted(found.get("FAILED", [])) == FAILING, proc.stdout
    assert "ERROR" not in found, proc.stdout
    assert re.search(rf"^=+ {len(FAILING)} failed, {len(CHECKS)} passed in ", proc.stdout, re.M)
    for message in FAILURES:
        assert said(message, proc.stdout), proc.stdout
    # Each test's queue is obliterated, failed or not, and nothing else was written.
    with redis.Redis.from_url(redis_url) as client:
        assert client.keys("*") == []


def test_the_plugin_starts_an_embedded_server_and_stops_it(tmp_path: Path) -> None:
    """With no CORRAL_REDIS_URL, the session runs on an embedded server of its own (and the
    code under test, which passes no connection, reaches it too); the server is gone after."""
    report = tmp_path / "server-url"
    env = {**base_env(), "PLUGIN_PROJECT_REPORT": str(report)}
    proc = run_project("check_signup.py", env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert sorted(outcomes(proc)["PASSED"]) == CHECKS
    url = report.read_text()
    assert url.startswith("unix://") and "/corral-pytest-" in url, url
    data_dir = Path(url.removeprefix("unix://").split("?")[0]).parent
    assert not data_dir.exists()
    assert not corral_server.status(data_dir).running


def test_the_blocks_of_docs_testing_md_pass(redis_url: str, tmp_path: Path) -> None:
    """Each ```python title="test_....py" block of docs/testing.md is a test file: they pass."""
    blocks = [b for b in python_blocks(DOCS / "testing.md") if b.title.startswith("test_")]
    assert blocks
    for block in blocks:
        (tmp_path / block.title).write_text(block.code, encoding="utf-8")
    (tmp_path / "pytest.ini").write_text(
        "[pytest]\nfilterwarnings = error\nasyncio_default_fixture_loop_scope = function\n",
        encoding="utf-8",
    )
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "corral.testing", "-p", "no:cacheprovider", "-q"],
        cwd=tmp_path,
        env={**base_env(), "CORRAL_REDIS_URL": redis_url},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert re.search(r"^\d+ passed in ", proc.stdout, re.M), proc.stdout


def test_unique_queue_names() -> None:
    name = unique_queue_name("test_x[a::b]")
    assert re.fullmatch(r"test_x-a-b-[0-9a-f]{10}", name), name
    assert unique_queue_name("test_x") != unique_queue_name("test_x")
    assert unique_queue_name("::")[:5] == "test-"
