// listen_all.mjs <queue> <count> [<lastEventId>]
// stdout line 1: READY  (once the QueueEvents listener is in place)
// stdout line 2: {"events": [{"event": name, "id": streamId, "args": {...}}, ...]}
// Records every BullMQ event as Node's QueueEvents delivers it (args parsed by Node: JSON
// returnvalue/progress data, numeric delay), until <count> events are seen. Starts after the
// newest entry present at start, or at <lastEventId> when given ("0" for all).
import { QueueEvents } from 'bullmq';
import { connect, closeConnections, emit, log, parseCount, run, usage, PREFIX } from './common.mjs';

const NAMES = [
  'added', 'waiting', 'waiting-children', 'delayed', 'active', 'progress', 'completed',
  'failed', 'retries-exhausted', 'stalled', 'removed', 'duplicated', 'deduplicated',
  'drained', 'paused', 'resumed', 'cleaned',
];

run(async () => {
  const [queueName, countArg, startArg] = process.argv.slice(2);
  if (!queueName || countArg === undefined) usage('listen_all.mjs <queue> <count> [<lastEventId>]');
  const count = parseCount(countArg);
  let lastEventId = startArg;
  if (lastEventId === undefined) {
    const probe = connect();
    const last = await probe.xrevrange(`${PREFIX}:${queueName}:events`, '+', '-', 'COUNT', 1);
    lastEventId = last.length ? last[0][0] : '0-0';
  }
  log(`listening on ${queueName} from event id ${lastEventId}`);

  const events = [];
  let resolveDone;
  const done = new Promise((resolve) => { resolveDone = resolve; });
  const qe = new QueueEvents(queueName, { connection: connect(), prefix: PREFIX, lastEventId });
  qe.on('error', (err) => log(`queue events error: ${err.message}`));
  for (const name of NAMES) {
    qe.on(name, (args, id) => {
      events.push({ event: name, id, args: args === undefined ? null : args });
      if (events.length >= count) resolveDone();
    });
  }
  await qe.waitUntilReady();
  process.stdout.write('READY\n');
  if (count === 0) resolveDone();
  await done;
  await qe.close();
  await closeConnections();
  emit({ events });
});
