// read_jobs.mjs <queue> <id> [<id> ...]
// stdout: {"jobs": {"<id>": {...fields...} | null, ...}, "counts": {...}}
// Fields per job: id, name, data, opts, timestamp, delay, priority,
// processedOn, finishedOn, returnvalue, failedReason, stacktrace,
// attemptsMade, attemptsStarted, stalledCounter, progress, state.
// A job that does not exist maps to null. counts = queue.getJobCounts().
import { Job, Queue } from 'bullmq';
import { connect, closeConnections, emit, run, usage, PREFIX } from './common.mjs';

const orNull = (v) => (v === undefined ? null : v);

run(async () => {
  const [queueName, ...ids] = process.argv.slice(2);
  if (!queueName || ids.length === 0) usage('read_jobs.mjs <queue> <id> [<id> ...]');

  const queue = new Queue(queueName, { connection: connect(), prefix: PREFIX });
  const jobs = {};
  let counts;
  try {
    for (const id of ids) {
      const job = await Job.fromId(queue, id);
      if (!job) {
        jobs[id] = null;
        continue;
      }
      jobs[id] = {
        id: orNull(job.id),
        name: orNull(job.name),
        data: orNull(job.data),
        opts: orNull(job.opts),
        timestamp: orNull(job.timestamp),
        delay: orNull(job.delay),
        priority: orNull(job.priority),
        processedOn: orNull(job.processedOn),
        finishedOn: orNull(job.finishedOn),
        returnvalue: orNull(job.returnvalue),
        failedReason: orNull(job.failedReason),
        stacktrace: orNull(job.stacktrace),
        attemptsMade: orNull(job.attemptsMade),
        attemptsStarted: orNull(job.attemptsStarted),
        stalledCounter: orNull(job.stalledCounter),
        progress: orNull(job.progress),
        state: await job.getState(),
      };
    }
    counts = await queue.getJobCounts();
  } finally {
    await queue.close();
    await closeConnections();
  }
  emit({ jobs, counts });
});
