"""``FlowProducer.add`` with odd trees, ``QueueEvents(last_event_id=...)`` and the
construction of a ``Worker`` (then one fetch, and for names and prefixes one run)."""

from __future__ import annotations

import asyncio
from typing import Any

import redis
from hypothesis import given, settings
from hypothesis import strategies as st

from corral import AsyncFlowProducer, AsyncQueue, AsyncQueueEvents, FlowJob, Worker
from corral._codec import encode_data
from corral.job import JobState
from tests.property import strategies as s
from tests.property.known import skip_known
from tests.property.support import assert_consistent, attempt, examples, fresh, unchanged
from tests.property.test_add import job_options

queue_names = st.one_of(st.sampled_from(["q", "pq", "q2"]), s.names(huge=False))


def _node(children: st.SearchStrategy[list[Any]]) -> st.SearchStrategy[Any]:
    fields = {
        "name": st.one_of(st.just("job"), s.names(huge=False)),
        "queue_name": queue_names,
        "data": s.data,
        # Ids from a pool of two: nodes meet each other (a child with its parent's id...).
        "opts": st.one_of(
            st.just({}), job_options, st.fixed_dictionaries({"job_id": st.sampled_from(["a", "b"])})
        ),
        "children": children,
    }
    return st.one_of(
        st.builds(
            FlowJob,
            fields["name"],
            fields["queue_name"],
            fields["data"],
            fields["opts"],
            fields["children"],
        ),
        st.fixed_dictionaries(
            {"name": fields["name"], "queue_name": fields["queue_name"]},
            optional={
                "data": fields["data"],
                "opts": fields["opts"],
                "children": children,
                "x": s.anything,
            },
        ),
    )


leaf = _node(st.just([]))
trees = st.one_of(
    st.recursive(leaf, lambda kids: _node(st.lists(kids, max_size=3)), max_leaves=6),
    _node(st.lists(st.one_of(leaf, s.anything), max_size=2)),
    s.anything,
)


def _nodes(tree: Any) -> list[Any]:
    out, pending = [], [tree]
    while pending:
        node = pending.pop()
        out.append(node)
        pending.extend(node.children)
    return out


@settings(max_examples=examples(200))
@given(tree=trees)
async def test_flow_add(
    raw: redis.Redis, r: redis.Redis, flows: AsyncFlowProducer, tree: Any
) -> None:
    skip_known("flow.add", tree=tree)
    fresh(raw)
    what = f"FlowProducer.add({tree!r:.400})"
    words = ["flow node", "job name", "queue name", "data", "options", "parent", "children"]
    outcome = await attempt(raw, lambda: flows.add(tree), names=words, what=what)
    if not outcome.ok:
        return
    for node in _nodes(outcome.value):
        job = node.job
        fields = r.hgetall(f"bull:{job.queue_name}:{job.id}")
        assert fields, f"{what}: job {job.id} of queue {job.queue_name!r} has no hash"
        if node.children and fields.get("name") == job.name:
            assert r.zscore(f"bull:{job.queue_name}:waiting-children", job.id) is not None or (
                r.scard(f"bull:{job.queue_name}:{job.id}:dependencies") == 0
            )
        if fields.get("name") == job.name and job.data is not None:
            assert fields["data"] == encode_data(job.data)
    for name in {n.job.queue_name for n in _nodes(outcome.value)}:
        assert_consistent(r, f"bull:{name}", after=what)


@settings(max_examples=examples(60))
@given(
    prefix=st.one_of(st.sampled_from(["bull", "{bull}", "b:c", "b*"]), s.names(huge=False)),
    batch=st.lists(trees, max_size=3),
)
async def test_flow_add_bulk(
    raw: redis.Redis, r: redis.Redis, redis_url: str, prefix: str, batch: list[Any]
) -> None:
    """Several flows in one call, through a producer of any prefix."""
    skip_known("flow.add_bulk", prefix=prefix, batch=batch)
    fresh(raw)

    async def build() -> AsyncFlowProducer:
        return AsyncFlowProducer(connection=redis_url, prefix=prefix)

    made = await attempt(raw, build, names=["prefix"], what=f"FlowProducer(prefix={prefix!r})")
    if not made.ok:
        return
    producer: AsyncFlowProducer = made.value
    try:
        what = f"add_bulk({batch!r:.400}) (prefix {prefix!r:.40})"
        words = ["flow", "job name", "queue name", "data", "options", "parent", "children"]
        outcome = await attempt(raw, lambda: producer.add_bulk(batch), names=words, what=what)
        if outcome.ok:
            assert len(outcome.value) == len(batch)
            for name in {n.job.queue_name for root in outcome.value for n in _nodes(root)}:
                assert_consistent(r, f"{prefix}:{name}", after=what)
    finally:
        await producer.close()


@settings(max_examples=examples(60))
@given(
    job_id=st.one_of(st.sampled_from(["root", "leaf"]), s.names(), s.anything),
    queue_name=st.one_of(st.just("q"), s.names(huge=False), s.anything),
    depth=st.one_of(st.integers(0, 3), s.numbers),
    max_children=st.one_of(st.integers(1, 3), s.numbers),
)
async def test_get_flow(
    raw: redis.Redis,
    flows: AsyncFlowProducer,
    job_id: Any,
    queue_name: Any,
    depth: Any,
    max_children: Any,
) -> None:
    skip_known(
        "flow.get_flow",
        job_id=job_id,
        queue_name=queue_name,
        depth=depth,
        max_children=max_children,
    )
    if not raw.exists("bull:q:root"):
        await flows.add(
            FlowJob(
                "root",
                "q",
                None,
                {"job_id": "root"},
                [FlowJob("leaf", "q", None, {"job_id": "leaf"})],
            )
        )
    args = {"depth": depth, "max_children": max_children}
    what = f"get_flow({job_id!r:.60}, {queue_name!r:.60}, **{args!r})"
    outcome = await unchanged(raw, lambda: flows.get_flow(job_id, queue_name, **args), what)
    if outcome.ok and outcome.value is not None:
        assert outcome.value.job.id == job_id and outcome.value.state is not JobState.UNKNOWN


STREAM_IDS = [
    "$",
    "0",
    "0-0",
    "1-1",
    "0-1",
    "-",
    "+",
    ">",
    "abc",
    "1-",
    "-1",
    "18446744073709551615-18446744073709551615",
    "18446744073709551616-0",
    "1.5-0",
    " 0",
    "0\n",
    "",
]


@settings(max_examples=examples(60))
@given(
    queue_name=st.one_of(st.just("q"), s.names(huge=False)),
    prefix=st.one_of(st.just("bull"), s.names(huge=False)),
    last_event_id=st.one_of(st.sampled_from(STREAM_IDS), s.names(huge=False), s.anything),
)
async def test_queue_events(
    raw: redis.Redis, redis_url: str, queue_name: str, prefix: str, last_event_id: Any
) -> None:
    skip_known("QueueEvents", queue_name=queue_name, prefix=prefix, last_event_id=last_event_id)
    if not raw.exists("bull:q:events"):
        async with AsyncQueue("q", connection=redis_url) as q:
            await q.add("j", {"n": 1})

    async def build() -> AsyncQueueEvents:
        return AsyncQueueEvents(
            queue_name, connection=redis_url, prefix=prefix, last_event_id=last_event_id
        )

    words = ["last_event_id", "queue name", "prefix", "stream id", "event id"]
    what = (
        f"QueueEvents({queue_name!r:.60}, prefix={prefix!r:.60}, "
        f"last_event_id={last_event_id!r:.80})"
    )
    made = await attempt(raw, build, names=words, what=what)
    if not made.ok:
        return
    events: AsyncQueueEvents = made.value
    try:
        await unchanged(raw, lambda: events.next_event(timeout=0.01), f"next_event of {what}")
    finally:
        await events.close()


worker_settings = st.fixed_dictionaries(
    {},
    optional={
        "name": st.one_of(
            st.none(), st.sampled_from(["w", "a b", "a\nb", "é"]), s.names(huge=False)
        ),
        "prefix": st.one_of(st.sampled_from(["bull", "a b", "{b}"]), s.names(huge=False)),
        "concurrency": st.one_of(st.integers(1, 4), s.numbers),
        "lock_duration": st.one_of(
            st.sampled_from([0, 1e17, 0.0001]), st.floats(1, 60), s.durations
        ),
        "stalled_interval": st.one_of(st.floats(1, 60), s.durations),
        "max_stalled_count": st.one_of(st.integers(0, 3), s.numbers),
        "drain_delay": st.one_of(st.floats(0.01, 5), s.durations),
        "limiter": st.one_of(
            st.none(),
            st.fixed_dictionaries(
                {
                    "max": st.one_of(st.integers(1, 5), s.numbers),
                    "duration": st.one_of(st.floats(0.001, 60), s.durations),
                }
            ),
            s.anything,
        ),
        "close_grace": s.durations,
        "metrics_max_data_points": st.one_of(st.integers(0, 10), s.numbers),
        "retry_on": st.one_of(
            st.none(), st.just(ValueError), st.just((ValueError, KeyError)), s.anything
        ),
        "no_retry_on": st.one_of(st.just(()), st.just([TypeError]), s.anything),
        "backoff_strategies": st.one_of(st.none(), st.just({"custom": lambda *a: 1}), s.anything),
    },
)


@settings(max_examples=examples(150))
@given(
    queue_name=st.one_of(st.just("q"), s.names(huge=False)),
    options=worker_settings,
    processor=st.one_of(st.none(), st.just(print), s.anything),
)
async def test_worker_construction(
    raw: redis.Redis, redis_url: str, queue_name: str, options: dict[str, Any], processor: Any
) -> None:
    """A worker is refused at construction, or fetches a job of its queue cleanly."""
    skip_known("Worker", queue_name=queue_name, processor=processor, **options)
    fresh(raw)

    async def build() -> Worker:
        return Worker(queue_name, processor, connection=redis_url, **options)

    what = f"Worker({queue_name!r:.60}, **{options!r:.300})"
    words = [*options, "queue name", "limiter", "processor"]
    made = await attempt(raw, build, names=words, what=what)
    if not made.ok:
        return
    worker: Worker = made.value
    prefix = options.get("prefix", "bull")
    try:
        async with AsyncQueue(queue_name, connection=redis_url, prefix=prefix) as q:
            added = await attempt(raw, lambda: q.add("j", {"n": 1}), what=f"add for {what}")
        fetched = await attempt(raw, worker.get_next_job, what=f"get_next_job of {what}")
        if added.ok and fetched.ok:
            assert fetched.value is not None and fetched.value.id == added.value.id
    finally:
        await worker.close()


@settings(max_examples=examples(12))
@given(
    name=st.one_of(st.sampled_from(["a b", "a\nb", "é", "{w}*"]), s.names(huge=False)),
    prefix=st.one_of(st.sampled_from(["a b", "{b}", "b*"]), s.names(huge=False)),
)
async def test_worker_runs(raw: redis.Redis, redis_url: str, name: str, prefix: str) -> None:
    """A worker whose name or prefix was accepted runs a job, or stops with a corral error."""
    skip_known("Worker.run", name=name, prefix=prefix)
    fresh(raw)

    async def build() -> Worker:
        return Worker(
            "q", lambda job: 1, connection=redis_url, name=name, prefix=prefix, drain_delay=0.2
        )

    what = f"Worker(name={name!r:.60}, prefix={prefix!r:.60})"
    made = await attempt(raw, build, names=["name", "prefix"], what=what)
    if not made.ok:
        return
    worker: Worker = made.value
    async with AsyncQueue("q", connection=redis_url, prefix=prefix) as q:
        job = await q.add("j", None)
        run = asyncio.create_task(worker.run_async())
        finished = asyncio.create_task(job.wait_until_finished(timeout=10))
        try:  # whichever comes first: the job done, or the worker stopped
            await asyncio.wait({run, finished}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            await worker.close()
        ran = await attempt(raw, lambda: run, what=f"run_async of {what}")
        if ran.ok:  # the worker ran: the job finished, or it was refused cleanly
            done = await attempt(raw, lambda: finished, what=f"a job of {what}")
            assert done.ok, f"{what}: the job did not finish: {done.error}"
        else:
            finished.cancel()
