// listen_completed.mjs <queue> <count>
// stdout line 1: READY  (once the QueueEvents listener is in place)
// stdout line 2: {"completed": {"<jobId>": returnvalue, ...},
//                 "failed": {"<jobId>": failedReason, ...}}
// Ends once completed + failed cover <count> distinct job ids.
// Events are read from the last entry present in the events stream at start
// (pinned explicitly, so nothing emitted after READY can be missed).
import { QueueEvents } from 'bullmq';
import { connect, closeConnections, emit, log, parseCount, run, usage, PREFIX } from './common.mjs';

run(async () => {
  const [queueName, countArg] = process.argv.slice(2);
  if (!queueName || countArg === undefined) usage('listen_completed.mjs <queue> <count>');
  const count = parseCount(countArg);

  // Pin the starting point: the id of the newest entry in the stream (or 0-0).
  const probe = connect();
  const last = await probe.xrevrange(`${PREFIX}:${queueName}:events`, '+', '-', 'COUNT', 1);
  const lastEventId = last.length ? last[0][0] : '0-0';
  log(`listening on ${queueName} from event id ${lastEventId}`);

  const completed = {};
  const failed = {};
  const seen = new Set();
  let resolveDone;
  const done = new Promise((resolve) => { resolveDone = resolve; });
  const check = () => { if (seen.size >= count) resolveDone(); };

  const qe = new QueueEvents(queueName, { connection: connect(), prefix: PREFIX, lastEventId });
  qe.on('error', (err) => log(`queue events error: ${err.message}`));
  qe.on('completed', ({ jobId, returnvalue }) => {
    completed[jobId] = returnvalue === undefined ? null : returnvalue;
    seen.add(jobId);
    check();
  });
  qe.on('failed', ({ jobId, failedReason }) => {
    failed[jobId] = failedReason === undefined ? null : failedReason;
    seen.add(jobId);
    check();
  });
  await qe.waitUntilReady();
  process.stdout.write('READY\n');
  check();
  await done;
  await qe.close();
  await closeConnections();
  emit({ completed, failed });
});
