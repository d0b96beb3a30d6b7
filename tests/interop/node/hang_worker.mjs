// hang_worker.mjs <queue> [<worker options JSON>]
// A Node Worker (concurrency 1, plus the given Worker options) whose processor,
// on the first job it gets, prints READY and then {"jobId": "<id>"} and never
// returns. The test kills this process (SIGKILL) to leave the job stalled; left
// alone, the self-timeout ends it (exit 3).
// stdout line 1: READY   (the processor has started a job)
// stdout line 2: {"jobId": "<id>"}
import { Worker } from 'bullmq';
import { connect, emit, log, parseJson, run, usage, PREFIX } from './common.mjs';

run(async () => {
  const [queueName, optsArg] = process.argv.slice(2);
  if (!queueName) usage('hang_worker.mjs <queue> [<worker options JSON>]');
  const workerOpts = optsArg === undefined ? {} : parseJson(optsArg, 'worker options');

  const worker = new Worker(
    queueName,
    async (job) => {
      process.stdout.write('READY\n');
      emit({ jobId: job.id });
      await new Promise(() => {});
    },
    { concurrency: 1, ...workerOpts, connection: connect(), prefix: PREFIX },
  );
  worker.on('error', (err) => log(`worker error: ${err.message}`));
  await worker.waitUntilReady();
  log(`hanging worker ready on ${queueName}`);
});
