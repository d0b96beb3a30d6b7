// api_worker_pause.mjs <queue>
// One Worker (concurrency 2, autorun off) through a pause and a resume: it runs, takes the
// queue's job "slow" (which runs 300 ms), is paused while "slow" runs, then a job "next" is
// added; once the pause has settled it is resumed, and closed after both jobs completed.
// Records its events ready/closing/closed/paused/resumed and, at each step, isRunning() and
// isPaused().
// stdout: {"events": [name, ...], "states": [[step, isRunning, isPaused], ...],
//          "waitingWhilePaused": <waiting count once the pause settled>,
//          "queuePaused": <queue.isPaused() then>}
import { Queue, Worker } from 'bullmq';
import { connect, closeConnections, emit, run, sleep, usage, PREFIX } from './common.mjs';

run(async () => {
  const [queueName] = process.argv.slice(2);
  if (!queueName) usage('api_worker_pause.mjs <queue>');
  const queue = new Queue(queueName, { connection: connect(), prefix: PREFIX });
  const events = [];
  const states = [];
  let started = false;
  const worker = new Worker(
    queueName,
    async (job) => {
      if (job.name === 'slow') {
        started = true;
        await sleep(300);
      }
      return job.name;
    },
    { connection: connect(), prefix: PREFIX, concurrency: 2, autorun: false },
  );
  for (const name of ['ready', 'closing', 'closed', 'paused', 'resumed']) worker.on(name, () => events.push(name));
  const state = (step) => states.push([step, worker.isRunning(), worker.isPaused()]);
  let out = {};
  try {
    state('before run');
    const running = worker.run();
    while (!started) await sleep(10);
    state('running');
    const pausing = worker.pause();
    state('pausing');
    await queue.add('next', {});
    await pausing;
    state('paused');
    out = { waitingWhilePaused: await queue.getWaitingCount(), queuePaused: await queue.isPaused() };
    worker.resume();
    state('resumed');
    while ((await queue.getCompletedCount()) < 2) await sleep(20);
    await worker.close();
    await running;
    state('closed');
  } finally {
    await queue.close();
    await closeConnections();
  }
  emit({ events, states, ...out });
});
