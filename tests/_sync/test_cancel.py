# Generated from tests/_async/test_cancel.py by scripts/unasync.py: do not edit.
"""Remote cancel, the server's side (cancel_job.lua through ``queue.cancel``/``job.cancel``).

A job that has not started fails for good at once ("cancelled: <reason>", never retried), with
everything a final failure writes: the ``failed`` event with the state it left as ``prev``, its
flow parent told by its failure policy, its deduplication id freed, removeOnFail. An active
job's worker is asked to stop it: ``x-cancel`` on its hash and a message on the queue's cancel
channel. Unknown and finished jobs are errors; bad input writes nothing.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
import redis

from corral import (
    FlowProducer,
    Job,
    Queue,
    FlowJob,
    InvalidOptionError,
    JobCancelledError,
    JobFinishedError,
    JobNotFoundError,
    JobState,
    JobStateError,
    _scripts,
    clock,
)
from corral.dedup import Dedup
from tests._sync.support import events, snapshot


def activate(queue: Queue) -> Job | None:
    """Take the next job as a worker would (lock token ``tok:0``)."""
    fetch = _scripts.FetchNext(1, "tok", 0, 30_000)
    reply = queue._run(
        _scripts.MOVE_TO_ACTIVE, [queue._job_prefix, clock.now_ms(), *fetch.args()]
    )
    fetched = _scripts.parse_fetched(reply, 2)
    if not fetched:
        return None
    return queue._bind(fetched[0].job_id, fetched[0].fields, token=fetched[0].token)


def last_events(r: redis.Redis, since: int, queue: str = "q") -> list[dict[str, str]]:
    """The events written after the first ``since`` ones."""
    return events(r, queue)[since:]


def assert_cancelled(r: redis.Redis, job_id: str, reason: str, queue: str = "q") -> None:
    fields: dict[str, str] = r.hgetall(f"bull:{queue}:{job_id}")  # type: ignore[assignment]
    assert fields["failedReason"] == reason
    assert int(fields["finishedOn"]) > 0
    assert r.zscore(f"bull:{queue}:failed", job_id) == float(fields["finishedOn"])
    assert "x-cancel" not in fields  # nobody has to be told: it failed here


# -- jobs that have not started fail now ------------------------------------------------------


def test_waiting_job_fails_for_good_with_the_reason(
    queue: Queue, r: redis.Redis
) -> None:
    job = queue.add("a", {"v": 1}, attempts=5, backoff=1)
    seen = len(events(r))

    assert queue.cancel(job.id, "user closed the tab") is JobState.FAILED

    assert_cancelled(r, job.id, "cancelled: user closed the tab")
    assert r.llen("bull:q:wait") == 0
    assert job.get_state() is JobState.FAILED
    # attempts=5 does not bring it back: nothing scheduled, no attempt counted.
    assert r.zcard("bull:q:delayed") == 0 and r.zcard("bull:q:prioritized") == 0
    assert r.hget(f"bull:q:{job.id}", "atm") is None
    # BullMQ's failed event (what Node's QueueEvents reads); no attempt, so no
    # retries-exhausted.
    assert last_events(r, seen) == [
        {
            "event": "failed",
            "jobId": job.id,
            "failedReason": "cancelled: user closed the tab",
            "prev": "waiting",
        }
    ]


def test_job_cancel_without_a_reason(queue: Queue, r: redis.Redis) -> None:
    job = queue.add("a", None)
    assert job.cancel() is JobState.FAILED
    assert_cancelled(r, job.id, "cancelled")
    assert events(r)[-1]["failedReason"] == "cancelled"


def test_waiting_job_of_a_paused_queue(queue: Queue, r: redis.Redis) -> None:
    queue.pause()
    job = queue.add("a", None)
    assert r.lrange("bull:q:wait", 0, -1) == [job.id]  # BullMQ 6.x keeps it in wait

    assert queue.cancel(job.id, "x") is JobState.FAILED

    assert_cancelled(r, job.id, "cancelled: x")
    assert r.llen("bull:q:wait") == 0
    assert events(r)[-1]["prev"] == "waiting"


def test_waiting_job_in_the_legacy_paused_list(queue: Queue, r: redis.Redis) -> None:
    # K:paused holds ids only in data written by BullMQ < 5.
    job = queue.add("a", None)
    r.lrem("bull:q:wait", 1, job.id)
    r.lpush("bull:q:paused", job.id)

    assert queue.cancel(job.id, "old") is JobState.FAILED

    assert_cancelled(r, job.id, "cancelled: old")
    assert r.llen("bull:q:paused") == 0
    assert events(r)[-1]["prev"] == "waiting"


def test_delayed_job(queue: Queue, r: redis.Redis) -> None:
    job = queue.add("a", None, delay=60, attempts=5)
    seen = len(events(r))

    assert queue.cancel(job.id, "too late") is JobState.FAILED

    assert_cancelled(r, job.id, "cancelled: too late")
    assert r.zcard("bull:q:delayed") == 0
    assert [(e["event"], e["prev"]) for e in last_events(r, seen)] == [("failed", "delayed")]


def test_prioritized_job(queue: Queue, r: redis.Redis) -> None:
    job = queue.add("a", None, priority=3, attempts=5)
    other = queue.add("b", None, priority=3)

    assert queue.cancel(job.id, "p") is JobState.FAILED

    assert_cancelled(r, job.id, "cancelled: p")
    assert r.zrange("bull:q:prioritized", 0, -1) == [other.id]
    assert events(r)[-1]["prev"] == "prioritized"


def test_waiting_children_parent(
    flows: FlowProducer, pq: Queue, r: redis.Redis
) -> None:
    flows.add(
        FlowJob(
            "P", "pq", None, {"job_id": "P"}, children=[FlowJob("c", "cq", None, {"job_id": "c"})]
        )
    )

    assert pq.cancel("P", "no longer needed") is JobState.FAILED

    assert_cancelled(r, "P", "cancelled: no longer needed", queue="pq")
    assert r.zcard("bull:pq:waiting-children") == 0
    assert events(r, "pq")[-1] == {
        "event": "failed",
        "jobId": "P",
        "failedReason": "cancelled: no longer needed",
        "prev": "waiting-children",
    }
    # Its child is left alone: cancelling a parent cancels only the parent.
    assert r.lrange("bull:cq:wait", 0, -1) == ["c"]


def test_remove_on_fail_is_honoured(
    queue: Queue, r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = queue.add("a", None, remove_on_fail=True)
    kept = queue.add("b", None, remove_on_fail=1)
    older = queue.add("c", None, remove_on_fail=1)

    assert queue.cancel(job.id) is JobState.FAILED
    # Gone at once, but the failed event is in the stream.
    assert r.exists(f"bull:q:{job.id}") == 0
    assert r.zscore("bull:q:failed", job.id) is None
    assert events(r)[-1]["jobId"] == job.id and events(r)[-1]["event"] == "failed"

    # removeOnFail: 1 keeps the newest failed job only (finished a millisecond later).
    now = clock.now_ms()
    monkeypatch.setattr(clock, "now_ms", lambda: now)
    queue.cancel(older.id)
    monkeypatch.setattr(clock, "now_ms", lambda: now + 1)
    queue.cancel(kept.id)
    assert r.zrange("bull:q:failed", 0, -1) == [kept.id]
    assert r.exists(f"bull:q:{older.id}") == 0


def test_dedup_id_is_released(queue: Queue, r: redis.Redis) -> None:
    first = queue.add("a", {"v": 1}, deduplication=Dedup("D"))
    assert (queue.add("a", {"v": 2}, deduplication=Dedup("D"))).id == first.id

    queue.cancel(first.id)

    assert r.exists("bull:q:de:D") == 0
    again = queue.add("a", {"v": 3}, deduplication=Dedup("D"))
    assert again.id != first.id
    assert r.lrange("bull:q:wait", 0, -1) == [again.id]


def test_idempotency_record_gets_the_outcome(queue: Queue, r: redis.Redis) -> None:
    job = queue.add("charge", None, idempotency_key="order-7", idempotency_window=60)
    queue.cancel(job.id, "refunded")
    record = r.hgetall("bull:q:x-idem:order-7")
    assert record["state"] == "failed" and record["value"] == "cancelled: refunded"


def test_child_with_fail_parent_on_failure_fails_its_parent(
    flows: FlowProducer, pq: Queue, cq: Queue, r: redis.Redis
) -> None:
    flows.add(
        FlowJob(
            "P",
            "pq",
            None,
            {"job_id": "P"},
            children=[
                FlowJob("c1", "cq", None, {"job_id": "c1", "fail_parent_on_failure": True}),
                FlowJob("c2", "cq", None, {"job_id": "c2"}),
            ],
        )
    )

    assert cq.cancel("c1", "bad input") is JobState.FAILED

    # As for any final failure of such a child: the parent is released, marked to fail...
    assert r.zrange("bull:pq:P:unsuccessful", 0, -1) == ["bull:cq:c1"]
    assert r.hget("bull:pq:P", "defa") == "child bull:cq:c1 failed"
    assert r.lrange("bull:pq:wait", 0, -1) == ["P"]
    # ...and the next fetch fails it instead of running it.
    assert activate(pq) is None
    assert r.zscore("bull:pq:failed", "P") is not None
    assert r.hget("bull:pq:P", "failedReason") == "child bull:cq:c1 failed"


def test_child_without_a_policy_keeps_its_parent_waiting(
    flows: FlowProducer, cq: Queue, r: redis.Redis
) -> None:
    flows.add(
        FlowJob(
            "P", "pq", None, {"job_id": "P"}, children=[FlowJob("c", "cq", None, {"job_id": "c"})]
        )
    )
    cq.cancel("c")
    assert r.zrange("bull:pq:waiting-children", 0, -1) == ["P"]
    assert r.smembers("bull:pq:P:dependencies") == {"bull:cq:c"}


# -- refusals ---------------------------------------------------------------------------------


def test_unknown_job(queue: Queue, r: redis.Redis) -> None:
    with pytest.raises(JobNotFoundError) as info:
        queue.cancel("nope", "x")
    assert info.value.job_id == "nope" and info.value.queue == "q"
    # A queue's own key is no job, whatever is there.
    queue.add("a", None)
    before = snapshot(r)
    for key_name in ("wait", "meta", "events"):
        with pytest.raises(JobNotFoundError):
            queue.cancel(key_name)
    assert snapshot(r) == before


@pytest.mark.parametrize("outcome", ["completed", "failed"])
def test_finished_job(queue: Queue, r: redis.Redis, outcome: str) -> None:
    queue.add("a", None)
    job = activate(queue)
    assert job is not None
    if outcome == "completed":
        job.move_to_completed("ok")
    else:
        job.move_to_failed(RuntimeError("boom"))
    before = snapshot(r)

    with pytest.raises(JobFinishedError, match="has already finished") as info:
        queue.cancel(job.id, "x")

    assert isinstance(info.value, JobStateError)
    assert snapshot(r) == before


def test_twice(queue: Queue, r: redis.Redis) -> None:
    job = queue.add("a", None)
    job.cancel("once")
    with pytest.raises(JobFinishedError):
        job.cancel("twice")
    assert r.hget(f"bull:q:{job.id}", "failedReason") == "cancelled: once"


@pytest.mark.parametrize("immediately", [True, False])
def test_pending_iteration_of_a_scheduler(
    queue: Queue, r: redis.Redis, immediately: bool
) -> None:
    # every: the first run is now (in wait); cron: at its next tick (delayed).
    if immediately:
        job = queue.upsert_job_scheduler("ev", every=60)
    else:
        job = queue.upsert_job_scheduler("cr", cron="0 0 1 1 *")
    assert job is not None
    before = snapshot(r)

    with pytest.raises(JobStateError, match="remove the scheduler instead"):
        queue.cancel(job.id, "x")

    assert snapshot(r) == before


def test_job_in_no_state(queue: Queue, r: redis.Redis) -> None:
    # A hash that no list or zset of the queue names (written by something else).
    r.hset("bull:q:stray", mapping={"name": "n", "data": "{}", "opts": "{}"})
    before = snapshot(r)
    with pytest.raises(JobStateError):
        queue.cancel("stray")
    assert snapshot(r) == before


@pytest.mark.parametrize(
    ("job_id", "reason", "named"),
    [
        ("j", "x" * 1001, "reason"),
        ("j", 7, "reason"),
        ("j", None, "reason"),
        ("j", "\ud800", "reason"),
        (7, "x", "job_id"),
        ("", "x", "job_id"),
        (None, "x", "job_id"),
        ("\udfff", "x", "job_id"),
    ],
)
def test_bad_input_writes_nothing(
    queue: Queue, r: redis.Redis, job_id: Any, reason: Any, named: str
) -> None:
    queue.add("a", None, job_id="j")
    before = snapshot(r)
    with pytest.raises(InvalidOptionError, match=named):
        queue.cancel(job_id, reason)
    job = queue.get_job("j")
    assert job is not None
    with pytest.raises(InvalidOptionError, match="reason"):
        job.cancel(reason if named == "reason" else 7)
    assert snapshot(r) == before


def test_longest_reason(queue: Queue, r: redis.Redis) -> None:
    job = queue.add("a", None)
    reason = "é" * 1000
    queue.cancel(job.id, reason)
    assert r.hget(f"bull:q:{job.id}", "failedReason") == "cancelled: " + reason


# -- active jobs ------------------------------------------------------------------------------


def next_message(pubsub: redis.client.PubSub, timeout: float = 5.0) -> dict[str, Any] | None:
    """The next published message (subscribe confirmations skipped), or None at ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        message = pubsub.get_message(ignore_subscribe_messages=True, timeout=0.1)
        if message is not None:
            return message
    return None


def test_active_job_with_a_lock_asks_its_worker(queue: Queue, r: redis.Redis) -> None:
    queue.add("a", None, attempts=5)
    job = activate(queue)
    assert job is not None
    seen = len(events(r))
    pubsub = r.pubsub()
    pubsub.subscribe(queue.keys.cancel_channel())
    assert queue.keys.cancel_channel() == "bull:q:x-cancel"
    try:
        assert next_message(pubsub, 0.2) is None  # nothing before the cancel

        assert queue.cancel(job.id, "stop now") is JobState.ACTIVE

        message = next_message(pubsub)
        assert message is not None and message["channel"] == "bull:q:x-cancel"
        assert json.loads(message["data"]) == {"jobId": job.id, "reason": "stop now"}
    finally:
        pubsub.close()
    # The job is the worker's to fail: untouched but for the request.
    assert r.hget(f"bull:q:{job.id}", "x-cancel") == "stop now"
    assert r.lrange("bull:q:active", 0, -1) == [job.id]
    assert r.get(f"bull:q:{job.id}:lock") == "tok:0"
    assert r.hget(f"bull:q:{job.id}", "failedReason") is None
    assert r.zcard("bull:q:failed") == 0
    assert last_events(r, seen) == []


def test_active_job_with_an_empty_reason(queue: Queue, r: redis.Redis) -> None:
    queue.add("a", None)
    job = activate(queue)
    assert job is not None
    pubsub = r.pubsub()
    pubsub.subscribe(queue.keys.cancel_channel())
    try:
        assert job.cancel() is JobState.ACTIVE
        message = next_message(pubsub)
        assert message is not None
        assert json.loads(message["data"]) == {"jobId": job.id, "reason": ""}
    finally:
        pubsub.close()
    # The field is there (empty): a worker tests for its presence, not its truth.
    assert r.hexists(f"bull:q:{job.id}", "x-cancel")
    assert r.hget(f"bull:q:{job.id}", "x-cancel") == ""


def test_active_job_without_a_lock_fails_now(queue: Queue, r: redis.Redis) -> None:
    queue.add("a", None, attempts=5)
    job = activate(queue)
    assert job is not None
    # Its worker died: the lock expired, and a stall check's first pass listed it.
    r.delete(f"bull:q:{job.id}:lock")
    r.sadd("bull:q:stalled", job.id)
    seen = len(events(r))
    pubsub = r.pubsub()
    pubsub.subscribe(queue.keys.cancel_channel())
    try:
        assert queue.cancel(job.id, "orphan") is JobState.FAILED
        assert next_message(pubsub, 0.2) is None  # nobody to tell
    finally:
        pubsub.close()

    assert_cancelled(r, job.id, "cancelled: orphan")
    assert r.llen("bull:q:active") == 0
    assert r.scard("bull:q:stalled") == 0
    # It ends the attempt it was in, as a stalled job failed at fetch.
    assert r.hget(f"bull:q:{job.id}", "atm") == "1"
    assert last_events(r, seen) == [
        {"event": "failed", "jobId": job.id, "failedReason": "cancelled: orphan", "prev": "active"},
        {"event": "retries-exhausted", "jobId": job.id, "attemptsMade": "1"},
    ]


@pytest.mark.parametrize("how", ["job", "queue"])
def test_retry_of_a_cancelled_job_clears_the_request(
    queue: Queue, r: redis.Redis, how: str
) -> None:
    queue.add("a", None)
    job = activate(queue)
    assert job is not None
    assert queue.cancel(job.id, "stop") is JobState.ACTIVE
    # What the worker does once the processor stopped.
    job.move_to_failed(JobCancelledError("cancelled: stop"))
    assert r.hget(f"bull:q:{job.id}", "x-cancel") == "stop"

    if how == "job":
        job.retry()
    else:
        assert queue.retry_jobs() == 1

    assert r.hexists(f"bull:q:{job.id}", "x-cancel") == 0
    assert r.lrange("bull:q:wait", 0, -1) == [job.id]
    # It runs again as a job never cancelled.
    again = activate(queue)
    assert again is not None and again.id == job.id
