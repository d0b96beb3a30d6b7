# Generated from tests/_async/test_queue_admin.py by scripts/unasync.py: do not edit.
"""Queue administration against a real server: pause, drain, clean, obliterate, bulk moves,
listings, counts, workers, meta settings and limits, with the keys BullMQ 6.7.0 expects."""

from __future__ import annotations

import base64
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

import pytest
import redis

from corral import Job, Queue, InvalidOptionError, QueueBusyError, _scripts, clock
from tests._sync.support import events, snapshot

P32 = 2**32


def job_hashes(r: redis.Redis, queue: str = "q") -> list[str]:
    """Keys of job hashes (and sub-keys) of the queue, by their numeric or test ids."""
    structures = {
        "wait", "paused", "active", "prioritized", "pc", "delayed", "waiting-children",
        "completed", "failed", "marker", "events", "meta", "stalled", "stalled-check",
        "limiter", "id", "de", "x-add",
    }  # fmt: skip
    return sorted(k for k in r.keys(f"bull:{queue}:*") if k.split(":")[2] not in structures)


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


def count_script_calls(queue: Queue, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record the name of every script the queue runs from now on."""
    calls: list[str] = []
    run = queue._run

    def counting(script: _scripts.Script, args: list[Any]) -> Any:
        calls.append(script.name)
        return run(script, args)

    monkeypatch.setattr(queue, "_run", counting)
    return calls


def seed_finished(r: redis.Redis, state: str, jobs: dict[str, int], priority: int = 0) -> None:
    """Write finished jobs as the finish script leaves them (hash + zset score = finishedOn).

    Used where a test needs many finished jobs; a few tests also finish jobs for real.
    """
    pipe = r.pipeline(transaction=False)
    for job_id, finished_on in jobs.items():
        fields: dict[str, Any] = {
            "name": "n",
            "data": "{}",
            "opts": '{"attempts":0}',
            "timestamp": finished_on - 10,
            "delay": 0,
            "priority": priority,
            "processedOn": finished_on - 5,
            "finishedOn": finished_on,
            "atm": 1,
            "ats": 1,
        }
        if state == "completed":
            fields["returnvalue"] = "null"
        else:
            fields["failedReason"] = "boom"
        pipe.hset(f"bull:q:{job_id}", mapping=fields)
        pipe.zadd(f"bull:q:{state}", {job_id: finished_on})
    pipe.execute()


# -- pause / resume ---------------------------------------------------------------------------


def test_pause_sets_meta_and_leaves_wait_alone(queue: Queue, r: redis.Redis) -> None:
    queue.add("a")
    r.delete("bull:q:marker")
    queue.pause()
    assert r.hget("bull:q:meta", "paused") == "1"
    assert queue.is_paused()
    assert r.lrange("bull:q:wait", 0, -1) == ["1"]
    assert events(r)[-1] == {"event": "paused"}
    queue.add("b")
    assert r.exists("bull:q:marker") == 0  # a paused queue wakes no worker
    assert activate(queue) is None  # and no worker takes a job


def test_resume_writes_the_markers_and_event(queue: Queue, r: redis.Redis) -> None:
    ts = clock.now_ms()
    queue.pause()
    queue.add("now")
    queue.add("later", delay=60, timestamp=ts)
    queue.resume()
    assert not queue.is_paused()
    assert r.hexists("bull:q:meta", "paused") == 0
    assert r.zrange("bull:q:marker", 0, -1, withscores=True) == [
        ("0", 0.0),
        ("1", float(ts + 60_000)),
    ]
    assert events(r)[-1] == {"event": "resumed"}
    job = activate(queue)
    assert job is not None and job.id == "1"


def test_resume_of_an_empty_queue_writes_no_marker(queue: Queue, r: redis.Redis) -> None:
    queue.pause()
    queue.resume()
    assert r.exists("bull:q:marker") == 0
    assert [e["event"] for e in events(r)] == ["paused", "resumed"]


# -- drain ------------------------------------------------------------------------------------


def test_drain_deletes_waiting_and_prioritized_jobs(
    queue: Queue, r: redis.Redis
) -> None:
    queue.add("active")
    assert activate(queue) is not None
    queue.add("w")  # 2
    queue.add("p", priority=3)  # 3
    queue.add("d", delay=60)  # 4
    seed_finished(r, "completed", {"c": 1000})
    r.rpush("bull:q:2:logs", "line")
    r.hset("bull:q:2", "deid", "dd")
    r.set("bull:q:de:dd", "2")
    r.set("bull:q:de:other", "9")
    queue.drain()
    assert r.llen("bull:q:wait") == 0
    assert r.exists("bull:q:prioritized", "bull:q:2", "bull:q:3", "bull:q:2:logs") == 0
    assert r.exists("bull:q:de:dd") == 0  # the deduplication id is free again
    assert r.get("bull:q:de:other") == "9"
    assert r.get("bull:q:pc") == "1"  # left as BullMQ leaves it
    assert r.zrange("bull:q:delayed", 0, -1) == ["4"]
    assert r.lrange("bull:q:active", 0, -1) == ["1"]
    assert r.zrange("bull:q:completed", 0, -1) == ["c"]
    assert r.exists("bull:q:1", "bull:q:4", "bull:q:c") == 3
    queue.drain(delayed=True)
    assert r.exists("bull:q:delayed", "bull:q:4") == 0
    assert job_hashes(r) == ["bull:q:1", "bull:q:1:lock", "bull:q:c"]


def test_drain_works_in_batches(
    queue: Queue, r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue.add_bulk([("j", None)] * 1500 + [("d", None, {"delay": 60})] * 1200)
    calls = count_script_calls(queue, monkeypatch)
    queue.drain(delayed=True)
    assert calls == ["drain_queue"] * 3  # at most 1000 jobs per call
    assert job_hashes(r) == []
    assert r.exists("bull:q:wait", "bull:q:delayed") == 0


# -- clean ------------------------------------------------------------------------------------


def test_clean_finished_jobs_by_finish_time(queue: Queue, r: redis.Redis) -> None:
    now = clock.now_ms()
    seed_finished(r, "completed", {"old": now - 60_000, "older": now - 90_000, "new": now})
    seed_finished(r, "failed", {"f": now - 60_000})
    r.rpush("bull:q:old:logs", "x")
    assert queue.clean(30, 0) == ["older", "old"]
    assert r.zrange("bull:q:completed", 0, -1) == ["new"]
    assert r.exists("bull:q:old", "bull:q:older", "bull:q:old:logs") == 0
    assert events(r)[-1] == {"event": "cleaned", "count": "2"}
    assert queue.clean(timedelta(seconds=30), 0, "failed") == ["f"]
    assert queue.clean(30, 0, "failed") == []
    assert events(r)[-1] == {"event": "cleaned", "count": "0"}


def test_clean_limit_takes_the_oldest(queue: Queue, r: redis.Redis) -> None:
    seed_finished(r, "completed", {"a": 3000, "b": 1000, "c": 2000})
    assert queue.clean(0, 2) == ["b", "c"]
    assert r.zrange("bull:q:completed", 0, -1) == ["a"]


def test_clean_waiting_delayed_prioritized_by_timestamp(
    queue: Queue, r: redis.Redis
) -> None:
    old = clock.now_ms() - 60_000
    for state, opts in (
        ("wait", {}),
        ("delayed", {"delay": 600}),
        ("prioritized", {"priority": 2}),
    ):
        queue.add(f"{state}-old", timestamp=old, **opts)
        queue.add(f"{state}-new", **opts)
    assert queue.clean(30, 0, "waiting") == ["1"]
    assert r.lrange("bull:q:wait", 0, -1) == ["2"]
    assert queue.clean(30, 0, "delayed") == ["3"]
    assert r.zrange("bull:q:delayed", 0, -1) == ["4"]
    assert queue.clean(30, 0, "prioritized") == ["5"]
    assert r.zrange("bull:q:prioritized", 0, -1) == ["6"]
    assert job_hashes(r) == ["bull:q:2", "bull:q:4", "bull:q:6"]


def test_clean_active_spares_locked_jobs(queue: Queue, r: redis.Redis) -> None:
    old = clock.now_ms() - 60_000
    queue.add("a", timestamp=old)
    queue.add("b", timestamp=old)
    activate(queue)
    activate(queue)
    r.sadd("bull:q:stalled", "1", "2")
    r.delete("bull:q:1:lock")  # its worker is gone
    assert queue.clean(0, 0, "active") == ["1"]
    assert r.lrange("bull:q:active", 0, -1) == ["2"]
    assert r.smembers("bull:q:stalled") == {"2"}
    assert r.exists("bull:q:1") == 0
    assert r.exists("bull:q:2", "bull:q:2:lock") == 2


def test_clean_scans_in_batches(
    queue: Queue, r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = clock.now_ms()
    # 2400 waiting jobs, every other one old: the scan must go past the first 1000 entries.
    queue.add_bulk([("j", None, {"timestamp": now - 60_000 * (i % 2)}) for i in range(2400)])
    calls = count_script_calls(queue, monkeypatch)
    removed = queue.clean(30, 0, "wait")
    assert calls == ["clean_jobs"] * 3  # 1000 entries scanned per call
    assert len(removed) == 1200
    assert removed[:3] == ["2", "4", "6"]  # the oldest (right end of the list) first
    assert r.llen("bull:q:wait") == 1200
    assert [e for e in events(r) if e["event"] == "cleaned"] == [
        {"event": "cleaned", "count": "1200"}
    ]
    seed_finished(r, "completed", {f"c{i}": 1000 + i for i in range(2500)})
    removed = queue.clean(0, 1500)
    assert removed == [f"c{i}" for i in range(1500)]
    assert r.zcard("bull:q:completed") == 1000
    assert events(r)[-1] == {"event": "cleaned", "count": "1500"}


# -- obliterate -------------------------------------------------------------------------------


def fill_everything(queue: Queue, r: redis.Redis) -> None:
    """One job of each kind and every side key a queue can have."""
    queue.add("active")
    activate(queue)
    queue.add("w")
    queue.add("p", priority=4)
    queue.add("d", delay=60)
    seed_finished(r, "completed", {"c": 1000})
    seed_finished(r, "failed", {"f": 1000})
    r.zadd("bull:q:waiting-children", {"parent": 1000})
    r.hset("bull:q:parent", "name", "parent")
    r.sadd("bull:q:parent:dependencies", "bull:q:2")
    r.rpush("bull:q:2:logs", "x")
    r.set("bull:q:de:x", "2")
    r.zadd("bull:q:repeat", {"sch": 1000})
    r.hset("bull:q:repeat:sch", "every", 1000)
    r.hset("bull:q:metrics:completed", "count", 1)
    r.set("bull:q:stalled-check", 1, px=30_000)
    r.sadd("bull:q:stalled", "1")
    r.set("bull:q:limiter", 1, px=30_000)


def test_obliterate_refuses_a_queue_with_active_jobs(
    queue: Queue, r: redis.Redis
) -> None:
    fill_everything(queue, r)
    before = snapshot(r)
    with pytest.raises(QueueBusyError, match="active jobs"):
        queue.obliterate()
    assert snapshot(r) == before


def test_obliterate_with_force_deletes_every_key(redis_url: str, r: redis.Redis) -> None:
    q = Queue("q", connection=redis_url)
    q2 = Queue("q2", connection=redis_url)
    try:
        fill_everything(q, r)
        q2.add("other")
        r.set("bull:q", "not a queue key")
        others = snapshot(r)
        q.obliterate(force=True)
        assert r.keys("bull:q:*") == []
        assert snapshot(r) == {k: v for k, v in others.items() if not k.startswith("bull:q:")}
        assert r.lrange("bull:q2:wait", 0, -1) == ["1"]
    finally:
        q.close()
        q2.close()


def test_obliterate_of_an_idle_queue_in_batches(
    queue: Queue, r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue.add_bulk([("j", None)] * 1300 + [("d", None, {"delay": 60})] * 1300)
    seed_finished(r, "completed", {f"c{i}": i for i in range(1200)})
    calls = count_script_calls(queue, monkeypatch)
    queue.obliterate()
    assert calls == ["obliterate_queue"] * 4
    assert r.keys("*") == []


def test_obliterate_escapes_glob_characters(redis_url: str, r: redis.Redis) -> None:
    star = Queue("a*", connection=redis_url, prefix="b[x]")
    other = Queue("ab", connection=redis_url, prefix="bx")
    try:
        star.add("j")
        other.add("j")
        r.set("b[x]:a*:de:z", "1")
        star.obliterate()
        assert sorted(r.keys("*")) == sorted(r.keys("bx:ab:*"))
        assert r.lrange("bx:ab:wait", 0, -1) == ["1"]
    finally:
        star.close()
        other.close()


# -- retry_jobs / promote_jobs ----------------------------------------------------------------


def test_retry_jobs_moves_failed_jobs_back(queue: Queue, r: redis.Redis) -> None:
    queue.add("a")
    queue.add("b", priority=2)
    for _ in range(2):
        job = activate(queue)
        assert job is not None
        job.move_to_failed(ValueError("boom"))
    r.delete("bull:q:marker")
    assert queue.retry_jobs() == 2
    assert r.zcard("bull:q:failed") == 0
    assert r.lrange("bull:q:wait", 0, -1) == ["1"]
    assert r.zrange("bull:q:prioritized", 0, -1) == ["2"]
    fields = r.hgetall("bull:q:1")
    assert not {"finishedOn", "processedOn", "failedReason"} & set(fields)
    assert (fields["atm"], fields["ats"]) == ("1", "1")
    assert "boom" in fields["stacktrace"]
    assert r.zrange("bull:q:marker", 0, -1) == ["0"]
    assert events(r)[-2:] == [
        {"event": "waiting", "jobId": "1", "prev": "failed"},
        {"event": "waiting", "jobId": "2", "prev": "failed"},
    ]


def test_retry_completed_jobs_before_a_timestamp(queue: Queue, r: redis.Redis) -> None:
    seed_finished(r, "completed", {"a": 1000, "b": 2000, "c": 3000})
    queue.pause()
    assert queue.retry_jobs("completed", timestamp=2000) == 2
    assert r.lrange("bull:q:wait", 0, -1) == ["b", "a"]
    assert "returnvalue" not in r.hgetall("bull:q:a")
    assert r.zrange("bull:q:completed", 0, -1) == ["c"]
    assert r.exists("bull:q:marker") == 0  # paused
    assert events(r)[-1] == {"event": "waiting", "jobId": "b", "prev": "completed"}


def test_retry_jobs_in_batches(
    queue: Queue, r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    seed_finished(r, "failed", {f"f{i}": 1000 + i for i in range(2500)})
    calls = count_script_calls(queue, monkeypatch)
    assert queue.retry_jobs(count=1000) == 2500
    assert calls == ["retry_jobs"] * 3
    assert r.llen("bull:q:wait") == 2500
    assert r.exists("bull:q:failed") == 0


def test_promote_jobs(queue: Queue, r: redis.Redis) -> None:
    queue.add("a", delay=60)
    queue.add("b", delay=30, priority=7)
    r.delete("bull:q:marker")
    assert queue.promote_jobs() == 2
    assert r.exists("bull:q:delayed") == 0
    assert r.lrange("bull:q:wait", 0, -1) == ["1"]
    assert r.zrange("bull:q:prioritized", 0, -1) == ["2"]
    assert r.hget("bull:q:1", "delay") == r.hget("bull:q:2", "delay") == "0"
    assert r.zrange("bull:q:marker", 0, -1) == ["0"]
    assert events(r)[-2:] == [
        {"event": "waiting", "jobId": "2", "prev": "delayed"},
        {"event": "waiting", "jobId": "1", "prev": "delayed"},
    ]


def test_promote_jobs_in_batches(
    queue: Queue, r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue.add_bulk([("d", None, {"delay": 60})] * 2100)
    calls = count_script_calls(queue, monkeypatch)
    assert queue.promote_jobs(count=1000) == 2100
    assert calls == ["promote_jobs"] * 3
    assert r.llen("bull:q:wait") == 2100


# -- listings ---------------------------------------------------------------------------------


@pytest.fixture
def listed(queue: Queue, r: redis.Redis) -> Queue:
    """a1 active; w1 w2 w3 waiting; d2 before d1; p2 before p1; c1 c2 completed; f1 failed."""
    queue.add("a", job_id="a1")
    activate(queue)
    ts = clock.now_ms()
    for job_id in ("w1", "w2", "w3"):
        queue.add("w", job_id=job_id)
    queue.add("d", job_id="d1", delay=20, timestamp=ts)
    queue.add("d", job_id="d2", delay=10, timestamp=ts)
    queue.add("p", job_id="p1", priority=5)
    queue.add("p", job_id="p2", priority=1)
    seed_finished(r, "completed", {"c1": 100, "c2": 200})
    seed_finished(r, "failed", {"f1": 100})
    return queue


EVERY_STATE_NEWEST_FIRST = ["a1", "c2", "c1", "d1", "d2", "f1", "p1", "p2", "w3", "w2", "w1"]


@pytest.mark.parametrize(
    ("states", "start", "end", "asc", "expected"),
    [
        ("waiting", 0, -1, False, ["w3", "w2", "w1"]),
        ("waiting", 0, -1, True, ["w1", "w2", "w3"]),
        ("wait", 1, 1, True, ["w2"]),
        (["waiting", "delayed"], 0, -1, True, ["w1", "w2", "w3", "d2", "d1"]),
        (["waiting", "delayed"], 2, 3, True, ["w3", "d2"]),
        (["waiting", "delayed"], 2, 3, False, ["w1", "d1"]),
        (["delayed", "waiting"], 1, 3, False, ["d2", "w3", "w2"]),
        (["waiting", "delayed", "prioritized"], 3, 10, False, ["d1", "d2", "p1", "p2"]),
        (["waiting", "delayed", "prioritized"], -2, -1, True, ["p2", "p1"]),
        (["waiting", "delayed", "prioritized"], -9, 1, True, ["w1", "w2"]),
        (["completed", "failed", "prioritized"], 0, 2, True, ["c1", "c2", "f1"]),
        (["active", "paused", "waiting-children", "waiting"], 0, 1, True, ["a1", "w1"]),
        (["waiting", "waiting"], 0, -1, True, ["w1", "w2", "w3"]),
        ("waiting", 5, 10, True, []),
        ("waiting", 2, 1, True, []),
        ("paused", 0, -1, True, []),
        (None, 0, -1, False, EVERY_STATE_NEWEST_FIRST),
    ],
)
def test_get_jobs_paginates_across_states(
    listed: Queue,
    states: Any,
    start: int,
    end: int,
    asc: bool,
    expected: list[str],
) -> None:
    jobs = listed.get_jobs(states, start, end, asc=asc)
    assert [j.id for j in jobs] == expected


def test_get_jobs_pages_have_no_gap_or_overlap(listed: Queue) -> None:
    pages = [[j.id for j in listed.get_jobs(None, i, i + 2)] for i in range(0, 12, 3)]
    assert [i for page in pages for i in page] == EVERY_STATE_NEWEST_FIRST


def test_get_jobs_reads_the_jobs(listed: Queue, r: redis.Redis) -> None:
    r.delete("bull:q:w2")  # an id whose hash vanished is skipped
    jobs = listed.get_jobs(["waiting", "failed"], asc=True)
    assert [(j.id, j.name, j.queue_name) for j in jobs] == [
        ("w1", "w", "q"),
        ("w3", "w", "q"),
        ("f1", "n", "q"),
    ]
    assert jobs[2].failed_reason == "boom" and jobs[2].finished_on == 100


def test_get_state_wrappers(listed: Queue) -> None:
    def ids(jobs: Awaitable[list[Job]]) -> list[str]:
        return [j.id for j in jobs]

    assert ids(listed.get_waiting()) == ["w1", "w2", "w3"]
    assert ids(listed.get_waiting(1)) == ["w2", "w3"]
    assert ids(listed.get_active()) == ["a1"]
    assert ids(listed.get_delayed()) == ["d2", "d1"]
    assert ids(listed.get_prioritized(0, 0)) == ["p2"]
    assert ids(listed.get_completed()) == ["c2", "c1"]
    assert ids(listed.get_failed()) == ["f1"]
    assert ids(listed.get_waiting_children()) == []


@pytest.mark.parametrize(
    ("start", "end", "asc", "expected"),
    [
        (0, -1, True, ["l0", "l1", "l2", "l3", "l4"]),
        (0, -1, False, ["l4", "l3", "l2", "l1", "l0"]),
        (1, 2, True, ["l1", "l2"]),
        (1, 2, False, ["l3", "l2"]),
        (1, -2, False, ["l3", "l2", "l1"]),
        (3, 10, True, ["l3", "l4"]),
        (6, 10, False, []),
    ],
)
def test_get_job_logs(
    queue: Queue, r: redis.Redis, start: int, end: int, asc: bool, expected: list[str]
) -> None:
    r.rpush("bull:q:7:logs", *[f"l{i}" for i in range(5)])
    assert queue.get_job_logs("7", start, end, asc) == (expected, 5)


def test_get_job_logs_of_a_job_without_logs(queue: Queue) -> None:
    assert queue.get_job_logs("nope") == ([], 0)


# -- counts -----------------------------------------------------------------------------------


def test_count_and_counts_per_priority(listed: Queue, r: redis.Redis) -> None:
    listed.add("p", priority=5)
    r.zadd("bull:q:waiting-children", {"parent": 1})
    # waiting 3 + delayed 2 + prioritized 3 + waiting-children 1; not active, completed, failed
    assert listed.count() == 9
    assert listed.get_counts_per_priority([0, 1, 5, 2, 5]) == {0: 3, 1: 1, 5: 2, 2: 0}
    assert listed.get_counts_per_priority([]) == {}


# -- workers ----------------------------------------------------------------------------------


def test_get_workers_lists_the_named_connections(queue: Queue, redis_url: str) -> None:
    b64 = base64.b64encode(b"q").decode()
    names = [f"bull:{b64}", f"bull:{b64}:w:mailer-1", f"bull:{b64}:qe", "bull:cTI=", "other"]
    conns = [redis.Redis.from_url(redis_url, decode_responses=True) for _ in names]
    try:
        for conn, name in zip(conns, names, strict=True):
            conn.client_setname(name)
        workers = queue.get_workers()
        assert sorted((w["name"], w.get("worker_name")) for w in workers) == [
            (f"bull:{b64}", None),
            (f"bull:{b64}:w:mailer-1", "mailer-1"),
        ]
        for worker in workers:
            assert {"addr", "age", "idle", "id"} <= set(worker)
    finally:
        for conn in conns:
            conn.close()


# -- meta, events, limits ---------------------------------------------------------------------


def test_meta_settings(queue: Queue, r: redis.Redis) -> None:
    assert queue.get_meta() == {"paused": False}
    queue.set_max_len_events(50)
    queue.set_global_concurrency(3)
    queue.set_global_rate_limit(10, 1.5)
    queue.pause()
    r.hset("bull:q:meta", "version", "bullmq:6.7.0")
    assert r.hgetall("bull:q:meta") == {
        "opts.maxLenEvents": "50",
        "concurrency": "3",
        "max": "10",
        "duration": "1500",
        "paused": "1",
        "version": "bullmq:6.7.0",
    }
    assert queue.get_meta() == {
        "opts.maxLenEvents": 50,
        "concurrency": 3,
        "max": 10,
        "duration": 1500,
        "paused": True,
        "version": "bullmq:6.7.0",
    }


def test_global_concurrency(queue: Queue, r: redis.Redis) -> None:
    assert queue.get_global_concurrency() is None
    queue.set_global_concurrency(1)
    assert queue.get_global_concurrency() == 1
    queue.add("a")
    queue.add("b")
    assert activate(queue) is not None
    assert activate(queue) is None  # the fetch honours meta.concurrency
    queue.remove_global_concurrency()
    assert r.hexists("bull:q:meta", "concurrency") == 0
    assert queue.get_global_concurrency() is None


def test_global_rate_limit(queue: Queue, r: redis.Redis) -> None:
    assert queue.get_global_rate_limit() is None
    queue.set_global_rate_limit(5, timedelta(seconds=2))
    assert queue.get_global_rate_limit() == (5, 2000)
    queue.remove_global_rate_limit()
    assert queue.get_global_rate_limit() is None
    assert r.hmget("bull:q:meta", ["max", "duration"]) == [None, None]


def test_rate_limit_and_its_ttl(queue: Queue, r: redis.Redis) -> None:
    assert queue.get_rate_limit_ttl() == -2  # no limiter key, as BullMQ answers
    assert queue.get_rate_limit_ttl(max_jobs=1) == 0
    queue.rate_limit(2)
    assert r.get("bull:q:limiter") == "9007199254740991"
    assert 0 < r.pttl("bull:q:limiter") <= 2000
    assert 0 < queue.get_rate_limit_ttl() <= 2000
    assert 0 < queue.get_rate_limit_ttl(max_jobs=100) <= 2000
    r.set("bull:q:limiter", 3, px=5000)  # a worker limiter's counter in its window
    assert queue.get_rate_limit_ttl(max_jobs=5) == 0
    assert 0 < queue.get_rate_limit_ttl(max_jobs=3) <= 5000
    r.set("bull:q:limiter", 3)  # no TTL: BullMQ's -1, and not a wait for a worker
    assert queue.get_rate_limit_ttl() == -1
    assert queue.get_rate_limit_ttl(max_jobs=2) == 0


def test_trim_events(queue: Queue, r: redis.Redis) -> None:
    for _ in range(5):
        queue.add("a")
    assert queue.trim_events(3, approximate=False) == 7
    assert r.xlen("bull:q:events") == 3
    pipe = r.pipeline(transaction=False)
    for i in range(500):
        pipe.xadd("bull:q:events", {"event": "x", "i": i})
    pipe.execute()
    removed = queue.trim_events(50)  # whole stream nodes only, as BullMQ trims
    assert removed > 0
    assert 50 <= r.xlen("bull:q:events") < 503


# -- bad input --------------------------------------------------------------------------------


Call = Callable[[Queue], Awaitable[Any]]


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda q: q.clean(-1, 0), "grace must be a finite number >= 0"),
        (lambda q: q.clean(0, -1), "limit must be an integer from 0 to"),
        (lambda q: q.clean(0, 1.5), "limit must be an integer"),
        (lambda q: q.clean(0, 0, "nope"), "state must be among .*'nope'"),
        (lambda q: q.retry_jobs(count=0), "count must be an integer from 1 to"),
        (lambda q: q.retry_jobs(count=-5), "count must be an integer from 1 to"),
        (lambda q: q.retry_jobs("active"), "state must be 'failed' or 'completed'"),
        (lambda q: q.retry_jobs(timestamp=-1), "timestamp must be an integer from 0 to"),
        (lambda q: q.promote_jobs(-1), "count must be an integer from 1 to"),
        (lambda q: q.get_jobs(["waiting", "nope"]), "states must be among .*'nope'"),
        (lambda q: q.get_jobs("waiting", "0"), "start must be an integer"),
        (lambda q: q.get_job_logs("1", 0, None), "end must be an integer"),
        (lambda q: q.get_counts_per_priority([1, -1]), "priority must be an integer from 0 to"),
        (lambda q: q.set_global_concurrency(0), "concurrency must be an integer from 1 to"),
        (lambda q: q.set_global_rate_limit(0, 1), "max_jobs must be an integer from 1 to"),
        (lambda q: q.set_global_rate_limit(1, 0), "duration must be at least 1 ms"),
        (lambda q: q.set_global_rate_limit(1, -1), "duration must be a finite number >= 0"),
        (lambda q: q.rate_limit(0), "duration must be at least 1 ms"),
        (lambda q: q.get_rate_limit_ttl(0), "max_jobs must be an integer from 1 to"),
        (lambda q: q.trim_events(-1), "max_len must be an integer from 0 to"),
        (lambda q: q.set_max_len_events(True), "max_len must be an integer"),
    ],
)
def test_bad_input_writes_nothing(
    queue: Queue, r: redis.Redis, call: Call, message: str
) -> None:
    queue.add("seed")
    seed_finished(r, "failed", {"f": 1000})
    before = snapshot(r)
    with pytest.raises(InvalidOptionError, match=message):
        call(queue)
    assert snapshot(r) == before
