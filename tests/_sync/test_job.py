# Generated from tests/_async/test_job.py by scripts/unasync.py: do not edit.
"""Job methods against a real server: keys, scores, fields and events as BullMQ 6.7.0."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
import redis

from corral import (
    Job,
    Queue,
    InvalidOptionError,
    JobLockedError,
    JobNotFoundError,
    JobState,
    JobStateError,
    LockMismatchError,
    LockMissingError,
    NotActiveError,
    _scripts,
    clock,
)
from tests._sync.support import events, snapshot

T = 1_700_000_000_000  # a fixed "now" (epoch ms) for the scripts that take the time
P32 = 2**32


@pytest.fixture
def frozen(monkeypatch: pytest.MonkeyPatch) -> int:
    """Freeze the clock the job methods read at ``T``."""
    monkeypatch.setattr(clock, "now_ms", lambda: T)
    return T


def activate(queue: Queue) -> Job:
    """Take the next job as a worker would, with lock token ``tok:0``."""
    reply = queue._run(
        _scripts.MOVE_TO_ACTIVE, [queue._job_prefix, T, 1, "tok", 0, 30000, ""]
    )
    (f,) = _scripts.parse_fetched(reply, 2)
    return queue._bind(f.job_id, f.fields, token=f.token)


def failed_job(queue: Queue) -> Job:
    queue.add("a", {"v": 1}, attempts=1)
    job = activate(queue)
    job.move_to_failed(RuntimeError("boom"))
    return job


# -- progress, logs, data -----------------------------------------------------------------------


def test_update_progress_writes_field_and_event(queue: Queue, r: redis.Redis) -> None:
    job = queue.add("a")
    job.update_progress(42)
    assert r.hget("bull:q:1", "progress") == "42"
    job.update_progress({"pct": 50, "step": "upload"})
    assert r.hget("bull:q:1", "progress") == '{"pct":50,"step":"upload"}'
    assert job.progress == {"pct": 50, "step": "upload"}
    assert events(r)[-2:] == [
        {"event": "progress", "jobId": "1", "data": "42"},
        {"event": "progress", "jobId": "1", "data": '{"pct":50,"step":"upload"}'},
    ]
    assert (queue.get_job("1")).progress == {"pct": 50, "step": "upload"}  # type: ignore[union-attr]


def test_update_progress_errors_write_nothing(queue: Queue, r: redis.Redis) -> None:
    job = queue.add("a")
    before = snapshot(r)
    with pytest.raises(InvalidOptionError):
        job.update_progress(float("nan"))
    assert snapshot(r) == before
    r.delete("bull:q:1")
    before = snapshot(r)
    with pytest.raises(JobNotFoundError) as info:
        job.update_progress(1)
    assert (info.value.job_id, info.value.queue) == ("1", "q")
    assert snapshot(r) == before


def test_log_and_get_logs(queue: Queue, r: redis.Redis) -> None:
    job = queue.add("a")
    for i in range(5):
        assert job.log(f"line {i}") == i + 1
    assert r.lrange("bull:q:1:logs", 0, -1) == [f"line {i}" for i in range(5)]
    assert job.get_logs() == ([f"line {i}" for i in range(5)], 5)
    assert job.get_logs(1, 2) == (["line 1", "line 2"], 5)
    assert job.get_logs(0, 1, asc=False) == (["line 4", "line 3"], 5)
    assert job.get_logs(asc=False) == ([f"line {i}" for i in range(4, -1, -1)], 5)


def test_log_is_trimmed_to_keep_logs(queue: Queue, r: redis.Redis) -> None:
    queue.add("a")
    r.hset("bull:q:1", "opts", '{"attempts":0,"kl":2}')  # keepLogs as Node stores it
    job = queue.get_job("1")
    assert job is not None
    assert job.log("a") == 1
    assert job.log("b") == 2
    assert job.log("c") == 2
    assert r.lrange("bull:q:1:logs", 0, -1) == ["b", "c"]


def test_clear_logs(queue: Queue, r: redis.Redis) -> None:
    job = queue.add("a")
    for line in "abcd":
        job.log(line)
    job.clear_logs(keep=2)
    assert job.get_logs() == (["c", "d"], 2)
    job.clear_logs()
    assert r.exists("bull:q:1:logs") == 0
    assert job.get_logs() == ([], 0)
    with pytest.raises(InvalidOptionError):
        job.clear_logs(-1)


def test_log_on_missing_job_leaves_no_list(queue: Queue, r: redis.Redis) -> None:
    job = queue.add("a")
    r.delete("bull:q:1")
    with pytest.raises(JobNotFoundError):
        job.log("x")
    assert r.exists("bull:q:1:logs") == 0


def test_update_data(queue: Queue, r: redis.Redis) -> None:
    job = queue.add("a", {"v": 1})
    n_events = len(events(r))
    job.update_data({"v": 2, "s": "日本"})
    assert r.hget("bull:q:1", "data") == '{"v":2,"s":"日本"}'
    assert job.data == {"v": 2, "s": "日本"}
    assert len(events(r)) == n_events  # BullMQ emits nothing for updateData
    before = snapshot(r)
    with pytest.raises(InvalidOptionError):
        job.update_data({1, 2})
    assert snapshot(r) == before
    r.delete("bull:q:1")
    with pytest.raises(JobNotFoundError):
        job.update_data({"v": 3})
    assert r.exists("bull:q:1") == 0


# -- change_delay, change_priority, promote ------------------------------------------------------


def test_change_delay_reschedules_from_now(
    queue: Queue, r: redis.Redis, frozen: int
) -> None:
    job = queue.add("a", delay=1, timestamp=T)
    # Another job already due at T + 5000: the changed one takes the next seq in that ms.
    queue.add("b", delay=5, timestamp=T)
    job.change_delay(timedelta(seconds=5))
    assert r.zrange("bull:q:delayed", 0, -1, withscores=True) == [
        ("2", float((T + 5000) * 4096)),
        ("1", float((T + 5000) * 4096 + 1)),
    ]
    assert r.hget("bull:q:1", "delay") == "5000"
    assert job.delay == 5000
    assert events(r)[-1] == {"event": "delayed", "jobId": "1", "delay": str(T + 5000)}
    # The "1" marker pointed at the old runAt (T + 1000); it now points at the earliest.
    assert r.zrange("bull:q:marker", 0, -1, withscores=True) == [("1", float(T + 5000))]
    job.change_delay(0.25)
    assert r.zscore("bull:q:delayed", "1") == float((T + 250) * 4096)
    assert r.zrange("bull:q:marker", 0, -1, withscores=True) == [("1", float(T + 250))]


def test_change_delay_refuses_jobs_not_delayed(queue: Queue, r: redis.Redis) -> None:
    job = queue.add("a")
    before = snapshot(r)
    with pytest.raises(JobStateError):
        job.change_delay(5)
    with pytest.raises(InvalidOptionError):
        job.change_delay(-1)
    assert snapshot(r) == before
    assert job.delay == 0
    r.delete("bull:q:1")
    with pytest.raises(JobNotFoundError):
        job.change_delay(5)


def test_change_priority_moves_a_waiting_job(queue: Queue, r: redis.Redis) -> None:
    job = queue.add("a")
    queue.add("b", priority=3)
    r.delete("bull:q:marker")
    job.change_priority(3)
    assert r.llen("bull:q:wait") == 0
    # A new counter: it goes behind b, which was queued at priority 3 before.
    assert r.zrange("bull:q:prioritized", 0, -1, withscores=True) == [
        ("2", float(3 * P32 + 1)),
        ("1", float(3 * P32 + 2)),
    ]
    assert r.hget("bull:q:1", "priority") == "3"
    assert r.hget("bull:q:1", "opts") == '{"attempts":0}'  # opts untouched, as BullMQ
    assert job.priority == 3
    assert r.zrange("bull:q:marker", 0, -1, withscores=True) == [("0", 0.0)]


def test_change_priority_within_prioritized_takes_a_new_counter(
    queue: Queue, r: redis.Redis
) -> None:
    job = queue.add("a", priority=5)
    queue.add("b", priority=1)
    job.change_priority(1)
    assert r.zrange("bull:q:prioritized", 0, -1, withscores=True) == [
        ("2", float(P32 + 2)),
        ("1", float(P32 + 3)),
    ]
    assert r.get("bull:q:pc") == "3"


def test_change_priority_to_zero_goes_to_wait(queue: Queue, r: redis.Redis) -> None:
    queue.add("w")
    a = queue.add("a", priority=5)
    b = queue.add("b", priority=5)
    a.change_priority(0)
    b.change_priority(0, lifo=True)
    assert r.exists("bull:q:prioritized") == 0
    # Workers pop the right end: b (lifo) first, then w, then a (queued at the back).
    assert r.lrange("bull:q:wait", 0, -1) == ["2", "1", "3"]
    assert r.hget("bull:q:2", "priority") == "0"


def test_change_priority_of_a_delayed_job_only_sets_the_field(
    queue: Queue, r: redis.Redis
) -> None:
    job = queue.add("a", delay=10, timestamp=T)
    r.delete("bull:q:marker")
    job.change_priority(7)
    assert r.hget("bull:q:1", "priority") == "7"
    assert r.zrange("bull:q:delayed", 0, -1, withscores=True) == [("1", float((T + 10000) * 4096))]
    assert r.exists("bull:q:prioritized", "bull:q:marker") == 0
    job.promote()  # the new priority applies when the job becomes ready
    assert r.zrange("bull:q:prioritized", 0, -1, withscores=True) == [("1", float(7 * P32 + 1))]


def test_change_priority_on_paused_queue_writes_no_marker(
    queue: Queue, r: redis.Redis
) -> None:
    r.hset("bull:q:meta", "paused", "1")
    job = queue.add("a")
    job.change_priority(2)
    assert r.zrange("bull:q:prioritized", 0, -1) == ["1"]
    assert r.exists("bull:q:marker") == 0


@pytest.mark.parametrize("bad", [-1, 2_097_152, 1.5, True, "1"])
def test_change_priority_refuses_bad_values(
    queue: Queue, r: redis.Redis, bad: Any
) -> None:
    job = queue.add("a")
    before = snapshot(r)
    with pytest.raises(InvalidOptionError, match="priority must be an integer"):
        job.change_priority(bad)
    assert snapshot(r) == before


def test_change_priority_missing_job(queue: Queue, r: redis.Redis) -> None:
    job = queue.add("a")
    r.delete("bull:q:1")
    with pytest.raises(JobNotFoundError):
        job.change_priority(1)
    assert r.exists("bull:q:1") == 0


def test_promote(queue: Queue, r: redis.Redis) -> None:
    job = queue.add("a", delay=60, timestamp=T)
    prio = queue.add("b", delay=60, priority=4, timestamp=T)
    job.promote()
    prio.promote()
    assert r.exists("bull:q:delayed") == 0
    assert r.lrange("bull:q:wait", 0, -1) == ["1"]
    assert r.zrange("bull:q:prioritized", 0, -1, withscores=True) == [("2", float(4 * P32 + 1))]
    assert r.hget("bull:q:1", "delay") == r.hget("bull:q:2", "delay") == "0"
    assert job.delay == 0
    assert events(r)[-2:] == [
        {"event": "waiting", "jobId": "1", "prev": "delayed"},
        {"event": "waiting", "jobId": "2", "prev": "delayed"},
    ]
    assert ("0", 0.0) in r.zrange("bull:q:marker", 0, -1, withscores=True)


def test_promote_refuses_jobs_not_delayed(queue: Queue, r: redis.Redis) -> None:
    job = queue.add("a")
    before = snapshot(r)
    with pytest.raises(JobStateError):
        job.promote()
    assert snapshot(r) == before
    r.delete("bull:q:1")
    with pytest.raises(JobNotFoundError):
        job.promote()


# -- retry ---------------------------------------------------------------------------------------


def test_retry_failed_job(queue: Queue, r: redis.Redis) -> None:
    job = failed_job(queue)
    stacktrace = r.hget("bull:q:1", "stacktrace")
    r.delete("bull:q:marker")
    job.retry()
    assert r.exists("bull:q:failed") == 0
    assert r.lrange("bull:q:wait", 0, -1) == ["1"]
    fields = r.hgetall("bull:q:1")
    for gone in ("finishedOn", "processedOn", "failedReason", "returnvalue"):
        assert gone not in fields
    assert (fields["atm"], fields["ats"], fields["stacktrace"]) == ("1", "1", stacktrace)
    assert events(r)[-1] == {"event": "waiting", "jobId": "1", "prev": "failed"}
    assert r.zrange("bull:q:marker", 0, -1, withscores=True) == [("0", 0.0)]
    assert (job.failed_reason, job.finished_on, job.processed_on) == (None, None, None)
    assert job.attempts_made == 1


def test_retry_completed_job_with_resets(queue: Queue, r: redis.Redis) -> None:
    queue.add("a", priority=2)
    job = activate(queue)
    job.move_to_completed({"ok": True})
    job.retry("completed", reset_attempts_made=True, reset_attempts_started=True)
    assert r.exists("bull:q:completed") == 0
    assert r.zrange("bull:q:prioritized", 0, -1) == ["1"]
    fields = r.hgetall("bull:q:1")
    assert "returnvalue" not in fields
    assert "finishedOn" not in fields
    assert (fields["atm"], fields["ats"]) == ("0", "0")
    assert (job.attempts_made, job.attempts_started, job.returnvalue) == (0, 0, None)
    assert events(r)[-1] == {"event": "waiting", "jobId": "1", "prev": "completed"}


def test_retry_refusals_write_nothing(queue: Queue, r: redis.Redis) -> None:
    job = failed_job(queue)
    waiting = queue.add("w")
    before = snapshot(r)
    with pytest.raises(JobStateError):
        waiting.retry()
    with pytest.raises(JobStateError):
        job.retry("completed")
    with pytest.raises(InvalidOptionError):
        job.retry("active")
    assert snapshot(r) == before
    r.set("bull:q:1:lock", "someone")
    before = snapshot(r)
    with pytest.raises(JobLockedError):
        job.retry()
    assert snapshot(r) == before
    r.delete("bull:q:2")
    with pytest.raises(JobNotFoundError):
        waiting.retry()


# -- remove --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("add_kwargs", "prev"),
    [({}, "wait"), ({"delay": 60}, "delayed"), ({"priority": 3}, "prioritized")],
)
def test_remove_ready_or_delayed_job(
    queue: Queue, r: redis.Redis, add_kwargs: dict[str, Any], prev: str
) -> None:
    job = queue.add("a", **add_kwargs)
    job.log("hello")
    job.remove()
    assert r.keys("bull:q:1*") == []
    assert r.exists(f"bull:q:{prev}") == 0
    assert events(r)[-1] == {"event": "removed", "jobId": "1", "prev": prev}


def test_remove_finished_jobs(queue: Queue, r: redis.Redis) -> None:
    failed = failed_job(queue)
    queue.add("b")
    done = activate(queue)
    done.move_to_completed(1)
    failed.remove()
    done.remove()
    assert r.exists("bull:q:1", "bull:q:2", "bull:q:failed", "bull:q:completed") == 0
    assert events(r)[-2:] == [
        {"event": "removed", "jobId": "1", "prev": "failed"},
        {"event": "removed", "jobId": "2", "prev": "completed"},
    ]


def test_remove_frees_the_deduplication_id(queue: Queue, r: redis.Redis) -> None:
    job = queue.add("a")
    r.hset("bull:q:1", "deid", "d1")
    r.set("bull:q:de:d1", "1")
    r.set("bull:q:de:d2", "other")
    job.remove()
    assert r.exists("bull:q:de:d1") == 0


def test_remove_refuses_an_active_job(queue: Queue, r: redis.Redis) -> None:
    queue.add("a")
    job = activate(queue)
    before = snapshot(r)
    with pytest.raises(JobLockedError):
        job.remove()
    assert snapshot(r) == before


def test_remove_refuses_a_locked_job_outside_active(
    queue: Queue, r: redis.Redis
) -> None:
    job = queue.add("a")
    r.set("bull:q:1:lock", "tok:9")
    before = snapshot(r)
    with pytest.raises(JobLockedError):
        job.remove()
    assert snapshot(r) == before


def test_remove_missing_job(queue: Queue, r: redis.Redis) -> None:
    job = queue.add("a")
    r.delete("bull:q:1")
    before = snapshot(r)
    with pytest.raises(JobNotFoundError):
        job.remove()
    assert snapshot(r) == before


def build_flow(r: redis.Redis) -> None:
    """A parent in q waiting for: c1 (q, waiting), c2 (queue other, waiting; itself the
    parent of g1 in q, delayed) and c3 (q, completed)."""
    r.hset("bull:q:parent", mapping={"name": "p", "data": "{}", "opts": "{}", "timestamp": T})
    r.zadd("bull:q:waiting-children", {"parent": T})
    r.sadd("bull:q:parent:dependencies", "bull:q:c1", "bull:other:c2")
    r.hset("bull:q:parent:processed", "bull:q:c3", '"done"')
    for key in ("bull:q:c1", "bull:other:c2", "bull:q:c3"):
        r.hset(key, mapping={"name": "c", "data": "{}", "parentKey": "bull:q:parent"})
    r.lpush("bull:q:wait", "c1")
    r.zadd("bull:q:completed", {"c3": T})
    r.zadd("bull:other:waiting-children", {"c2": T})
    r.sadd("bull:other:c2:dependencies", "bull:q:g1")
    r.hset("bull:q:g1", mapping={"name": "g", "data": "{}", "parentKey": "bull:other:c2"})
    r.zadd("bull:q:delayed", {"g1": T * 4096})


def test_remove_takes_the_whole_flow_below(queue: Queue, r: redis.Redis) -> None:
    build_flow(r)
    r.lpush("bull:q:wait", "unrelated")
    job = queue.get_job("parent")
    assert job is not None
    job.remove()
    assert sorted(r.keys("*")) == ["bull:other:events", "bull:q:events", "bull:q:wait"]
    assert r.lrange("bull:q:wait", 0, -1) == ["unrelated"]
    # Children before their parents; each event goes to the job's own queue.
    assert events(r, "other") == [{"event": "removed", "jobId": "c2", "prev": "waiting-children"}]
    assert sorted(events(r)[:-1], key=lambda e: e["jobId"]) == [
        {"event": "removed", "jobId": "c1", "prev": "wait"},
        {"event": "removed", "jobId": "c3", "prev": "completed"},
        {"event": "removed", "jobId": "g1", "prev": "delayed"},
    ]
    assert events(r)[-1] == {"event": "removed", "jobId": "parent", "prev": "waiting-children"}


def test_remove_refuses_when_a_grandchild_is_active(
    queue: Queue, r: redis.Redis
) -> None:
    build_flow(r)
    r.zrem("bull:q:delayed", "g1")
    r.lpush("bull:q:active", "g1")
    job = queue.get_job("parent")
    assert job is not None
    before = snapshot(r)
    with pytest.raises(JobLockedError):
        job.remove()
    assert snapshot(r) == before


def test_remove_without_children_unlinks_nothing_below(
    queue: Queue, r: redis.Redis
) -> None:
    build_flow(r)
    r.lpush("bull:q:active", "c1")  # an active child does not matter when children stay
    job = queue.get_job("parent")
    assert job is not None
    job.remove(remove_children=False)
    assert r.exists("bull:q:parent", "bull:q:parent:dependencies", "bull:q:parent:processed") == 0
    assert r.exists("bull:q:c1", "bull:other:c2", "bull:q:c3", "bull:q:g1") == 4


def test_removing_a_child_unlinks_it_from_its_parent(
    queue: Queue, r: redis.Redis
) -> None:
    build_flow(r)
    child = queue.get_job("c1")
    assert child is not None
    child.remove()
    assert r.smembers("bull:q:parent:dependencies") == {"bull:other:c2"}
    assert r.zrange("bull:q:waiting-children", 0, -1) == ["parent"]  # released later


# -- state ---------------------------------------------------------------------------------------


def test_get_state_in_every_state(queue: Queue, r: redis.Redis) -> None:
    waiting = queue.add("w")
    prio = queue.add("p", priority=1)
    delayed = queue.add("d", delay=60)
    assert waiting.get_state() is JobState.WAITING
    assert waiting.is_waiting()
    assert prio.get_state() is JobState.PRIORITIZED
    assert prio.is_prioritized()
    assert not prio.is_waiting()
    assert delayed.get_state() is JobState.DELAYED
    assert delayed.is_delayed()
    active = activate(queue)
    assert active.id == "1"
    assert active.is_active()
    active.move_to_completed(None)
    assert active.is_completed()
    second = activate(queue)  # wait is empty now: the prioritized job
    assert second.id == "2"
    second.move_to_failed(RuntimeError("x"))
    assert second.is_failed()
    r.zadd("bull:q:waiting-children", {"wc": T})
    r.hset("bull:q:wc", "name", "wc")
    parent = queue.get_job("wc")
    assert parent is not None
    assert parent.is_waiting_children()
    r.lpush("bull:q:paused", "old")  # data of BullMQ < 5: still waiting
    assert queue._bind("old", {}).get_state() is JobState.WAITING
    assert queue._bind("nope", {}).get_state() is JobState.UNKNOWN


# -- step jobs -----------------------------------------------------------------------------------


def test_move_to_delayed(queue: Queue, r: redis.Redis, frozen: int) -> None:
    queue.add("a")
    job = activate(queue)
    r.sadd("bull:q:stalled", "1")
    job.move_to_delayed(T + 10_000)
    assert r.exists("bull:q:active", "bull:q:1:lock", "bull:q:stalled") == 0
    assert r.zrange("bull:q:delayed", 0, -1, withscores=True) == [("1", float((T + 10_000) * 4096))]
    assert r.hget("bull:q:1", "delay") == "10000"
    assert r.hget("bull:q:1", "atm") is None  # not a finished attempt
    assert events(r)[-1] == {"event": "delayed", "jobId": "1", "delay": str(T + 10_000)}
    assert ("1", float(T + 10_000)) in r.zrange("bull:q:marker", 0, -1, withscores=True)
    assert (job.delay, job.token) == (10_000, None)


def test_move_to_delayed_in_the_past_stores_no_negative_delay(
    queue: Queue, r: redis.Redis, frozen: int
) -> None:
    queue.add("a")
    job = activate(queue)
    job.move_to_delayed(T - 5, token="tok:0")
    assert r.hget("bull:q:1", "delay") == "0"
    assert r.zscore("bull:q:delayed", "1") == float((T - 5) * 4096)


def test_step_moves_check_the_lock(queue: Queue, r: redis.Redis) -> None:
    queue.add("a")
    job = activate(queue)
    before = snapshot(r)
    with pytest.raises(LockMismatchError):
        job.move_to_delayed(T, token="other:0")
    with pytest.raises(LockMismatchError):
        job.move_to_wait(token="other:0")
    assert snapshot(r) == before
    r.delete("bull:q:1:lock")
    with pytest.raises(LockMissingError):
        job.move_to_wait()
    r.set("bull:q:1:lock", "tok:0")
    r.delete("bull:q:active")
    before = snapshot(r)
    with pytest.raises(NotActiveError):
        job.move_to_delayed(T)
    assert snapshot(r) == before
    r.delete("bull:q:1")
    with pytest.raises(JobNotFoundError):
        job.move_to_wait()
    with pytest.raises(InvalidOptionError):
        job.move_to_delayed(-1)


def test_finishing_checks_the_lock_and_that_the_job_is_still_active(
    queue: Queue, r: redis.Redis
) -> None:
    queue.add("a")
    job = activate(queue)
    before = snapshot(r)
    # Another worker's token: the job is not ours to finish.
    with pytest.raises(LockMismatchError):
        job.move_to_completed("late", token="other:0")
    with pytest.raises(LockMismatchError):
        job.move_to_failed(RuntimeError("late"), token="other:0")
    assert snapshot(r) == before
    # Our lock expired: refused as missing, whoever holds the job now.
    r.delete("bull:q:1:lock")
    before = snapshot(r)
    with pytest.raises(LockMissingError):
        job.move_to_completed("late")
    assert snapshot(r) == before
    # Our lock, but the job is no longer active (moved meanwhile): nothing is written.
    r.set("bull:q:1:lock", "tok:0")
    r.delete("bull:q:active")
    r.rpush("bull:q:wait", "1")
    before = snapshot(r)
    with pytest.raises(NotActiveError):
        job.move_to_completed("late")
    with pytest.raises(NotActiveError):
        job.move_to_failed(RuntimeError("late"))
    with pytest.raises(NotActiveError):  # no lock check at all (manual processing)
        job.move_to_completed("late", token="0")
    assert snapshot(r) == before


def test_move_to_wait(queue: Queue, r: redis.Redis) -> None:
    queue.add("a")
    queue.add("b", priority=2)
    first = activate(queue)
    second = activate(queue)
    r.sadd("bull:q:stalled", "1", "2")
    r.delete("bull:q:marker")
    assert first.move_to_wait() == 0
    assert r.lrange("bull:q:wait", 0, -1) == ["1"]
    assert r.exists("bull:q:1:lock") == 0
    assert r.smembers("bull:q:stalled") == {"2"}
    assert events(r)[-1] == {"event": "waiting", "jobId": "1", "prev": "active"}
    assert r.zrange("bull:q:marker", 0, -1, withscores=True) == [("0", 0.0)]
    assert first.token is None
    # A rate-limited queue: the answer is how long workers hold off.
    r.set("bull:q:limiter", 9007199254740991, px=5000)
    ttl = second.move_to_wait()
    assert 0 < ttl <= 5000
    assert r.zrange("bull:q:prioritized", 0, -1) == ["2"]
    assert r.lrange("bull:q:active", 0, -1) == []


def test_extend_lock(queue: Queue, r: redis.Redis) -> None:
    queue.add("a")
    job = activate(queue)
    r.sadd("bull:q:stalled", "1")
    job.extend_lock(120)
    assert 30_000 < r.pttl("bull:q:1:lock") <= 120_000
    assert r.exists("bull:q:stalled") == 0
    with pytest.raises(LockMismatchError):
        job.extend_lock(120, token="other:0")
    with pytest.raises(InvalidOptionError):
        job.extend_lock(0)
    r.delete("bull:q:1:lock")
    with pytest.raises(LockMissingError):
        job.extend_lock(timedelta(seconds=10))
    assert r.exists("bull:q:1:lock") == 0


def test_refresh(queue: Queue, r: redis.Redis) -> None:
    queue.add("a", {"v": 1})
    job = activate(queue)
    r.hset("bull:q:1", mapping={"data": '{"v":2}', "progress": "7", "atm": "3"})
    job.refresh()
    assert (job.data, job.progress, job.attempts_made, job.token) == ({"v": 2}, 7, 3, "tok:0")
    r.delete("bull:q:1")
    with pytest.raises(JobNotFoundError):
        job.refresh()
