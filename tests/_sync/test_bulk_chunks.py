# Generated from tests/_async/test_bulk_chunks.py by scripts/unasync.py: do not edit.
"""add_bulk in several calls: refusals before any call, a call that fails part-way, resends,
and debounced items replaced within the bulk.

Chunks are made small (a few jobs a call) so that each case needs only a few items; faults
are real: a TCP proxy (tests/faults/proxy.py) between the queue and the test server, or a
key deleted between two calls of the bulk.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

from corral import Queue, _bulk
from corral.errors import BulkAddError, InvalidOptionError, ParentNotFoundError
from tests._sync.support import snapshot
from tests.conftest import ServerProcess
from tests.faults.proxy import FaultProxy

DEBOUNCE = {"id": "d", "ttl": 60, "extend": True, "replace": True}


@pytest.fixture(autouse=True)
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_bulk, "CHUNK_JOBS", 3)  # a few items make several calls


@pytest.fixture
def proxy(test_server: ServerProcess, redis_url: str) -> Iterator[FaultProxy]:
    with FaultProxy(test_server.port) as p:
        yield p


def before_call(
    monkeypatch: pytest.MonkeyPatch, queue: Queue, number: int, action: Callable[[], Any]
) -> None:
    """Run ``action`` just before the bulk's call ``number`` (0 for the first) is sent."""
    send = queue._send_chunk
    sent = [0]

    def send_after(chunk: _bulk.Chunk, shared: list[Any], wait: Any = None) -> Any:
        if sent[0] == number:
            action()
        sent[0] += 1
        return send(chunk, shared, wait)

    monkeypatch.setattr(queue, "_send_chunk", send_after)


def items(n: int, start: int = 0) -> list[Any]:
    return [(f"j{i}", i) for i in range(start, start + n)]


def stored(r: redis.Redis, queue: str = "q") -> list[Any]:
    """The data of every job waiting in a queue, in the order they were added."""
    ids = r.lrange(f"bull:{queue}:wait", 0, -1)[::-1]
    return [json.loads(r.hget(f"bull:{queue}:{job_id}", "data")) for job_id in ids]


def evalsha_calls(r: redis.Redis) -> int:
    return int(r.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0))


def test_a_bulk_goes_in_calls_of_bounded_size(queue: Queue, r: redis.Redis) -> None:
    queue.add("first")  # scripts loaded
    before = evalsha_calls(r)
    jobs = queue.add_bulk(items(10))
    assert evalsha_calls(r) - before == 4  # 3 + 3 + 3 + 1
    assert [(job.id, job.data) for job in jobs] == [(str(i + 2), i) for i in range(10)]
    assert stored(r) == [None, *range(10)]


def test_bytes_bound_a_call_too(
    queue: Queue, r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_bulk, "CHUNK_JOBS", 100)
    monkeypatch.setattr(_bulk, "CHUNK_BYTES", 1000)
    queue.add("first")
    before = evalsha_calls(r)
    data = ["x" * 400] * 4 + ["y" * 5000] + ["z" * 10]
    jobs = queue.add_bulk([("j", d) for d in data])
    assert evalsha_calls(r) - before == 4  # 2 + 2 + the big one alone + 1
    assert [job.data for job in jobs] == data


def test_a_bad_item_in_a_later_call_writes_nothing(queue: Queue, r: redis.Redis) -> None:
    before = snapshot(r)
    with pytest.raises(InvalidOptionError, match="add_bulk item 7: priority"):
        queue.add_bulk([*items(7), ("bad", 7, {"priority": -1}), *items(2, 8)])
    assert snapshot(r) == before


def test_a_missing_parent_in_a_later_call_is_found_before_the_first(
    queue: Queue, r: redis.Redis
) -> None:
    before = snapshot(r)
    orphan = ("orphan", 5, {"parent": {"id": "nope", "queue": "bull:pq"}})
    with pytest.raises(ParentNotFoundError, match="bull:pq:nope") as caught:
        queue.add_bulk([*items(5), orphan])
    assert (caught.value.queue, caught.value.job_id) == ("pq", "nope")
    assert snapshot(r) == before


def test_a_parent_added_by_an_item_of_an_earlier_call_may_be_named(
    queue: Queue, r: redis.Redis
) -> None:
    child = ("child", 5, {"parent": {"id": "p", "queue": "bull:q"}})
    jobs = queue.add_bulk([("parent", -1, {"job_id": "p"}), *items(4), child])
    assert jobs[0].id == "p"
    assert jobs[5].parent_key == "bull:q:p"
    assert r.smembers("bull:q:p:dependencies") == {f"bull:q:{jobs[5].id}"}


def test_a_parent_removed_between_calls_stops_the_bulk_there(
    queue: Queue, r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    r.hset("bull:pq:p", "name", "parent")
    child = ("child", 3, {"parent": {"id": "p", "queue": "bull:pq"}})
    bulk = [*items(3), child, *items(3, 4)]
    before_call(monkeypatch, queue, 1, lambda: r.delete("bull:pq:p"))
    with pytest.raises(BulkAddError) as caught:
        queue.add_bulk(bulk)
    error = caught.value
    assert error.index == 3
    assert [job.id for job in error.jobs] == ["1", "2", "3"]
    assert isinstance(error.__cause__, ParentNotFoundError)
    assert "items 0 to 2 of 7" in str(error)
    assert stored(r) == [0, 1, 2]  # the refused call wrote nothing
    r.hset("bull:pq:p", "name", "parent")
    rest = queue.add_bulk(bulk[error.index :])
    assert [job.data for job in error.jobs + rest] == list(range(7))
    assert stored(r) == list(range(7))
    assert r.get("bull:q:id") == "7"


def test_a_parent_removed_before_the_first_call_is_the_plain_error(
    queue: Queue, r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    r.hset("bull:pq:p", "name", "parent")
    child = ("child", 0, {"parent": {"id": "p", "queue": "bull:pq"}})
    before_call(monkeypatch, queue, 0, lambda: r.delete("bull:pq:p"))
    with pytest.raises(ParentNotFoundError):
        queue.add_bulk([child, *items(4, 1)])
    assert r.keys("bull:q:*") == []


def test_a_call_that_cannot_be_sent_after_earlier_ones_raises_bulk_add_error(
    proxy: FaultProxy, r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Queue("q", connection=proxy.url, add_retries=2) as queue:
        before_call(monkeypatch, queue, 2, proxy.refuse)
        with pytest.raises(BulkAddError) as caught:
            queue.add_bulk(items(8))
        error = caught.value
        assert (error.index, len(error.jobs)) == (6, 6)
        assert isinstance(error.__cause__, redis.ConnectionError)
        assert stored(r) == list(range(6))
        proxy.heal()
        monkeypatch.undo()  # back to the real calls (and chunk size)
        rest = queue.add_bulk(items(8)[error.index :])
    assert [job.data for job in error.jobs + rest] == list(range(8))
    assert stored(r) == list(range(8))


def test_a_first_call_that_cannot_be_sent_is_the_plain_error(
    proxy: FaultProxy, r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Queue("q", connection=proxy.url, add_retries=1) as queue:
        queue.add("first")
        before_call(monkeypatch, queue, 0, proxy.refuse)
        with pytest.raises(redis.ConnectionError):
            queue.add_bulk(items(8))
        proxy.heal()
    assert stored(r) == [None]


def test_a_lost_reply_in_a_later_call_is_resent_without_duplicates(
    proxy: FaultProxy, r: redis.Redis
) -> None:
    with Queue("q", connection=proxy.url) as queue:
        queue.add("first")
        proxy.lose_reply_to(b"EVALSHA", b"j4")  # the second call (j3, j4, j5) runs, unheard
        jobs = queue.add_bulk(items(9))
    assert proxy.lost == 1
    assert [(job.id, job.data) for job in jobs] == [(str(i + 2), i) for i in range(9)]
    assert stored(r) == [None, *range(9)]
    assert r.get("bull:q:id") == "10"
    added = [f["jobId"] for _, f in r.xrange("bull:q:events") if f["event"] == "added"]
    assert added == [str(i) for i in range(1, 11)]


def test_a_job_that_cannot_be_read_between_calls_stops_the_bulk(
    proxy: FaultProxy, r: redis.Redis
) -> None:
    with Queue("q", connection=proxy.url) as queue:
        queue.add("existing", -1, job_id="x")
        bulk = [("dup", 0, {"job_id": "x"}), *items(4, 1)]
        # The first call is written; reading the job it found (id "x") then fails.
        proxy.lose_reply_to(b"HGETALL", b"bull:q:x")
        with pytest.raises(BulkAddError) as caught:
            queue.add_bulk(bulk)
        error = caught.value
        assert isinstance(error.__cause__, redis.ConnectionError)
        assert error.index == 3
        assert [job.id for job in error.jobs] == ["x", "3", "4"]  # K:id counts the duplicate
        rest = queue.add_bulk(bulk[error.index :])
    assert [job.data for job in rest] == [3, 4]
    assert stored(r) == [-1, 1, 2, 3, 4]


def test_a_parent_an_earlier_item_did_not_create_stops_the_bulk_at_its_child(
    queue: Queue, r: redis.Redis
) -> None:
    holder = queue.add("holder", deduplication={"id": "d"})
    bulk = [
        ("a", 0),
        ("p", 1, {"job_id": "p", "deduplication": {"id": "d"}}),  # deduplicated: no job p
        ("c", 2, {"parent": {"id": "p", "queue": "bull:q"}}),
        ("e", 3),
    ]
    with pytest.raises(BulkAddError) as caught:
        queue.add_bulk(bulk)
    error = caught.value
    assert isinstance(error.__cause__, ParentNotFoundError)
    assert error.index == 2
    assert [job.id for job in error.jobs] == ["2", holder.id]
    assert stored(r) == [None, 0]


def test_debounced_items_of_one_call_return_the_job_that_holds_the_id(
    queue: Queue, r: redis.Redis
) -> None:
    debounced = {"delay": 60, "deduplication": DEBOUNCE}
    bulk = [("a", 0, debounced), ("plain", 1), ("b", 2, debounced)]
    jobs = queue.add_bulk(bulk)
    (kept,) = r.zrange("bull:q:delayed", 0, -1)
    assert kept == r.get("bull:q:de:d") == jobs[2].id
    assert [job.id for job in jobs] == [kept, "2", kept]
    assert [job.data for job in jobs] == [2, 1, 2]
    for job in jobs:
        assert queue.get_job(job.id) is not None


def test_debounced_items_across_calls_return_the_last_job(
    queue: Queue, r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_bulk, "CHUNK_JOBS", 2)
    debounced = {"delay": 60, "deduplication": DEBOUNCE}
    plain_dedup = {"deduplication": {"id": "d"}}  # no replace: it gets the holder
    bulk = [
        ("a", 0, debounced),
        ("x", 1, plain_dedup),
        ("b", 2, debounced),
        ("y", 3),
        ("c", 4, debounced),
    ]
    jobs = queue.add_bulk(bulk)
    (kept,) = r.zrange("bull:q:delayed", 0, -1)
    assert kept == r.get("bull:q:de:d")
    assert [job.id for job in jobs] == [kept, kept, kept, jobs[3].id, kept]
    assert jobs[0].data == 4
    for job in jobs:
        assert queue.get_job(job.id) is not None


def test_a_debounced_item_replacing_an_older_job_returns_itself(queue: Queue) -> None:
    older = queue.add("old", 0, delay=60, deduplication=DEBOUNCE)
    (job,) = queue.add_bulk([("new", 1, {"delay": 60, "deduplication": DEBOUNCE})])
    assert job.id != older.id
    assert queue.get_job(older.id) is None
    assert queue.get_deduplication_job_id("d") == job.id
