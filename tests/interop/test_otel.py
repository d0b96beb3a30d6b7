"""Traces shared by corral and Node BullMQ 6.7.0 with bullmq-otel 2.0.1: a trace a Node
producer starts continues in a corral worker, and the other way round.

Node's side (``node/otel_add.mjs``, ``node/otel_work.mjs``) exports its spans as JSON (see
``node/otel_common.mjs``); corral's goes to the SDK's in-memory exporter. Both sides carry the
context in the job's ``opts.tm``: the JSON of a W3C trace-context carrier.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from corral import AsyncFlowProducer, AsyncJob, AsyncQueue, FlowJob, Worker
from corral.otel import Telemetry
from tests.interop.conftest import Node

pytestmark = pytest.mark.interop


@pytest.fixture
def exporter() -> Iterator[tuple[InMemorySpanExporter, Telemetry]]:
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    yield spans, Telemetry(tracer_provider=provider, metrics=False)
    provider.shutdown()


def tm_of(r: redis.Redis, queue: str, job_id: str) -> dict[str, str]:
    """The carrier in a job's ``opts.tm`` (a JSON string inside the opts JSON)."""
    opts = json.loads(r.hget(f"bull:{queue}:{job_id}", "opts"))  # type: ignore[arg-type]
    assert isinstance(opts.get("tm"), str), opts
    carrier: dict[str, str] = json.loads(opts["tm"])
    return carrier


def hex_ids(span: ReadableSpan) -> tuple[str, str]:
    return f"{span.context.trace_id:032x}", f"{span.context.span_id:016x}"


def parent_hex(span: ReadableSpan) -> str | None:
    return None if span.parent is None else f"{span.parent.span_id:016x}"


def by_name(spans: list[dict[str, Any]], name: str) -> dict[str, Any]:
    found = [s for s in spans if s["name"] == name]
    assert len(found) == 1, [s["name"] for s in spans]
    return found[0]


async def test_a_node_producers_trace_continues_in_a_corral_worker(
    node: Node, redis_url: str, r: redis.Redis, exporter: tuple[InMemorySpanExporter, Telemetry]
) -> None:
    spans, telemetry = exporter
    entries = [{"add": "a", "opts": {"attempts": 2}}, {"add": "b"}, {"bulk": ["c1", "c2"]}]
    out = node.run("otel_add.mjs", "traced", json.dumps(entries))
    node_spans = out["spans"]
    root = out["root"]
    (a_id,), (b_id,), bulk_ids = out["ids"]
    add_a, add_b = by_name(node_spans, "add traced.a"), by_name(node_spans, "add traced.b")
    add_bulk = by_name(node_spans, "addBulk traced")
    # What bullmq-otel stores: opts.tm = '{"traceparent":"00-<trace>-<producer span>-01"}'.
    assert tm_of(r, "traced", a_id) == {"traceparent": f"00-{root['traceId']}-{add_a['spanId']}-01"}
    for job_id in bulk_ids:
        assert tm_of(r, "traced", job_id)["traceparent"].split("-")[2] == add_bulk["spanId"]

    seen: dict[tuple[str, int], tuple[str, str]] = {}

    async def process(job: AsyncJob) -> str:
        ctx = trace.get_current_span().get_span_context()
        seen[(job.id, job.attempts_started)] = (f"{ctx.trace_id:032x}", f"{ctx.span_id:016x}")
        if job.name == "a" and job.attempts_started == 1:
            raise RuntimeError("corral failure for a")
        return "ok"

    async with AsyncQueue("traced", connection=redis_url) as queue:
        worker = Worker("traced", process, connection=redis_url, telemetry=telemetry)
        task = asyncio.create_task(worker.run_async())
        try:
            deadline = asyncio.get_running_loop().time() + 30
            while (await queue.get_job_counts("completed"))["completed"] < 4:
                assert asyncio.get_running_loop().time() < deadline, "timed out"
                assert not task.done(), "worker stopped"
                await asyncio.sleep(0.02)
        finally:
            await worker.close()
            await task
    attempts = [s for s in spans.get_finished_spans() if s.name == "process traced"]
    assert len(attempts) == 5
    producer_of = {a_id: add_a, b_id: add_b, **{i: add_bulk for i in bulk_ids}}
    for span in attempts:
        assert span.kind is SpanKind.CONSUMER
        assert span.attributes is not None
        job_id = span.attributes["bullmq.job.id"]
        number = span.attributes["bullmq.job.attempts.made"]
        assert hex_ids(span)[0] == root["traceId"]
        assert parent_hex(span) == producer_of[job_id]["spanId"]  # type: ignore[index]
        assert seen[(job_id, number)] == hex_ids(span)  # type: ignore[index]
    a_attempts = sorted(
        (s for s in attempts if s.attributes and s.attributes["bullmq.job.id"] == a_id),
        key=lambda s: s.attributes["bullmq.job.attempts.made"],  # type: ignore[index]
    )
    assert [s.status.status_code for s in a_attempts] == [StatusCode.ERROR, StatusCode.UNSET]
    assert [s.attributes["bullmq.job.state"] for s in a_attempts] == ["retried", "completed"]  # type: ignore[index]


async def test_a_corral_producers_trace_continues_in_a_node_worker(
    node: Node, redis_url: str, r: redis.Redis, exporter: tuple[InMemorySpanExporter, Telemetry]
) -> None:
    spans, telemetry = exporter
    async with AsyncQueue("traced", connection=redis_url, telemetry=telemetry) as queue:
        with telemetry.tracer.start_as_current_span("request") as request:
            a = await queue.add("a", {"n": 1}, attempts=2)
            bulk = await queue.add_bulk([("b1", 1), ("b2", 2)])
            async with AsyncFlowProducer(connection=redis_url, telemetry=telemetry) as flows:
                tree = await flows.add(FlowJob("p", "traced", children=[FlowJob("c", "traced")]))
    ours = {s.name: s for s in spans.get_finished_spans()}
    trace_id = f"{request.get_span_context().trace_id:032x}"
    producer_of = {
        a.id: ours["add traced.a"],
        bulk[0].id: ours["addBulk traced"],
        bulk[1].id: ours["addBulk traced"],
    }
    nodes = [s for s in spans.get_finished_spans() if s.name == "addNode traced"]
    for span in nodes:
        assert span.attributes is not None
        producer_of[span.attributes["bullmq.job.id"]] = span  # type: ignore[index]
    assert set(producer_of) == {a.id, bulk[0].id, bulk[1].id, tree.job.id, tree.children[0].job.id}
    # corral stores the carrier as bullmq-otel does.
    carrier = tm_of(r, "traced", a.id)
    assert list(carrier) == ["traceparent"]
    assert carrier["traceparent"].split("-")[:3] == [
        "00",
        trace_id,
        hex_ids(ours["add traced.a"])[1],
    ]

    out = await asyncio.to_thread(
        node.run, "otel_work.mjs", "traced", 5, env={"WORK_FAIL_ONCE": "a"}
    )
    processed = [s for s in out["spans"] if s["name"] == "process traced"]
    assert len(processed) == 6  # a twice
    for span in processed:
        job_id = span["attributes"]["bullmq.job.id"]
        assert span["kind"] == "CONSUMER"
        assert span["traceId"] == trace_id
        assert span["parentSpanId"] == hex_ids(producer_of[job_id])[1], span
    # The Node processor ran inside bullmq-otel's process span, in corral's trace.
    process_ids = {s["spanId"] for s in processed}
    assert {s["traceId"] for s in out["seen"]} == {trace_id}
    assert {s["spanId"] for s in out["seen"]} == process_ids
    attempts_of_a = sorted(
        s["attributes"]["bullmq.job.attempts.made"]
        for s in processed
        if s["attributes"]["bullmq.job.id"] == a.id
    )
    assert attempts_of_a == [1, 2]


def metric_shapes(metrics: list[dict[str, Any]]) -> set[tuple[Any, ...]]:
    """(name, type, unit, job name, state, value or count) per point, queue name left out."""
    shapes = set()
    for metric in metrics:
        for point in metric["points"]:
            attrs = dict(point["attributes"])
            assert set(attrs) == {"bullmq.queue.name", "bullmq.job.name", "bullmq.job.state"}
            value = point["value"]
            count = value["count"] if isinstance(value, dict) else value
            shapes.add(
                (
                    metric["name"],
                    metric["type"],
                    metric["unit"],
                    attrs["bullmq.job.name"],
                    attrs["bullmq.job.state"],
                    count,
                )
            )
    return shapes


async def test_corral_records_the_metrics_bullmq_otel_records(node: Node, redis_url: str) -> None:
    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader])
    telemetry = Telemetry(tracer_provider=TracerProvider(), meter_provider=meters)
    for name in ("m-node", "m-corral"):
        async with AsyncQueue(name, connection=redis_url) as queue:
            await queue.add("a", None, attempts=2)
            await queue.add_bulk([("b", 1), ("b", 2), ("c", 3)])
    out = await asyncio.to_thread(
        node.run, "otel_work.mjs", "m-node", 4, env={"WORK_FAIL_ONCE": "a,c"}
    )

    async def process(job: AsyncJob) -> None:
        if job.name in ("a", "c") and job.attempts_started == 1:
            raise RuntimeError(f"corral failure for {job.name}")

    async with AsyncQueue("m-corral", connection=redis_url) as queue:
        worker = Worker("m-corral", process, connection=redis_url, telemetry=telemetry)
        task = asyncio.create_task(worker.run_async())
        try:
            deadline = asyncio.get_running_loop().time() + 30
            while sum((await queue.get_job_counts("completed", "failed")).values()) < 4:
                assert asyncio.get_running_loop().time() < deadline, "timed out"
                assert not task.done(), "worker stopped"
                await asyncio.sleep(0.02)
        finally:
            await worker.close()
            await task
    data = reader.get_metrics_data()
    assert data is not None
    ours = []
    for scope in data.resource_metrics[0].scope_metrics:
        for metric in scope.metrics:
            if metric.name.startswith("corral."):
                continue  # corral's own (the waiting time): bullmq-otel has none
            kind = "HISTOGRAM" if type(metric.data).__name__ == "Histogram" else "COUNTER"
            points = [
                {
                    "attributes": dict(p.attributes or {}),
                    "value": getattr(p, "value", None) or {"count": p.count},  # type: ignore[attr-defined]
                }
                for p in metric.data.data_points
            ]
            ours.append({"name": metric.name, "type": kind, "unit": metric.unit, "points": points})
    meters.shutdown()
    node_shapes = metric_shapes(out["metrics"])
    assert ("bullmq.jobs.retried", "COUNTER", "1", "a", "retried", 1) in node_shapes
    assert metric_shapes(ours) == node_shapes
