"""OpenTelemetry: one trace from a web request through add, a retried attempt and a flow."""

import asyncio
import json
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from corral import AsyncFlowProducer, AsyncJob, AsyncQueue, FlowJob, Worker
from corral.otel import Telemetry

# An application sets these up once (with an OTLP exporter instead of the in-memory one).
spans = InMemorySpanExporter()
tracer_provider = TracerProvider()
tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
metric_reader = InMemoryMetricReader()
telemetry = Telemetry(
    tracer_provider=tracer_provider,
    meter_provider=MeterProvider(metric_readers=[metric_reader]),
)
tracer = tracer_provider.get_tracer("shop")


async def send_receipt(job: AsyncJob) -> str:
    # The attempt's span is the current one: spans started here are its children.
    with tracer.start_as_current_span("render pdf"):
        pass
    if job.attempts_started == 1:
        raise ConnectionError("mail server busy")
    return "sent"


async def bill(job: AsyncJob) -> None:
    return None


def tree(span_list: list[ReadableSpan]) -> list[str]:
    """The spans as an indented tree, parents first (children in start order)."""
    children: dict[Any, list[ReadableSpan]] = {}
    for span in sorted(span_list, key=lambda s: s.start_time or 0):
        children.setdefault(span.parent.span_id if span.parent else None, []).append(span)
    lines: list[str] = []

    def walk(parent: Any, depth: int) -> None:
        for span in children.get(parent, []):
            attrs = span.attributes or {}
            extra = f" job={attrs['bullmq.job.name']}" if "bullmq.job.name" in attrs else ""
            if span.kind is trace.SpanKind.CONSUMER:
                made, state = attrs["bullmq.job.attempts.made"], attrs["bullmq.job.state"]
                extra += f" attempt={made} state={state} status={span.status.status_code.name}"
            lines.append(f"{'  ' * depth}{span.name} [{span.kind.name}]{extra}")
            walk(span.context.span_id, depth + 1)

    walk(None, 0)
    return lines


async def main() -> None:
    for name in ("receipts", "billing"):
        async with AsyncQueue(name) as queue:
            await queue.obliterate(force=True)  # start empty: the embedded server keeps old jobs
    async with AsyncQueue("receipts", telemetry=telemetry) as receipts:
        with tracer.start_as_current_span("POST /checkout"):
            job = await receipts.add("receipt", {"order": 42}, attempts=3)
            async with AsyncFlowProducer(telemetry=telemetry) as flows:
                await flows.add(FlowJob("invoice", "billing", children=[FlowJob("tax", "billing")]))
        print("opts.tm carries:", list(json.loads(job.opts["tm"])))

        workers = [
            Worker("receipts", send_receipt, telemetry=telemetry),
            Worker("billing", bill, telemetry=telemetry),
        ]
        tasks = [asyncio.create_task(w.run_async()) for w in workers]
        async with AsyncQueue("billing") as billing:
            while (await receipts.get_job_counts("completed"))["completed"] < 1 or (
                await billing.get_job_counts("completed")
            )["completed"] < 2:
                await asyncio.sleep(0.05)
        for worker in workers:
            await worker.close()
        await asyncio.gather(*tasks)

    for line in tree(list(spans.get_finished_spans())):
        print(line)
    data = metric_reader.get_metrics_data()
    assert data is not None
    figures = []
    for metric in data.resource_metrics[0].scope_metrics[0].metrics:
        for point in metric.data.data_points:
            value = getattr(point, "value", None)
            shown = value if value is not None else f"count={point.count}"  # type: ignore[attr-defined]
            labels = ",".join(
                f"{k.removeprefix('bullmq.')}={v}"
                for k, v in sorted((point.attributes or {}).items())
            )
            figures.append(f"{metric.name}{{{labels}}} {shown}")
    print("\n".join(sorted(figures)))


asyncio.run(main())
