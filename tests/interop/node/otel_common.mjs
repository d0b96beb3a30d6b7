// Shared OpenTelemetry set-up for the otel_*.mjs interop scripts.
//
// Registers a global NodeTracerProvider (async-hooks context manager, W3C trace
// context propagator) that keeps every ended span in memory, and turns the
// spans into plain JSON so the Python tests can read them:
//   {"name", "kind" (SpanKind name, e.g. "PRODUCER"), "traceId", "spanId",
//    "parentSpanId" (or null), "attributes", "status": {"code", "message"},
//    "events": [{"name", "attributes"}], "links": [{"traceId", "spanId"}],
//    "scope" (the tracer's name)}
// Only the public APIs of @opentelemetry/* and bullmq-otel are used.
import { trace, SpanKind, SpanStatusCode } from '@opentelemetry/api';
import { InMemorySpanExporter, NodeTracerProvider, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-node';

const exporter = new InMemorySpanExporter();
export const provider = new NodeTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
provider.register();

export const tracer = trace.getTracer('corral-interop');

const kindName = (kind) => SpanKind[kind] ?? String(kind);
const statusName = (code) => SpanStatusCode[code] ?? String(code);

export async function finishedSpans() {
  await provider.forceFlush();
  return exporter.getFinishedSpans().map((span) => {
    const ctx = span.spanContext();
    const parent = span.parentSpanContext ?? null;
    return {
      name: span.name,
      kind: kindName(span.kind),
      traceId: ctx.traceId,
      spanId: ctx.spanId,
      parentSpanId: parent ? parent.spanId : null,
      attributes: span.attributes,
      status: { code: statusName(span.status.code), message: span.status.message ?? null },
      events: span.events.map((e) => ({ name: e.name, attributes: e.attributes ?? {} })),
      links: span.links.map((l) => ({ traceId: l.context.traceId, spanId: l.context.spanId })),
      scope: span.instrumentationScope ? span.instrumentationScope.name : null,
    };
  });
}

export async function shutdown() {
  await provider.shutdown();
}
