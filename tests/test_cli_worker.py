"""`corral worker`'s output, run as a user runs it (a subprocess): the banner and the summary
on stdout, a log line per job's start, end and failure on stderr (text or JSON), the levels,
warnings once, and one-line errors with the right exit status."""

from __future__ import annotations

import logging
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
import redis

from corral import Queue
from corral._log_format import JsonFormatter, TextFormatter, utc_timestamp
from corral.cli_worker import JOB_KEYS, banner_text, error_text, server_description
from corral.errors import ChildJobError
from tests.conftest import ServerProcess, running_server
from tests.test_cli import ROOT, cli, corral

#: A text line: the UTC time with ms, the level padded to 5, the message.
TEXT_LINE = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z) (DEBUG|INFO |WARNING|ERROR) (.*)")
BY_NAME = "tests.fixtures.processors:by_name"
FIXED_50MS = {"type": "fixed", "delay": 0.05}


def worker(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``corral worker ARGS`` to its end (give it --burst or a bound)."""
    return subprocess.run(
        corral("worker", *args),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
    )


def messages(stream: str) -> list[tuple[str, str]]:
    """``(level, message)`` of each text line, after checking that every line is one."""
    found = []
    for line in stream.splitlines():
        match = TEXT_LINE.fullmatch(line)
        assert match is not None, f"not a log line: {line!r}\n{stream}"
        found.append((match.group(2).strip(), match.group(3)))
    return found


def job_messages(stream: str) -> list[str]:
    """The messages of the job lines (``<queue>: job ...``) of a text stream."""
    return [m for _, m in messages(stream) if re.match(r"\S+: job ", m)]


@pytest.fixture(scope="module")
def password_server() -> Iterator[ServerProcess]:
    """A server of its own that wants a password (set once it answers the start probe)."""
    for srv in running_server("auth"):
        with redis.Redis(port=srv.port) as client:
            client.config_set("requirepass", "sekret")
        yield srv


# -- job lines ---------------------------------------------------------------------------------


@pytest.mark.timeout(90)
def test_text_lines_for_each_start_finish_and_failure(redis_url: str) -> None:
    with Queue("lines", connection=redis_url) as queue:
        queue.add("shout", {"text": "hi"}, attempts=3)
        queue.add("flaky", {}, attempts=2, backoff=FIXED_50MS)
        queue.add("broken", {}, attempts=2, backoff=FIXED_50MS)
    done = worker(BY_NAME, "-q", "lines", "--url", redis_url, "--burst", "--burst-wait", "10")
    assert done.returncode == 0, done.stderr
    lines = job_messages(done.stderr)
    expected = [
        r"lines: job 1 shout started \(attempt 1/3\)",
        r"lines: job 1 shout completed in \d+ ms \(attempt 1/3\)",
        r"lines: job 2 flaky started \(attempt 1/2\)",
        # The message's two lines are one in the log.
        r"lines: job 2 flaky failed in \d+ ms \(attempt 1/2\): ValueError: flaky attempt 1 "
        r"second line of the message; retrying in 50 ms",
        r"lines: job 2 flaky started \(attempt 2/2\)",
        r"lines: job 2 flaky completed in \d+ ms \(attempt 2/2\)",
        r"lines: job 3 broken started \(attempt 1/2\)",
        r"lines: job 3 broken failed in \d+ ms \(attempt 1/2\): RuntimeError: broken on "
        r"purpose; retrying in 50 ms",
        r"lines: job 3 broken started \(attempt 2/2\)",
        r"lines: job 3 broken failed for good in \d+ ms \(attempt 2/2\): RuntimeError: broken "
        r"on purpose",
    ]
    for pattern in expected:
        assert sum(bool(re.fullmatch(pattern, line)) for line in lines) == 1, (pattern, lines)
    assert len(lines) == len(expected), lines
    # An attempt's end comes after its start.
    assert lines.index(next(m for m in lines if "job 2 flaky completed" in m)) > lines.index(
        "lines: job 2 flaky started (attempt 2/2)"
    )
    levels = {m: level for level, m in messages(done.stderr)}
    assert levels["lines: job 1 shout started (attempt 1/3)"] == "INFO"
    assert all(levels[m] == "WARNING" for m in lines if " failed " in m)
    out = messages(done.stdout)
    assert len(out) == 2
    assert out[0][1].startswith("corral worker ") and "queue=lines" in out[0][1]
    assert out[1] == ("INFO", "corral worker: drained: 2 completed, 1 failed, 2 retried")


@pytest.mark.timeout(90)
def test_json_lines_parse_and_have_the_fixed_keys(redis_url: str) -> None:
    with Queue("json", connection=redis_url) as queue:
        queue.add("shout", {"text": "hi"}, attempts=2)
        queue.add("broken", {}, attempts=2, backoff=FIXED_50MS)
    done = worker(
        BY_NAME, "-q", "json", "--url", redis_url, "--burst", "--burst-wait", "10",
        "--log-format", "json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    records = [orjson.loads(line) for line in done.stderr.splitlines()]
    for record in records:
        assert {"ts", "level", "logger", "msg"} <= record.keys()
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", record["ts"])
    jobs = [r for r in records if r["logger"] == "corral.jobs"]
    assert all(set(JOB_KEYS) <= r.keys() for r in jobs)
    by_event = [(r["job_id"], r["event"], r["attempt"]) for r in jobs]
    assert sorted(by_event) == [
        ("1", "active", 1),
        ("1", "completed", 1),
        ("2", "active", 1),
        ("2", "active", 2),
        ("2", "failed", 2),
        ("2", "retrying", 1),
    ]
    completed = next(r for r in jobs if r["event"] == "completed")
    assert completed["queue"] == "json" and completed["job_name"] == "shout"
    assert completed["attempts"] == 2 and completed["level"] == "INFO"
    assert isinstance(completed["duration_ms"], int) and completed["duration_ms"] >= 0
    assert completed["error"] is None and completed["retry_delay_ms"] is None
    retrying = next(r for r in jobs if r["event"] == "retrying")
    assert retrying["error"] == "RuntimeError: broken on purpose"
    assert retrying["retry_delay_ms"] == 50 and retrying["level"] == "WARNING"
    failed = next(r for r in jobs if r["event"] == "failed")
    assert failed["retry_delay_ms"] is None and isinstance(failed["duration_ms"], int)
    assert next(r for r in jobs if r["event"] == "active")["duration_ms"] is None
    # The library's own lines come through the same formatter.
    assert any(r["logger"] == "corral.worker" and "run over" in r["msg"] for r in records)
    started, stopped = (orjson.loads(line) for line in done.stdout.splitlines())
    assert started["event"] == "started" and started["queue"] == "json"
    assert stopped == {
        **{k: stopped[k] for k in ("ts", "level", "logger", "msg")},
        "event": "stopped",
        "stopped": "drained",
        "completed": 1,
        "failed": 1,
        "retried": 1,
    }


@pytest.mark.timeout(90)
@pytest.mark.parametrize("how", ["option", "environment"])
def test_warning_level_logs_the_failures_but_not_the_successes(redis_url: str, how: str) -> None:
    with Queue("quiet", connection=redis_url) as queue:
        queue.add("shout", {"text": "a"})
        queue.add("shout", {"text": "b"})
        queue.add("broken", {})
    args = ["--log-level", "warning"] if how == "option" else []
    env = {**os.environ, "CORRAL_LOG_LEVEL": "WARNING"} if how == "environment" else None
    done = worker(BY_NAME, "-q", "quiet", "--url", redis_url, "--burst", *args, env=env)
    assert done.returncode == 0, done.stderr
    lines = job_messages(done.stderr)
    assert len(lines) == 1, done.stderr
    assert re.fullmatch(
        r"quiet: job 3 broken failed for good in \d+ ms \(attempt 1/1\): RuntimeError: broken "
        r"on purpose",
        lines[0],
    )
    assert " started " not in done.stderr and " completed " not in done.stderr
    assert all(level == "WARNING" for level, _ in messages(done.stderr))
    # The banner and the summary are the command's output, not its log: still there.
    assert "queue=quiet" in done.stdout and "drained: 2 completed, 1 failed" in done.stdout


@pytest.mark.timeout(90)
def test_jobs_in_child_processes_log_the_same_lines(redis_url: str) -> None:
    with Queue("kids", connection=redis_url) as queue:
        queue.add("shout", {"text": "hi"})
        queue.add("shout", {"no_text": True})  # KeyError in the child
    done = worker(
        "tests.fixtures.processors:shout", "-q", "kids", "--url", redis_url, "--burst", "-p", "2"
    )
    assert done.returncode == 0, done.stderr
    lines = job_messages(done.stderr)
    assert "kids: job 1 shout started (attempt 1/1)" in lines
    assert any(
        re.fullmatch(r"kids: job 1 shout completed in \d+ ms \(attempt 1/1\)", m) for m in lines
    )
    assert any(
        re.fullmatch(
            r"kids: job 2 shout failed for good in \d+ ms \(attempt 1/1\): KeyError: 'text'", m
        )
        for m in lines
    ), lines
    assert "processes=2" in done.stdout


# -- the banner --------------------------------------------------------------------------------


@pytest.mark.timeout(90)
def test_the_banner_names_the_run_and_masks_the_password(password_server: ServerProcess) -> None:
    url = f"redis://default:sekret@127.0.0.1:{password_server.port}/0"
    done = worker(
        BY_NAME, "-q", "banner", "--url", url, "--burst", "--name", "w1", "--prefix", "app",
        "--shards", "2", "-c", "3",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "sekret" not in done.stdout + done.stderr
    (_, banner), (_, summary) = messages(done.stdout)
    assert re.fullmatch(
        rf"corral worker \S+: server=redis://default:\*\*\*@127\.0\.0\.1:{password_server.port}/0 "
        r"queue=banner concurrency=3 processes=0 prefix=app name=w1 pid=\d+ shards=2",
        banner,
    ), banner
    assert summary == "corral worker: drained: 0 completed, 0 failed, 0 retried"


def test_the_banner_of_the_embedded_server_names_its_data_dir(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("CORRAL_REDIS_URL", raising=False)
    monkeypatch.delenv("REDIS_URL", raising=False)
    monkeypatch.setenv("CORRAL_DATA_DIR", str(tmp_path / "data"))
    assert server_description(None) == f"embedded data_dir={tmp_path / 'data'}"
    assert server_description("redis://u:pw@h:1/2") == "redis://u:***@h:1/2"
    fields = {"version": "9", "server": "s", "queue": "q", "concurrency": 1, "processes": 0}
    fields |= {"prefix": "bull", "name": None, "pid": 7, "shards": 1}
    # No name, one shard: neither is shown.
    assert (
        banner_text(fields)
        == "corral worker 9: server=s queue=q concurrency=1 processes=0 prefix=bull pid=7"
    )


# -- warnings ----------------------------------------------------------------------------------


@pytest.mark.timeout(90)
def test_the_maxmemory_warning_is_one_log_line_per_run(redis_url: str, r: redis.Redis) -> None:
    with Queue("evict", connection=redis_url) as queue:
        queue.add("shout", {"text": "hi"})
    r.config_set("maxmemory-policy", "allkeys-lru")
    try:
        # Three shards: a connection each, and each warns.
        done = worker(
            "tests.fixtures.processors:shout", "-q", "evict", "--url", redis_url, "--burst",
            "--shards", "3",
        )  # fmt: skip
    finally:
        r.config_set("maxmemory-policy", "noeviction")
    assert done.returncode == 0, done.stderr
    warned = [(level, m) for level, m in messages(done.stderr) if "maxmemory-policy" in m]
    assert warned == [
        (
            "WARNING",
            "the server's maxmemory-policy is 'allkeys-lru': it may evict queue keys and lose "
            "jobs; set maxmemory-policy noeviction",
        )
    ]
    assert "RuntimeWarning" not in done.stderr


# -- errors ------------------------------------------------------------------------------------


def one_error_line(done: subprocess.CompletedProcess[str], code: int) -> str:
    assert done.returncode == code, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("Error: ")
    return lines[0]


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["--url", "http://x/0"], 2, "Error: --url is not a usable Redis URL"),
        (["--url", "redis://127.0.0.1:1/0", "--timeout", "-1"], 2, "Error: --timeout must be"),
        (
            ["--url", "redis://127.0.0.1:1/0", "--soft-timeout", "3", "--timeout", "2"],
            2,
            "Error: --soft-timeout must be less than --timeout",
        ),
        (
            ["--url", "redis://127.0.0.1:1/0", "--burst-wait", "2"],
            2,
            "Error: --burst-wait needs --burst",
        ),
        (["--url", "redis://127.0.0.1:1/0", "--max-time", "0"], 2, "Error: --max-time must be"),
        (["--url", "redis://127.0.0.1:1/0", "--concurrency", "0"], 2, "'--concurrency'"),
        (["--url", "redis://127.0.0.1:1/0", "--log-level", "loud"], 2, "'--log-level'"),
        (["--url", "redis://127.0.0.1:1/0", "--log-format", "xml"], 2, "'--log-format'"),
        (
            ["--url", "redis://127.0.0.1:1/0", "-p", "2", "--shards", "2"],
            2,
            "Error: --processes with --shards=2: not supported",
        ),
    ],
)
def test_bad_options_are_one_line_usage_errors(args: list[str], code: int, message: str) -> None:
    done = worker("tests.fixtures.processors:shout", "-q", "q", *args)
    assert message in one_error_line(done, code)
    assert done.stdout == ""  # refused before the banner


@pytest.mark.parametrize(
    "spec", ["no_colon", "tests.fixtures.nope:f", "tests.fixtures.processors:not_callable"]
)
def test_a_bad_processor_is_a_one_line_usage_error(spec: str) -> None:
    done = worker(spec, "-q", "q", "--url", "redis://127.0.0.1:1/0")
    assert one_error_line(done, 2).startswith("Error: Invalid value for PROCESSOR: ")
    assert done.stdout == ""


@pytest.mark.timeout(90)
@pytest.mark.parametrize(
    ("userinfo", "db", "message"),
    [
        (
            "",
            0,
            "Error: authentication required at redis://127.0.0.1:{port}/0: the server wants a "
            "password and the URL has none",
        ),
        (
            ":wrong@",
            0,
            "Error: authentication failed at redis://:***@127.0.0.1:{port}/0: wrong username or "
            "password",
        ),
        (
            ":sekret@",
            99,
            "Error: db index out of range at redis://:***@127.0.0.1:{port}/99: the server has "
            "fewer databases",
        ),
    ],
)
def test_a_server_that_refuses_the_worker_is_one_line_exit_1(
    password_server: ServerProcess, userinfo: str, db: int, message: str
) -> None:
    url = f"redis://{userinfo}127.0.0.1:{password_server.port}/{db}"
    done = worker("tests.fixtures.processors:shout", "-q", "q", "--url", url)
    line = one_error_line(done, 1)
    assert line.startswith(message.format(port=password_server.port)), line
    assert "sekret" not in line and ":wrong@" not in line  # the password is masked
    assert "queue=q" in done.stdout  # the banner came before the connection


def test_debug_shows_the_traceback(password_server: ServerProcess) -> None:
    url = f"redis://:wrong@127.0.0.1:{password_server.port}/0"
    done = worker("tests.fixtures.processors:shout", "-q", "q", "--url", url, "--debug")
    assert done.returncode == 1
    assert "Traceback" in done.stderr and "AuthenticationError" in done.stderr


@pytest.mark.timeout(90)
def test_an_unreachable_server_is_waited_for_with_one_line() -> None:
    """A server that closes every connection: the worker retries without end, logs that once,
    and stops on SIGTERM with the summary."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    port = listener.getsockname()[1]
    accepted = threading.Semaphore(0)

    def refuse() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:  # closed at the end of the test
                return
            conn.close()
            accepted.release()

    threading.Thread(target=refuse, daemon=True).start()
    proc = subprocess.Popen(
        corral(
            "worker",
            "tests.fixtures.processors:shout",
            "-q",
            "q",
            "--url",
            f"redis://127.0.0.1:{port}/0",
        ),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        for _ in range(6):  # six connections refused: the worker tried again and again
            assert accepted.acquire(timeout=30), "the worker stopped trying"
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        listener.close()
    assert proc.returncode == 0, err
    away = [(level, m) for level, m in messages(err) if "retrying until the server is back" in m]
    assert len(away) == 1 and away[0][0] == "WARNING", err
    assert [m for _, m in messages(err) if "connect" in m] == [away[0][1]]
    assert messages(out)[-1][1] == "corral worker: closed: 0 completed, 0 failed, 0 retried"


def test_in_process_the_command_puts_the_logging_back(redis_url: str) -> None:
    """The root logger is set up by the command while it runs, not at import, and put back
    (click's runner, a cluster test, runs it in-process)."""
    with Queue("inproc", connection=redis_url) as queue:
        queue.add("shout", {"text": "hi"})
    root = logging.getLogger()
    handlers, level, show = list(root.handlers), root.level, warnings.showwarning
    result = cli(
        "worker", "tests.fixtures.processors:shout", "-q", "inproc", "--url", redis_url, "--burst"
    )
    assert result.exit_code == 0, result.output
    assert "inproc: job 1 shout completed in " in result.stderr
    assert "corral worker: drained: 1 completed, 0 failed, 0 retried" in result.stdout
    assert (root.handlers, root.level, warnings.showwarning) == (handlers, level, show)


# -- the formatters ----------------------------------------------------------------------------


def _record_with_exc() -> logging.LogRecord:
    try:
        raise ValueError("boom")
    except ValueError:
        return logging.LogRecord(
            "corral.worker", logging.ERROR, __file__, 1, "it %s", ("broke",), sys.exc_info()
        )


def test_a_record_with_exc_info_gets_its_traceback() -> None:
    record = _record_with_exc()
    text = TextFormatter().format(record).splitlines()
    assert TEXT_LINE.fullmatch(text[0]) and text[0].endswith(" ERROR it broke")
    assert text[1] == "Traceback (most recent call last):" and text[-1] == "ValueError: boom"
    data = orjson.loads(JsonFormatter().format(record))
    assert (data["level"], data["logger"], data["msg"]) == ("ERROR", "corral.worker", "it broke")
    assert data["exc"].startswith("Traceback") and data["exc"].endswith("ValueError: boom")


def test_timestamps_are_utc_with_milliseconds() -> None:
    assert utc_timestamp(1_796_217_068.4881) == "2026-12-02T13:11:08.488Z"


@pytest.mark.parametrize(
    ("error", "text"),
    [
        (KeyError("text"), "KeyError: 'text'"),
        (RuntimeError(), "RuntimeError"),
        (SystemExit(3), "SystemExit: 3"),
        (
            ChildJobError("bad\n  input", type_name="app.errors.BadInput", remote_traceback=""),
            "BadInput: bad input",
        ),
        (ValueError("x" * 2000), "ValueError: " + "x" * 485 + "..."),
    ],
)
def test_error_text_is_one_line(error: BaseException, text: str) -> None:
    assert error_text(error) == text


# -- where the processor comes from --------------------------------------------------------------


def getting_started_worker_command() -> list[str]:
    """The `corral worker` line of docs/getting-started.md, as its words."""
    page = (ROOT / "docs" / "getting-started.md").read_text(encoding="utf-8")
    lines = [line for line in page.splitlines() if line.startswith("corral worker ")]
    assert len(lines) == 1, lines
    return lines[0].split()[2:]


@pytest.mark.timeout(90)
def test_the_getting_started_worker_command_works_from_the_repository_root(
    redis_url: str,
) -> None:
    with Queue("images", connection=redis_url) as queue:
        queue.obliterate(force=True)
        good = queue.add("resize", {"path": "cat.png", "width": 320})
        bad = queue.add("resize", {"path": "dog.png", "width": -1}, attempts=3)
        done = worker(*getting_started_worker_command(), "--burst", "--url", redis_url)
        assert done.returncode == 0, done.stderr
        assert done.stdout.splitlines()[-1].endswith(
            " corral worker: drained: 1 completed, 1 failed, 0 retried"
        )
        finished = queue.get_job(good.id)
        assert finished is not None and finished.returnvalue == {"path": "cat.png", "width": 320}
        refused = queue.get_job(bad.id)
        assert refused is not None and refused.attempts_made == 1  # UnrecoverableError


@pytest.mark.timeout(90)
@pytest.mark.parametrize("processes", [[], ["--processes", "1"]], ids=["threads", "children"])
def test_app_dir_is_where_the_processor_module_is_imported_from(
    redis_url: str, tmp_path: Path, processes: list[str]
) -> None:
    app = tmp_path / "app"
    app.mkdir()
    (app / "appdir_jobs.py").write_text("def double(job):\n    return job.data * 2\n")
    queue_name = f"appdir-{len(processes)}"
    spec = ["appdir_jobs:double", "-q", queue_name, "--burst", "--url", redis_url]
    # Not importable from the current directory (the repository root) ...
    refused = worker(*spec)
    assert "cannot import 'appdir_jobs'" in one_error_line(refused, 2)
    with Queue(queue_name, connection=redis_url) as queue:
        job = queue.add("double", 21)
        # ... but from --app-dir, in this process and in child processes alike.
        done = worker(*spec, "--app-dir", str(app), *processes)
        assert done.returncode == 0, done.stderr
        finished = queue.get_job(job.id)
        assert finished is not None and finished.returnvalue == 42


def test_app_dir_must_be_a_directory(tmp_path: Path) -> None:
    done = worker("m:f", "-q", "q", "--app-dir", str(tmp_path / "missing"))
    assert "--app-dir" in one_error_line(done, 2)
