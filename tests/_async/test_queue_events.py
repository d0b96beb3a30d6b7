"""QueueEvents against a real server: typed events with BullMQ's fields, resuming from ids."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import redis

from corral import AsyncQueue, AsyncQueueEvents, InvalidOptionError, _scripts
from corral.clock import now_ms
from corral.events import (
    Active,
    Added,
    Cleaned,
    Completed,
    CustomEvent,
    Delayed,
    Drained,
    Duplicated,
    Failed,
    Paused,
    Progress,
    QueueEvent,
    Removed,
    Resumed,
    RetriesExhausted,
    Stalled,
    Waiting,
)


async def drain_events(events: AsyncQueueEvents, limit: int = 10_000) -> list[QueueEvent]:
    seen: list[QueueEvent] = []
    while len(seen) < limit:
        event = await events.next_event(timeout=0.2)
        if event is None:
            break
        seen.append(event)
    return seen


def without_ids(events: list[QueueEvent]) -> list[tuple[Any, ...]]:
    out = []
    for e in events:
        fields = [
            getattr(e, f.name)
            for f in dataclasses.fields(e)
            # Added.actor is None for a job without provenance: left out, as the entry has none.
            if f.name != "event_id" and not (f.name == "actor" and e.actor is None)  # type: ignore[attr-defined]
        ]
        out.append((type(e).__name__, *fields))
    return out


async def test_events_corral_produces_arrive_typed(
    queue: AsyncQueue, r: redis.Redis, redis_url: str
) -> None:
    fetch = [queue._job_prefix, 0, 1, "tok", 0, 30_000, ""]

    async def take() -> str:
        fetch[1] = now_ms()
        reply = await queue._run(_scripts.MOVE_TO_ACTIVE, fetch)
        return str(reply[2])

    await queue.add("a", {"x": 1}, job_id="j1")
    await queue.add("a", {}, job_id="j1")  # duplicated
    ts = now_ms() + 3_600_000  # due in an hour: no fetch below promotes it
    await queue.add("later", delay=60, timestamp=ts)
    job = await queue.get_job(await take())
    assert job is not None
    await job.update_progress({"pct": 50})
    await job.move_to_completed(
        {"ok": True}, "tok:0", fetch=_scripts.FetchNext(1, "tok", 1, 30_000)
    )
    await queue.add("b", attempts=1)
    failing = await queue.get_job(await take())
    assert failing is not None
    fetch[4] = 5
    await failing.move_to_failed(ValueError("bad"), failing.token)
    await queue.pause()
    await queue.resume()
    await queue.remove("3")
    await queue.clean(0, 10, "completed")
    await queue.add("c")
    stuck = await take()
    r.sadd("bull:q:stalled", stuck)
    r.delete(f"bull:q:{stuck}:lock")
    await queue._run(_scripts.CHECK_STALLED, [queue._job_prefix, now_ms(), 1000])
    last = await queue.get_job(await take())
    assert last is not None
    await last.move_to_completed(None, last.token)  # the queue is empty after it

    events = AsyncQueueEvents("q", connection=redis_url, last_event_id="0")
    seen = await drain_events(events)
    await events.close()
    assert without_ids(seen) == [
        ("Added", "j1", "a"),
        ("Waiting", "j1", None),
        ("Duplicated", "j1"),
        ("Added", "3", "later"),  # K:id counts the custom id and the duplicate too
        ("Delayed", "3", ts + 60_000),
        ("Active", "j1", "waiting"),
        ("Progress", "j1", {"pct": 50}),
        ("Completed", "j1", {"ok": True}, "active"),
        # No ("Drained",): job 3 is still delayed, and BullMQ 6.7.0 writes none then.
        ("Added", "4", "b"),
        ("Waiting", "4", None),
        ("Active", "4", "waiting"),
        ("Failed", "4", "bad", "active"),
        ("RetriesExhausted", "4", 1),
        ("Paused",),
        ("Resumed",),
        ("Removed", "3", "delayed"),
        ("Cleaned", 1),
        ("Added", "5", "c"),
        ("Waiting", "5", None),
        ("Active", "5", "waiting"),
        ("Waiting", "5", "active"),
        ("Stalled", "5"),
        ("Active", "5", "waiting"),
        ("Completed", "5", None, "active"),
        ("Drained",),
    ]
    ids = [e.event_id for e in seen]
    assert ids == sorted(ids, key=lambda i: tuple(map(int, i.split("-"))))
    assert [type(e) for e in seen[:2]] == [Added, Waiting]
    kinds = {
        Active, Cleaned, Completed, Delayed, Drained, Duplicated, Failed, Paused, Progress,
        Removed, Resumed, RetriesExhausted, Stalled,
    }  # fmt: skip
    assert kinds <= {type(e) for e in seen}


async def test_resume_from_an_old_id_after_a_thousand_events(
    queue: AsyncQueue, redis_url: str
) -> None:
    await queue.add_bulk([("n", {"i": i}) for i in range(500)])  # 1000 events
    events = AsyncQueueEvents("q", connection=redis_url, last_event_id="0")
    first = await drain_events(events, limit=400)
    await events.close()
    assert len(first) == 400
    resumed = AsyncQueueEvents("q", connection=redis_url, last_event_id=first[-1].event_id)
    rest = await drain_events(resumed)
    await resumed.close()
    assert len(rest) == 600
    all_ids = [e.event_id for e in first + rest]
    assert len(set(all_ids)) == 1000  # every event once
    assert isinstance(rest[-1], Waiting) and rest[-1].job_id == "500"


async def test_dollar_starts_with_new_events_only(queue: AsyncQueue, redis_url: str) -> None:
    await queue.add("old")
    events = AsyncQueueEvents("q", connection=redis_url)
    assert await events.next_event(timeout=0.1) is None
    await queue.add("new")
    seen = await drain_events(events)
    await events.close()
    assert [(type(e).__name__, getattr(e, "job_id", None)) for e in seen] == [
        ("Added", "2"),
        ("Waiting", "2"),
    ]


async def test_custom_events(queue: AsyncQueue, redis_url: str) -> None:
    event_id = await queue.publish_event("invoice-sent", {"invoice": "A-1", "total": 12.5})
    events = AsyncQueueEvents("q", connection=redis_url, last_event_id="0")
    seen = await drain_events(events)
    await events.close()
    assert seen == [
        CustomEvent(event_id, "invoice-sent", {"invoice": "A-1", "total": "12.5"}),
    ]
    assert seen[0].name == "invoice-sent"
    with pytest.raises(InvalidOptionError, match="one of BullMQ's own events"):
        await queue.publish_event("completed", {})


async def test_max_len_events_caps_the_stream(
    queue: AsyncQueue, r: redis.Redis, redis_url: str
) -> None:
    await queue.set_max_len_events(100)
    await queue.add_bulk([("n", {}) for _ in range(1000)])
    # Approximate trimming (XADD MAXLEN ~): whole stream nodes go, so a node's worth may stay.
    assert 100 <= r.xlen("bull:q:events") < 300
    await queue.trim_events(10, approximate=False)
    assert r.xlen("bull:q:events") == 10
