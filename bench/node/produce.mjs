// produce.mjs --mode single|bulk|paced --count N [--chunk C] [--rate R] [--payload BYTES]
// Adds N jobs named "bench" to queue "bench" with Node BullMQ's Queue:
//   single: queue.add one at a time, awaiting each;
//   bulk:   queue.addBulk in chunks of C;
//   paced:  queue.add at R jobs per second, each job's data {"t": enqueue time in ms}.
// The clock starts once the connection is ready and stops when the last add resolved.
// stdout: {"count": N, "elapsed_s": seconds}
import { Queue, QUEUE, PREFIX, connect, emit, makeData, parseArgs, run, sleep, wallMs } from './common.mjs';

run(async () => {
  const a = parseArgs(process.argv.slice(2), { chunk: '1000', rate: '200', payload: '0' });
  const count = Number(a.count);
  const chunk = Number(a.chunk);
  const rate = Number(a.rate);
  const payload = Number(a.payload);
  const connection = connect();
  const queue = new Queue(QUEUE, { connection, prefix: PREFIX });
  await queue.waitUntilReady();

  const t0 = performance.now();
  if (a.mode === 'single') {
    for (let i = 0; i < count; i++) await queue.add('bench', makeData(i, payload));
  } else if (a.mode === 'bulk') {
    for (let start = 0; start < count; start += chunk) {
      const jobs = [];
      for (let i = start; i < Math.min(count, start + chunk); i++) {
        jobs.push({ name: 'bench', data: makeData(i, payload) });
      }
      await queue.addBulk(jobs);
    }
  } else if (a.mode === 'paced') {
    for (let i = 0; i < count; i++) {
      const wait = t0 + (i * 1000) / rate - performance.now();
      if (wait > 0) await sleep(wait);
      await queue.add('bench', { t: wallMs() });
    }
  } else {
    throw new Error(`unknown mode ${a.mode}`);
  }
  const elapsed = (performance.now() - t0) / 1000;

  await queue.close();
  await connection.quit();
  emit({ count, elapsed_s: elapsed });
});
