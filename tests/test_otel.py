"""OpenTelemetry (corral.otel): the spans and metrics of adds, flows and attempts, read from
the SDK's in-memory exporter and reader; the context a job carries in ``opts.tm``; and a
tracer that raises, which must not stop anything.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
import textwrap
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest
import redis
from opentelemetry import baggage, trace
from opentelemetry import context as otel_context
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from corral import (
    AsyncFlowProducer,
    AsyncJob,
    AsyncQueue,
    AsyncShardedQueue,
    FlowJob,
    InvalidOptionError,
    Job,
    Queue,
    Worker,
)
from corral._bulk import Chunker
from corral.otel import Telemetry, job_context


class Traces:
    """A tracer provider and meter provider that keep what they get, and a Telemetry on them."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider()
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.reader = InMemoryMetricReader()
        self.meters = MeterProvider(metric_readers=[self.reader])
        self.telemetry = Telemetry(tracer_provider=self.provider, meter_provider=self.meters)
        self.tracer = self.provider.get_tracer("tests")

    def spans(self, prefix: str = "") -> list[ReadableSpan]:
        return [s for s in self.exporter.get_finished_spans() if s.name.startswith(prefix)]

    def one(self, name: str) -> ReadableSpan:
        found = [s for s in self.exporter.get_finished_spans() if s.name == name]
        assert len(found) == 1, [s.name for s in self.exporter.get_finished_spans()]
        return found[0]

    def metrics(self) -> dict[str, list[tuple[dict[str, Any], Any]]]:
        """Metric name -> [(attributes, value or (count, sum))]."""
        out: dict[str, list[tuple[dict[str, Any], Any]]] = {}
        data = self.reader.get_metrics_data()
        for resource in data.resource_metrics if data else []:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    for point in metric.data.data_points:
                        value = getattr(point, "value", None)
                        if value is None:
                            value = (point.count, point.sum)  # type: ignore[attr-defined]
                        out.setdefault(metric.name, []).append((dict(point.attributes), value))
        return out


@pytest.fixture
def traces() -> Iterator[Traces]:
    t = Traces()
    yield t
    t.provider.shutdown()
    t.meters.shutdown()


async def drive(worker: Worker, done: Callable[[], Awaitable[bool]], timeout: float = 20) -> None:
    """Run ``worker`` until ``done()`` is true, then close it; fail on timeout."""
    task = asyncio.create_task(worker.run_async())
    deadline = asyncio.get_running_loop().time() + timeout
    try:
        while not await done():
            if task.done():
                task.result()
                raise AssertionError("worker stopped on its own")
            assert asyncio.get_running_loop().time() < deadline, "timed out"
            await asyncio.sleep(0.02)
    finally:
        await worker.close()
        await task


def finished(queue: AsyncQueue, n: int) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        counts = await queue.get_job_counts("completed", "failed")
        return counts["completed"] + counts["failed"] >= n

    return check


def stored_tm(r: redis.Redis, queue: str, job_id: str) -> dict[str, str]:
    """The trace context carrier a job's hash holds (``opts.tm``, a JSON string)."""
    opts = json.loads(r.hget(f"bull:{queue}:{job_id}", "opts"))  # type: ignore[arg-type]
    assert isinstance(opts["tm"], str)
    carrier: dict[str, str] = json.loads(opts["tm"])
    return carrier


def traceparent(span: ReadableSpan) -> str:
    ctx = span.get_span_context()
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-"


def parent_id(span: ReadableSpan) -> int | None:
    return None if span.parent is None else span.parent.span_id


# -- producers ---------------------------------------------------------------------------------


async def test_add_makes_a_producer_span_whose_context_the_job_carries(
    redis_url: str, r: redis.Redis, traces: Traces
) -> None:
    async with AsyncQueue("emails", connection=redis_url, telemetry=traces.telemetry) as queue:
        with traces.tracer.start_as_current_span("request") as request:
            job = await queue.add("welcome", {"to": "ada"}, attempts=3)
    span = traces.one("add emails.welcome")
    assert span.kind is SpanKind.PRODUCER
    assert parent_id(span) == request.get_span_context().span_id
    assert span.context.trace_id == request.get_span_context().trace_id
    assert span.attributes is not None
    assert dict(span.attributes) == {
        "messaging.system": "bullmq",
        "messaging.destination.name": "emails",
        "messaging.operation.name": "add",
        "messaging.operation.type": "send",
        "messaging.message.id": job.id,
        "bullmq.queue.name": "emails",
        "bullmq.queue.operation": "add",
        "bullmq.job.name": "welcome",
        "bullmq.job.id": job.id,
    }
    carrier = stored_tm(r, "emails", job.id)
    assert carrier["traceparent"].startswith(traceparent(span))
    # The other options are stored as without telemetry; the job object has them too.
    opts = json.loads(r.hget(f"bull:emails:{job.id}", "opts"))  # type: ignore[arg-type]
    assert opts["attempts"] == 3
    assert job.opts["tm"] == opts["tm"]


def test_the_sync_queue_traces_its_adds(redis_url: str, r: redis.Redis, traces: Traces) -> None:
    with Queue("emails", connection=redis_url, telemetry=traces.telemetry) as queue:
        job = queue.add("welcome")
    span = traces.one("add emails.welcome")
    assert stored_tm(r, "emails", job.id)["traceparent"].startswith(traceparent(span))


async def test_add_bulk_makes_one_span_that_every_job_carries(
    redis_url: str, r: redis.Redis, traces: Traces, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("corral._bulk.CHUNK_JOBS", 2)  # several calls, one span
    assert Chunker().max_jobs == 2
    async with AsyncQueue("emails", connection=redis_url, telemetry=traces.telemetry) as queue:
        jobs = await queue.add_bulk(
            [("a", 1), ("b", 2, {"priority": 5}), ("c", 3), ("d", 4, {"delay": 60})]
        )
    span = traces.one("addBulk emails")
    assert span.kind is SpanKind.PRODUCER
    assert span.attributes is not None
    assert span.attributes["bullmq.job.bulk.names"] == ("a", "b", "c", "d")
    assert span.attributes["bullmq.job.bulk.count"] == 4
    assert span.attributes["messaging.batch.message_count"] == 4
    for job in jobs:
        assert stored_tm(r, "emails", job.id)["traceparent"].startswith(traceparent(span))
    opts = json.loads(r.hget(f"bull:emails:{jobs[1].id}", "opts"))  # type: ignore[arg-type]
    assert opts["priority"] == 5


async def test_a_failed_add_is_recorded_on_its_span(redis_url: str, traces: Traces) -> None:
    async with AsyncQueue("emails", connection=redis_url, telemetry=traces.telemetry) as queue:
        with pytest.raises(InvalidOptionError):
            await queue.add("welcome", priority=-1)
    span = traces.one("add emails.welcome")
    assert span.status.status_code is StatusCode.ERROR
    assert [e.name for e in span.events] == ["exception"]


async def test_a_sharded_queue_and_worker_trace_each_shard(
    redis_url: str, r: redis.Redis, traces: Traces
) -> None:
    """The shards' adds and attempts are traced as a plain queue's, one trace per job."""
    async with AsyncShardedQueue(
        "mail", shards=2, connection=redis_url, telemetry=traces.telemetry
    ) as queue:
        jobs = [await queue.add("welcome", {"i": i}) for i in range(4)]
        shards = {queue.shard_for(job.id).name for job in jobs}
        assert len(shards) == 2
        worker = Worker(
            "mail", lambda job: None, shards=2, connection=redis_url, telemetry=traces.telemetry
        )

        async def done() -> bool:
            return len(traces.spans("process ")) == 4

        await drive(worker, done)
    adds = {s.context.trace_id: s for s in traces.spans("add ")}
    assert {s.name for s in adds.values()} == {f"add {name}.welcome" for name in shards}
    for attempt in traces.spans("process "):  # each continues the trace of its add
        add = adds[attempt.context.trace_id]
        assert attempt.name == "process " + add.name.split()[1].rsplit(".", 1)[0]


async def test_without_telemetry_no_context_is_stored(redis_url: str, r: redis.Redis) -> None:
    async with AsyncQueue("emails", connection=redis_url) as queue:
        job = await queue.add("welcome")
        jobs = await queue.add_bulk([("a", 1), ("b", 2, {"priority": 1})])
    for job_id in [job.id, *(j.id for j in jobs)]:
        opts = json.loads(r.hget(f"bull:emails:{job_id}", "opts"))  # type: ignore[arg-type]
        assert "tm" not in opts


async def test_flows_nest_a_span_per_job_under_the_parents(
    redis_url: str, r: redis.Redis, traces: Traces
) -> None:
    tree = FlowJob("report", "reports", children=[FlowJob("page", "pages", {"n": 1})])
    async with AsyncFlowProducer(connection=redis_url, telemetry=traces.telemetry) as flows:
        node = await flows.add(tree)
    root = traces.one("addFlow reports")
    assert root.attributes is not None
    assert root.attributes["bullmq.flow.name"] == "report"
    parent = traces.one("addNode reports")
    child = traces.one("addNode pages")
    assert parent_id(parent) == root.context.span_id
    assert parent_id(child) == parent.context.span_id
    assert {s.context.trace_id for s in (root, parent, child)} == {root.context.trace_id}
    assert child.attributes is not None
    assert child.attributes["bullmq.job.id"] == node.children[0].job.id
    assert stored_tm(r, "reports", node.job.id)["traceparent"].startswith(traceparent(parent))
    assert stored_tm(r, "pages", node.children[0].job.id)["traceparent"].startswith(
        traceparent(child)
    )


async def test_flow_add_bulk_has_one_span_for_the_call(redis_url: str, traces: Traces) -> None:
    trees = [FlowJob("a", "qa", children=[FlowJob("a1", "qb")]), FlowJob("b", "qc")]
    async with AsyncFlowProducer(connection=redis_url, telemetry=traces.telemetry) as flows:
        await flows.add_bulk(trees)
    root = traces.one("addBulkFlows")
    assert root.attributes is not None
    assert root.attributes["bullmq.job.bulk.count"] == 2
    assert root.attributes["bullmq.job.bulk.names"] == "a,b"
    assert parent_id(traces.one("addNode qa")) == root.context.span_id
    assert parent_id(traces.one("addNode qc")) == root.context.span_id
    assert parent_id(traces.one("addNode qb")) == traces.one("addNode qa").context.span_id


# -- workers -----------------------------------------------------------------------------------


async def test_an_attempt_continues_the_trace_and_is_the_current_span(
    redis_url: str, traces: Traces
) -> None:
    seen: list[tuple[int, int, str | None]] = []

    async def process(job: AsyncJob) -> str:
        ctx = trace.get_current_span().get_span_context()
        seen.append((ctx.trace_id, ctx.span_id, baggage.get_baggage("tenant")))  # type: ignore[arg-type]
        return "ok"

    async with AsyncQueue("emails", connection=redis_url, telemetry=traces.telemetry) as queue:
        token = otel_context.attach(baggage.set_baggage("tenant", "acme"))
        try:
            job = await queue.add("welcome")
        finally:
            otel_context.detach(token)
        worker = Worker("emails", process, connection=redis_url, telemetry=traces.telemetry)
        await drive(worker, finished(queue, 1))
    add = traces.one("add emails.welcome")
    attempt = traces.one("process emails")
    assert attempt.kind is SpanKind.CONSUMER
    assert attempt.context.trace_id == add.context.trace_id
    assert parent_id(attempt) == add.context.span_id
    assert seen == [(attempt.context.trace_id, attempt.context.span_id, "acme")]
    assert attempt.attributes is not None
    attrs = dict(attempt.attributes)
    assert attrs["messaging.operation.type"] == "process"
    assert attrs["messaging.destination.name"] == "emails"
    assert attrs["messaging.message.id"] == job.id
    assert attrs["bullmq.job.attempts.made"] == 1
    assert attrs["bullmq.job.state"] == "completed"
    assert attrs["bullmq.job.attempt_finished_timestamp"] >= attrs["bullmq.job.processed.timestamp"]
    assert [e.name for e in attempt.events] == ["job completed"]
    assert attempt.status.status_code is StatusCode.UNSET


async def test_a_plain_function_in_a_thread_sees_the_attempt_span(
    redis_url: str, traces: Traces
) -> None:
    seen: list[int] = []

    def process(job: Job) -> None:
        seen.append(trace.get_current_span().get_span_context().span_id)

    async with AsyncQueue("emails", connection=redis_url) as queue:
        await queue.add_bulk([("a", 1), ("b", 2)])
        worker = Worker("emails", process, connection=redis_url, telemetry=traces.telemetry)
        await drive(worker, finished(queue, 2))
    attempts = traces.spans("process emails")
    assert sorted(seen) == sorted(s.context.span_id for s in attempts)
    # Added without telemetry: each attempt is the root of its own trace.
    assert all(s.parent is None for s in attempts)


async def test_retries_and_failures_are_recorded_per_attempt(
    redis_url: str, traces: Traces
) -> None:
    async def process(job: AsyncJob) -> None:
        raise RuntimeError(f"attempt {job.attempts_started} broke")

    async with AsyncQueue("emails", connection=redis_url, telemetry=traces.telemetry) as queue:
        await queue.add("welcome", attempts=2)
        worker = Worker("emails", process, connection=redis_url, telemetry=traces.telemetry)
        await drive(worker, finished(queue, 1))
    add = traces.one("add emails.welcome")
    attempts = sorted(
        traces.spans("process emails"),
        key=lambda s: s.attributes["bullmq.job.attempts.made"],  # type: ignore[index]
    )
    assert [s.attributes["bullmq.job.attempts.made"] for s in attempts] == [1, 2]  # type: ignore[index]
    assert [s.attributes["bullmq.job.state"] for s in attempts] == ["retried", "failed"]  # type: ignore[index]
    for number, span in enumerate(attempts, 1):
        assert parent_id(span) == add.context.span_id
        assert span.status.status_code is StatusCode.ERROR
        assert span.status.description == f"RuntimeError: attempt {number} broke"
        exception, failed = span.events
        assert exception.name == "exception"
        assert exception.attributes is not None
        assert exception.attributes["exception.type"] == "RuntimeError"
        assert exception.attributes["exception.message"] == f"attempt {number} broke"
        assert failed.name == "job failed"
        assert failed.attributes == {"bullmq.job.failed.reason": f"attempt {number} broke"}
    metrics = traces.metrics()
    state = {"bullmq.queue.name": "emails", "bullmq.job.name": "welcome"}
    assert metrics["bullmq.jobs.retried"] == [({**state, "bullmq.job.state": "retried"}, 1)]
    assert metrics["bullmq.jobs.failed"] == [({**state, "bullmq.job.state": "failed"}, 1)]
    assert "bullmq.jobs.completed" not in metrics


async def test_metrics_count_jobs_and_time_them(redis_url: str, traces: Traces) -> None:
    async def process(job: AsyncJob) -> None:
        if job.name == "bad":
            raise ValueError("no")

    async with AsyncQueue("emails", connection=redis_url) as queue:
        await queue.add_bulk([("good", 1), ("good", 2), ("bad", 3)])
        worker = Worker("emails", process, connection=redis_url, telemetry=traces.telemetry)
        await drive(worker, finished(queue, 3))
    metrics = traces.metrics()
    good = {"bullmq.queue.name": "emails", "bullmq.job.name": "good"}
    bad = {"bullmq.queue.name": "emails", "bullmq.job.name": "bad"}
    assert metrics["bullmq.jobs.completed"] == [({**good, "bullmq.job.state": "completed"}, 2)]
    assert metrics["bullmq.jobs.failed"] == [({**bad, "bullmq.job.state": "failed"}, 1)]
    durations = {
        attrs["bullmq.job.name"]: value[0] for attrs, value in metrics["bullmq.job.duration"]
    }
    assert durations == {"good": 2, "bad": 1}
    waits = {
        attrs["bullmq.job.name"]: value[0]
        for attrs, value in metrics["corral.job.waiting.duration"]
    }
    assert waits == {"good": 2, "bad": 1}


async def test_metrics_can_be_turned_off(redis_url: str, traces: Traces) -> None:
    telemetry = Telemetry(
        tracer_provider=traces.provider, meter_provider=traces.meters, metrics=False
    )
    async with AsyncQueue("emails", connection=redis_url) as queue:
        await queue.add("good")
        worker = Worker("emails", lambda job: None, connection=redis_url, telemetry=telemetry)
        await drive(worker, finished(queue, 1))
    assert traces.metrics() == {}
    assert len(traces.spans("process emails")) == 1


async def test_flow_jobs_run_in_the_trace_of_their_flow(redis_url: str, traces: Traces) -> None:
    tree = FlowJob("report", "reports", children=[FlowJob("page", "pages")])
    async with AsyncFlowProducer(connection=redis_url, telemetry=traces.telemetry) as flows:
        await flows.add(tree)
    workers = [
        Worker(q, lambda job: None, connection=redis_url, telemetry=traces.telemetry)
        for q in ("reports", "pages")
    ]
    tasks = [asyncio.create_task(w.run_async()) for w in workers]
    try:
        async with AsyncQueue("reports", connection=redis_url) as reports:
            deadline = asyncio.get_running_loop().time() + 20
            while (await reports.get_job_counts("completed"))["completed"] < 1:
                assert asyncio.get_running_loop().time() < deadline, "timed out"
                await asyncio.sleep(0.02)
    finally:
        for worker in workers:
            await worker.close()
        await asyncio.gather(*tasks)
    root = traces.one("addFlow reports")
    assert parent_id(traces.one("process pages")) == traces.one("addNode pages").context.span_id
    assert parent_id(traces.one("process reports")) == traces.one("addNode reports").context.span_id
    assert {s.context.trace_id for s in traces.spans()} == {root.context.trace_id}


def child_trace(job: Any) -> dict[str, Any]:
    """Run in a child process (``tests.test_otel:child_trace``): the trace the job carries."""
    ctx = trace.get_current_span(job_context(job)).get_span_context()
    return {"trace": f"{ctx.trace_id:032x}", "span": f"{ctx.span_id:016x}"}


async def test_a_child_process_attempt_is_traced_and_reads_the_jobs_context(
    redis_url: str, traces: Traces
) -> None:
    async with AsyncQueue("emails", connection=redis_url, telemetry=traces.telemetry) as queue:
        job = await queue.add("welcome")
        worker = Worker(
            "emails",
            "tests.test_otel:child_trace",
            connection=redis_url,
            processes=1,
            telemetry=traces.telemetry,
        )
        await drive(worker, finished(queue, 1), timeout=60)
        done = await queue.get_job(job.id)
    add = traces.one("add emails.welcome")
    attempt = traces.one("process emails")
    assert parent_id(attempt) == add.context.span_id
    assert done is not None
    assert done.returnvalue == {
        "trace": f"{add.context.trace_id:032x}",
        "span": f"{add.context.span_id:016x}",
    }


# -- robustness --------------------------------------------------------------------------------


class BrokenTracerProvider(TracerProvider):
    """Its tracers raise at every span start."""

    def get_tracer(self, *args: Any, **kwargs: Any) -> trace.Tracer:
        tracer = super().get_tracer(*args, **kwargs)

        def start_span(*a: Any, **k: Any) -> trace.Span:
            raise RuntimeError("tracer is broken")

        tracer.start_span = start_span  # type: ignore[method-assign]
        return tracer


class BrokenSpan(trace.NonRecordingSpan):
    """A span whose every recording call raises."""

    def __init__(self) -> None:
        super().__init__(trace.INVALID_SPAN_CONTEXT)

    def _broken(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("span is broken")

    set_attribute = end = record_exception = set_status = add_event = _broken  # type: ignore[assignment]


class BrokenSpanTracerProvider(TracerProvider):
    """Its tracers start spans that raise when anything is recorded or ended."""

    def get_tracer(self, *args: Any, **kwargs: Any) -> trace.Tracer:
        tracer = super().get_tracer(*args, **kwargs)
        tracer.start_span = lambda *a, **k: BrokenSpan()  # type: ignore[method-assign]
        return tracer


@pytest.mark.parametrize("provider", [BrokenTracerProvider, BrokenSpanTracerProvider])
async def test_a_tracer_that_raises_stops_nothing(
    redis_url: str, caplog: pytest.LogCaptureFixture, provider: type[TracerProvider]
) -> None:
    telemetry = Telemetry(tracer_provider=provider(), metrics=False)
    tries: list[int] = []

    async def process(job: AsyncJob) -> str:
        tries.append(job.attempts_started)
        if job.name == "flaky" and job.attempts_started == 1:
            raise RuntimeError("once")
        return "done"

    caplog.set_level(logging.WARNING, logger="corral.otel")
    async with AsyncQueue("emails", connection=redis_url, telemetry=telemetry) as queue:
        ok = await queue.add("ok")
        flaky = await queue.add("flaky", attempts=2)
        bulk = await queue.add_bulk([("b", 1)])
        async with AsyncFlowProducer(connection=redis_url, telemetry=telemetry) as flows:
            await flows.add(FlowJob("p", "emails", children=[FlowJob("c", "emails")]))
        worker = Worker("emails", process, connection=redis_url, telemetry=telemetry)
        await drive(worker, finished(queue, 5))
        for job_id in (ok.id, flaky.id, bulk[0].id):
            done = await queue.get_job(job_id)
            assert done is not None
            assert done.returnvalue == "done"
    assert sorted(tries) == [1, 1, 1, 1, 1, 2]
    warnings = [r.getMessage() for r in caplog.records if r.name == "corral.otel"]
    assert warnings, "the broken tracer was not reported"
    assert all("going on without it" in w and "is broken" in w for w in warnings)
    # Once per kind of call, not once per job.
    assert len(warnings) == len(set(w.split(" failed")[0] for w in warnings))


def test_telemetry_must_be_a_telemetry(redis_url: str) -> None:
    with pytest.raises(InvalidOptionError, match="telemetry must be True, False, None or a"):
        Queue("emails", connection=redis_url, telemetry="yes")  # type: ignore[arg-type]
    with pytest.raises(InvalidOptionError, match="got int"):
        Worker("emails", lambda job: None, connection=redis_url, telemetry=1)  # type: ignore[arg-type]


def test_job_context_ignores_what_is_not_a_carrier() -> None:
    for tm in (None, 3, "", "not json", "[1]", '{"traceparent": 5}', '{"traceparent": "junk"}'):
        job = Job.from_hash("q", "1", {"opts": json.dumps({"tm": tm}), "name": "n"})
        assert not trace.get_current_span(job_context(job)).get_span_context().is_valid
    good = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    job = Job.from_hash("q", "1", {"opts": json.dumps({"tm": json.dumps({"traceparent": good})})})
    ctx = trace.get_current_span(job_context(job)).get_span_context()
    assert (ctx.trace_id, ctx.span_id) == (0x0AF7651916CD43DD8448EB211C80319C, 0xB7AD6B7169203331)


#: Run in a fresh interpreter where opentelemetry cannot be imported (redis-py imports it
#: for its own instrumentation when it is there: that is not corral's doing).
_OFF_SCRIPT = """
import sys

class NoOpenTelemetry:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "opentelemetry":
            raise ImportError(f"{name} is blocked")

sys.meta_path.insert(0, NoOpenTelemetry())
from corral import Queue, Worker
queue = Queue("emails", connection=sys.argv[1])
queue.add("welcome")
worker = Worker("emails", lambda job: "ok", connection=sys.argv[1])
summary = worker.run(max_jobs=1)
queue.close()
print(summary.completed, "corral.otel" in sys.modules, "corral._telemetry" in sys.modules)
"""

#: Run in a fresh interpreter: ``telemetry=True`` uses the global providers.
_GLOBAL_SCRIPT = """
import sys
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from corral import Queue, Worker
exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)
queue = Queue("emails", connection=sys.argv[1], telemetry=True)
queue.add("welcome")
Worker("emails", lambda job: "ok", connection=sys.argv[1], telemetry=True).run(max_jobs=1)
queue.close()
print(sorted(s.name for s in exporter.get_finished_spans()))
"""


def run_script(script: str, redis_url: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script), redis_url],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "PYTHONPATH": os.getcwd()},
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_off_by_default_and_opentelemetry_is_not_imported(redis_url: str) -> None:
    assert run_script(_OFF_SCRIPT, redis_url) == "1 False True"


def test_telemetry_true_uses_the_global_providers(redis_url: str) -> None:
    assert run_script(_GLOBAL_SCRIPT, redis_url) == "['add emails.welcome', 'process emails']"
