// Shared helpers for the Node side of corral's benchmark (bench/run.py drives these).
//
// Contract, the same as the Python side (bench/produce.py, bench/worker.py):
//   * connection from env REDIS_URL; arguments as --name value pairs;
//   * workers print READY once connected, then wait for a GO line on stdin;
//   * results: ONE line of JSON on stdout; logging goes to stderr;
//   * a hard self-timeout (env BENCH_TIMEOUT_MS, default 300000) exits 3.
// BullMQ and ioredis are the ones `make` installs for the interop tests
// (tests/interop/node_modules); only BullMQ's public API is used.
import { createRequire } from 'node:module';
import { createInterface } from 'node:readline';

const require = createRequire(new URL('../../tests/interop/package.json', import.meta.url));
export const { Queue, Worker } = require('bullmq');
const IORedis = require('ioredis');

export const PREFIX = 'bull';
export const QUEUE = 'bench';

const timeoutMs = Number(process.env.BENCH_TIMEOUT_MS || 300000);
setTimeout(() => {
  console.error(`timeout after ${timeoutMs} ms`);
  process.exit(3);
}, timeoutMs).unref();

export function connect() {
  const url = process.env.REDIS_URL;
  if (!url) fail('env REDIS_URL is not set', 2);
  const conn = new IORedis(url, { maxRetriesPerRequest: null });
  conn.on('error', (err) => console.error(`redis error: ${err.message}`));
  return conn;
}

export function fail(message, code = 1) {
  console.error(message);
  process.exit(code);
}

// --name value pairs -> {name: value}; every value is a string.
export function parseArgs(argv, defaults) {
  const out = { ...defaults };
  for (let i = 0; i < argv.length; i += 2) {
    const key = argv[i];
    if (!key.startsWith('--') || i + 1 >= argv.length) fail(`bad arguments: ${argv.join(' ')}`, 2);
    out[key.slice(2)] = argv[i + 1];
  }
  return out;
}

// Wall-clock time in ms with sub-ms resolution (CLOCK_REALTIME at process start plus a
// monotonic offset): comparable across processes on one machine, like Python's time.time_ns().
export function wallMs() {
  return performance.timeOrigin + performance.now();
}

// The lines of stdin, one at a time: `await next()` gives the next line, or null at EOF.
export function stdinLines() {
  const rl = createInterface({ input: process.stdin });
  const queued = [];
  const waiting = [];
  let closed = false;
  rl.on('line', (line) => (waiting.length ? waiting.shift()(line) : queued.push(line)));
  rl.on('close', () => {
    closed = true;
    while (waiting.length) waiting.shift()(null);
  });
  return () => {
    if (queued.length) return Promise.resolve(queued.shift());
    if (closed) return Promise.resolve(null);
    return new Promise((resolve) => waiting.push(resolve));
  };
}

export function emit(obj) {
  process.stdout.write(JSON.stringify(obj) + '\n');
}

export function run(main) {
  main().then(
    () => process.exit(0),
    (err) => {
      console.error(err && err.stack ? err.stack : String(err));
      process.exit(1);
    },
  );
}

export function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

// The data of job i, the same on both sides: {"i": i}, or a fixed string making the JSON
// exactly `payload` bytes long: {"p":"xxx..."}.
export function makeData(i, payload) {
  if (payload > 0) return { p: 'x'.repeat(Math.max(0, payload - 8)) };
  return { i };
}
