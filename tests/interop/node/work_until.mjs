// work_until.mjs <queues> <local|queue> <count> [<worker options JSON>]
// Runs one Node Worker per queue (<queues> is comma-separated) with the given
// Worker options (default {"concurrency": 1}) and prints READY once they run.
// The processor is driven by job.data, like the Python one in test_lifecycle.py:
//   1. RPUSH to the list `trace` the JSON {"queue","id","attempt","by":"node"},
//      where attempt = job.attemptsMade + 1;
//   2. job.log(`node attempt <attempt>`);
//   3. waits data.sleep_ms (if given);
//   4. throws Error(`attempt <attempt> of <id> failed on node`) while
//      attempt <= data.fail_attempts (if given);
//   5. returns {"by": "node", "attempt": attempt}.
// Ends in mode "local" once this process saw <count> jobs finish for good
// (completed, or failed on their last attempt); in mode "queue" once the queues
// hold <count> completed + failed jobs in all (whoever processed them).
// stdout line 1: READY
// stdout line 2: {"order": [[queue, id, attempt], ...]   (processor starts, in order),
//                 "completed": [snapshot, ...], "failed": [snapshot + "failedReason", ...]}
// snapshot = {queue, id, name, attemptsMade, stalledCounter, processedOn, finishedOn,
//             returnvalue}, in the order the jobs finished.
import { Queue, Worker } from 'bullmq';
import { connect, closeConnections, emit, log, parseCount, parseJson, run, sleep, usage, PREFIX } from './common.mjs';

run(async () => {
  const [queuesArg, mode, countArg, optsArg] = process.argv.slice(2);
  if (!queuesArg || !['local', 'queue'].includes(mode) || countArg === undefined) {
    usage('work_until.mjs <queues> <local|queue> <count> [<worker options JSON>]');
  }
  const queueNames = queuesArg.split(',').filter(Boolean);
  const count = parseCount(countArg);
  const workerOpts = optsArg === undefined ? {} : parseJson(optsArg, 'worker options');

  const tracer = connect();
  const order = [];
  const completed = [];
  const failed = [];
  let resolveDone;
  const done = new Promise((resolve) => { resolveDone = resolve; });
  const check = () => {
    if (mode === 'local' && completed.length + failed.length >= count) resolveDone();
  };
  const snapshot = (queue, job) => ({
    queue,
    id: job.id,
    name: job.name,
    attemptsMade: job.attemptsMade,
    stalledCounter: job.stalledCounter,
    processedOn: job.processedOn ?? null,
    finishedOn: job.finishedOn ?? null,
    returnvalue: job.returnvalue ?? null,
  });

  const workers = queueNames.map((queue) => {
    const worker = new Worker(
      queue,
      async (job) => {
        const attempt = job.attemptsMade + 1;
        const data = job.data || {};
        order.push([queue, job.id, attempt]);
        await tracer.rpush('trace', JSON.stringify({ queue, id: job.id, attempt, by: 'node' }));
        await job.log(`node attempt ${attempt}`);
        if (data.sleep_ms) await sleep(data.sleep_ms);
        if (data.fail_attempts && attempt <= data.fail_attempts) {
          throw new Error(`attempt ${attempt} of ${job.id} failed on node`);
        }
        return { by: 'node', attempt };
      },
      { concurrency: 1, ...workerOpts, connection: connect(), prefix: PREFIX, autorun: false },
    );
    worker.on('error', (err) => log(`worker error on ${queue}: ${err.message}`));
    worker.on('completed', (job) => {
      completed.push(snapshot(queue, job));
      check();
    });
    worker.on('failed', (job, err) => {
      if (!job) return;
      const attempts = (job.opts && job.opts.attempts) || 1;
      if (job.attemptsMade >= attempts) {
        failed.push({ ...snapshot(queue, job), failedReason: job.failedReason ?? (err && err.message) });
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

  if (mode === 'queue') {
    const queues = queueNames.map((name) => new Queue(name, { connection: connect(), prefix: PREFIX }));
    for (;;) {
      let finished = 0;
      for (const queue of queues) {
        const counts = await queue.getJobCounts('completed', 'failed');
        finished += counts.completed + counts.failed;
      }
      if (finished >= count) break;
      await sleep(50);
    }
    for (const queue of queues) await queue.close();
  } else {
    check();
    await done;
  }
  await Promise.all(workers.map((worker) => worker.close()));
  await closeConnections();
  log(`completed ${completed.length}, failed ${failed.length} on ${queuesArg}`);
  emit({ order, completed, failed });
});
