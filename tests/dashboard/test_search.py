"""The dashboard's search (corral/dashboard/search.py and _lua/search_jobs.lua) on a real server:
what it matches, how its cursor walks the states, the bounds of one request, bad input."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import redis

from corral import AsyncQueue
from corral._async._calls import run_script
from corral.dashboard import search
from corral.dashboard.search import SearchPage, search_jobs
from corral.errors import InvalidOptionError


@pytest.fixture
async def queue(redis_url: str) -> AsyncIterator[AsyncQueue]:
    async with AsyncQueue("q", connection=redis_url) as q:
        yield q


def fail(r: redis.Redis, job_id: str, reason: str, finished_on: int) -> None:
    """Move a waiting job to failed as a final failure leaves it (BullMQ's layout)."""
    r.lrem("bull:q:wait", 0, job_id)
    r.zadd("bull:q:failed", {job_id: finished_on})
    r.hset(f"bull:q:{job_id}", mapping={"failedReason": reason, "finishedOn": finished_on})


async def walk(queue: AsyncQueue, needle: str, **kwargs: object) -> list[SearchPage]:
    pages = [await search_jobs(queue, needle, **kwargs)]  # type: ignore[arg-type]
    while pages[-1].cursor is not None:
        assert len(pages) < 10_000, "the cursor does not move on"
        pages.append(await search_jobs(queue, needle, cursor=pages[-1].cursor, **kwargs))  # type: ignore[arg-type]
    return pages


def found(pages: list[SearchPage]) -> list[str]:
    return [job.id for page in pages for _, job in page.jobs]


async def test_finds_by_id_name_data_and_failure_reason_in_any_case(
    queue: AsyncQueue, r: redis.Redis
) -> None:
    await queue.add("Send-Invoice", {"customer": "ACME Corp"}, job_id="order-77")
    await queue.add("resize", {"path": "/img/Kitten.png"})
    failing = await queue.add("charge", {"amount": 3})
    await queue.add("other", {"x": 1})
    fail(r, failing.id, "Card DECLINED by bank", 1000)

    async def ids(needle: str) -> list[str]:
        return found(await walk(queue, needle))

    assert await ids("ORDER-7") == ["order-77"]  # id
    assert await ids("send-INVOICE") == ["order-77"]  # name
    assert await ids("acme corp") == ["order-77"]  # data
    assert await ids("kitten") == [(await queue.get_waiting())[1].id]
    assert await ids("declined") == [failing.id]  # failure reason
    assert await ids('"amount":3') == [failing.id]  # the JSON text as stored
    assert await ids("nowhere") == []
    page = await search_jobs(queue, "declined")
    assert [(state, job.name) for state, job in page.jobs] == [("failed", "charge")]
    assert page.jobs[0][1].failed_reason == "Card DECLINED by bank"


async def test_the_needle_is_plain_text_not_a_pattern(queue: AsyncQueue) -> None:
    await queue.add("a", {"v": "50% off (today)"})
    await queue.add("b", {"v": "50 off today"})
    assert len(found(await walk(queue, "50% off ("))) == 1
    assert found(await walk(queue, ".")) == []  # no job holds a dot: "." is no wildcard


async def test_a_cursor_walks_every_job_exactly_once(queue: AsyncQueue) -> None:
    for start in range(0, 2500, 500):
        await queue.add_bulk(
            [("job", {"n": i, "tag": f"t{i % 7}"}) for i in range(start, start + 500)]
        )
    pages = await walk(queue, "job", chunk=100, limit=10)
    ids = found(pages)
    assert len(ids) == 2500 and len(set(ids)) == 2500
    assert all(len(page.jobs) <= 10 for page in pages)
    assert pages[-1].scanned == pages[-1].total == 2500
    # Every page but the last stopped at its limit; the scanned count only goes up.
    assert all(len(page.jobs) == 10 for page in pages[:-1])
    assert [p.scanned for p in pages] == sorted(p.scanned for p in pages)

    sparse = found(await walk(queue, '"tag":"t3"', chunk=100, limit=10))
    expected = {job.id for job in await queue.get_waiting() if job.data["tag"] == "t3"}
    assert len(sparse) == len(expected) == len(set(sparse)) and set(sparse) == expected


async def test_waiting_jobs_come_oldest_first_and_states_in_turn(
    queue: AsyncQueue, r: redis.Redis
) -> None:
    jobs = [await queue.add("hit", {"i": i}) for i in range(5)]
    await queue.add("hit", {"later": True}, delay=60_000)
    fail(r, jobs[0].id, "boom", 1)
    fail(r, jobs[1].id, "boom", 2)
    page = await search_jobs(queue, "hit", chunk=2)
    assert [(state, job.id) for state, job in page.jobs] == [
        ("waiting", jobs[2].id),
        ("waiting", jobs[3].id),
        ("waiting", jobs[4].id),
        ("delayed", "6"),
        ("failed", jobs[1].id),  # newest finished first
        ("failed", jobs[0].id),
    ]
    only = await search_jobs(queue, "hit", state="failed")
    assert [job.id for _, job in only.jobs] == [jobs[1].id, jobs[0].id]
    assert only.total == 2


async def test_the_limit_stops_inside_a_chunk_and_the_cursor_resumes_there(
    queue: AsyncQueue,
) -> None:
    await queue.add_bulk([("job", {"i": i}) for i in range(20)])
    first = await search_jobs(queue, "job", limit=3)
    assert [job.data["i"] for _, job in first.jobs] == [0, 1, 2]
    assert first.scanned == 3 and first.cursor is not None
    second = await search_jobs(queue, "job", limit=3, cursor=first.cursor)
    assert [job.data["i"] for _, job in second.jobs] == [3, 4, 5]


async def test_the_budget_stops_a_request_early_and_the_cursor_resumes(
    queue: AsyncQueue,
) -> None:
    await queue.add_bulk([("job", {"i": i}) for i in range(1000)])
    # No time at all: one chunk per request, so a cursor always moves on.
    page = await search_jobs(queue, "absent", chunk=100, budget_ms=0)
    assert page.jobs == [] and page.scanned == 100 and page.total == 1000
    assert page.cursor is not None
    assert page.server_ms > 0
    pages = [page]
    while pages[-1].cursor is not None:
        pages.append(
            await search_jobs(queue, "absent", chunk=100, budget_ms=0, cursor=pages[-1].cursor)
        )
    # 10 chunks of waiting, then one call for each other state (empty).
    assert [p.scanned for p in pages[:10]] == list(range(100, 1001, 100))
    assert pages[-1].scanned == 1000 and pages[-1].cursor is None
    # With time enough, one request does it all.
    whole = await search_jobs(queue, "absent", chunk=100, budget_ms=10_000)
    assert whole.cursor is None and whole.scanned == 1000


async def test_bad_cursors_are_refused(queue: AsyncQueue) -> None:
    await queue.add_bulk([("job", {"i": i}) for i in range(30)])
    page = await search_jobs(queue, "job", chunk=10, limit=5)
    assert page.cursor is not None
    for cursor in ("", "garbage", "!!!", "x" * 500, page.cursor[:-2], page.cursor + "AA", 7):
        with pytest.raises(InvalidOptionError, match="cursor"):
            await search_jobs(queue, "job", chunk=10, limit=5, cursor=cursor)  # type: ignore[arg-type]
    # A cursor of another search (needle, state) is refused too.
    with pytest.raises(InvalidOptionError, match="cursor"):
        await search_jobs(queue, "other", cursor=page.cursor)
    with pytest.raises(InvalidOptionError, match="cursor"):
        await search_jobs(queue, "job", state="waiting", cursor=page.cursor)
    forged = search._encode(99, 0, 0, 0, search._fingerprint(queue, "job", None))
    with pytest.raises(InvalidOptionError, match="cursor"):
        await search_jobs(queue, "job", cursor=forged)


async def test_bad_needles_and_bounds_are_refused(queue: AsyncQueue) -> None:
    for needle, words in (("", "empty"), ("x" * 201, "too long"), (None, "string")):
        with pytest.raises(InvalidOptionError, match=words):
            await search_jobs(queue, needle)  # type: ignore[arg-type]
    assert (await search_jobs(queue, "x" * 200)).jobs == []  # the longest allowed
    with pytest.raises(InvalidOptionError, match="state"):
        await search_jobs(queue, "x", state="nope")
    for kwargs in ({"chunk": 0}, {"chunk": 10_001}, {"limit": 0}, {"limit": 5000}):
        with pytest.raises(InvalidOptionError, match=next(iter(kwargs))):
            await search_jobs(queue, "x", **kwargs)  # type: ignore[arg-type]
    with pytest.raises(InvalidOptionError, match="budget_ms"):
        await search_jobs(queue, "x", budget_ms=-1)


async def test_a_job_whose_hash_vanished_is_skipped(queue: AsyncQueue, r: redis.Redis) -> None:
    kept = await queue.add("ghostly", {"i": 1})
    gone = await queue.add("ghostly", {"i": 2})
    r.delete(f"bull:q:{gone.id}")  # removed behind the list's back
    r.lpush("bull:q:wait", "ghost-3")  # an id that matches, with no hash at all
    page = await search_jobs(queue, "ghost")
    assert [job.id for _, job in page.jobs] == [kept.id]
    assert page.scanned == 3


async def call(queue: AsyncQueue, *args: object) -> object:
    client = await queue.client()
    return await run_script(client, search._SEARCH_JOBS, queue.keys.script_keys(), list(args))


async def test_the_script_refuses_arguments_out_of_its_bounds(queue: AsyncQueue) -> None:
    await queue.add("job", {})
    ok = ("bull:q:", "waiting", 0, 10, "job", 5)
    reply = await call(queue, *ok)
    assert isinstance(reply, list) and reply[:2] == [1, 1] and reply[3:] == ["1"]
    bad = {
        -1: [("state", "wait"), ("state", "")],
        -2: [("offset", -1), ("offset", 1.5), ("offset", "x")],
        -3: [("chunk", 0), ("chunk", 10_001), ("chunk", 2.5)],
        -4: [("needle", ""), ("needle", "x" * 1001)],
        -5: [("wanted", 0), ("wanted", "x")],
    }
    names = ("prefix", "state", "offset", "chunk", "needle", "wanted")
    for code, cases in bad.items():
        for name, value in cases:
            args = list(ok)
            args[names.index(name)] = value
            assert await call(queue, *args) == code, (name, value)
    # The largest chunk and needle are accepted.
    assert isinstance(await call(queue, "bull:q:", "waiting", 0, 10_000, "x" * 1000, 1), list)


async def test_the_script_reads_one_chunk_whatever_the_set_size(queue: AsyncQueue) -> None:
    await queue.add_bulk([("job", {"i": i}) for i in range(50)])
    reply = await call(queue, "bull:q:", "waiting", 10, 5, "job", 100)
    assert isinstance(reply, list)
    assert reply[:2] == [15, 50] and len(reply[3:]) == 5
    past_the_end = await call(queue, "bull:q:", "waiting", 48, 5, "job", 100)
    assert isinstance(past_the_end, list) and past_the_end[:2] == [50, 50]
    assert len(past_the_end[3:]) == 2
