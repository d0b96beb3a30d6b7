"""`corral enqueue`: what system cron runs. It adds one job and prints its id."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from corral import Queue
from corral.errors import InvalidOptionError
from tests.conftest import ServerProcess, free_port, running_server
from tests.test_cli import cli, one_line_error, run_corral


@pytest.fixture(scope="module")
def password_server() -> Iterator[ServerProcess]:
    """A server of its own that wants a password (set once it answers the start probe)."""
    for srv in running_server("auth"):
        with redis.Redis(port=srv.port) as client:
            client.config_set("requirepass", "sekret")
        yield srv


def test_enqueue_adds_a_job_and_prints_its_id(redis_url: str, r: redis.Redis) -> None:
    proc = run_corral(
        "enqueue", "reports", "nightly", "--data", '{"day": "2026-11-30"}', "--priority", "2",
        "--attempts", "3", "--url", redis_url,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "1\n"
    with Queue("reports", connection=redis_url) as queue:
        job = queue.get_job("1")
        assert job is not None
        assert (job.name, job.data, job.priority) == ("nightly", {"day": "2026-11-30"}, 2)
        assert job.opts["attempts"] == 3


def test_enqueue_with_a_job_id_is_idempotent(redis_url: str, r: redis.Redis) -> None:
    for _ in range(2):
        proc = run_corral(
            "enqueue", "reports", "nightly", "--job-id", "nightly-2026-11-30", "--url", redis_url
        )
        assert (proc.returncode, proc.stdout) == (0, "nightly-2026-11-30\n")
    assert r.llen("bull:reports:wait") == 1


def test_enqueue_delay(redis_url: str, r: redis.Redis) -> None:
    proc = run_corral("enqueue", "reports", "later", "--delay", "90", "--url", redis_url)
    assert proc.returncode == 0, proc.stderr
    assert r.zcard("bull:reports:delayed") == 1
    assert r.hget("bull:reports:1", "delay") == "90000"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--data", "{not json"], "Error: --data is not valid JSON: Expecting property name"),
        (["--priority", "-3"], "Error: --priority must be an integer from 0 to 2097151, got -3"),
        (["--job-id", "12"], "Error: --job-id must not be all digits, got '12'"),
        (["--delay", "nan"], "Error: --delay must be a finite number >= 0, got nan"),
        (["--data", "[" * 100_000], "Error: --data is not valid JSON"),
        (["--job-id", "meta"], "Error: --job-id 'meta' is the name of one of the queue's own"),
        (["--delay", "1e17"], "Error: --delay must be at most 315,532,800 s"),
        (["--url", "notaurl"], "Error: --url is not a usable Redis URL"),
        (["--prefix", "my app"], "Error: --prefix must be printable ASCII without spaces"),
        (["--attempts", "0"], "Error: --attempts must be an integer from 1 to"),
        (["--backoff", "linear:5"], "Error: --backoff must be SECONDS, fixed:SECONDS or"),
        (["--backoff", "fixed:soon"], "Error: --backoff must be SECONDS, fixed:SECONDS or"),
        (["--backoff", "-1"], "Error: --backoff delay must be a finite number >= 0, got -1.0"),
        (["--remove-on-complete", "maybe"], "Error: --remove-on-complete must be true, false,"),
        (["--remove-on-complete", "-1"], "Error: --remove-on-complete N must be a count of jobs"),
        (["--remove-on-fail", "age=x"], "Error: --remove-on-fail age must be a whole number"),
        (["--remove-on-fail", "size=3"], "Error: --remove-on-fail must be true, false, a count"),
        (["--keep-logs", "-1"], "Error: --keep-logs must be an integer from 0 to"),
        (["--timeout", "0"], "Error: --timeout must be more than 0, got 0.0"),
        (["--timeout", "5", "--soft-timeout", "6"], "Error: --soft-timeout must be less than"),
        (["--dedup-ttl", "5"], "Error: --dedup-ttl needs --dedup-id"),
        (["--dedup-id", "d", "--dedup-extend"], "Error: --dedup-extend needs --dedup-ttl"),
        (["--dedup-id", "d", "--dedup-ttl", "0"], "Error: --dedup-ttl must be more than 0"),
        (["--idempotency-window", "5"], "Error: --idempotency-window needs --idempotency-key"),
        (["--data", "@/nonexistent/x.json"], "Error: --data @/nonexistent/x.json: cannot read"),
        (["--retries", "101"], "Error: Invalid value for '--retries'"),
    ],
)  # fmt: skip
def test_enqueue_refuses_bad_input_as_a_usage_error(
    redis_url: str, r: redis.Redis, args: list[str], message: str
) -> None:
    before = r.dbsize()
    url = [] if "--url" in args else ["--url", redis_url]
    line = one_line_error(cli("enqueue", "reports", "x", *args, *url), 2)
    assert line.startswith(message)
    assert r.dbsize() == before


def test_enqueue_errors_are_one_line_from_the_entry_point(redis_url: str) -> None:
    line = one_line_error(run_corral("enqueue", "reports", "x", "--priority", "-1"), 2)
    assert line == "Error: --priority must be an integer from 0 to 2097151, got -1"
    proc = run_corral("enqueue", "reports", "x", "--url", redis_url, "--data", "-", stdin="[1,")
    assert one_line_error(proc, 2).startswith("Error: --data is not valid JSON (from stdin): ")


def test_enqueue_reports_an_unreachable_server() -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    line = one_line_error(run_corral("enqueue", "reports", "x", "--url", url), 1)
    assert line.startswith(f"Error: cannot reach the server at {url}: ")


def test_enqueue_db_index_out_of_range(redis_url: str) -> None:
    url = redis_url.rsplit("/", 1)[0] + "/999"
    line = one_line_error(cli("enqueue", "reports", "x", "--url", url), 1)
    assert line.startswith("Error: db index out of range at ")


def test_enqueue_and_cancel_name_auth_errors(password_server: ServerProcess) -> None:
    port = password_server.port
    for command in (["enqueue", "reports", "x"], ["cancel", "reports", "1"]):
        line = one_line_error(cli(*command, "--url", f"redis://127.0.0.1:{port}/0"), 1)
        assert line.startswith("Error: authentication required at ")
        wrong = f"redis://:wrong@127.0.0.1:{port}/0"
        line = one_line_error(
            cli(*command, "--url", wrong, "--retries", "0")
            if command[0] == "enqueue"
            else cli(*command, "--url", wrong),
            1,
        )
        assert line.startswith(f"Error: authentication failed at redis://:***@127.0.0.1:{port}/0")
    good = cli("enqueue", "reports", "x", "--url", f"redis://:sekret@127.0.0.1:{port}/0")
    assert (good.exit_code, good.stdout) == (0, "1\n")


def test_enqueue_debug_shows_the_exception() -> None:
    result = cli("enqueue", "reports", "x", "--priority", "-1", "--debug")
    assert isinstance(result.exception, InvalidOptionError)
    assert "--priority" in str(result.exception)


def test_enqueue_idempotency_window(redis_url: str, r: redis.Redis) -> None:
    args = ["enqueue", "billing", "invoice", "--idempotency-key", "inv-2026-11", "--url", redis_url]
    first = run_corral(*args, "--idempotency-window", "3600")
    second = run_corral(*args)
    assert (first.returncode, second.returncode) == (0, 0)
    assert first.stdout == second.stdout == "1\n"
    assert r.llen("bull:billing:wait") == 1
    assert 0 < r.pttl("bull:billing:x-idem:inv-2026-11") <= 3_600_000
    bad = run_corral(*args[:-2], "--idempotency-window", "0", "--url", redis_url)
    assert one_line_error(bad, 2) == "Error: --idempotency-window must be more than 0, got 0.0"


def test_enqueue_retries_are_bounded_and_checked() -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"
    proc = run_corral("enqueue", "reports", "x", "--url", url, "--retries", "0")
    assert one_line_error(proc, 1).startswith("Error: cannot reach the server at ")


def test_enqueue_data_from_a_file_and_from_stdin(
    redis_url: str, r: redis.Redis, tmp_path: Path
) -> None:
    path = tmp_path / "job.json"
    path.write_text(json.dumps({"day": "2026-12-01", "rows": [1, 2]}), encoding="utf-8")
    proc = run_corral("enqueue", "reports", "nightly", "--data", f"@{path}", "--url", redis_url)
    assert (proc.returncode, proc.stdout) == (0, "1\n")
    proc = run_corral(
        "enqueue", "reports", "nightly", "--data", "-", "--url", redis_url, stdin='["from stdin"]'
    )
    assert (proc.returncode, proc.stdout) == (0, "2\n")
    with Queue("reports", connection=redis_url) as queue:
        first, second = queue.get_job("1"), queue.get_job("2")
        assert first is not None and second is not None
        assert first.data == {"day": "2026-12-01", "rows": [1, 2]}
        assert second.data == ["from stdin"]
    path.write_bytes(b"\xff\xfe")
    line = one_line_error(cli("enqueue", "reports", "x", "--data", f"@{path}"), 2)
    assert line == f"Error: --data @{path}: the file is not UTF-8 text"
    path.write_text("{", encoding="utf-8")
    line = one_line_error(cli("enqueue", "reports", "x", "--data", f"@{path}"), 2)
    assert line.startswith(f"Error: --data is not valid JSON (from '{path}'): ")
    assert r.llen("bull:reports:wait") == 2


def test_enqueue_job_options(redis_url: str, r: redis.Redis) -> None:
    proc = run_corral(
        "enqueue", "reports", "nightly", "--url", redis_url, "--attempts", "4",
        "--backoff", "exponential:0.5", "--lifo", "--remove-on-complete", "10",
        "--remove-on-fail", "age=3600,count=5", "--keep-logs", "20", "--timeout", "30",
        "--soft-timeout", "10",
    )  # fmt: skip
    assert (proc.returncode, proc.stdout) == (0, "1\n"), proc.stderr
    opts = json.loads(r.hget("bull:reports:1", "opts"))
    assert opts == {
        "attempts": 4,
        "lifo": True,
        "backoff": {"type": "exponential", "delay": 500},
        "removeOnComplete": 10,
        "removeOnFail": {"age": 3600, "count": 5},
        "kl": 20,
        "x-timeout": 30_000,
        "x-soft-timeout": 10_000,
    }
    for value, stored in [("true", True), ("false", False), ("age=60", {"age": 60})]:
        result = cli("enqueue", "reports", "n", "--url", redis_url, "--remove-on-complete", value,
                     "--backoff", "2")  # fmt: skip
        assert result.exit_code == 0, result.output
        opts = json.loads(r.hget(f"bull:reports:{result.stdout.strip()}", "opts"))
        assert opts["removeOnComplete"] == stored
        assert opts["backoff"] == {"type": "fixed", "delay": 2000}


def test_enqueue_lifo_runs_first(redis_url: str) -> None:
    for args in ([], [], ["--lifo"]):
        assert cli("enqueue", "reports", "n", "--url", redis_url, *args).exit_code == 0
    with Queue("reports", connection=redis_url) as queue:
        assert [job.id for job in queue.get_waiting()] == ["3", "1", "2"]


def test_enqueue_deduplication(redis_url: str, r: redis.Redis) -> None:
    args = ["enqueue", "reports", "n", "--url", redis_url, "--dedup-id", "sync-42"]
    first = cli(*args, "--dedup-ttl", "60")
    second = cli(*args, "--dedup-ttl", "60", "--dedup-extend")
    assert (first.exit_code, second.exit_code) == (0, 0)
    assert first.stdout == second.stdout == "1\n"  # the second add added nothing
    assert r.llen("bull:reports:wait") == 1
    assert json.loads(r.hget("bull:reports:1", "opts"))["de"] == {"id": "sync-42", "ttl": 60_000}
    assert r.get("bull:reports:de:sync-42") == "1"
    assert 0 < r.pttl("bull:reports:de:sync-42") <= 60_000
    # Debounce: a new add replaces the job still waiting for its delay.
    debounce = ["--dedup-id", "d", "--dedup-ttl", "60", "--dedup-extend", "--dedup-replace"]
    one = cli("enqueue", "reports", "n", "--url", redis_url, "--delay", "30", *debounce)
    two = cli("enqueue", "reports", "n", "--url", redis_url, "--delay", "30", *debounce)
    assert (one.exit_code, two.exit_code) == (0, 0)
    assert one.stdout != two.stdout
    assert r.zrange("bull:reports:delayed", 0, -1) == [two.stdout.strip()]
    keep = cli(*args[:-1], "k", "--dedup-keep-last-if-active")
    assert keep.exit_code == 0
    assert json.loads(r.hget(f"bull:reports:{keep.stdout.strip()}", "opts"))["de"] == {
        "id": "k",
        "keepLastIfActive": True,
    }
