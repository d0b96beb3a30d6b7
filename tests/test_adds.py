"""Adds across a disconnect: bounded resends, and a resend never creates a second job.

Faults are real: a TCP proxy (tests/faults/proxy.py) between the queue and the test server
loses a reply after the server ran the add, or refuses connections as a server that is down.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from corral import AsyncQueue, Queue, _adds
from corral.errors import InvalidOptionError
from tests.conftest import ServerProcess
from tests.faults.proxy import FaultProxy


@pytest.fixture
def proxy(test_server: ServerProcess, redis_url: str) -> Iterator[FaultProxy]:
    with FaultProxy(test_server.port) as p:
        yield p


def added_events(r: redis.Redis) -> list[str]:
    return [f["jobId"] for _, f in r.xrange("bull:q:events") if f["event"] == "added"]


def answers(r: redis.Redis) -> dict[str, dict[str, str]]:
    """The answers the server keeps for resends, by key."""
    return {key: r.hgetall(key) for key in r.scan_iter("bull:q:x-add:*")}


def kept(r: redis.Redis) -> dict[str, str]:
    """The answers kept for the test's one producer (call number -> answer)."""
    (only,) = answers(r).values()
    return only


async def test_an_add_whose_reply_was_lost_is_sent_again_and_creates_one_job(
    proxy: FaultProxy, r: redis.Redis
) -> None:
    async with AsyncQueue("q", connection=proxy.url) as queue:
        await queue.add("first")  # connected, scripts loaded
        proxy.lose_replies(1)  # the server runs the next add; its reply never arrives
        job = await queue.add("second", {"n": 2})
        assert (job.id, job.name, job.data) == ("2", "second", {"n": 2})
        assert r.lrange("bull:q:wait", 0, -1) == ["2", "1"]
        assert r.get("bull:q:id") == "2"  # the resend did not count as another add
        assert added_events(r) == ["1", "2"]


def test_a_blocking_queue_resends_a_lost_add_once(proxy: FaultProxy, r: redis.Redis) -> None:
    with Queue("q", connection=proxy.url) as queue:
        queue.add("first")
        proxy.lose_replies(1)
        job = queue.add("second")
        assert job.id == "2"
        assert r.lrange("bull:q:wait", 0, -1) == ["2", "1"]
        assert added_events(r) == ["1", "2"]


async def test_a_bulk_add_whose_reply_was_lost_creates_each_job_once(
    proxy: FaultProxy, r: redis.Redis
) -> None:
    async with AsyncQueue("q", connection=proxy.url) as queue:
        await queue.add("first")
        proxy.lose_replies(1)
        jobs = await queue.add_bulk([("a", 1), ("b", 2, {"job_id": "custom"}), ("c", 3)])
        assert [(j.id, j.name, j.data) for j in jobs] == [
            ("2", "a", 1),
            ("custom", "b", 2),
            ("4", "c", 3),
        ]
        assert sorted(r.lrange("bull:q:wait", 0, -1)) == ["1", "2", "4", "custom"]
        assert added_events(r) == ["1", "2", "custom", "4"]
        assert not [f for _, f in r.xrange("bull:q:events") if f["event"] == "duplicated"]


async def test_without_retries_a_lost_reply_raises(proxy: FaultProxy, r: redis.Redis) -> None:
    async with AsyncQueue("q", connection=proxy.url, add_retries=0) as queue:
        await queue.add("first")
        proxy.lose_replies(1)
        with pytest.raises(redis.ConnectionError):
            await queue.add("second")
        # The server did run it: that is what the numbered resend is for.
        assert r.lrange("bull:q:wait", 0, -1) == ["2", "1"]
        assert answers(r) == {}  # nothing is kept for a producer that never resends


async def test_resends_are_bounded_and_the_error_is_raised(
    proxy: FaultProxy, r: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    async with AsyncQueue("q", connection=proxy.url, add_retries=3) as queue:
        await queue.add("first")
        proxy.refuse()
        before = proxy.accepted
        with pytest.raises(redis.ConnectionError):
            await queue.add("second")
        # Each retry connects anew (the first send may still find the old connection open).
        assert 3 <= proxy.accepted - before <= 4
        proxy.heal()
    assert r.lrange("bull:q:wait", 0, -1) == ["1"]
    lines = [rec.getMessage() for rec in caplog.records if rec.name == "corral.queue"]
    assert len([m for m in lines if "retrying" in m]) == 1, lines  # once per outage
    assert [m for m in lines if "not sent after 3 retries" in m], lines


async def test_an_add_waits_out_a_short_outage(proxy: FaultProxy, r: redis.Redis) -> None:
    async with AsyncQueue("q", connection=proxy.url) as queue:
        await queue.add("first")
        proxy.refuse()
        adding = asyncio.ensure_future(queue.add("second"))
        accepted = proxy.accepted
        while proxy.accepted < accepted + 2:  # it is retrying
            await asyncio.sleep(0.01)
        assert not adding.done()
        proxy.heal()
        job = await adding
    assert job.id == "2"
    assert r.lrange("bull:q:wait", 0, -1) == ["2", "1"]


async def test_answers_are_forgotten_once_heard_and_deleted_on_close(
    redis_url: str, r: redis.Redis
) -> None:
    queue = AsyncQueue("q", connection=redis_url)
    await asyncio.gather(*(queue.add("x") for _ in range(50)))
    assert len(kept(r)) == 50  # not heard when they were sent
    for _ in range(60):
        await queue.add("y")
    # Each call forgets two answers heard before it: soon only the last call's is left.
    assert kept(r) == {"109": "110"}  # the id of the job that call created
    await queue.add_bulk([("z", None)] * 3)
    assert kept(r) == {"110": '[["111",1],["112",1],["113",1]]'}
    await queue.close()
    assert answers(r) == {}


async def test_an_answer_that_needed_a_resend_is_kept_a_while(
    proxy: FaultProxy, r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A first send held up somewhere (a proxy's buffer) may land after its resend was
    # answered: it must still find the answer, so a resent call's is forgotten only later.
    now = [1000.0]
    monkeypatch.setattr(_adds, "monotonic", lambda: now[0])
    async with AsyncQueue("q", connection=proxy.url) as queue:
        await queue.add("first")
        proxy.lose_replies(1)
        await queue.add("second")  # call 1, resent
        for _ in range(5):
            await queue.add("more")
        assert "1" in kept(r)
        now[0] += _adds.RESENT_FORGET_DELAY_S
        await queue.add("later")
        assert "1" not in kept(r)


async def test_answers_outlive_a_producer_that_never_closed(redis_url: str, r: redis.Redis) -> None:
    queue = AsyncQueue("q", connection=redis_url)
    await queue.add("x")
    (key,) = answers(r)
    assert 0 < r.pttl(key) <= 600_000  # they go on their own
    await queue.close()


def test_add_retries_is_checked() -> None:
    for bad in (-1, 101, 1.5, True):
        with pytest.raises(InvalidOptionError, match="add_retries"):
            AsyncQueue("q", add_retries=bad)  # type: ignore[arg-type]


def test_numbers_are_unique_across_threads(redis_url: str, r: redis.Redis) -> None:
    with Queue("q", connection=redis_url) as queue:
        ids: list[Any] = []

        def add_some() -> None:
            for _ in range(50):
                ids.append(queue.add("t").id)

        threads = [threading.Thread(target=add_some) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert len(set(ids)) == 200
    assert r.llen("bull:q:wait") == 200
