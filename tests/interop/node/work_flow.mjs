// work_flow.mjs <queues> <count>
// Runs one Node Worker per queue (<queues> is comma-separated) and prints READY once
// they run. The processor returns
//   {"by": "node", "name": job.name, "children": await job.getChildrenValues(),
//    "ignored": await job.getIgnoredChildrenFailures()}
// or, for the job names listed in env WORK_FAIL (comma-separated), throws
// Error(`node failure for <name>`) at every attempt.
// Ends once this process saw <count> jobs finish for good (completed, or failed on their
// last attempt; a parent that BullMQ fails at fetch for a failed child counts too).
// stdout line 1: READY
// stdout line 2: {"completed": [{"queue", "id", "name", "returnvalue"}, ...],
//                 "failed": [{"queue", "id", "name", "failedReason"}, ...]}  (in order)
import { Worker } from 'bullmq';
import { connect, closeConnections, emit, log, parseCount, run, usage, PREFIX } from './common.mjs';

run(async () => {
  const [queuesArg, countArg] = process.argv.slice(2);
  if (!queuesArg || countArg === undefined) usage('work_flow.mjs <queues> <count>  (env WORK_FAIL)');
  const queueNames = queuesArg.split(',').filter(Boolean);
  const count = parseCount(countArg);
  const failNames = new Set((process.env.WORK_FAIL || '').split(',').map((s) => s.trim()).filter(Boolean));

  const completed = [];
  const failed = [];
  let resolveDone;
  const done = new Promise((resolve) => { resolveDone = resolve; });
  const check = () => { if (completed.length + failed.length >= count) resolveDone(); };

  const workers = queueNames.map((queue) => {
    const worker = new Worker(
      queue,
      async (job) => {
        if (failNames.has(job.name)) throw new Error(`node failure for ${job.name}`);
        return {
          by: 'node',
          name: job.name,
          children: await job.getChildrenValues(),
          ignored: await job.getIgnoredChildrenFailures(),
        };
      },
      { connection: connect(), prefix: PREFIX, concurrency: 4, autorun: false },
    );
    worker.on('error', (err) => log(`worker error on ${queue}: ${err.message}`));
    worker.on('completed', (job) => {
      completed.push({ queue, id: job.id, name: job.name, returnvalue: job.returnvalue ?? null });
      check();
    });
    worker.on('failed', (job, err) => {
      if (!job) return;
      const attempts = (job.opts && job.opts.attempts) || 1;
      if (job.attemptsMade >= attempts) {
        failed.push({ queue, id: job.id, name: job.name, failedReason: job.failedReason ?? (err && err.message) });
        check();
      }
    });
    return worker;
  });
  for (const worker of workers) {
    worker.run().catch((err) => log(`worker run error: ${err.stack || err}`));
  }
  await Promise.all(workers.map((worker) => worker.waitUntilReady()));
  process.stdout.write('READY\n');
  check();
  await done;
  await Promise.all(workers.map((worker) => worker.close()));
  await closeConnections();
  log(`completed ${completed.length}, failed ${failed.length} on ${queuesArg}`);
  emit({ completed, failed });
});
