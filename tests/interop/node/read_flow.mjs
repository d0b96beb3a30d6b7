// read_flow.mjs <queue> <id>
// Reads a flow with FlowProducer.getFlow({queueName, id}).
// stdout: {"tree": node | null} where node = {"queue", "id", "name", "state", "parentKey",
//          "returnvalue", "failedReason", "dependencies": job.getDependencies(),
//          "children": [node, ...]} (children sorted by id).
import { FlowProducer } from 'bullmq';
import { connect, closeConnections, emit, run, usage, PREFIX } from './common.mjs';

const orNull = (v) => (v === undefined ? null : v);

async function describe(node) {
  const { job } = node;
  const children = await Promise.all((node.children || []).map(describe));
  children.sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
  return {
    queue: job.queueName,
    id: job.id,
    name: job.name,
    state: await job.getState(),
    parentKey: orNull(job.parentKey),
    returnvalue: orNull(job.returnvalue),
    failedReason: orNull(job.failedReason),
    dependencies: await job.getDependencies(),
    children,
  };
}

run(async () => {
  const [queueName, id] = process.argv.slice(2);
  if (!queueName || !id) usage('read_flow.mjs <queue> <id>');
  const producer = new FlowProducer({ connection: connect(), prefix: PREFIX });
  let tree = null;
  try {
    const node = await producer.getFlow({ queueName, id });
    if (node && node.job) tree = await describe(node);
  } finally {
    await producer.close();
    await closeConnections();
  }
  emit({ tree });
});
