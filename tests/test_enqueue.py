"""`corral enqueue`: what system cron runs. It adds one job and prints its id."""

from __future__ import annotations

import pytest
import redis

from corral import Queue
from tests.test_cli import run_corral


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
        (["--data", "{not json"], "Error: --data is not valid JSON"),
        (["--priority", "-3"], "Error: priority must be an integer from 0 to 2097151, got -3"),
        (["--job-id", "12"], "Error: job_id must not be all digits, got '12'"),
        (["--delay", "nan"], "Error: delay must be a finite number >= 0, got nan"),
        (["--data", "[" * 100_000], "Error: --data is not valid JSON"),
        (["--job-id", "meta"], "Error: job_id 'meta' is the name of one of the queue's own"),
        (["--delay", "1e17"], "Error: delay must be at most 315,532,800 s"),
        (["--url", "notaurl"], "Error: connection is not a usable Redis URL"),
        (["--prefix", "my app"], "Error: prefix must be printable ASCII without spaces"),
    ],
)
def test_enqueue_refuses_bad_input(
    redis_url: str, r: redis.Redis, args: list[str], message: str
) -> None:
    before = r.dbsize()
    url = [] if "--url" in args else ["--url", redis_url]
    proc = run_corral("enqueue", "reports", "x", *args, *url)
    assert proc.returncode == 1
    assert proc.stderr.startswith(message)
    assert len(proc.stderr.strip().splitlines()) == 1  # one line, no traceback
    assert r.dbsize() == before


def test_enqueue_reports_an_unreachable_server() -> None:
    proc = run_corral("enqueue", "reports", "x", "--url", "redis://127.0.0.1:1/0")
    assert proc.returncode == 1
    assert proc.stderr.startswith("Error: cannot reach the server:")
    assert len(proc.stderr.strip().splitlines()) == 1


def test_enqueue_idempotency_window(redis_url: str, r: redis.Redis) -> None:
    args = ["enqueue", "billing", "invoice", "--idempotency-key", "inv-2026-11", "--url", redis_url]
    first = run_corral(*args, "--idempotency-window", "3600")
    second = run_corral(*args)
    assert (first.returncode, second.returncode) == (0, 0)
    assert first.stdout == second.stdout == "1\n"
    assert r.llen("bull:billing:wait") == 1
    assert 0 < r.pttl("bull:billing:x-idem:inv-2026-11") <= 3_600_000
    bad = run_corral(*args[:-2], "--idempotency-window", "0", "--url", redis_url)
    assert bad.returncode == 1 and "idempotency_window must be more than 0" in bad.stderr


def test_enqueue_retries_are_bounded_and_checked() -> None:
    proc = run_corral("enqueue", "reports", "x", "--url", "redis://127.0.0.1:1/0", "--retries", "0")
    assert proc.returncode == 1
    assert proc.stderr.startswith("Error: cannot reach the server:")
    bad = run_corral("enqueue", "reports", "x", "--retries", "101")
    assert bad.returncode == 2 and "--retries" in bad.stderr
