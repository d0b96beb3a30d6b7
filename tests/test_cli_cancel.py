"""`corral cancel QUEUE JOB_ID`: cancel a job from a shell (one process, one line of output)."""

from __future__ import annotations

import json

import redis
from click.testing import CliRunner

from corral import Queue, _scripts, clock
from corral.cli import main
from corral.errors import InvalidOptionError
from tests.conftest import free_port
from tests.test_cli import cli, one_line_error, run_corral


def cancel(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["cancel", *args])
    return result.exit_code, result.output


def test_cancel_a_waiting_job(redis_url: str, r: redis.Redis) -> None:
    with Queue("reports", connection=redis_url) as queue:
        job = queue.add("nightly", None, attempts=3)
    code, out = cancel("reports", job.id, "--reason", "holiday", "--url", redis_url)
    assert (code, out) == (0, f"cancelled {job.id}\n")
    assert r.hget(f"bull:reports:{job.id}", "failedReason") == "cancelled: holiday"
    assert r.zscore("bull:reports:failed", job.id) is not None


def test_cancel_without_a_reason_and_with_a_prefix(redis_url: str, r: redis.Redis) -> None:
    with Queue("reports", connection=redis_url, prefix="{app}") as queue:
        job = queue.add("nightly", None)
    code, out = cancel("reports", job.id, "--url", redis_url, "--prefix", "{app}")
    assert (code, out) == (0, f"cancelled {job.id}\n")
    assert r.hget(f"{{app}}:reports:{job.id}", "failedReason") == "cancelled"


def test_cancel_an_active_job(redis_url: str, r: redis.Redis) -> None:
    with Queue("reports", connection=redis_url) as queue:
        queue.add("nightly", None)
        fetch = _scripts.FetchNext(1, "tok", 0, 30_000)
        reply = queue._run(
            _scripts.MOVE_TO_ACTIVE, [queue._job_prefix, clock.now_ms(), *fetch.args()]
        )
        job_id = _scripts.parse_fetched(reply, 2)[0].job_id
        pubsub = r.pubsub()
        pubsub.subscribe(queue.keys.cancel_channel())
        try:
            code, out = cancel("reports", job_id, "--reason", "stop", "--url", redis_url)
            message = None
            while message is None:  # the test's timeout bounds this
                message = pubsub.get_message(ignore_subscribe_messages=True, timeout=1)
        finally:
            pubsub.close()
    assert (code, out) == (0, f"cancelling {job_id} (active: its worker stops it)\n")
    assert json.loads(message["data"]) == {"jobId": job_id, "reason": "stop"}
    assert r.hget(f"bull:reports:{job_id}", "x-cancel") == "stop"


def test_unknown_or_finished_job_is_a_one_line_error(redis_url: str, r: redis.Redis) -> None:
    line = one_line_error(run_corral("cancel", "reports", "nope", "--url", redis_url), 1)
    assert line == "Error: job nope does not exist in queue reports"

    with Queue("reports", connection=redis_url) as queue:
        job = queue.add("nightly", None)
    assert cancel("reports", job.id, "--url", redis_url)[0] == 0
    before = r.hgetall(f"bull:reports:{job.id}")
    line = one_line_error(cli("cancel", "reports", job.id, "--url", redis_url), 1)
    assert line == f"Error: job {job.id} in queue reports has already finished"
    assert r.hgetall(f"bull:reports:{job.id}") == before


def test_bad_input_is_a_usage_error_and_writes_nothing(redis_url: str, r: redis.Redis) -> None:
    with Queue("reports", connection=redis_url) as queue:
        job = queue.add("nightly", None)
    before = r.dbsize(), r.hgetall(f"bull:reports:{job.id}")
    result = cli("cancel", "reports", job.id, "--reason", "x" * 1001, "--url", redis_url)
    assert one_line_error(result, 2) == "Error: --reason must be at most 1000 characters, got 1001"
    line = one_line_error(cli("cancel", "bad:name", job.id, "--url", redis_url), 2)
    assert line.startswith("Error: queue name must not contain ':'")
    line = one_line_error(cli("cancel", "reports", job.id, "--url", "http://localhost/0"), 2)
    assert line.startswith("Error: --url is not a usable Redis URL")
    assert one_line_error(cli("cancel", "reports"), 2).startswith("Error: Missing argument")
    assert (r.dbsize(), r.hgetall(f"bull:reports:{job.id}")) == before


def test_unreachable_server_and_db_index(redis_url: str) -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    line = one_line_error(cli("cancel", "reports", "j", "--url", url), 1)
    assert line.startswith(f"Error: cannot reach the server at {url}: ")
    url = redis_url.rsplit("/", 1)[0] + "/999"
    line = one_line_error(cli("cancel", "reports", "j", "--url", url), 1)
    assert line.startswith("Error: db index out of range at ")


def test_debug_shows_the_exception() -> None:
    result = cli("cancel", "reports", "j", "--url", "http://localhost/0", "--debug")
    assert isinstance(result.exception, InvalidOptionError)
