// worker.mjs --mode drain|latency --concurrency C [--count N] [--sandboxed 1]
// A Node BullMQ Worker on queue "bench" (default options but concurrency, autorun off).
// Prints READY once its connection is ready, starts on a GO line from stdin, then:
//   drain:   no-op processor; closes on a STOP line (or EOF); stdout {"ok": true};
//            with --sandboxed 1 it is BullMQ's sandboxed processor: the path of
//            noop_processor.cjs, run in child processes (useWorkerThreads: false), which
//            BullMQ starts as the first jobs arrive (after GO: the harness does not time
//            the first jobs);
//   latency: the processor records (now - job.data.t) in ms; once N jobs were seen it
//            closes; stdout {"latencies_ms": [...]}.
import { fileURLToPath } from 'node:url';
import { Worker, QUEUE, PREFIX, connect, emit, parseArgs, run, stdinLines, wallMs } from './common.mjs';

run(async () => {
  const a = parseArgs(process.argv.slice(2), { concurrency: '1', count: '0', sandboxed: '0' });
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

  const connection = connect();
  const worker = new Worker(QUEUE, processor, {
    connection, prefix: PREFIX, concurrency, autorun: false, ...extra,
  });
  worker.on('error', (err) => console.error(`worker error: ${err.message}`));
  await worker.waitUntilReady();
  process.stdout.write('READY\n');
  const go = await nextLine();
  if (go !== 'GO') throw new Error(`expected GO, got ${JSON.stringify(go)}`);
  const running = worker.run().catch((err) => console.error(`worker run error: ${err.stack || err}`));

  if (a.mode === 'drain') {
    await nextLine(); // STOP or EOF
  } else {
    await done;
  }
  await worker.close();
  await running;
  await connection.quit();
  emit(a.mode === 'drain' ? { ok: true } : { latencies_ms: latencies });
});
