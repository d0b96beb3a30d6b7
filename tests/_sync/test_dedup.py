# Generated from tests/_async/test_dedup.py by scripts/unasync.py: do not edit.
"""Deduplication (BullMQ's modes, as Node 6.7.0 writes them), idempotency windows, metrics."""

from __future__ import annotations

import time

import pytest
import redis

from corral import Job, Queue, InvalidOptionError, _scripts
from corral.clock import now_ms
from corral.dedup import Dedup
from tests._sync.support import events


def take(queue: Queue, metrics: int = 0) -> Job:
    fetch = _scripts.FetchNext(1, "tok", int(time.time() * 1000), 30_000, metrics_points=metrics)
    reply = queue._run(_scripts.MOVE_TO_ACTIVE, [queue._job_prefix, now_ms(), *fetch.args()])
    jobs = _scripts.parse_fetched(reply, 2)
    assert jobs, "nothing to take"
    return queue._bind(jobs[0].job_id, jobs[0].fields, token=jobs[0].token)


def test_simple_mode_until_the_job_finishes(queue: Queue, r: redis.Redis) -> None:
    first = queue.add("a", {"v": 1}, deduplication=Dedup("D"))
    second = queue.add("a", {"v": 2}, deduplication={"id": "D"})
    assert second.id == first.id == "1" and second.data == {"v": 1}
    assert r.get("bull:q:id") == "2"  # the dropped add used up an id, as in BullMQ
    assert r.get("bull:q:de:D") == "1" and r.pttl("bull:q:de:D") == -1
    assert r.hget("bull:q:1", "deid") == "D"
    assert r.hget("bull:q:1", "opts") == '{"attempts":0,"de":{"id":"D"}}'
    assert events(r)[-1] == {
        "event": "deduplicated",
        "jobId": "1",
        "deduplicationId": "D",
        "deduplicatedJobId": "2",
    }
    assert queue.get_deduplication_job_id("D") == "1"
    job = take(queue)
    job.move_to_completed("done")
    assert r.exists("bull:q:de:D") == 0  # freed when the job finished
    third = queue.add("a", {"v": 3}, deduplication=Dedup("D"))
    assert third.id == "3"


def test_a_job_that_fails_for_good_frees_its_deduplication_id(
    queue: Queue, r: redis.Redis
) -> None:
    queue.add("a", {"v": 1}, deduplication=Dedup("F"), attempts=2)
    job = take(queue)
    job.move_to_failed(RuntimeError("once"))  # retried: still the holder
    assert r.get("bull:q:de:F") == "1"
    assert (queue.add("a", {"v": 2}, deduplication=Dedup("F"))).id == "1"
    job = take(queue)  # back in wait at once (no backoff)
    job.move_to_failed(RuntimeError("twice"))  # no attempts left: failed for good
    assert r.zscore("bull:q:failed", "1") is not None
    assert r.exists("bull:q:de:F") == 0
    again = queue.add("a", {"v": 3}, deduplication=Dedup("F"))
    assert (again.id, again.data) == ("3", {"v": 3})


def test_throttle_ttl_outlives_the_job_and_extends(queue: Queue, r: redis.Redis) -> None:
    queue.add("a", deduplication=Dedup("T", ttl=60))
    job = take(queue)
    job.move_to_completed(None)
    assert r.get("bull:q:de:T") == "1" and 0 < r.pttl("bull:q:de:T") <= 60_000
    # Finished, but the id still blocks adds until the ttl runs out.
    again = queue.add("a", deduplication=Dedup("T", ttl=60))
    assert again.id == "1" and r.llen("bull:q:wait") == 0
    r.pexpire("bull:q:de:T", 1000)
    queue.add("a", deduplication=Dedup("T", ttl=60, extend=True))
    assert r.pttl("bull:q:de:T") > 50_000  # extended back to the full ttl
    assert queue.remove_deduplication_key("T") is True
    assert queue.remove_deduplication_key("T") is False
    assert (queue.add("a", deduplication=Dedup("T", ttl=60))).id == "4"


def test_debounce_replaces_the_delayed_job(queue: Queue, r: redis.Redis) -> None:
    debounce = Dedup("R", ttl=5, extend=True, replace=True)
    queue.add("a", {"v": 1}, delay=5, deduplication=debounce)
    second = queue.add("a", {"v": 2}, delay=5, deduplication=debounce)
    assert second.id == "2" and second.data == {"v": 2}
    assert r.exists("bull:q:1") == 0
    assert r.zrange("bull:q:delayed", 0, -1) == ["2"]
    assert r.get("bull:q:de:R") == "2" and r.pttl("bull:q:de:R") > 4000
    assert r.hget("bull:q:2", "opts") == (
        '{"attempts":0,"delay":5000,"de":{"id":"R","ttl":5000,"extend":true,"replace":true}}'
    )
    due = str(int(r.hget("bull:q:2", "timestamp")) + 5000)
    assert events(r)[-4:] == [
        {"event": "removed", "jobId": "1", "prev": "delayed"},
        {"event": "deduplicated", "jobId": "2", "deduplicationId": "R", "deduplicatedJobId": "1"},
        {"event": "added", "jobId": "2", "name": "a"},
        {"event": "delayed", "jobId": "2", "delay": due},
    ]  # fmt: skip


def test_keep_last_if_active(queue: Queue, r: redis.Redis) -> None:
    keep = Dedup("K", keep_last_if_active=True)
    queue.add("a", {"v": 1}, deduplication=keep)
    running = take(queue)
    assert (queue.add("a", {"v": 2}, deduplication=keep)).id == "1"
    assert (queue.add("a", {"v": 3}, deduplication=keep)).id == "1"
    # The latest add waits in K:dn:<id> under the id reserved for it, as Node keeps it.
    assert r.hgetall("bull:q:dn:K") == {
        "name": "a",
        "data": '{"v":3}',
        "opts": '{"attempts":0,"de":{"id":"K","keepLastIfActive":true}}',
        "jid": "3",
    }
    running.move_to_completed(1)
    assert r.exists("bull:q:dn:K") == 0
    assert r.lrange("bull:q:wait", 0, -1) == ["3"]
    assert r.hget("bull:q:3", "data") == '{"v":3}' and r.get("bull:q:de:K") == "3"
    kinds = [(e["event"], e.get("jobId")) for e in events(r)]
    # As Node writes them: the kept add becomes a job before the active one's `completed`.
    assert kinds[-3:] == [("added", "3"), ("waiting", "3"), ("completed", "1")]
    # While the job waits (not active), another add is dropped as usual.
    assert (queue.add("a", {"v": 4}, deduplication=keep)).id == "3"


def test_idempotency_window_outlives_job_removal(queue: Queue, r: redis.Redis) -> None:
    first = queue.add(
        "charge",
        {"amount": 5},
        idempotency_key="order-7",
        idempotency_window=60,
        remove_on_complete=True,
    )
    pending = queue.add("charge", {"amount": 5}, idempotency_key="order-7")
    assert pending.id == first.id and pending.returnvalue is None
    job = take(queue)
    job.move_to_completed({"charged": 5})
    assert r.exists(f"bull:q:{first.id}") == 0  # removed on completion
    again = queue.add("charge", {"amount": 5}, idempotency_key="order-7")
    assert (again.id, again.name, again.returnvalue) == (first.id, "charge", {"charged": 5})
    assert r.llen("bull:q:wait") == 0 and r.get("bull:q:id") == "3"
    record = r.hgetall("bull:q:x-idem:order-7")
    assert record["jobId"] == first.id and record["state"] == "completed"
    assert 0 < r.pttl("bull:q:x-idem:order-7") <= 60_000


def test_idempotency_window_expires(queue: Queue, r: redis.Redis) -> None:
    first = queue.add("a", idempotency_key="k", idempotency_window=0.2)
    time.sleep(0.3)  # the record's TTL is the window: it is the server's clock that counts
    second = queue.add("a", idempotency_key="k", idempotency_window=0.2)
    assert second.id != first.id and r.llen("bull:q:wait") == 2


def test_idempotent_failure_is_remembered(queue: Queue) -> None:
    queue.add("a", idempotency_key="f", remove_on_fail=True)
    job = take(queue)
    job.move_to_failed(ValueError("declined"))
    again = queue.add("a", idempotency_key="f")
    assert again.failed_reason == "declined" and again.returnvalue is None


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"deduplication": Dedup("")}, "deduplication id must be a non-empty string"),
        ({"deduplication": Dedup("x", ttl=-1)}, "deduplication ttl must be a finite number"),
        ({"deduplication": Dedup("x", ttl=0)}, "deduplication ttl must be more than 0"),
        ({"deduplication": Dedup("x", extend=True)}, "deduplication extend needs a ttl"),
        ({"deduplication": {"id": "x", "tll": 5}}, "deduplication must have 'id'"),
        ({"deduplication": "x"}, "deduplication must be a Dedup or a dict"),
        ({"idempotency_key": ""}, "idempotency_key must be a non-empty string"),
        ({"idempotency_window": 5}, "idempotency_window needs an idempotency_key"),
        ({"idempotency_key": "k", "idempotency_window": 0}, "idempotency_window must be more"),
    ],
)
def test_bad_dedup_options(
    queue: Queue, r: redis.Redis, options: dict[str, object], message: str
) -> None:
    queue.add("seed")
    before = r.dbsize()
    with pytest.raises(InvalidOptionError, match=message):
        queue.add("a", **options)  # type: ignore[arg-type]
    assert r.dbsize() == before


def test_metrics_per_minute(queue: Queue, r: redis.Redis) -> None:
    for _ in range(4):
        queue.add("a")
    for _ in range(3):
        job = take(queue, metrics=5)
        job.move_to_completed(1, fetch=_scripts.FetchNext(0, "", 0, 0, metrics_points=5))
    metrics = queue.get_metrics("completed")
    assert (metrics.count, metrics.prev_count, metrics.data) == (3, 0, [])
    # Three minutes later (as Node BullMQ 6.7.0 does, seen: data [0, 0, 3], prevCount 3).
    r.hset("bull:q:metrics:completed", "prevTS", now_ms() - 3 * 60_000 - 1000)
    job = take(queue, metrics=5)
    job.move_to_completed(1, fetch=_scripts.FetchNext(0, "", 0, 0, metrics_points=5))
    metrics = queue.get_metrics("completed")
    assert (metrics.count, metrics.prev_count, metrics.data, metrics.points) == (4, 3, [0, 0, 3], 3)
    assert (queue.get_metrics("failed")).count == 0
    with pytest.raises(InvalidOptionError, match="kind must be 'completed' or 'failed'"):
        queue.get_metrics("done")
