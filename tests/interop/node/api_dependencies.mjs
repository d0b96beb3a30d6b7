// api_dependencies.mjs <queue> <id> <reads JSON>
// Reads the job's children with job.getDependencies(opts) once per entry of <reads JSON>
// (a list of BullMQ DependenciesOpts, {} for a whole read); a read whose opts hold a
// "pages" key instead follows the cursors of one kind to the end:
// {"pages": "processed"|"unprocessed"|"ignored", "count": n} -> the union of its pages.
// stdout: {"reads": [<getDependencies result> | {"all": <union>, "pages": <page count>}]}
import { Job, Queue } from 'bullmq';
import { connect, closeConnections, emit, parseJson, run, usage, PREFIX } from './common.mjs';

const NEXT = { processed: 'nextProcessedCursor', unprocessed: 'nextUnprocessedCursor', ignored: 'nextIgnoredCursor' };

run(async () => {
  const [queueName, id, spec] = process.argv.slice(2);
  if (!queueName || !id || spec === undefined) usage('api_dependencies.mjs <queue> <id> <reads JSON>');
  const reads = parseJson(spec, 'reads');
  const queue = new Queue(queueName, { connection: connect(), prefix: PREFIX });
  const out = [];
  try {
    const job = await Job.fromId(queue, id);
    if (!job) throw new Error(`no job ${id}`);
    for (const opts of reads) {
      if (!opts.pages) {
        out.push(await job.getDependencies(opts));
        continue;
      }
      const kind = opts.pages;
      let cursor = 0;
      let pages = 0;
      let all = kind === 'unprocessed' ? [] : {};
      do {
        const page = await job.getDependencies({ [kind]: { cursor, count: opts.count } });
        all = Array.isArray(all) ? all.concat(page[kind]) : { ...all, ...page[kind] };
        cursor = page[NEXT[kind]];
        pages += 1;
      } while (cursor);
      out.push({ all, pages });
    }
  } finally {
    await queue.close();
    await closeConnections();
  }
  emit({ reads: out });
});
