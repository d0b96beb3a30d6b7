// worker.mjs --mode drain|latency --concurrency C [--count N] [--sandboxed 1]
//            [--queues Q --queue-start K]
// A Node BullMQ Worker on queue "bench" (default options but concurrency, autorun off).
// Prints READY once its connection is ready, starts on a GO line from stdin, then:
//   drain:   no-op processor; closes on a STOP line (or EOF); stdout {"ok": true};
//            with --sandboxed 1 it is BullMQ's sandboxed processor: the path of
//            noop_processor.cjs, run in child processes (useWorkerThreads: false), which
//            BullMQ starts as the first jobs arrive (after GO: the harness does not time
//            the first jobs);
//            with --queues Q (the scale curves, bench/curves.py): BullMQ has no worker of
//            several queues, so Q Worker objects, one per queue "bench-K" .. "bench-(K+Q-1)",
//            each of concurrency C, sharing the process and its connection (the twin of
//            bench/worker.py's lanes worker with C slots per queue);
//   latency: the processor records (now - job.data.t) in ms; once N jobs were seen it
//            closes; stdout {"latencies_ms": [...]}.
import { fileURLToPath } from 'node:url';
import { Worker, QUEUE, PREFIX, connect, emit, parseArgs, run, stdinLines, wallMs } from './common.mjs';

run(async () => {
  const a = parseArgs(process.argv.slice(2), {
    concurrency: '1', count: '0', sandboxed: '0', queues: '0', 'queue-start': '0',
  });
  const concurrency = Number(a.concurrency);
  const count = Number(a.count);
  const nextLine = stdinLines();
  const latencies = [];
  let resolveDone;
  const done = new Promise((resolve) => { resolveDone = resolve; });

  let processor;
  const extra = {};
  if (a.mode === 'drain' && a.sandboxed === '1') {
    processor = fileURLToPath(new URL('./noop_processor.cjs', import.meta.url));
    extra.useWorkerThreads = false; // child processes, as corral's processes=
  } else if (a.mode === 'drain') {
    processor = async () => {};
  } else if (a.mode === 'latency') {
    processor = async (job) => {
      latencies.push(wallMs() - job.data.t);
      if (latencies.length >= count) resolveDone();
    };
  } else {
    throw new Error(`unknown mode ${a.mode}`);
  }

  const names = [];
  if (a.mode === 'drain') {
    for (let j = Number(a['queue-start']); j < Number(a['queue-start']) + Number(a.queues); j++) {
      names.push(`${QUEUE}-${j}`);
    }
  }
  if (!names.length) names.push(QUEUE);
  const connection = connect();
  const workers = names.map((name) => new Worker(name, processor, {
    connection, prefix: PREFIX, concurrency, autorun: false, ...extra,
  }));
  for (const worker of workers) {
    worker.on('error', (err) => console.error(`worker error: ${err.message}`));
  }
  await Promise.all(workers.map((worker) => worker.waitUntilReady()));
  process.stdout.write('READY\n');
  const go = await nextLine();
  if (go !== 'GO') throw new Error(`expected GO, got ${JSON.stringify(go)}`);
  const running = workers.map((worker) => worker.run().catch((err) => console.error(`worker run error: ${err.stack || err}`)));

  if (a.mode === 'drain') {
    await nextLine(); // STOP or EOF
  } else {
    await done;
  }
  await Promise.all(workers.map((worker) => worker.close()));
  await Promise.all(running);
  await connection.quit();
  emit(a.mode === 'drain' ? { ok: true } : { latencies_ms: latencies });
});
