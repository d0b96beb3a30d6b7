"""Bad input is refused before anything is written (issue 19): each case the fuzzing run found.

Every refusal is an :class:`InvalidOptionError` naming the argument, and the keyspace is the
same afterwards (``snapshot``).
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import redis

from corral import AsyncFlowProducer, AsyncQueue, AsyncQueueEvents, FlowJob, Worker
from corral.bounds import MAX_TIMESTAMP_MS, RESERVED_JOB_IDS
from corral.errors import InvalidOptionError, ServerReplyError
from corral.job import JobState
from tests._async.support import snapshot

Call = Callable[[AsyncQueue], Awaitable[Any]]

BIG = sys.maxsize  # 2**63 - 1


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda q: q.set_max_len_events(BIG), "max_len must be an integer from 0 to"),
        (lambda q: q.add("a", remove_on_complete=BIG), "remove_on_complete must be True, a count"),
        (lambda q: q.add("a", remove_on_fail={"count": 2**63}), r"remove_on_fail\['count'\]"),
        (lambda q: q.add("a", remove_on_fail={"age": 2**40}), r"remove_on_fail\['age'\]"),
        (lambda q: q.add("a", keep_logs=BIG), "keep_logs must be an integer from 0 to"),
        (lambda q: q.add("a", attempts=2**53 + 1), "attempts must be an integer from 1 to"),
        (lambda q: q.add("a", stacktrace_limit=2**63), "stacktrace_limit must be an integer"),
        (lambda q: q.add("a", size_limit=2**40), "size_limit must be an integer from 1 to"),
        (lambda q: q.add("a", timestamp=2**63), r"timestamp \(epoch ms\) must be an integer"),
        (lambda q: q.add("a", delay=1e17), "delay must be at most"),
        (lambda q: q.add("a", delay=BIG), "delay must be at most"),
        (
            lambda q: q.add("a", timestamp=MAX_TIMESTAMP_MS - 10, delay=1),
            "delay must end before",
        ),
        (
            lambda q: q.add("a", idempotency_key="k", idempotency_window=1e16),
            "idempotency_window must be at most",
        ),
        (lambda q: q.add("a", backoff=1e300), "backoff must be at most"),
        (lambda q: q.add("\ud800"), "job name must be valid text"),
        (lambda q: q.add("a", job_id="x\ud800"), "job_id must be valid text"),
        (lambda q: q.add("a", {"k": "\ud800"}), "data must be JSON-serializable"),
        (lambda q: q.add("a", deduplication={"id": "\udfff"}), "deduplication id must be valid"),
        (lambda q: q.add("a", deduplication={"id": "d" * 1025}), "deduplication id must be at"),
        (lambda q: q.add("a", idempotency_key="\ud800"), "idempotency_key must be valid text"),
        (
            lambda q: q.add("a", parent={"id": "p", "queue": "other:pq"}),
            "not under this queue's prefix 'bull'",
        ),
        (
            lambda q: q.add("a", parent={"id": "p", "queue": "bull:pq:x"}),
            "not under this queue's prefix",
        ),
        (lambda q: q.add("a", parent={"id": "meta", "queue": "bull:pq"}), "parent id 'meta'"),
        (lambda q: q.add("a", parent={"id": "p:lock", "queue": "bull:pq"}), "parent id must not"),
        (
            lambda q: q.add("a", job_id="p", parent={"id": "p", "queue": "bull:q"}),
            "job id 'p' is the id of its parent",
        ),
        (lambda q: q.get_jobs(5), "states must be a state name or several, got int 5"),
        (lambda q: q.get_jobs("waiting", 0, 2**63), "end must be an integer from"),
        (lambda q: q.get_jobs("waiting", -(2**64)), "start must be an integer from"),
        (lambda q: q.get_job_logs("1", 0, 2**63), "end must be an integer from"),
        (lambda q: q.get_job_logs("\ud800"), "job_id must be valid text"),
        (lambda q: q.get_job_logs(7), "job_id must be a non-empty string"),
        (lambda q: q.get_metrics("completed", 2**63), "start must be an integer from"),
        (lambda q: q.get_job_schedulers(0, 2**63), "end must be an integer from"),
        (lambda q: q.get_counts_per_priority([2**63]), "priority must be an integer from 0"),
        (lambda q: q.clean(0, 2**63), "limit must be an integer from 0 to"),
        (lambda q: q.retry_jobs(timestamp=2**63), "timestamp must be an integer from 0 to"),
        (lambda q: q.get_deduplication_job_id("\ud800"), "deduplication id must be valid"),
        (lambda q: q.remove_deduplication_key(""), "deduplication id must be a non-empty"),
        (lambda q: q.upsert_job_scheduler("a:1", every=1), "scheduler id must not contain ':'"),
        (lambda q: q.upsert_job_scheduler("s", cron="0 0 30 2 *"), "never fires"),
        (lambda q: q.upsert_job_scheduler("s", cron="* * * * *", tz="Z" * 300), "tz must be at"),
        (lambda q: q.upsert_job_scheduler("s", every=1, limit=2**63), "limit must be an integer"),
        (lambda q: q.upsert_job_scheduler("s", every=1, now_ms=2**63), "now_ms must be an"),
        (lambda q: q.set_global_rate_limit(10**17, 1), "max_jobs must be an integer from 1 to"),
        (lambda q: q.set_global_concurrency(2**63), "concurrency must be an integer from 1 to"),
        (lambda q: q.rate_limit(1e17), "duration must be at most"),
        (lambda q: q.get_counts_per_priority(0), "priorities must be several priorities"),
        (lambda q: q.get_job_counts({"a": 1}), "unknown job state"),
        (lambda q: q.get_job_scheduler(False), "scheduler id must be a non-empty string"),
        (lambda q: q.get_job_scheduler("\ud800"), "scheduler id must be valid text"),
        (lambda q: q.remove_job_scheduler(False), "scheduler id must be a non-empty string"),
        (lambda q: q.publish_event("e", object()), "fields must be a dict"),
        (lambda q: q.publish_event("e", {"a": float("nan")}), r"fields\['a'\]: data must be"),
        (lambda q: q.publish_event("e", {"a": "\ud800"}), r"fields\['a'\]: value must be"),
        (lambda q: q.publish_event("e", {1: "x"}), "fields key must be a non-empty string"),
    ],
)
async def test_refused_and_nothing_written(
    queue: AsyncQueue, r: redis.Redis, call: Call, message: str
) -> None:
    await queue.add("seed")
    before = snapshot(r)
    with pytest.raises(InvalidOptionError, match=message):
        await call(queue)
    assert snapshot(r) == before


@pytest.mark.parametrize("job_id", sorted(RESERVED_JOB_IDS))
async def test_a_job_id_that_names_a_queue_key_is_refused(
    queue: AsyncQueue, r: redis.Redis, job_id: str
) -> None:
    await queue.add("seed")
    await queue.set_global_rate_limit(5, 60)  # so that K:limiter-like keys are around
    before = snapshot(r)
    with pytest.raises(InvalidOptionError, match=f"job_id '{job_id}' is the name of one of"):
        await queue.add("a", job_id=job_id)
    assert snapshot(r) == before


async def test_dedup_ids_cannot_reach_a_jobs_keys(queue: AsyncQueue, r: redis.Redis) -> None:
    # Job "de" would have its lock at K:de:lock, which is where dedup id "lock" lives.
    with pytest.raises(InvalidOptionError, match="job_id 'de'"):
        await queue.add("a", job_id="de")
    job = await queue.add("a", deduplication={"id": "lock"})
    assert r.get("bull:q:de:lock") == job.id


async def test_reads_of_a_reserved_id_find_no_job(queue: AsyncQueue, r: redis.Redis) -> None:
    await queue.add("a")
    await queue.set_global_concurrency(3)
    r.hset("bull:q:metrics:failed", mapping={"count": "1", "prevTS": "1"})
    for job_id in ("meta", "metrics:failed", "events", "wait", "id", "repeat:x"):
        assert await queue.get_job(job_id) is None
        assert await queue.get_job_state(job_id) is JobState.UNKNOWN
        assert await queue.remove(job_id) is False
    # Nothing of the queue's own was touched, and no raw WRONGTYPE reached the caller.
    assert r.hget("bull:q:meta", "concurrency") == "3"
    assert r.exists("bull:q:metrics:failed")


async def test_a_scheduler_iteration_id_is_still_read(queue: AsyncQueue) -> None:
    job = await queue.upsert_job_scheduler("tick", every=60)
    assert job is not None and job.id.startswith("repeat:tick:")
    found = await queue.get_job(job.id)
    assert found is not None and found.name == "tick"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"lock_duration": 0}, "lock_duration must be more than 0"),
        ({"lock_duration": 1e17}, "lock_duration must be at most"),
        ({"stalled_interval": float("inf")}, "stalled_interval must be a finite number"),
        ({"limiter": {"max": 10**17, "duration": 1}}, "limiter max must be an integer from 1"),
        ({"limiter": {"max": 1, "duration": 1e17}}, "limiter duration must be at most"),
        ({"name": "my worker"}, "worker name must be printable ASCII without spaces"),
        ({"name": "w\n"}, "worker name must be printable ASCII"),
        ({"prefix": "my app"}, "prefix must be printable ASCII without spaces"),
        ({"prefix": "bülk"}, "prefix must be printable ASCII"),
        ({"concurrency": 2**63}, "concurrency must be an integer from 1 to"),
    ],
)
def test_worker_refuses_at_construction(
    redis_url: str, kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(InvalidOptionError, match=message):
        Worker("q", None, connection=redis_url, **kwargs)


@pytest.mark.parametrize("prefix", ["my app", "bull\n", "b\ud800"])
def test_a_queue_refuses_a_prefix_workers_cannot_use(redis_url: str, prefix: str) -> None:
    with pytest.raises(InvalidOptionError, match="prefix must"):
        AsyncQueue("q", connection=redis_url, prefix=prefix)


@pytest.mark.parametrize("last_event_id", ["garbage", "", "1-2-3", "-1", "1-", str(2**64)])
def test_queue_events_refuse_a_bad_last_event_id_at_construction(
    redis_url: str, last_event_id: str
) -> None:
    with pytest.raises(InvalidOptionError, match="last_event_id"):
        AsyncQueueEvents("q", connection=redis_url, last_event_id=last_event_id)


@pytest.mark.parametrize("last_event_id", ["$", "0", "0-0", "1700000000000-5", "1700000000000"])
async def test_queue_events_take_every_id_xread_takes(redis_url: str, last_event_id: str) -> None:
    events = AsyncQueueEvents("q", connection=redis_url, last_event_id=last_event_id)
    try:
        assert await events.next_event(timeout=0.01) is None
    finally:
        await events.close()


async def test_a_key_of_another_type_gives_a_corral_error_not_a_raw_one(
    queue: AsyncQueue, r: redis.Redis
) -> None:
    # Something else wrote the queue's wait list as a string: the add script fails on it.
    r.set("bull:q:wait", "not a list")
    with pytest.raises(ServerReplyError, match="WRONGTYPE") as caught:
        await queue.add("a")
    assert isinstance(caught.value, redis.ResponseError)  # what callers caught before


JobCall = Callable[[Any], Awaitable[Any]]


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda job: job.get_logs(0, 2**63), "end must be an integer from"),
        (lambda job: job.get_logs(0.5), "start must be an integer"),
        (lambda job: job.get_logs(0, None), "end must be an integer"),
        (lambda job: job.get_logs(asc=1), "asc must be True or False"),
        (lambda job: job.clear_logs(2**64), "keep must be an integer from 0 to"),
        (lambda job: job.change_delay(1e16), "delay must be at most"),
        (lambda job: job.move_to_delayed(2**63, "t"), "timestamp_ms must be an integer from 0"),
        (lambda job: job.change_priority(2**63), "priority"),
    ],
)
async def test_job_calls_refuse_and_write_nothing(
    queue: AsyncQueue, r: redis.Redis, call: JobCall, message: str
) -> None:
    job = await queue.add("a", delay=60)
    await job.log("line")
    before = snapshot(r)
    with pytest.raises(InvalidOptionError, match=message):
        await call(job)
    assert snapshot(r) == before


@pytest.mark.parametrize("stored", ["1e20", "abc", "-5", "nan", "2.5e9"])
async def test_a_bad_events_cap_written_by_another_client_does_not_break_adds(
    queue: AsyncQueue, r: redis.Redis, stored: str
) -> None:
    await queue.add("first")
    r.hset("bull:q:meta", "opts.maxLenEvents", stored)
    job = await queue.add("second")  # XADD MAXLEN would refuse the stored value
    assert r.hget(f"bull:q:{job.id}", "name") == "second"
    assert r.lrange("bull:q:wait", 0, -1) == [job.id, "1"]


async def test_removing_a_scheduler_id_with_a_colon_spares_another_schedulers_iteration(
    queue: AsyncQueue, r: redis.Redis
) -> None:
    job = await queue.upsert_job_scheduler("a", every=60)
    assert job is not None  # its id is repeat:a:<ms>, its hash K:repeat:a:<ms>
    alias = job.id.removeprefix("repeat:")  # "a:<ms>": as a scheduler id, the same key
    assert await queue.remove_job_scheduler(alias) is False
    assert r.exists(f"bull:q:{job.id}")
    assert await queue.get_job(job.id) is not None


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"backoff_types": None}, "backoff_types must be names of strategies"),
        ({"backoff_types": "fib"}, "backoff_types must be names of strategies"),
        ({"backoff_types": [1]}, "backoff_types item must be a non-empty string"),
        ({"connection": "notaurl"}, "connection is not a usable Redis URL"),
        ({"connection": "redis://[::1"}, "connection is not a usable Redis URL"),
        ({"connection": "redis://h:99999"}, "connection is not a usable Redis URL"),
        ({"connection": b"redis://h"}, "connection must be a redis:// URL or a client"),
    ],
)
def test_queue_refuses_at_construction(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidOptionError, match=message):
        AsyncQueue("q", **kwargs)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"no_retry_on": 0}, "no_retry_on must be an exception type or several, got int"),
        ({"retry_on": "ValueError"}, "retry_on must be an exception type or several"),
        ({"backoff_strategies": 1}, "backoff_strategies must be a dict"),
        ({"backoff_strategies": {"x": 1}}, r"backoff_strategies\['x'\] must be callable"),
        ({"connection": "notaurl"}, "connection is not a usable Redis URL"),
    ],
)
def test_worker_refuses_bad_settings(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidOptionError, match=message):
        Worker("q", None, **kwargs)


@pytest.mark.parametrize("timeout", [float("nan"), -1, float("inf"), "1", True])
async def test_waits_refuse_a_timeout_that_is_not_seconds(
    queue: AsyncQueue, redis_url: str, timeout: Any
) -> None:
    job = await queue.add("a")
    with pytest.raises(InvalidOptionError, match="timeout must be None or seconds"):
        await job.wait_until_finished(timeout=timeout)
    events = AsyncQueueEvents("q", connection=redis_url)
    try:
        with pytest.raises(InvalidOptionError, match="timeout must be None or seconds"):
            await events.next_event(timeout=timeout)
    finally:
        await events.close()


async def test_get_flow_refuses_a_queue_name_that_is_not_one(flows: AsyncFlowProducer) -> None:
    with pytest.raises(InvalidOptionError, match="queue name must be a non-empty string"):
        await flows.get_flow("x", {"a": 1})  # type: ignore[arg-type]


async def test_obliterate_spares_a_queue_whose_prefix_nests_under_it(
    redis_url: str, r: redis.Redis
) -> None:
    app = AsyncQueue("app", connection=redis_url)
    mail = AsyncQueue("mail", connection=redis_url, prefix="bull:app")
    try:
        await app.add("a", deduplication={"id": "d"})
        await mail.add("m")
        await mail.upsert_job_scheduler("tick", every=60)
        kept = {key for key in r.scan_iter("bull:app:mail:*")}
        assert kept
        await app.obliterate()
        assert {key for key in r.scan_iter("bull:app:*")} == kept
        assert await mail.get_job_counts("waiting") == {"waiting": 2}  # "m", the first tick
    finally:
        await app.close()
        await mail.close()


async def test_obliterate_spares_the_keys_of_the_job_its_prefix_names(
    redis_url: str, r: redis.Redis
) -> None:
    neighbour = AsyncQueue("neighbour", connection=redis_url)
    kept = AsyncQueue("kept", connection=redis_url, prefix="bull:neighbour")
    try:
        job = await neighbour.add("x", job_id="kept")
        await job.log("a line of neighbour's job 'kept'")
        await kept.add("k")
        await kept.obliterate(force=True)
        assert r.lrange("bull:neighbour:kept:logs", 0, -1) == ["a line of neighbour's job 'kept'"]
        assert r.hget("bull:neighbour:kept", "name") == "x"
    finally:
        await neighbour.close()
        await kept.close()


async def test_a_bad_events_cap_of_a_parent_queue_does_not_break_its_children(
    flows: AsyncFlowProducer, queue: AsyncQueue, r: redis.Redis
) -> None:
    node = await flows.add(FlowJob("p", "pq", children=[FlowJob("c", "q")]))
    r.hset("bull:pq:meta", "opts.maxLenEvents", "1e20")
    # The parent is released on its own queue's stream (emit_to) as its last child goes.
    child = node.children[0].job
    assert await child.remove_child_dependency() is True
    assert r.lrange("bull:pq:wait", 0, -1) == [node.job.id]


@pytest.mark.parametrize("job_id", ["logs", "lock", "de", "metrics", "x-add"])
async def test_a_job_node_added_with_an_id_corral_refuses_is_still_read(
    queue: AsyncQueue, r: redis.Redis, job_id: str
) -> None:
    # Node BullMQ takes these ids; where prefixes do not nest, such a job works.
    r.hset(f"bull:q:{job_id}", mapping={"name": "n", "data": "{}", "opts": "{}", "timestamp": 1})
    r.lpush("bull:q:wait", job_id)
    job = await queue.get_job(job_id)
    assert job is not None and job.name == "n"
    assert await queue.get_job_state(job_id) is JobState.WAITING
    assert await queue.remove(job_id) is True
    assert not r.exists(f"bull:q:{job_id}")
