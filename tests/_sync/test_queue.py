# Generated from tests/_async/test_queue.py by scripts/unasync.py: do not edit.
"""Queue against a real server: the keys and fields BullMQ 6.7.0 expects after each add."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from corral import Queue, InvalidOptionError
from tests._sync.support import events, snapshot


def test_add_writes_the_bullmq_job_hash(queue: Queue, r: redis.Redis) -> None:
    job = queue.add("send", {"to": "ada", "n": [1, 2]}, timestamp=1_700_000_000_000)
    assert job.id == "1"
    assert r.hgetall("bull:q:1") == {
        "name": "send",
        "data": '{"to":"ada","n":[1,2]}',
        "opts": '{"attempts":0,"timestamp":1700000000000}',
        "timestamp": "1700000000000",
        "delay": "0",
        "priority": "0",
    }
    assert r.lrange("bull:q:wait", 0, -1) == ["1"]
    assert r.zrange("bull:q:marker", 0, -1, withscores=True) == [("0", 0.0)]
    assert r.get("bull:q:id") == "1"
    assert r.hget("bull:q:meta", "opts.maxLenEvents") == "10000"
    assert events(r) == [
        {"event": "added", "jobId": "1", "name": "send"},
        {"event": "waiting", "jobId": "1"},
    ]


def test_jobs_queue_at_the_left_and_lifo_at_the_right(
    queue: Queue, r: redis.Redis
) -> None:
    queue.add("a")
    queue.add("b")
    queue.add("c", lifo=True)
    # Workers pop the right end: c (lifo) first, then a, then b.
    assert r.lrange("bull:q:wait", 0, -1) == ["2", "1", "3"]


def test_custom_id_duplicate_returns_the_existing_job(
    queue: Queue, r: redis.Redis
) -> None:
    first = queue.add("a", {"v": 1}, job_id="order-7")
    again = queue.add("a", {"v": 2}, job_id="order-7")
    assert first.id == again.id == "order-7"
    assert again.data == {"v": 1}
    assert r.get("bull:q:id") == "2"  # every add counts, duplicates included
    assert r.lrange("bull:q:wait", 0, -1) == ["order-7"]
    assert events(r)[-1] == {"event": "duplicated", "jobId": "order-7"}
    assert r.hget("bull:q:order-7", "opts") == '{"attempts":0,"jobId":"order-7"}'


def test_delayed_job_score_marker_and_event(queue: Queue, r: redis.Redis) -> None:
    ts = 1_700_000_000_000
    for _ in range(3):
        queue.add("later", delay=2.5, timestamp=ts)
    run_at = ts + 2500
    assert r.zrange("bull:q:delayed", 0, -1, withscores=True) == [
        ("1", float(run_at * 4096)),
        ("2", float(run_at * 4096 + 1)),
        ("3", float(run_at * 4096 + 2)),
    ]
    assert r.zrange("bull:q:marker", 0, -1, withscores=True) == [("1", float(run_at))]
    assert {"event": "delayed", "jobId": "1", "delay": str(run_at)} in events(r)
    assert r.hget("bull:q:1", "delay") == "2500"
    assert r.llen("bull:q:wait") == 0


def test_prioritized_score(queue: Queue, r: redis.Redis) -> None:
    queue.add("p", priority=1)
    queue.add("p", priority=2_097_151)
    assert r.zrange("bull:q:prioritized", 0, -1, withscores=True) == [
        ("1", float(2**32 + 1)),
        ("2", float(2_097_151 * 2**32 + 2)),
    ]
    assert r.get("bull:q:pc") == "2"
    assert queue.get_job_counts("prioritized", "waiting") == {
        "prioritized": 2,
        "waiting": 0,
    }


def test_paused_queue_gets_no_marker(queue: Queue, r: redis.Redis) -> None:
    r.hset("bull:q:meta", "paused", "1")
    queue.add("a")
    assert r.lrange("bull:q:wait", 0, -1) == ["1"]
    assert r.exists("bull:q:marker") == 0


def test_get_job_and_counts(queue: Queue) -> None:
    assert queue.get_job("nope") is None
    queue.add("a", {"x": "日本語"})
    job = queue.get_job("1")
    assert job is not None
    assert (job.name, job.data, job.opts) == ("a", {"x": "日本語"}, {"attempts": 0})
    assert queue.get_job_counts() == {
        "active": 0,
        "completed": 0,
        "delayed": 0,
        "failed": 0,
        "prioritized": 0,
        "waiting": 1,
        "waiting-children": 0,
    }


@pytest.mark.parametrize(
    ("name", "data", "kwargs", "message"),
    [
        ("a", {1, 2}, {}, "data must be JSON-serializable"),
        ("a", {"x": float("nan")}, {}, "data must be JSON-serializable"),
        ("", {}, {}, "job name must be a non-empty string"),
        ("a", {}, {"job_id": "1:2"}, "job_id must not contain ':'"),
        ("a", {}, {"job_id": "12"}, "job_id must not be all digits"),
        ("a", {}, {"delay": -1}, "delay must be a finite number >= 0"),
        ("a", {}, {"priority": -1}, "priority must be an integer"),
    ],
)
def test_bad_input_writes_nothing(
    queue: Queue,
    r: redis.Redis,
    name: str,
    data: object,
    kwargs: dict[str, object],
    message: str,
) -> None:
    queue.add("seed")
    before = r.dbsize()
    with pytest.raises(InvalidOptionError, match=message):
        queue.add(name, data, **kwargs)  # type: ignore[arg-type]
    assert r.dbsize() == before
    assert r.get("bull:q:id") == "1"


def test_bad_queue_name_is_refused(redis_url: str) -> None:
    with pytest.raises(InvalidOptionError, match="queue name must not contain ':'"):
        Queue("a:b", connection=redis_url)


def test_remove_and_get_job_state(queue: Queue, r: redis.Redis) -> None:
    queue.add("a")
    queue.add("b", delay=60)
    assert queue.get_job_state("1") == "waiting"
    assert queue.get_job_state("2") == "delayed"
    assert queue.get_job_state("nope") == "unknown"
    assert queue.remove("2") is True
    assert queue.remove("2") is False
    assert r.exists("bull:q:2") == 0
    assert r.zcard("bull:q:delayed") == 0
    assert r.xrevrange("bull:q:events", count=1)[0][1] == {
        "event": "removed",
        "jobId": "2",
        "prev": "delayed",
    }


def test_add_bulk_writes_what_add_writes(redis_url: str, r: redis.Redis) -> None:
    """Jobs without options of their own travel in add_bulk's short form, the others in
    full: either way every key, field and event is what one add at a time writes."""
    items: list[tuple[Any, ...]] = [
        ("plain", {"i": 1}),
        ("own-id", {"i": 2}, {"job_id": "custom"}),
        ("plain", None),
        ("prio", [1], {"priority": 3}),
        ("late", "x", {"delay": 60, "timestamp": 1_700_000_000_000}),
        ("plain", {"é": "ü"}),
        ("lifo", 0, {"lifo": True, "attempts": 2}),
        ("dup", 1, {"job_id": "custom"}),
    ]
    defaults: Any = {"attempts": 4, "remove_on_complete": 10}
    one = Queue("one", connection=redis_url, default_job_options=defaults)
    bulk = Queue("bulk", connection=redis_url, default_job_options=defaults)
    try:
        for item in items:
            one.add(item[0], item[1], **(item[2] if len(item) == 3 else {}))
        jobs = bulk.add_bulk(items)
    finally:
        one.close()
        bulk.close()
    assert [j.id for j in jobs] == ["1", "custom", "3", "4", "5", "6", "7", "custom"]

    def state(queue: str) -> dict[str, Any]:
        out = {}
        for key, value in snapshot(r).items():
            if key.startswith(f"bull:{queue}:") and not key.endswith(":events"):
                if isinstance(value, dict):
                    value = {f: v for f, v in value.items() if f != "timestamp"}
                out[key.split(":", 2)[2]] = value
        return out

    assert state("bulk") == state("one")
    assert state("bulk")["custom"]["name"] == "own-id"
    assert events(r, "bulk") == events(r, "one")
