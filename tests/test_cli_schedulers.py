"""`corral schedulers QUEUE list|upsert|remove` against a real server, and its errors: one
line on stderr, no traceback, exit status 2 for usage (checked before the server is reached)
and 1 at runtime."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import redis

from corral import Queue, Worker, clock
from tests.conftest import free_port
from tests.test_cli import cli, one_line_error, run_corral

SCHEDULER_KEYS = {
    "id", "name", "pattern", "every", "tz", "limit", "start_date", "end_date", "offset",
    "iteration_count", "next_run", "template",
}  # fmt: skip


def as_json(*args: str) -> Any:
    result = cli(*args, "--json")
    assert result.exit_code == 0, (result.stdout, result.stderr)
    return json.loads(result.stdout)


def test_upsert_every_then_list(redis_url: str, r: redis.Redis) -> None:
    before = clock.now_ms()
    doc = as_json(
        "schedulers", "reports", "upsert", "heartbeat", "--every", "30", "--limit", "100",
        "--name", "ping", "--data", '{"n": 1}', "--url", redis_url,
    )  # fmt: skip
    scheduler = doc["scheduler"]
    assert set(doc) == {"queue", "scheduler", "job_id"} and doc["queue"] == "reports"
    assert set(scheduler) == SCHEDULER_KEYS
    assert (scheduler["id"], scheduler["name"], scheduler["every"]) == ("heartbeat", "ping", 30_000)
    assert (scheduler["pattern"], scheduler["limit"], scheduler["tz"]) == (None, 100, None)
    assert scheduler["template"] == {"name": "ping", "data": {"n": 1}, "opts": {}}
    assert before <= scheduler["next_run"] <= clock.now_ms()  # an every scheduler runs now
    assert doc["job_id"] == f"repeat:heartbeat:{scheduler['next_run']}"
    assert r.hget(f"bull:reports:{doc['job_id']}", "name") == "ping"

    listed = as_json("schedulers", "reports", "list", "--url", redis_url)
    assert listed == {"queue": "reports", "prefix": "bull", "schedulers": [scheduler]}
    table = cli("schedulers", "reports", "list", "--url", redis_url)
    assert table.exit_code == 0
    row = next(line for line in table.stdout.splitlines() if "heartbeat" in line)
    cells = [cell.strip() for cell in row.split("│")[1:-1]]
    assert cells[0:2] == ["heartbeat", "every 30s"]
    assert cells[3:] == ["-", "1/100", "ping"]
    assert table.stdout.startswith("reports: 1 scheduler")


def test_upsert_cron_with_a_template(redis_url: str, r: redis.Redis, tmp_path: Path) -> None:
    data = tmp_path / "template.json"
    data.write_text('{"kind": "sales"}', encoding="utf-8")
    proc = run_corral(
        "schedulers", "reports", "upsert", "nightly", "--pattern", "0 2 * * *", "--tz",
        "Europe/Paris", "--data", f"@{data}", "--attempts", "3", "--backoff", "exponential:10",
        "--remove-on-complete", "true", "--url", redis_url,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("upserted nightly: cron 0 2 * * *, next run ")
    (scheduler,) = as_json("schedulers", "reports", "list", "--url", redis_url)["schedulers"]
    assert (scheduler["pattern"], scheduler["tz"], scheduler["every"]) == (
        "0 2 * * *",
        "Europe/Paris",
        None,
    )
    assert scheduler["template"] == {
        "name": "nightly",
        "data": {"kind": "sales"},
        "opts": {
            "attempts": 3,
            "backoff": {"type": "exponential", "delay": 10_000},
            "removeOnComplete": True,
        },
    }
    assert scheduler["next_run"] > clock.now_ms()
    # 02:00 in Paris is 01:00 or 00:00 UTC, whatever the season.
    assert scheduler["next_run"] // 1000 % 86400 in (0, 3600)
    job_id = f"repeat:nightly:{scheduler['next_run']}"
    assert r.zscore("bull:reports:delayed", job_id) is not None
    assert json.loads(r.hget(f"bull:reports:{job_id}", "data")) == {"kind": "sales"}
    table = cli("schedulers", "reports", "list", "--url", redis_url).stdout
    row = next(line for line in table.splitlines() if "nightly" in line)
    assert "cron 0 2 * * *" in row and "Europe/Paris" in row and "(in " in row
    assert " 02:00:00+0" in row  # the next run in the scheduler's time zone


def test_upsert_again_changes_the_timing_and_keeps_the_count(redis_url: str) -> None:
    base = ["schedulers", "reports", "upsert", "tick", "--url", redis_url]
    first = as_json(*base, "--every", "60")
    second = as_json(*base, "--pattern", "*/10 * * * * *", "--immediately")
    assert second["scheduler"]["pattern"] == "*/10 * * * * *"
    assert second["scheduler"]["every"] is None
    assert second["scheduler"]["iteration_count"] == first["scheduler"]["iteration_count"]
    with Queue("reports", connection=redis_url) as queue:
        assert queue.count_job_schedulers() == 1
        assert [job.id for job in queue.get_jobs(["waiting", "delayed"])] == [second["job_id"]]


def test_every_scheduler_runs_its_template_in_a_worker(redis_url: str) -> None:
    result = cli(
        "schedulers", "emails", "upsert", "digest", "--every", "3600", "--name", "send-digest",
        "--data", '{"to": "all"}', "--url", redis_url,
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    seen: list[tuple[str, Any]] = []
    summary = Worker(
        "emails", lambda job: seen.append((job.name, job.data)), connection=redis_url
    ).run(burst=True)
    assert summary.completed == 1
    assert seen == [("send-digest", {"to": "all"})]
    (scheduler,) = as_json("schedulers", "emails", "list", "--url", redis_url)["schedulers"]
    assert scheduler["iteration_count"] == 2  # the next run is made as the worker takes one


def test_remove(redis_url: str, r: redis.Redis) -> None:
    doc = as_json("schedulers", "reports", "upsert", "tick", "--every", "60", "--url", redis_url)
    result = cli("schedulers", "reports", "remove", "tick", "--url", redis_url)
    assert (result.exit_code, result.stdout) == (0, "removed scheduler tick\n")
    assert not r.exists(f"bull:reports:{doc['job_id']}", "bull:reports:repeat:tick")
    empty = cli("schedulers", "reports", "list", "--url", redis_url)
    assert (empty.exit_code, empty.stdout) == (0, "no schedulers in reports\n")
    assert as_json("schedulers", "reports", "list", "--url", redis_url)["schedulers"] == []
    line = one_line_error(cli("schedulers", "reports", "remove", "tick", "--url", redis_url), 1)
    assert line == "Error: no such scheduler 'tick' in queue 'reports'"
    as_json("schedulers", "reports", "upsert", "tock", "--every", "60", "--url", redis_url)
    gone = as_json("schedulers", "reports", "remove", "tock", "--url", redis_url)
    assert gone == {"queue": "reports", "removed": "tock"}


def test_unknown_queue_and_unreachable_server() -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    for args in (["list"], ["remove", "x"], ["upsert", "x", "--every", "5"]):
        line = one_line_error(cli("schedulers", "reports", *args, "--url", url), 1)
        assert line.startswith(f"Error: cannot reach the server at {url}: ")


def test_no_such_queue(redis_url: str) -> None:
    for args in (["list"], ["remove", "x"]):
        line = one_line_error(cli("schedulers", "nope", *args, "--url", redis_url), 1)
        assert line == "Error: no such queue 'nope' (no bull:nope:* keys)"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--pattern", "0 0 * *"], "Error: invalid --pattern '0 0 * *': expected 5 fields"),
        (["--pattern", "61 * * * *"], "Error: invalid --pattern '61 * * * *'"),
        (["--pattern", "0 0 30 2 *"], "Error: --pattern '0 0 30 2 *' never fires (no such date)"),
        (["--pattern", "0 0 * * *", "--tz", "Mars/Base"], "Error: unknown --tz 'Mars/Base'"),
        (["--every", "0"], "Error: --every must be at least 1 ms, got 0.0"),
        (["--every", "nan"], "Error: --every must be a finite number >= 0, got nan"),
        ([], "Error: give --every SECONDS or --pattern CRON (one of them)"),
        (["--every", "5", "--pattern", "* * * * *"], "Error: give --every SECONDS or --pattern"),
        (["--every", "5", "--immediately"], "Error: --immediately goes with --pattern"),
        (["--every", "5", "--limit", "0"], "Error: --limit must be an integer from 1 to"),
        (["--every", "5", "--start-date", "soon"], "Error: --start-date must be an ISO 8601 date"),
        (["--every", "5", "--end-date", "1969-01-01T00:00+00:00"], "Error: --end-date must be"),
        (
            ["--every", "5", "--start-date", "2030-01-02", "--end-date", "2030-01-01"],
            "Error: --start-date (",
        ),
        (["--every", "5", "--end-date", "1000"], "Error: --end-date (1000 ms) is before the"),
        (["--every", "5", "--priority", "-1"], "Error: --priority must be an integer from 0 to"),
        (["--every", "5", "--backoff", "soon"], "Error: --backoff must be SECONDS"),
        (["--every", "5", "--data", "{x"], "Error: --data is not valid JSON"),
        (["--every", "5", "--name", ""], "Error: --name must be"),
        (["--every", "5", "--prefix", "a b"], "Error: --prefix must be printable ASCII"),
        (["--every", "5", "--url", "http://x/0"], "Error: --url is not a usable Redis URL"),
    ],
)
def test_upsert_refuses_bad_input_as_a_usage_error(
    redis_url: str, r: redis.Redis, args: list[str], message: str
) -> None:
    url = [] if "--url" in args else ["--url", redis_url]
    line = one_line_error(cli("schedulers", "reports", "upsert", "x", *args, *url), 2)
    assert line.startswith(message)
    assert r.dbsize() == 0
    if "--url" not in args and "--prefix" not in args:  # refused with no server at all
        down = ["--url", f"redis://127.0.0.1:{free_port()}/0"]
        line = one_line_error(cli("schedulers", "reports", "upsert", "x", *args, *down), 2)
        assert line.startswith(message)


def test_bad_ids_and_usage(redis_url: str) -> None:
    with Queue("reports", connection=redis_url) as queue:
        queue.add("x", None)
    line = one_line_error(
        cli("schedulers", "reports", "upsert", "a:b", "--every", "5", "--url", redis_url), 2
    )
    assert line.startswith("Error: scheduler id must not contain ':'")
    line = one_line_error(cli("schedulers", "reports"), 2)
    assert line == "Error: Missing command. (see 'main schedulers --help')"
    line = one_line_error(cli("schedulers", "reports", "show"), 2)
    assert line == "Error: No such command 'show'. (see 'main schedulers --help')"
    line = one_line_error(cli("schedulers", "reports", "remove"), 2)
    assert line.startswith("Error: Missing argument 'ID'.")
    line = one_line_error(cli("schedulers", "reports", "list", "--nope"), 2)
    assert "No such option '--nope'" in line
    assert "List, create or change" in cli("schedulers").stderr  # no argument: the help


def test_entry_point_process(redis_url: str) -> None:
    proc = run_corral("schedulers", "reports", "list", "--url", redis_url)
    assert (proc.returncode, proc.stdout) == (1, "")
    assert proc.stderr == "Error: no such queue 'reports' (no bull:reports:* keys)\n"
    proc = run_corral(
        "schedulers", "reports", "upsert", "x", "--pattern", "bad", "--url", redis_url
    )
    assert one_line_error(proc, 2).startswith("Error: invalid --pattern 'bad'")
