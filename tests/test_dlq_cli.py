"""`corral dlq QUEUE list|replay|purge`: each does what the DeadLetterQueue call does, says so
in one line per dead letter (or JSON), and fails in one line with the documented status."""

from __future__ import annotations

import json
from typing import Any

import pytest
import redis
from click.testing import CliRunner, Result

from corral import Queue, Worker
from corral.cli_dlq import dlq_group
from tests.test_cli_inspect import one_line_error


def fails(job: Any) -> None:
    raise RuntimeError("card declined")


def dlq(*args: str, answer: str | None = None) -> Result:
    # The group itself: corral.cli registers it as `corral dlq`.
    return CliRunner().invoke(dlq_group, list(args), input=answer)


@pytest.fixture
def dead(redis_url: str) -> list[str]:
    """Two jobs of ``orders`` dead-lettered to ``orders-dead``; their ids."""
    with Queue("orders", connection=redis_url, dead_letter_queue="orders-dead") as queue:
        ids = [queue.add("charge", {"i": i}).id for i in range(2)]
    Worker("orders", fails, connection=redis_url).run(burst=True)
    return ids


def test_list_shows_each_dead_letter(redis_url: str, dead: list[str]) -> None:
    result = dlq("orders-dead", "list", "--url", redis_url)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert len(lines) == 3
    assert lines[0].startswith(f"orders-1  orders/{dead[0]}  charge  1 attempts  ")
    assert lines[0].endswith("  card declined")
    assert lines[2] == "2 jobs in orders-dead"
    doc = json.loads(
        dlq("orders-dead", "list", "--url", redis_url, "--json", "--limit", "1").stdout
    )
    assert doc["total"] == 2
    assert [(d["id"], d["queue"], d["job_id"]) for d in doc["dead_letters"]] == [
        ("orders-1", "orders", dead[0])
    ]


def test_replay_given_ids_then_all(redis_url: str, r: redis.Redis, dead: list[str]) -> None:
    result = dlq("orders-dead", "replay", "orders-2", "--url", redis_url)
    assert result.exit_code == 0, result.output
    [new_id] = r.lrange("bull:orders:wait", 0, -1)
    assert result.stdout == f"replayed orders-2 as job {new_id} of orders\n"
    doc = json.loads(dlq("orders-dead", "replay", "--all", "--url", redis_url, "--json").stdout)
    assert [(d["id"], d["already"]) for d in doc["replayed"]] == [
        ("orders-1", False),
        ("orders-2", True),
    ]
    assert r.llen("bull:orders:wait") == 2
    listed = dlq("orders-dead", "list", "--url", redis_url).stdout
    assert f"replayed as {new_id}" in listed


def test_replay_of_an_unknown_id_fails_in_one_line(redis_url: str, dead: list[str]) -> None:
    result = dlq("orders-dead", "replay", "orders-1", "nope", "--url", redis_url)
    assert result.exit_code == 1
    assert result.stdout.startswith("replayed orders-1 as job ")  # the others were done
    assert result.stderr == "Error: no job nope in dead-letter queue orders-dead\n"


def test_purge_replayed_then_all(redis_url: str, r: redis.Redis, dead: list[str]) -> None:
    dlq("orders-dead", "replay", "orders-1", "--url", redis_url)
    result = dlq("orders-dead", "purge", "--replayed", "--yes", "--url", redis_url)
    assert (result.exit_code, result.stdout) == (0, "purged 1 jobs from orders-dead\n")
    assert not r.exists("bull:orders-dead:orders-1") and r.exists("bull:orders-dead:orders-2")
    result = dlq("orders-dead", "purge", "--url", redis_url, "--json", answer="y\n")
    assert json.loads(result.stdout.splitlines()[-1]) == {"queue": "orders-dead", "purged": 1}
    assert r.keys("bull:orders-dead:*") == []


def test_purge_asks_first(redis_url: str, r: redis.Redis, dead: list[str]) -> None:
    result = dlq("orders-dead", "purge", "--url", redis_url, answer="n\n")
    assert result.exit_code == 1  # aborted
    assert r.exists("bull:orders-dead:orders-1")


def test_usage_errors_are_one_line_with_status_2(redis_url: str, dead: list[str]) -> None:
    line = one_line_error(dlq("orders-dead", "replay", "--url", redis_url), 2)
    assert line == "Error: give dead-letter ids or --all, not both and not neither"
    line = one_line_error(dlq("orders-dead", "replay", "x", "--all", "--url", redis_url), 2)
    assert line == "Error: give dead-letter ids or --all, not both and not neither"
    line = one_line_error(dlq("orders-dead", "bogus"), 2)
    assert "No such command 'bogus'" in line


def test_an_unknown_queue_fails_in_one_line(redis_url: str) -> None:
    line = one_line_error(dlq("nothing-here", "list", "--url", redis_url), 1)
    assert line == "Error: no such queue 'nothing-here' (no bull:nothing-here:* keys)"
