// produce_events.mjs <queue>
// Drives Node BullMQ through a scenario that writes most event kinds to <queue>'s stream:
// add (and a duplicate id), a delayed add, a job that reports progress and completes, a job
// that fails for good, pause/resume, remove, clean. stdout: {"ids": {"done", "bad", "later"}}.
import { Queue, Worker } from 'bullmq';
import { connect, closeConnections, emit, run, sleep, usage, PREFIX } from './common.mjs';

run(async () => {
  const [queueName] = process.argv.slice(2);
  if (!queueName) usage('produce_events.mjs <queue>');
  const queue = new Queue(queueName, { connection: connect(), prefix: PREFIX });
  const done = await queue.add('done', { n: 1 }, { jobId: 'done-1' });
  await queue.add('done', { n: 2 }, { jobId: 'done-1' });
  const bad = await queue.add('bad', { n: 3 });
  let finished = 0;
  const worker = new Worker(queueName, async (job) => {
    if (job.name === 'bad') throw new Error('node says no');
    await job.updateProgress({ pct: 50 });
    return { ok: job.data.n };
  }, { connection: connect(), prefix: PREFIX, autorun: true });
  worker.on('completed', () => { finished += 1; });
  worker.on('failed', () => { finished += 1; });
  while (finished < 2) await sleep(20);
  await worker.close();
  const later = await queue.add('later', {}, { delay: 3600000 });
  await queue.pause();
  await queue.resume();
  await later.remove();
  await queue.clean(0, 10, 'completed');
  await queue.close();
  await closeConnections();
  emit({ ids: { done: done.id, bad: bad.id, later: later.id } });
});
