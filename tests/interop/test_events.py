"""Events cross between corral and Node BullMQ 6.7.0 in both directions."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import pytest

from corral import AsyncJob, AsyncQueue, AsyncQueueEvents, Worker, provenance
from corral.events import Added, QueueEvent
from tests.interop.conftest import Node
from tests.test_worker import drive, finished

pytestmark = pytest.mark.interop

#: corral's field names -> Node's argument names.
NODE_NAMES = {
    "job_id": "jobId",
    "job_name": "name",
    "failed_reason": "failedReason",
    "attempts_made": "attemptsMade",
    "deduplication_id": "deduplicationId",
    "deduplicated_job_id": "deduplicatedJobId",
}


def as_node_args(event: QueueEvent) -> dict[str, Any]:
    """What Node's QueueEvents hands its listeners for ``event``, in corral's reading."""
    args = {}
    for f in dataclasses.fields(event):
        if f.name == "event_id":
            continue
        value = getattr(event, f.name)
        if value is None and f.name in ("prev", "actor"):
            continue  # Node leaves out a field the entry does not have
        args[NODE_NAMES.get(f.name, f.name)] = value
    return args


async def read_all(redis_url: str, queue: str) -> list[QueueEvent]:
    events = AsyncQueueEvents(queue, connection=redis_url, last_event_id="0")
    seen = []
    while (event := await events.next_event(timeout=0.3)) is not None:
        seen.append(event)
    await events.close()
    return seen


def node_view(event: dict[str, Any]) -> tuple[str, str, dict[str, Any]]:
    if not isinstance(event["args"], dict):
        # Node hands listeners of events without fields (drained) only the stream id.
        return event["event"], event["args"], {}
    args = dict(event["args"])
    # Node's numeric fields: attemptsMade and count come as strings, delay as a number.
    for key in ("attemptsMade", "count"):
        if key in args:
            args[key] = int(args[key])
    return event["event"], event["id"], args


async def test_node_queue_events_hears_corral(node: Node, redis_url: str) -> None:
    async def process(job: AsyncJob) -> Any:
        await job.update_progress({"pct": job.data["n"] * 10})
        if job.name == "bad":
            raise ValueError("corral says no")
        return {"double": job.data["n"] * 2, "text": "日本"}

    async with AsyncQueue("ev", connection=redis_url) as queue:
        await queue.add("ok", {"n": 1}, job_id="ok-1")
        await queue.add("ok", {"n": 1}, job_id="ok-1")  # duplicated
        async with provenance(actor="user:42"):  # its added event names the actor
            await queue.add("bad", {"n": 2})
        await drive(Worker("ev", process, connection=redis_url), finished(queue, 2))
        later = await queue.add("later", {}, delay=3600)
        await queue.pause()
        await queue.resume()
        await queue.remove(later.id)
        await queue.clean(0, 10, "completed")
        ours = await read_all(redis_url, "ev")
        listener = await asyncio.to_thread(node.start, "listen_all.mjs", "ev", len(ours), "0")
        heard = (await asyncio.to_thread(Node.result, listener))["events"]

    assert [e.name for e in ours] == [e["event"] for e in heard]
    assert [e.actor for e in ours if isinstance(e, Added)] == [None, "user:42", None]
    assert {e.name for e in ours} >= {
        "added", "waiting", "duplicated", "active", "progress", "completed", "failed",
        "retries-exhausted", "drained", "delayed", "paused", "resumed", "removed", "cleaned",
    }  # fmt: skip
    for mine, theirs in zip(ours, heard, strict=True):
        name, event_id, args = node_view(theirs)
        assert (mine.name, mine.event_id) == (name, event_id)
        assert as_node_args(mine) == args, name


async def test_corral_queue_events_hears_node(node: Node, redis_url: str) -> None:
    ids = (await asyncio.to_thread(node.run, "produce_events.mjs", "nq"))["ids"]
    ours = await read_all(redis_url, "nq")
    heard = await asyncio.to_thread(node.start, "listen_all.mjs", "nq", len(ours), "0")
    theirs = (await asyncio.to_thread(Node.result, heard))["events"]
    assert [e.name for e in ours] == [e["event"] for e in theirs]
    for mine, other in zip(ours, theirs, strict=True):
        name, _, args = node_view(other)
        assert as_node_args(mine) == args, name
    by_name = {(e.name, getattr(e, "job_id", None)): e for e in ours}
    assert by_name[("completed", ids["done"])].returnvalue == {"ok": 1}  # type: ignore[attr-defined]
    assert by_name[("failed", ids["bad"])].failed_reason == "node says no"  # type: ignore[attr-defined]
    assert by_name[("progress", ids["done"])].data == {"pct": 50}  # type: ignore[attr-defined]
    assert ("duplicated", ids["done"]) in by_name
    assert by_name[("removed", ids["later"])].prev == "delayed"  # type: ignore[attr-defined]
