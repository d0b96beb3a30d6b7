// fail_once.mjs <queue> <count>
// A Node Worker (concurrency 1) whose processor throws Error(`node failure for <name>`) on
// every job's first attempt (job.attemptsMade === 0) and returns {"by": "node"} otherwise.
// It closes as soon as <count> attempts have failed, so a retry (delayed by its backoff) is
// left for another worker.
// stdout: {"failed": [{"id", "name", "opts", "attemptsMade"}...]}  (the job as Node saw it
//          in its "failed" event, in order)
import { Worker } from 'bullmq';
import { connect, closeConnections, emit, log, parseCount, run, usage, PREFIX } from './common.mjs';

run(async () => {
  const [queueName, countArg] = process.argv.slice(2);
  if (!queueName || countArg === undefined) usage('fail_once.mjs <queue> <count>');
  const count = parseCount(countArg);
  const failed = [];
  let resolveDone;
  const done = new Promise((resolve) => { resolveDone = resolve; });

  const worker = new Worker(
    queueName,
    async (job) => {
      if (job.attemptsMade === 0) throw new Error(`node failure for ${job.name}`);
      return { by: 'node' };
    },
    { connection: connect(), prefix: PREFIX, concurrency: 1, autorun: false },
  );
  worker.on('error', (err) => log(`worker error: ${err.message}`));
  worker.on('failed', (job) => {
    if (!job) return;
    failed.push({ id: job.id, name: job.name, opts: job.opts, attemptsMade: job.attemptsMade });
    if (failed.length >= count) resolveDone();
  });
  worker.run().catch((err) => log(`worker run error: ${err.stack || err}`));
  await done;
  await worker.close();
  await closeConnections();
  emit({ failed });
});
