// add_list.mjs <queue> <jobs JSON>
// <jobs JSON> is an array of {"name", "data", "opts", "queue"}: each is added, in
// order, with queue.add(name, data, opts) to its "queue" (default <queue>); "data"
// defaults to {} and "opts" to none.
// stdout: {"ids": [...], "jobs": [{"queue", "id", "name", "timestamp", "delay",
//          "priority", "opts"}, ...]}  (in the order added)
import { Queue } from 'bullmq';
import { connect, closeConnections, emit, log, parseJson, run, usage, PREFIX } from './common.mjs';

run(async () => {
  const [queueName, spec] = process.argv.slice(2);
  if (!queueName || spec === undefined) usage('add_list.mjs <queue> <jobs JSON>');
  const items = parseJson(spec, 'jobs');
  if (!Array.isArray(items)) usage('jobs must be a JSON array');

  const connection = connect();
  const queues = new Map();
  const queueFor = (name) => {
    if (!queues.has(name)) queues.set(name, new Queue(name, { connection, prefix: PREFIX }));
    return queues.get(name);
  };
  const ids = [];
  const jobs = [];
  try {
    for (const item of items) {
      const qname = item.queue || queueName;
      const job = item.opts
        ? await queueFor(qname).add(item.name, item.data ?? {}, { ...item.opts })
        : await queueFor(qname).add(item.name, item.data ?? {});
      ids.push(job.id);
      jobs.push({
        queue: qname,
        id: job.id,
        name: job.name,
        timestamp: job.timestamp,
        delay: job.delay,
        priority: job.priority,
        opts: job.opts,
      });
    }
    log(`added ${ids.length} jobs`);
  } finally {
    for (const queue of queues.values()) await queue.close();
    await closeConnections();
  }
  emit({ ids, jobs });
});
