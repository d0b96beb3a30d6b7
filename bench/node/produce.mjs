// produce.mjs --mode single|bulk|paced --count N [--chunk C] [--rate R] [--payload BYTES]
// Adds N jobs named "bench" to queue "bench" with Node BullMQ's Queue:
//   single: queue.add one at a time, awaiting each;
//   bulk:   queue.addBulk in chunks of C;
//   paced:  queue.add at R jobs per second, each job's data {"t": enqueue time in ms}.
// Options of the scale curves (bench/curves.py), single and bulk modes, the twins of
// bench/produce.py's; none given, the jobs are the ones above:
//   --queues Q [--queue-start K]: N jobs to each of the queues "bench-K" .. "bench-(K+Q-1)";
//   --offset I: the first job's data is {"i": I};
//   --priorities P: job i gets priority 1 + i % P;
//   --delay-until MS: every job delayed until the epoch time MS (computed as its chunk is
//     built; a job built after MS gets a 1 ms delay, and "overran": true is reported);
//   --remove-on-complete N: removeOnComplete: N;
//   --mode adds --fill F --bulk B: an addBulk of F jobs (untimed: it tops the queue up), then
//     N single adds and B jobs by addBulk in chunks of C, each timed; stdout also has
//     "bulk": B, "bulk_elapsed_s": seconds.
// The clock starts once the connections are ready and stops when the last add resolved.
// stdout: {"count": jobs added, "elapsed_s": seconds}
import { Queue, QUEUE, PREFIX, connect, emit, makeData, parseArgs, run, sleep, wallMs } from './common.mjs';

run(async () => {
  const a = parseArgs(process.argv.slice(2), {
    chunk: '1000', rate: '200', payload: '0', queues: '0', 'queue-start': '0', offset: '0',
    priorities: '0', 'delay-until': '0', 'remove-on-complete': '', fill: '0', bulk: '0',
  });
  const count = Number(a.count);
  const chunk = Number(a.chunk);
  const rate = Number(a.rate);
  const payload = Number(a.payload);
  const offset = Number(a.offset);
  const priorities = Number(a.priorities);
  const delayUntil = Number(a['delay-until']);
  const keep = a['remove-on-complete'] === '' ? null : Number(a['remove-on-complete']);
  let overran = false;
  const curveFlags = priorities > 0 || delayUntil > 0 || keep !== null;
  // Job i's options from the scale-curve flags, or undefined when none is given.
  const options = !curveFlags ? () => undefined : (i) => {
    const opts = {};
    if (priorities > 0) opts.priority = 1 + (i % priorities);
    if (delayUntil > 0) {
      const left = delayUntil - wallMs();
      if (left < 1) overran = true;
      opts.delay = Math.max(1, Math.round(left));
    }
    if (keep !== null) opts.removeOnComplete = keep;
    return Object.keys(opts).length ? opts : undefined;
  };

  const connection = connect();
  const names = [];
  for (let j = Number(a['queue-start']); j < Number(a['queue-start']) + Number(a.queues); j++) {
    names.push(`${QUEUE}-${j}`);
  }
  if (!names.length) names.push(QUEUE);
  const queues = names.map((name) => new Queue(name, { connection, prefix: PREFIX }));
  for (const queue of queues) await queue.waitUntilReady();

  const singles = async (queue, first, end) => {
    for (let i = first; i < end; i++) {
      const opts = options(i);
      if (opts) await queue.add('bench', makeData(i, payload), opts);
      else await queue.add('bench', makeData(i, payload));
    }
  };
  const bulk = async (queue, first, end) => {
    for (let start = first; start < end; start += chunk) {
      const jobs = [];
      for (let i = start; i < Math.min(end, start + chunk); i++) {
        const opts = options(i);
        jobs.push(opts ? { name: 'bench', data: makeData(i, payload), opts } : { name: 'bench', data: makeData(i, payload) });
      }
      await queue.addBulk(jobs);
    }
  };

  let out;
  let t0 = performance.now();
  if (a.mode === 'adds') {
    await bulk(queues[0], 0, Number(a.fill));
    t0 = performance.now();
    await singles(queues[0], 0, count);
    const t1 = performance.now();
    await bulk(queues[0], 0, Number(a.bulk));
    out = { elapsed_s: (t1 - t0) / 1000, bulk: Number(a.bulk), bulk_elapsed_s: (performance.now() - t1) / 1000 };
  } else {
    for (const queue of queues) {
      if (a.mode === 'single') {
        await singles(queue, offset, offset + count);
      } else if (a.mode === 'bulk') {
        await bulk(queue, offset, offset + count);
      } else if (a.mode === 'paced') {
        for (let i = 0; i < count; i++) {
          const wait = t0 + (i * 1000) / rate - performance.now();
          if (wait > 0) await sleep(wait);
          await queue.add('bench', { t: wallMs() });
        }
      } else {
        throw new Error(`unknown mode ${a.mode}`);
      }
    }
    out = { elapsed_s: (performance.now() - t0) / 1000 };
  }

  for (const queue of queues) await queue.close();
  await connection.quit();
  out.count = count * queues.length;
  if (overran) out.overran = true;
  emit(out);
});
