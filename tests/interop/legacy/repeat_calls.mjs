// repeat_calls.mjs <4|5> <queue> <calls JSON>
// Drives an older Node BullMQ, the one that still writes legacy repeatable jobs: 5 is bullmq
// 5.81.5 (the last 5.x), 4 is bullmq 4.18.3 (package.json here names both). <calls JSON> is
// an array of [method, ...args], each awaited in order on one Queue, e.g.
//   [["add", "tick", {"a": 1}, {"repeat": {"pattern": "0 * * * *"}}],
//    ["getRepeatableJobs", 0, -1, false],
//    ["removeRepeatable", "tick", {"pattern": "0 * * * *"}],
//    ["removeRepeatableByKey", "<key>"]]
// A job in a result is given as {"id","name","data","opts","timestamp","delay","repeatJobKey"};
// undefined as null; a call that throws as {"error": message}.
// Same contract as ../node/*.mjs: env REDIS_URL, one line of JSON on stdout:
//   {"results": [<result of call 1>, ...]}
// Only BullMQ's public API is used.
import { closeConnections, emit, parseJson, run, usage, PREFIX } from '../node/common.mjs';

const isJob = (x) => x !== null && typeof x === 'object' && 'id' in x && 'opts' in x && 'name' in x;
const summary = (job) => ({
  id: job.id,
  name: job.name,
  data: job.data,
  opts: job.opts,
  timestamp: job.timestamp,
  delay: job.delay,
  repeatJobKey: job.repeatJobKey ?? null,
});

// Connection options rather than a client: each BullMQ version brings its own ioredis.
function connection() {
  const url = new URL(process.env.REDIS_URL || usage('env REDIS_URL is not set'));
  const db = url.pathname.replace('/', '');
  return {
    host: url.hostname,
    port: Number(url.port || 6379),
    db: db ? Number(db) : 0,
    maxRetriesPerRequest: null,
  };
}

run(async () => {
  const [version, queueName, spec] = process.argv.slice(2);
  if (!['4', '5'].includes(version) || !queueName || spec === undefined) {
    usage('repeat_calls.mjs <4|5> <queue> <calls JSON>');
  }
  const calls = parseJson(spec, 'calls');
  const { Queue } = await import(version === '4' ? 'bullmq4' : 'bullmq');
  const queue = new Queue(queueName, { connection: connection(), prefix: PREFIX });
  const results = [];
  try {
    for (const [method, ...args] of calls) {
      if (typeof queue[method] !== 'function') usage(`Queue has no method ${method}`);
      try {
        const result = await queue[method](...args);
        if (isJob(result)) results.push(summary(result));
        else if (Array.isArray(result) && result.every(isJob)) results.push(result.map(summary));
        else results.push(result === undefined ? null : result);
      } catch (err) {
        results.push({ error: err.message });
      }
    }
  } finally {
    await queue.close();
    await closeConnections();
  }
  emit({ results });
});
