"""`corral stats`, `corral jobs`, `corral job` against a seeded server, and their errors:
one line on stderr, no traceback, exit status 1 at runtime and 2 for usage."""

from __future__ import annotations

import base64
import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from click.testing import CliRunner, Result

from corral import Queue, Worker
from corral.cli import main
from corral.errors import InvalidOptionError
from tests.conftest import ServerProcess, free_port, server_binary
from tests.test_cli import run_corral

STATES = ["waiting", "prioritized", "delayed", "active", "waiting-children", "completed", "failed"]


def cli(*args: str, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(main, list(args), env=env)


def as_json(*args: str) -> Any:
    result = cli(*args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def one_line_error(result: Result, code: int) -> str:
    """The error line, after checking it is alone on stderr, with nothing on stdout."""
    assert result.exit_code == code, (result.stdout, result.stderr)
    assert result.stdout == ""
    assert "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("Error: ")
    return lines[0]


def _reports(job: Any) -> dict[str, int]:
    job.log(f"attempt {job.attempts_made + 1} of day {job.data['day']}")
    if job.data["day"] == "bad":
        raise RuntimeError("disk full")
    return {"rows": 42}


@pytest.fixture
def seeded(redis_url: str) -> str:
    """``emails``: 3 waiting, 1 delayed, 1 prioritized; ``reports``: ``bad`` failed after two
    attempts (logs, two stack traces), ``good`` completed."""
    with Queue("emails", connection=redis_url) as queue:
        for i in range(3):
            queue.add("send", {"to": f"user{i}@example.com"})
        queue.add("send", {"to": "later@example.com"}, delay=3600)
        queue.add("send", {"to": "VIP@example.com"}, priority=1)
    with Queue("reports", connection=redis_url) as queue:
        queue.add("nightly", {"day": "bad"}, attempts=2, job_id="bad")
        queue.add("nightly", {"day": "good"}, job_id="good")
    summary = Worker("reports", _reports, connection=redis_url).run(burst=True)
    assert (summary.completed, summary.failed) == (1, 1)
    return redis_url


# stats


def test_stats_json_of_every_queue(seeded: str) -> None:
    doc = as_json("stats", "--url", seeded)
    assert doc["prefix"] == "bull"
    assert [q["name"] for q in doc["queues"]] == ["emails", "reports"]
    emails, reports = doc["queues"]
    assert emails["counts"] == {
        **dict.fromkeys(STATES, 0),
        "waiting": 3,
        "delayed": 1,
        "prioritized": 1,
    }
    assert reports["counts"] == {**dict.fromkeys(STATES, 0), "completed": 1, "failed": 1}
    assert (emails["paused"], emails["workers"], reports["workers"]) == (False, 0, 0)
    assert emails["oldest_waiting_age_s"] >= 0
    assert reports["oldest_waiting_age_s"] is None


def test_stats_table_names_queues_counts_and_pause(seeded: str) -> None:
    with Queue("emails", connection=seeded) as queue:
        queue.pause()
    result = cli("stats", "--url", seeded)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    emails = next(line for line in lines if "emails" in line)
    assert "(paused)" in emails
    numbers = [cell.strip() for cell in emails.split("│")[2:-1]]
    assert numbers[: len(STATES) + 1] == ["3", "1", "1", "0", "0", "0", "0", "0"]
    assert as_json("stats", "emails", "--url", seeded)["queues"][0]["paused"] is True


def test_stats_oldest_waiting_age_and_workers(seeded: str, r: redis.Redis) -> None:
    # The head of the wait list is the first added: make it an hour old (due an hour ago).
    head = r.lindex("bull:emails:wait", -1)
    r.hset(
        f"bull:emails:{head}",
        "timestamp",
        int(r.hget(f"bull:emails:{head}", "timestamp")) - 3_600_000,
    )
    # A worker's blocking connection is named bull:<base64 name>: count it (a real connection).
    worker = redis.Redis.from_url(seeded)
    try:
        worker.client_setname("bull:" + base64.b64encode(b"emails").decode())
        (emails,) = as_json("stats", "emails", "--url", seeded)["queues"]
        assert emails["workers"] == 1
        assert 3600 <= emails["oldest_waiting_age_s"] < 2 * 3600
        table = cli("stats", "emails", "--url", seeded).stdout
        assert "1.0h" in table
    finally:
        worker.close()


def test_stats_discovers_queues_of_its_prefix_only(redis_url: str, r: redis.Redis) -> None:
    with Queue("a", connection=redis_url, prefix="{app}") as queue:
        queue.add("x", None)
    with Queue("b", connection=redis_url) as queue:
        queue.add("x", None)
    with Queue("c", connection=redis_url, prefix="ab") as queue:
        queue.add("x", None)
    r.set("bull:b:other:meta", "not a queue's")  # bull:<name>:meta with a colon in <name>
    glob = as_json("stats", "--url", redis_url, "--prefix", "a*")  # a prefix, not a pattern
    assert glob == {"prefix": "a*", "queues": []}
    assert [
        q["name"] for q in as_json("stats", "--url", redis_url, "--prefix", "{app}")["queues"]
    ] == ["a"]
    assert [q["name"] for q in as_json("stats", "--url", redis_url)["queues"]] == ["b"]
    empty = cli("stats", "--url", redis_url, "--prefix", "none")
    assert (empty.exit_code, empty.stdout) == (0, "no queues under prefix 'none'\n")
    assert as_json("stats", "--url", redis_url, "--prefix", "none") == {
        "prefix": "none",
        "queues": [],
    }


def _fail_odd(job: Any) -> int:
    if job.data["i"] % 2:
        raise RuntimeError("odd")
    return int(job.data["i"])


def test_stats_rates_from_the_finished_sets(seeded: str, r: redis.Redis) -> None:
    """No worker records metrics: the rates count the finished sets' jobs (scored by
    finishedOn) of the last minute."""
    (reports,) = as_json("stats", "reports", "--url", seeded)["queues"]
    assert reports["rates_per_min"] == {"completed": 1.0, "failed": 1.0}
    assert reports["rate_source"] == {"completed": "finished", "failed": "finished"}
    with Queue("reports", connection=seeded) as queue:
        queue.add_bulk([("nightly", {"day": f"d{i}"}) for i in range(4)])
    assert Worker("reports", _reports, connection=seeded).run(burst=True).completed == 4
    # One finished two minutes ago (as its worker would have recorded it) is out of the window.
    finished_on = r.zscore("bull:reports:completed", "good")
    assert finished_on is not None
    r.zadd("bull:reports:completed", {"good": int(finished_on) - 120_000})
    (reports,) = as_json("stats", "reports", "--url", seeded)["queues"]
    assert reports["rates_per_min"] == {"completed": 4.0, "failed": 1.0}
    (emails,) = as_json("stats", "emails", "--url", seeded)["queues"]
    assert emails["rates_per_min"] == {"completed": 0.0, "failed": 0.0}
    row = next(
        line for line in cli("stats", "--url", seeded).stdout.splitlines() if "reports" in line
    )
    assert [cell.strip() for cell in row.split("│")[-3:-1]] == ["4", "1"]


def test_stats_rates_from_bullmq_metrics(redis_url: str, r: redis.Redis) -> None:
    """Workers record metrics and the completed jobs are removed at once: the metrics still
    count them, the finished set would not."""
    with Queue("m", connection=redis_url) as queue:
        queue.add_bulk([("n", {"i": i}, {"remove_on_complete": True}) for i in range(7)])
    summary = Worker("m", _fail_odd, connection=redis_url, metrics_max_data_points=10).run(
        burst=True
    )
    assert (summary.completed, summary.failed) == (4, 3)
    assert r.zcard("bull:m:completed") == 0
    (m,) = as_json("stats", "m", "--url", redis_url)["queues"]
    assert m["rates_per_min"] == {"completed": 4.0, "failed": 3.0}
    assert m["rate_source"] == {"completed": "metrics", "failed": "metrics"}
    # Metrics left by workers gone while others, without metrics, finish more: the set wins.
    r.hset("bull:m:metrics:completed", mapping={"count": 4, "prevTS": 1, "prevCount": 0})
    with Queue("m", connection=redis_url) as queue:
        queue.add_bulk([("n", {"i": 2 * i}) for i in range(3)])
    assert Worker("m", _fail_odd, connection=redis_url).run(burst=True).completed == 3
    (m,) = as_json("stats", "m", "--url", redis_url)["queues"]
    assert (m["rates_per_min"]["completed"], m["rate_source"]["completed"]) == (3.0, "finished")


# jobs


def test_jobs_lists_each_state_in_its_order(seeded: str) -> None:
    doc = as_json("jobs", "emails", "--url", seeded)
    assert doc["states"] == STATES
    assert [(j["state"], j["data"]["to"]) for j in doc["jobs"]] == [
        ("waiting", "user0@example.com"),  # the next to run first
        ("waiting", "user1@example.com"),
        ("waiting", "user2@example.com"),
        ("prioritized", "VIP@example.com"),
        ("delayed", "later@example.com"),
    ]
    limited = as_json("jobs", "emails", "--state", "waiting", "--limit", "2", "--url", seeded)
    assert [j["data"]["to"] for j in limited["jobs"]] == ["user0@example.com", "user1@example.com"]
    both = as_json("jobs", "reports", "-s", "failed", "-s", "completed", "--url", seeded)
    assert [(j["id"], j["state"]) for j in both["jobs"]] == [
        ("bad", "failed"),
        ("good", "completed"),
    ]


def test_jobs_json_schema_of_a_failed_job(seeded: str) -> None:
    (job,) = as_json("jobs", "reports", "--state", "failed", "--url", seeded)["jobs"]
    assert set(job) == {
        "id", "name", "queue", "state", "data", "opts", "timestamp", "delay", "priority",
        "processed_on", "finished_on", "progress", "returnvalue", "attempts_made",
        "attempts_started", "max_attempts", "stalled_counter", "failed_reason", "stacktrace",
        "processed_by", "parent_key", "repeat_job_key", "provenance",
    }  # fmt: skip
    assert (job["id"], job["queue"], job["failed_reason"]) == ("bad", "reports", "disk full")
    assert (job["attempts_made"], job["max_attempts"], len(job["stacktrace"])) == (2, 2, 2)


def test_jobs_table_and_search(seeded: str) -> None:
    table = cli("jobs", "reports", "--url", seeded)
    assert table.exit_code == 0
    bad = next(line for line in table.stdout.splitlines() if "│ bad" in line)
    assert "failed" in bad and "disk full" in bad and "2/2" in bad
    good = next(line for line in table.stdout.splitlines() if "│ good" in line)
    assert '{"rows": 42}' in good
    emails = cli("jobs", "emails", "--url", seeded).stdout.splitlines()
    assert "priority 1" in next(line for line in emails if "prioritized" in line)
    assert "due in " in next(line for line in emails if "delayed" in line)
    found = as_json("jobs", "emails", "--search", "vip@", "--url", seeded)["jobs"]
    assert [j["data"]["to"] for j in found] == ["VIP@example.com"]
    assert [
        j["id"] for j in as_json("jobs", "reports", "--search", "DISK", "--url", seeded)["jobs"]
    ] == ["bad"]
    none = cli("jobs", "emails", "--state", "failed", "--search", "x", "--url", seeded)
    assert (none.exit_code, none.stdout) == (0, "no failed jobs in emails match\n")


def test_jobs_search_reads_past_the_first_page(redis_url: str) -> None:
    with Queue("many", connection=redis_url) as queue:
        queue.add_bulk([("n", {"i": i}) for i in range(450)])
        queue.add("needle", {"i": -1})
    found = as_json("jobs", "many", "--state", "waiting", "--search", "needle", "--url", redis_url)
    assert [j["name"] for j in found["jobs"]] == ["needle"]


# job


def test_job_json_has_everything(seeded: str) -> None:
    doc = as_json("job", "reports", "bad", "--url", seeded)
    assert (doc["state"], doc["data"], doc["opts"]["attempts"]) == ("failed", {"day": "bad"}, 2)
    assert doc["failed_reason"] == "disk full"
    assert len(doc["stacktrace"]) == 2
    assert all("RuntimeError: disk full" in trace for trace in doc["stacktrace"])
    assert doc["logs"] == {"count": 2, "lines": ["attempt 1 of day bad", "attempt 2 of day bad"]}
    good = as_json("job", "reports", "good", "--url", seeded)
    assert (good["state"], good["returnvalue"], good["failed_reason"]) == (
        "completed",
        {"rows": 42},
        None,
    )
    assert as_json("job", "emails", "4", "--url", seeded)["state"] == "delayed"


def test_job_view(seeded: str) -> None:
    result = cli("job", "reports", "bad", "--url", seeded)
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "reports/bad (nightly)" in out
    assert "failure" in out and "disk full" in out
    assert "stack trace 1 of 2" in out and "stack trace 2 of 2" in out
    assert "logs (2 lines)" in out and "attempt 2 of day bad" in out
    assert "return value" in cli("job", "reports", "good", "--url", seeded).stdout


# errors


def test_no_such_queue_or_job(seeded: str) -> None:
    for args in (("stats", "nope"), ("jobs", "nope"), ("job", "nope", "1")):
        line = one_line_error(cli(*args, "--url", seeded), 1)
        assert line == "Error: no such queue 'nope' (no bull:nope:* keys)"
    line = one_line_error(cli("job", "reports", "zz", "--url", seeded), 1)
    assert line == "Error: no such job 'zz' in queue 'reports'"


def test_unreachable_server() -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    for args in (("stats",), ("jobs", "q"), ("job", "q", "1")):
        line = one_line_error(cli(*args, "--url", url), 1)
        assert line.startswith(f"Error: cannot reach the server at {url}: ")


def test_bad_url_scheme_and_bad_names_are_usage_errors(redis_url: str) -> None:
    line = one_line_error(cli("stats", "--url", "http://localhost/0"), 2)
    assert line.startswith("Error: --url is not a usable Redis URL")
    env = {"CORRAL_REDIS_URL": "http://localhost/0"}
    line = one_line_error(cli("stats", env=env), 2)
    assert line.startswith("Error: CORRAL_REDIS_URL is not a usable Redis URL")
    assert "queue name" in one_line_error(cli("jobs", "a:b", "--url", redis_url), 2)


def test_click_usage_errors_are_one_line_too(redis_url: str) -> None:
    line = one_line_error(cli("jobs", "q", "--state", "bogus", "--url", redis_url), 2)
    assert "'bogus' is not one of" in line and line.endswith("(see 'main jobs --help')")
    line = one_line_error(cli("job", "q", "--url", redis_url), 2)
    assert line.startswith("Error: Missing argument 'ID'.")
    assert "No such option '--nope'" in one_line_error(cli("stats", "--nope"), 2)
    assert one_line_error(cli("jobs", "q", "--limit", "0"), 2).startswith("Error: Invalid value")


def test_db_index_out_of_range(redis_url: str) -> None:
    url = redis_url.rsplit("/", 1)[0] + "/999"
    assert "db index out of range" in one_line_error(cli("stats", "--url", url), 1)


@pytest.fixture(scope="module")
def password_server() -> Iterator[ServerProcess]:
    """A server of its own that wants a password (set once it answers the start probe)."""
    workdir = Path(tempfile.mkdtemp(prefix="corral-auth-"))
    srv = ServerProcess(server_binary(), free_port(), workdir)
    srv.start()
    try:
        with redis.Redis(port=srv.port) as client:
            client.config_set("requirepass", "sekret")
        yield srv
    finally:
        srv.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def test_auth_errors_are_named(password_server: ServerProcess) -> None:
    port = password_server.port
    line = one_line_error(cli("stats", "--url", f"redis://127.0.0.1:{port}/0"), 1)
    assert line.startswith("Error: authentication required at ")
    line = one_line_error(cli("stats", "--url", f"redis://:wrong@127.0.0.1:{port}/0"), 1)
    assert line.startswith(f"Error: authentication failed at redis://:***@127.0.0.1:{port}/0")
    assert "wrong" not in line.replace("wrong username", "")  # the password is not shown
    good = as_json("stats", "--url", f"redis://:sekret@127.0.0.1:{port}/0")
    assert good == {"prefix": "bull", "queues": []}


def test_debug_shows_the_exception() -> None:
    result = cli("stats", "--url", "http://localhost/0", "--debug")
    assert isinstance(result.exception, InvalidOptionError)
    result = cli("stats", "--url", "http://localhost/0", env={"CORRAL_DEBUG": "1"})
    assert isinstance(result.exception, InvalidOptionError)


def test_entry_point_process_prints_one_line(redis_url: str) -> None:
    proc = run_corral("stats", "nope", "--url", redis_url)
    assert (proc.returncode, proc.stdout) == (1, "")
    assert proc.stderr == "Error: no such queue 'nope' (no bull:nope:* keys)\n"
    proc = run_corral("stats", "--url", redis_url, "--json")
    assert (proc.returncode, json.loads(proc.stdout)) == (0, {"prefix": "bull", "queues": []})
