// Shared helpers for the Node side of corral's interop tests.
//
// Contract for every script in this folder:
//   * connection comes from env REDIS_URL (e.g. redis://127.0.0.1:6390/0, or
//     redis+cluster://127.0.0.1:7000,127.0.0.1:7001 for a Redis Cluster);
//   * arguments come from argv;
//   * the result is ONE line of JSON on stdout (listen_completed.mjs prints a
//     `READY` line before it); all logging goes to stderr;
//   * exit 0 on success, non-zero with a message on stderr on failure;
//   * a hard self-timeout (env INTEROP_TIMEOUT_MS, default 60000) exits 3.
// Only BullMQ's public API is used here.
import IORedis from 'ioredis';

export const PREFIX = 'bull';

const timeoutMs = Number(process.env.INTEROP_TIMEOUT_MS || 60000);
setTimeout(() => {
  console.error(`timeout after ${timeoutMs} ms`);
  process.exit(3);
}, timeoutMs).unref();

const opened = [];

export function connect() {
  const url = process.env.REDIS_URL;
  if (!url) fail('env REDIS_URL is not set', 2);
  // REDIS_URL=redis+cluster://host:port,host:port (corral's cluster URL): ioredis's Cluster.
  const cluster = url.match(/^redis\+cluster:\/\/([^/?]+)/);
  const conn = cluster
    ? new IORedis.Cluster(
        cluster[1].split(',').map((hostPort) => {
          const [host, port] = hostPort.split(':');
          return { host, port: Number(port) };
        }),
        { redisOptions: { maxRetriesPerRequest: null } },
      )
    : new IORedis(url, { maxRetriesPerRequest: null });
  conn.on('error', (err) => console.error(`redis error: ${err.message}`));
  opened.push(conn);
  return conn;
}

export async function closeConnections() {
  for (const conn of opened.splice(0)) {
    if (conn.status === 'end') continue;
    try {
      await conn.quit();
    } catch {
      conn.disconnect();
    }
  }
}

export function log(...args) {
  console.error(...args);
}

export function emit(obj) {
  process.stdout.write(JSON.stringify(obj) + '\n');
}

export function fail(message, code = 1) {
  console.error(message);
  process.exit(code);
}

export function usage(text) {
  fail(`usage: ${text}`, 2);
}

export function parseCount(value, what = 'count') {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 0) usage(`${what} must be a non-negative integer, got ${JSON.stringify(value)}`);
  return n;
}

// Run `main` and turn any error into a non-zero exit with the stack on stderr.
export function run(main) {
  main().catch((err) => {
    console.error(err && err.stack ? err.stack : String(err));
    process.exit(1);
  });
}

// Parse a JSON argument (argv), or exit 2 naming it.
export function parseJson(value, what) {
  try {
    return JSON.parse(value);
  } catch (err) {
    return usage(`${what} must be JSON, got ${JSON.stringify(value)} (${err.message})`);
  }
}

export function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
