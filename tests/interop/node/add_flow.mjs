// add_flow.mjs <tree JSON>
// Adds one flow with FlowProducer.add(tree); <tree JSON> is BullMQ's FlowJob shape
// ({"name", "queueName", "data", "opts", "children"}).
// stdout: {"tree": node} where node = {"queue", "id", "name", "children": [node, ...]}
// (children in the order given).
import { FlowProducer } from 'bullmq';
import { connect, closeConnections, emit, parseJson, run, usage, PREFIX } from './common.mjs';

const summary = (node) => ({
  queue: node.job.queueName,
  id: node.job.id,
  name: node.job.name,
  children: (node.children || []).map(summary),
});

run(async () => {
  const [spec] = process.argv.slice(2);
  if (spec === undefined) usage('add_flow.mjs <tree JSON>');
  const tree = parseJson(spec, 'tree');
  const producer = new FlowProducer({ connection: connect(), prefix: PREFIX });
  let node;
  try {
    node = await producer.add(tree);
  } finally {
    await producer.close();
    await closeConnections();
  }
  emit({ tree: summary(node) });
});
