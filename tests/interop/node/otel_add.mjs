// otel_add.mjs <queue> <jobs JSON>
// A Node producer with telemetry (bullmq-otel's BullMQOtel on the Queue and a FlowProducer)
// adds, inside one root span "interop-root", what <jobs JSON> lists, in order:
//   {"add": name, "opts": {...}}               one queue.add(name, {i}, opts)
//   {"bulk": [name, ...]}                       one queue.addBulk of those names
//   {"flow": parent name, "children": [names]}  one FlowProducer.add, children in the queue
// stdout: {"root": {"traceId", "spanId"}, "ids": [[job id, ...] per entry],
//          "spans": [<span JSON, see otel_common.mjs>...]}
import { FlowProducer, Queue } from 'bullmq';
import { BullMQOtel } from 'bullmq-otel';
import { connect, closeConnections, emit, parseJson, run, usage, PREFIX } from './common.mjs';
import { finishedSpans, shutdown, tracer } from './otel_common.mjs';

run(async () => {
  const [queueName, jobsArg] = process.argv.slice(2);
  if (!queueName || jobsArg === undefined) usage('otel_add.mjs <queue> <jobs JSON>');
  const entries = parseJson(jobsArg, 'jobs');
  if (!Array.isArray(entries)) usage('jobs must be a JSON list');
  const telemetry = new BullMQOtel({ tracerName: 'bullmq' });
  const queue = new Queue(queueName, { connection: connect(), prefix: PREFIX, telemetry });
  const flows = new FlowProducer({ connection: connect(), prefix: PREFIX, telemetry });
  const ids = [];
  let root;
  try {
    await tracer.startActiveSpan('interop-root', async (span) => {
      root = { traceId: span.spanContext().traceId, spanId: span.spanContext().spanId };
      try {
        for (const [i, entry] of entries.entries()) {
          if (entry.add !== undefined) {
            const job = await queue.add(entry.add, { i }, entry.opts || {});
            ids.push([job.id]);
          } else if (entry.bulk !== undefined) {
            const jobs = await queue.addBulk(entry.bulk.map((name) => ({ name, data: { i } })));
            ids.push(jobs.map((job) => job.id));
          } else if (entry.flow !== undefined) {
            const tree = await flows.add({
              name: entry.flow,
              queueName,
              data: { i },
              children: (entry.children || []).map((name) => ({ name, queueName, data: { i } })),
            });
            ids.push([tree.job.id, ...(tree.children || []).map((c) => c.job.id)]);
          } else {
            usage(`unknown entry ${JSON.stringify(entry)}`);
          }
        }
      } finally {
        span.end();
      }
    });
  } finally {
    await queue.close();
    await flows.close();
    await closeConnections();
  }
  const spans = await finishedSpans();
  await shutdown();
  emit({ root, ids, spans });
});
