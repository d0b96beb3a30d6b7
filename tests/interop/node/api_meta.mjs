// api_meta.mjs <queue>
// Reads the queue's meta through a Queue made with skipMetasUpdate (so that it does not
// write its own `version` first, as a plain Queue does when it starts).
// stdout: {"version": <getVersion()>, "meta": <getMeta()>}
import { Queue } from 'bullmq';
import { connect, closeConnections, emit, run, usage, PREFIX } from './common.mjs';

run(async () => {
  const [queueName] = process.argv.slice(2);
  if (!queueName) usage('api_meta.mjs <queue>');
  const queue = new Queue(queueName, { connection: connect(), prefix: PREFIX, skipMetasUpdate: true });
  try {
    emit({ version: await queue.getVersion(), meta: await queue.getMeta() });
  } finally {
    await queue.close();
    await closeConnections();
  }
});
