"""Sequences of calls on one queue: after every call, refused or not, the queue is consistent
(every job id in exactly one state structure, every listed id with a job hash), and a refused
call wrote nothing.

Each example restores the world (``world.py``) and runs 3 to 12 calls drawn from the table
below, with ids from a small pool so that calls meet each other's jobs, and hostile
arguments among plausible ones.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, cast

import redis
from hypothesis import given, settings
from hypothesis import strategies as st

from corral import AsyncFlowProducer, AsyncJob, AsyncQueue, AsyncQueueEvents, FlowJob, Worker
from corral.dedup import Dedup
from corral.options import FAILURE_POLICIES
from tests.property import strategies as s
from tests.property import world
from tests.property.known import skip_known
from tests.property.support import assert_consistent, attempt, examples

#: Ids the calls share: the world's, new ones, and a few hostile ones.
POOL = [*world.ALL_IDS, "n1", "n2", "n3"]
ids = st.one_of(st.sampled_from(POOL), s.names(huge=False))
flag = st.one_of(st.booleans(), s.anything)
small = st.one_of(st.integers(0, 5), s.numbers)
seconds = st.one_of(st.sampled_from([0, 0.5, 3600]), s.durations)


@dataclass
class Run:
    """What one example's calls share: the queue, a manual worker, the jobs it took."""

    queue: AsyncQueue
    worker: Worker
    flows: AsyncFlowProducer
    taken: list[AsyncJob] = field(default_factory=list)

    async def job(self, job_id: str) -> AsyncJob:
        found = await self.queue.get_job(job_id) if isinstance(job_id, str) else None
        if found is None:  # a job object whose job is gone (or never was)
            found = AsyncJob(queue_name="q", id=str(job_id), name="gone", data=None)
            found.queue = self.queue
        return found

    async def flow(self, parent: str, children: list[str], policy: str | None) -> Any:
        opts: dict[str, Any] = {} if policy is None else {policy: True}
        return await self.flows.add(
            FlowJob(
                "parent",
                "q",
                None,
                {"job_id": parent},
                [FlowJob("child", "q", None, cast(Any, {"job_id": c, **opts})) for c in children],
            )
        )

    async def take(self) -> AsyncJob | None:
        job = await self.worker.get_next_job()
        if job is not None:
            self.taken.append(job)
        return job

    async def finish(self, index: int, fail: bool) -> Any:
        if not self.taken:
            return None
        job = self.taken.pop(index % len(self.taken))
        if fail:
            return await job.move_to_failed(RuntimeError("failed on purpose"))
        return await job.move_to_completed({"done": job.id})


Call = Callable[[Run, dict[str, Any]], Awaitable[Any]]


def _opts(a: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in a.items() if k not in ("name", "data")}


CALLS: dict[str, tuple[st.SearchStrategy[dict[str, Any]], Call]] = {
    "add": (
        st.fixed_dictionaries(
            {"name": st.just("job"), "data": st.one_of(st.just({"n": 1}), s.data)},
            optional={
                "job_id": ids,
                "delay": seconds,
                "priority": small,
                "lifo": flag,
                "parent": st.fixed_dictionaries({"id": ids, "queue": st.just("bull:q")}),
                "remove_on_complete": flag,
                "attempts": st.integers(1, 2),
                "deduplication": st.builds(
                    Dedup, st.sampled_from(["d1", "d2"]), ttl=st.sampled_from([None, 60])
                ),
            },
        ),
        lambda run, a: run.queue.add(a["name"], a["data"], **_opts(a)),
    ),
    "flow": (
        st.fixed_dictionaries(
            {
                "parent": ids,
                "children": st.lists(ids, min_size=1, max_size=3),
                "policy": st.sampled_from([None, *FAILURE_POLICIES]),
            }
        ),
        lambda run, a: run.flow(a["parent"], a["children"], a["policy"]),
    ),
    "add_bulk": (
        st.fixed_dictionaries(
            {
                "jobs": st.lists(
                    st.tuples(
                        st.just("bulk"),
                        st.just(1),
                        st.fixed_dictionaries(
                            {}, optional={"job_id": ids, "delay": seconds, "priority": small}
                        ),
                    ),
                    max_size=3,
                )
            }
        ),
        lambda run, a: run.queue.add_bulk(a["jobs"]),
    ),
    "remove": (
        st.fixed_dictionaries({"job_id": ids, "remove_children": flag}),
        lambda run, a: run.queue.remove(a["job_id"], remove_children=a["remove_children"]),
    ),
    "update_data": (
        st.fixed_dictionaries({"job_id": ids, "data": s.data}),
        lambda run, a: _on_job(run, a, lambda j: j.update_data(a["data"])),
    ),
    "change_delay": (
        st.fixed_dictionaries({"job_id": ids, "delay": seconds}),
        lambda run, a: _on_job(run, a, lambda j: j.change_delay(a["delay"])),
    ),
    "change_priority": (
        st.fixed_dictionaries({"job_id": ids, "priority": small, "lifo": flag}),
        lambda run, a: _on_job(run, a, lambda j: j.change_priority(a["priority"], lifo=a["lifo"])),
    ),
    "promote": (
        st.fixed_dictionaries({"job_id": ids}),
        lambda run, a: _on_job(run, a, lambda j: j.promote()),
    ),
    "retry": (
        st.fixed_dictionaries({"job_id": ids, "state": st.sampled_from(["failed", "completed"])}),
        lambda run, a: _on_job(run, a, lambda j: j.retry(a["state"])),
    ),
    "job.remove": (
        st.fixed_dictionaries({"job_id": ids, "remove_children": flag}),
        lambda run, a: _on_job(run, a, lambda j: j.remove(remove_children=a["remove_children"])),
    ),
    "take": (st.just({}), lambda run, a: run.take()),
    "finish": (
        st.fixed_dictionaries({"index": st.integers(0, 3), "fail": st.booleans()}),
        lambda run, a: run.finish(a["index"], a["fail"]),
    ),
    "remove_deduplication_key": (
        st.fixed_dictionaries({"deduplication_id": st.sampled_from(["d1", "d2", "dup"])}),
        lambda run, a: run.queue.remove_deduplication_key(**a),
    ),
    "clean": (
        st.fixed_dictionaries(
            {
                "grace": seconds,
                "limit": small,
                "state": st.sampled_from(
                    ["completed", "failed", "wait", "delayed", "prioritized", "active"]
                ),
            }
        ),
        lambda run, a: run.queue.clean(a["grace"], a["limit"], a["state"]),
    ),
    "drain": (st.fixed_dictionaries({"delayed": flag}), lambda run, a: run.queue.drain(**a)),
    "pause": (st.just({}), lambda run, a: run.queue.pause()),
    "resume": (st.just({}), lambda run, a: run.queue.resume()),
    "retry_jobs": (
        st.fixed_dictionaries(
            {"state": st.sampled_from(["failed", "completed"]), "count": st.integers(1, 3)}
        ),
        lambda run, a: run.queue.retry_jobs(**a),
    ),
    "promote_jobs": (st.just({}), lambda run, a: run.queue.promote_jobs()),
    "upsert_job_scheduler": (
        st.fixed_dictionaries(
            {
                "scheduler_id": st.sampled_from(["sched", "s2"]),
                "every": st.sampled_from([0.5, 60, 0]),
            }
        ),
        lambda run, a: run.queue.upsert_job_scheduler(**a),
    ),
    "remove_job_scheduler": (
        st.fixed_dictionaries({"scheduler_id": st.sampled_from(["sched", "s2"])}),
        lambda run, a: run.queue.remove_job_scheduler(**a),
    ),
    "set_global_concurrency": (
        st.fixed_dictionaries({"concurrency": small}),
        lambda run, a: run.queue.set_global_concurrency(**a),
    ),
    "obliterate": (
        st.fixed_dictionaries({"force": st.booleans()}),
        lambda run, a: run.queue.obliterate(**a),
    ),
}


async def _on_job(run: Run, a: dict[str, Any], method: Callable[[AsyncJob], Awaitable[Any]]) -> Any:
    return await method(await run.job(a["job_id"]))


def _bound(run: Run, name: str, args: dict[str, Any]) -> Callable[[], Awaitable[Any]]:
    return lambda: CALLS[name][1](run, args)


calls = st.lists(
    st.sampled_from(sorted(CALLS)).flatmap(lambda name: st.tuples(st.just(name), CALLS[name][0])),
    min_size=3,
    max_size=12,
)


@settings(max_examples=examples(90))
@given(sequence=calls)
async def test_sequence(
    raw: redis.Redis,
    r: redis.Redis,
    redis_url: str,
    queue: AsyncQueue,
    flows: AsyncFlowProducer,
    sequence: list[tuple[str, dict[str, Any]]],
) -> None:
    for name, args in sequence:
        skip_known(name, **args)
    await world.saved_world(raw, redis_url)
    worker = Worker("q", None, connection=redis_url, lock_duration=60)
    run = Run(queue, worker, flows)
    try:
        done = []
        for name, args in sequence:
            what = f"{name}(**{args!r:.200})"
            outcome = await attempt(raw, _bound(run, name, args), what=what)
            done.append(f"{what}{'' if outcome.ok else ' refused'}")
            assert_consistent(r, after=" then ".join(done))
        await readable(raw, queue, redis_url, " then ".join(done))
    finally:
        await worker.close()


async def readable(raw: redis.Redis, queue: AsyncQueue, url: str, after: str) -> None:
    """Whatever the calls left can be read back: every job (its hash decodes), the counts,
    and every event of the stream (a listener from the start must not choke on one)."""
    jobs = await attempt(raw, queue.get_jobs, what=f"get_jobs after {after}")
    await attempt(raw, queue.get_job_counts, what=f"get_job_counts after {after}")
    if jobs.ok:
        for job in jobs.value:
            await attempt(raw, job.get_state, what=f"get_state of {job.id} after {after}")
    events = AsyncQueueEvents("q", connection=url, last_event_id="0")

    async def read_all() -> None:
        for _ in range(int(raw.xlen("bull:q:events"))):  # no wait for one more at the end
            assert await events.next_event(timeout=5) is not None, "an event went missing"

    try:
        await attempt(raw, read_all, what=f"reading the events after {after}")
    finally:
        await events.close()
