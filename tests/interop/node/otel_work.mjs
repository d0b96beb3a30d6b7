// otel_work.mjs <queue> <count>
// A Node Worker with telemetry (bullmq-otel) runs until <count> jobs have finished for good
// (completed, or failed on their last attempt). Its processor records the active span
// (bullmq-otel's "process" span) and throws Error(`node failure for <name>`) on the first
// attempt of the jobs named in env WORK_FAIL_ONCE (comma-separated).
// bullmq-otel's metrics are on (enableMetrics), read from an in-memory exporter.
// stdout: {"seen": [{"id", "name", "attempt", "traceId", "spanId"}...] (processor calls),
//          "spans": [<span JSON, see otel_common.mjs>...],
//          "metrics": [{"name", "type", "unit", "points": [{"attributes", "value"}]}...]}
//          (value: a number for a counter, {"count", "sum"} for a histogram)
import { Worker } from 'bullmq';
import { BullMQOtel } from 'bullmq-otel';
import { metrics, trace } from '@opentelemetry/api';
import {
  AggregationTemporality, InMemoryMetricExporter, MeterProvider, PeriodicExportingMetricReader,
} from '@opentelemetry/sdk-metrics';
import { connect, closeConnections, emit, log, parseCount, run, usage, PREFIX } from './common.mjs';
import { finishedSpans, shutdown } from './otel_common.mjs';

const metricExporter = new InMemoryMetricExporter(AggregationTemporality.CUMULATIVE);
const metricReader = new PeriodicExportingMetricReader({ exporter: metricExporter, exportIntervalMillis: 3600000 });
metrics.setGlobalMeterProvider(new MeterProvider({ readers: [metricReader] }));

async function exportedMetrics() {
  await metricReader.forceFlush();
  const out = [];
  for (const resource of metricExporter.getMetrics()) {
    for (const scope of resource.scopeMetrics) {
      for (const m of scope.metrics) {
        out.push({
          name: m.descriptor.name,
          type: m.descriptor.type,
          unit: m.descriptor.unit,
          points: m.dataPoints.map((p) => ({
            attributes: p.attributes,
            value: typeof p.value === 'object' ? { count: p.value.count, sum: p.value.sum } : p.value,
          })),
        });
      }
    }
  }
  return out;
}

run(async () => {
  const [queueName, countArg] = process.argv.slice(2);
  if (!queueName || countArg === undefined) usage('otel_work.mjs <queue> <count>  (env WORK_FAIL_ONCE)');
  const count = parseCount(countArg);
  const failOnce = new Set((process.env.WORK_FAIL_ONCE || '').split(',').filter(Boolean));
  const seen = [];
  let finished = 0;
  let resolveDone;
  const done = new Promise((resolve) => { resolveDone = resolve; });
  const check = () => { if (finished >= count) resolveDone(); };

  const worker = new Worker(
    queueName,
    async (job) => {
      const ctx = trace.getActiveSpan()?.spanContext();
      seen.push({ id: job.id, name: job.name, attempt: job.attemptsMade + 1, traceId: ctx?.traceId ?? null, spanId: ctx?.spanId ?? null });
      if (failOnce.has(job.name) && job.attemptsMade === 0) throw new Error(`node failure for ${job.name}`);
      return { by: 'node' };
    },
    { connection: connect(), prefix: PREFIX, concurrency: 1, autorun: false, telemetry: new BullMQOtel({ tracerName: 'bullmq', enableMetrics: true }) },
  );
  worker.on('error', (err) => log(`worker error: ${err.message}`));
  worker.on('completed', () => { finished++; check(); });
  worker.on('failed', (job) => {
    if (job && job.attemptsMade >= ((job.opts && job.opts.attempts) || 1)) { finished++; check(); }
  });
  check();
  if (finished < count) {
    worker.run().catch((err) => log(`worker run error: ${err.stack || err}`));
    await done;
  }
  await worker.close();
  await closeConnections();
  const spans = await finishedSpans();
  const exported = await exportedMetrics();
  await shutdown();
  emit({ seen, spans, metrics: exported });
});
