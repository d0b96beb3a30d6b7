"""`corral retry`, `promote`, `remove`, `clean`, `pause`, `resume`, `drain` and `obliterate`:
each does what the queue's own call does, says so in one line (or JSON), and fails in one line
with the documented exit status."""

from __future__ import annotations

import json

import pytest
import redis
from click.testing import CliRunner, Result

from corral import Queue, Worker, _scripts, clock
from corral.cli import main
from tests.test_cli_inspect import cli, one_line_error


def fails(job: object) -> None:
    raise RuntimeError("boom")


@pytest.fixture
def failed_ids(redis_url: str) -> list[str]:
    """Three jobs of queue ``q`` that failed for good."""
    with Queue("q", connection=redis_url) as queue:
        ids = [queue.add("j", {"i": i}).id for i in range(3)]
    Worker("q", fails, connection=redis_url).run(burst=True)
    return ids


def test_retry_given_jobs_and_every_failed_one(
    redis_url: str, r: redis.Redis, failed_ids: list[str]
) -> None:
    result = cli("retry", "q", failed_ids[0], "--url", redis_url)
    assert (result.exit_code, result.stdout) == (0, f"retried {failed_ids[0]}\n")
    assert r.lrange("bull:q:wait", 0, -1) == [failed_ids[0]]
    result = cli("retry", "q", "--all-failed", "--url", redis_url, "--json")
    assert json.loads(result.stdout) == {"queue": "q", "retried": 2}
    assert sorted(r.lrange("bull:q:wait", 0, -1)) == sorted(failed_ids)
    assert r.zcard("bull:q:failed") == 0


def test_retry_of_a_job_in_another_state_is_refused_in_one_line(
    redis_url: str, r: redis.Redis, failed_ids: list[str]
) -> None:
    with Queue("q", connection=redis_url) as queue:
        waiting = queue.add("w").id
    result = cli("retry", "q", failed_ids[0], waiting, "nope", "--url", redis_url)
    line = one_line_error_after_output(result)
    assert line == (
        f"Error: job {waiting} in queue q is not in a state that allows this (and 1 more)"
    )
    assert result.stdout == f"retried {failed_ids[0]}\n"  # the others were still done


def one_line_error_after_output(result: Result) -> str:
    """The one error line of a command that also printed what it did."""
    assert result.exit_code == 1
    stderr = result.stderr
    assert "Traceback" not in stderr and len(stderr.splitlines()) == 1, stderr
    return str(stderr.strip())


@pytest.mark.parametrize("args", [["retry", "q"], ["retry", "q", "1", "--all-failed"]])
def test_ids_or_all_is_a_usage_error(redis_url: str, args: list[str]) -> None:
    line = one_line_error(cli(*args, "--url", redis_url), 2)
    assert "give job ids or --all-failed" in line


def test_promote_one_and_all(redis_url: str, r: redis.Redis) -> None:
    with Queue("q", connection=redis_url) as queue:
        ids = [queue.add("d", delay=3600).id for _ in range(3)]
    assert cli("promote", "q", ids[0], "--url", redis_url).stdout == f"promoted {ids[0]}\n"
    assert r.lrange("bull:q:wait", 0, -1) == [ids[0]]
    assert cli("promote", "q", "--all", "--url", redis_url).stdout == "promoted 2 jobs\n"
    assert r.zcard("bull:q:delayed") == 0


def test_remove(redis_url: str, r: redis.Redis) -> None:
    with Queue("q", connection=redis_url) as queue:
        a, b = queue.add("a").id, queue.add("b").id
    result = cli("remove", "q", a, b, "--url", redis_url, "--json")
    assert json.loads(result.stdout) == {"queue": "q", "removed": [a, b], "refused": {}}
    assert not r.exists(f"bull:q:{a}", f"bull:q:{b}")
    one_line_error(cli("remove", "q", "--url", redis_url), 2)  # an id is needed


def test_clean_pause_resume_and_drain(
    redis_url: str, r: redis.Redis, failed_ids: list[str]
) -> None:
    result = cli("clean", "q", "--state", "failed", "--limit", "2", "--url", redis_url)
    assert (result.exit_code, result.stdout) == (0, "removed 2 failed jobs\n")
    assert r.zcard("bull:q:failed") == 1
    assert cli("pause", "q", "--url", redis_url).stdout == "paused q\n"
    assert r.hexists("bull:q:meta", "paused")
    assert cli("resume", "q", "--url", redis_url).stdout == "resumed q\n"
    assert not r.hexists("bull:q:meta", "paused")
    with Queue("q", connection=redis_url) as queue:
        queue.add("w")
        queue.add("later", delay=3600)
    assert cli("drain", "q", "--url", redis_url).stdout == "drained q\n"
    assert (r.llen("bull:q:wait"), r.zcard("bull:q:delayed")) == (0, 1)
    cli("drain", "q", "--delayed", "--url", redis_url)
    assert r.zcard("bull:q:delayed") == 0


def test_obliterate_asks_and_refuses_active_jobs_without_force(
    redis_url: str, r: redis.Redis
) -> None:
    with Queue("q", connection=redis_url) as queue:
        queue.add("a")
        fetch = _scripts.FetchNext(1, "tok", 0, 30_000)
        queue._run(_scripts.MOVE_TO_ACTIVE, [queue._job_prefix, clock.now_ms(), *fetch.args()])
    declined = CliRunner().invoke(main, ["obliterate", "q", "--url", redis_url], input="n\n")
    assert declined.exit_code == 1 and r.exists("bull:q:meta")
    busy = cli("obliterate", "q", "--yes", "--url", redis_url)
    assert one_line_error(busy, 1) == (
        "Error: queue q has active jobs: obliterate(force=True) deletes them"
    )
    done = cli("obliterate", "q", "--yes", "--force", "--url", redis_url)
    assert done.stdout == "obliterated q\n"
    assert list(r.scan_iter("bull:q:*")) == []


@pytest.mark.parametrize("command", ["retry", "promote", "pause", "drain", "clean"])
def test_an_unknown_queue_is_one_line(redis_url: str, command: str) -> None:
    extra = ["--all-failed"] if command == "retry" else ["--all"] if command == "promote" else []
    line = one_line_error(cli(command, "nosuch", *extra, "--url", redis_url), 1)
    assert "no such queue" in line
