// queue_calls.mjs <queue> <calls JSON>
// <calls JSON> is an array of [method, ...args]; each is awaited in order as
// queue[method](...args) on one Queue (e.g. ["pause"], ["isPaused"],
// ["getJobCounts"], ["getJobs", ["waiting", "delayed"], 0, 3, true]).
// A result that is a list of jobs is given as their ids; undefined as null.
// stdout: {"results": [<result of call 1>, ...]}
import { Queue } from 'bullmq';
import { connect, closeConnections, emit, parseJson, run, usage, PREFIX } from './common.mjs';

const isJob = (x) => x !== null && typeof x === 'object' && 'id' in x && 'opts' in x && 'name' in x;

run(async () => {
  const [queueName, spec] = process.argv.slice(2);
  if (!queueName || spec === undefined) usage('queue_calls.mjs <queue> <calls JSON>');
  const calls = parseJson(spec, 'calls');
  if (!Array.isArray(calls) || !calls.every((c) => Array.isArray(c) && typeof c[0] === 'string')) {
    usage('calls must be a JSON array of [method, ...args]');
  }

  const queue = new Queue(queueName, { connection: connect(), prefix: PREFIX });
  const results = [];
  try {
    for (const [method, ...args] of calls) {
      if (typeof queue[method] !== 'function') usage(`Queue has no method ${method}`);
      const result = await queue[method](...args);
      if (Array.isArray(result) && result.every(isJob)) results.push(result.map((job) => job.id));
      else results.push(result === undefined ? null : result);
    }
  } finally {
    await queue.close();
    await closeConnections();
  }
  emit({ results });
});
