// read_dlq.mjs <queue>
// Reads a dead-letter queue as a BullMQ user (or bull-board) does: every job of every state,
// oldest first, with its state and its logs.
// stdout: {"counts": queue.getJobCounts(),
//          "jobs": [{"id", "name", "data", "opts", "state", "logs", "attemptsMade"}, ...]}
import { Queue } from 'bullmq';
import { connect, closeConnections, emit, run, usage, PREFIX } from './common.mjs';

const STATES = ['waiting', 'prioritized', 'delayed', 'active', 'waiting-children', 'completed', 'failed'];

run(async () => {
  const [queueName] = process.argv.slice(2);
  if (!queueName) usage('read_dlq.mjs <queue>');
  const queue = new Queue(queueName, { connection: connect(), prefix: PREFIX });
  const jobs = [];
  let counts;
  try {
    for (const job of await queue.getJobs(STATES, 0, -1, true)) {
      const { logs } = await queue.getJobLogs(job.id);
      jobs.push({
        id: job.id,
        name: job.name,
        data: job.data,
        opts: job.opts,
        state: await job.getState(),
        logs,
        attemptsMade: job.attemptsMade,
      });
    }
    counts = await queue.getJobCounts();
  } finally {
    await queue.close();
    await closeConnections();
  }
  emit({ counts, jobs });
});
