// upsert_scheduler.mjs <queue> <scheduler id> <repeat opts JSON> [<template JSON>]
// Calls queue.upsertJobScheduler(id, repeatOpts, template) once, e.g.
//   upsert_scheduler.mjs q tick '{"every":300}' '{"name":"t","data":{"a":1}}'
// stdout: {"job": {"id","name","data","opts","timestamp","delay"} | null,
//          "scheduler": <queue.getJobScheduler(id)> | null}
import { Queue } from 'bullmq';
import { connect, closeConnections, emit, parseJson, run, usage, PREFIX } from './common.mjs';

run(async () => {
  const [queueName, schedulerId, repeatArg, templateArg] = process.argv.slice(2);
  if (!queueName || !schedulerId || repeatArg === undefined) {
    usage('upsert_scheduler.mjs <queue> <scheduler id> <repeat opts JSON> [<template JSON>]');
  }
  const repeatOpts = parseJson(repeatArg, 'repeat opts');
  const template = templateArg === undefined ? undefined : parseJson(templateArg, 'template');

  const queue = new Queue(queueName, { connection: connect(), prefix: PREFIX });
  try {
    const job = await queue.upsertJobScheduler(schedulerId, repeatOpts, template);
    const scheduler = await queue.getJobScheduler(schedulerId);
    emit({
      job: job
        ? {
            id: job.id,
            name: job.name,
            data: job.data,
            opts: job.opts,
            timestamp: job.timestamp,
            delay: job.delay,
          }
        : null,
      scheduler: scheduler ?? null,
    });
  } finally {
    await queue.close();
    await closeConnections();
  }
});
