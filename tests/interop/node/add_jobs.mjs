// add_jobs.mjs <queue> <count>
// Adds <count> jobs with queue.add(`job-${i}`, data); data cycles through
// nested JSON, unicode strings and {}. Optional env JOB_OPTS: a JSON object
// used as the opts of every add.
// stdout: {"ids": [...], "jobs": [{"id", "name", "data"}, ...]}
import { Queue } from 'bullmq';
import { connect, closeConnections, emit, log, parseCount, run, usage, PREFIX } from './common.mjs';

export function makeData(i) {
  switch (i % 5) {
    case 0:
      return {
        index: i,
        user: {
          id: 1000 + i,
          active: true,
          banned: false,
          nickname: null,
          tags: ['alpha', 'beta', 'gamma'],
          scores: [0, -17, 3.5, 0.1, 1234567890123, -2.25e-7],
          profile: { address: { city: 'Zürich', geo: { lat: 47.3769, lng: 8.5417, extra: [[1, [2, [3, { deep: true }]]]] } } },
        },
      };
    case 1:
      return {
        index: i,
        text: 'héllo wörld 日本語 🚀',
        combining: 'e\u0301 a\u0308 n\u0303 \u0915\u094d\u0937',
        escapes: 'quote " backslash \\ tab \t newline \n nul-free',
        emoji: ['👩‍👩‍👧‍👦', '🇨🇭', '\u{1F600}'],
        'ключ': 'значение',
      };
    case 2:
      return {};
    case 3:
      return {
        index: i,
        matrix: [[1, 2, 3], [4, 5, 6], []],
        mixed: [null, true, false, 0, '', 'str', { k: [] }, [{}]],
        empty: { a: {}, b: [], c: '' },
      };
    default:
      return { index: i, value: `plain-${i}`, n: i * 7, ok: i % 2 === 0 };
  }
}

run(async () => {
  const [queueName, countArg] = process.argv.slice(2);
  if (!queueName || countArg === undefined) usage('add_jobs.mjs <queue> <count>  (env JOB_OPTS: JSON opts)');
  const count = parseCount(countArg);
  let opts;
  if (process.env.JOB_OPTS) {
    opts = JSON.parse(process.env.JOB_OPTS);
    if (opts === null || typeof opts !== 'object' || Array.isArray(opts)) usage('JOB_OPTS must be a JSON object');
  }

  const queue = new Queue(queueName, { connection: connect(), prefix: PREFIX });
  const ids = [];
  const jobs = [];
  try {
    for (let i = 0; i < count; i++) {
      const name = `job-${i}`;
      const data = makeData(i);
      const job = opts ? await queue.add(name, data, { ...opts }) : await queue.add(name, data);
      ids.push(job.id);
      jobs.push({ id: job.id, name, data });
    }
    log(`added ${ids.length} jobs to ${queueName}`);
  } finally {
    await queue.close();
    await closeConnections();
  }
  emit({ ids, jobs });
});
