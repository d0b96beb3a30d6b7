// work_jobs.mjs <queue> <count>
// Runs a Node Worker (concurrency 10) whose processor returns
// {"seen": job.data, "name": job.name, "by": "node"} until <count> jobs have
// finished, then closes.
// Optional env WORK_FAIL: "all" or a comma-separated list of job names; those
// jobs throw Error(`node failure for <name>`) instead (each attempt).
// A job counts as finished when it completes, or when it fails for the last
// time (attemptsMade >= opts.attempts, default 1).
// stdout: {"processed": [{"id","name","data","opts","timestamp","attemptsMade"}...],
//          "failed": [{"id","name","data","opts","timestamp","attemptsMade","failedReason"}...]}
// both in the order they finished.
import { Worker } from 'bullmq';
import { connect, closeConnections, emit, log, parseCount, run, usage, PREFIX } from './common.mjs';

run(async () => {
  const [queueName, countArg] = process.argv.slice(2);
  if (!queueName || countArg === undefined) usage('work_jobs.mjs <queue> <count>  (env WORK_FAIL: all|name,name)');
  const count = parseCount(countArg);
  const failSpec = (process.env.WORK_FAIL || '').trim();
  const failNames = new Set(failSpec.split(',').map((s) => s.trim()).filter(Boolean));
  const shouldFail = (name) => failSpec === 'all' || failNames.has(name);

  const processed = [];
  const failed = [];
  let resolveDone;
  const done = new Promise((resolve) => { resolveDone = resolve; });
  const check = () => { if (processed.length + failed.length >= count) resolveDone(); };
  const snapshot = (job) => ({
    id: job.id,
    name: job.name,
    data: job.data,
    opts: job.opts,
    timestamp: job.timestamp,
    attemptsMade: job.attemptsMade,
  });

  const worker = new Worker(
    queueName,
    async (job) => {
      if (shouldFail(job.name)) throw new Error(`node failure for ${job.name}`);
      return { seen: job.data, name: job.name, by: 'node' };
    },
    { connection: connect(), prefix: PREFIX, concurrency: 10, autorun: false },
  );
  worker.on('error', (err) => log(`worker error: ${err.message}`));
  worker.on('completed', (job) => {
    processed.push(snapshot(job));
    check();
  });
  worker.on('failed', (job, err) => {
    if (!job) return;
    const attempts = (job.opts && job.opts.attempts) || 1;
    if (job.attemptsMade >= attempts) {
      failed.push({ ...snapshot(job), failedReason: job.failedReason ?? (err && err.message) });
      check();
    }
  });

  check();
  if (processed.length + failed.length < count) {
    worker.run().catch((err) => log(`worker run error: ${err.stack || err}`));
    await done;
  }
  await worker.close();
  await closeConnections();
  log(`processed ${processed.length}, failed ${failed.length} on ${queueName}`);
  emit({ processed, failed });
});
