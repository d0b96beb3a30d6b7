// api_flow_opts.mjs <tree JSON> <queuesOptions JSON>
// One FlowProducer.add(tree, {queuesOptions}); <tree JSON> is BullMQ's FlowJob shape.
// stdout: {"ids": [job id, ...]} (the root first, then its children, as given)
import { FlowProducer } from 'bullmq';
import { connect, closeConnections, emit, parseJson, run, usage, PREFIX } from './common.mjs';

run(async () => {
  const [treeArg, optsArg] = process.argv.slice(2);
  if (!treeArg || !optsArg) usage('api_flow_opts.mjs <tree JSON> <queuesOptions JSON>');
  const producer = new FlowProducer({ connection: connect(), prefix: PREFIX });
  let node;
  try {
    node = await producer.add(parseJson(treeArg, 'tree'), { queuesOptions: parseJson(optsArg, 'queuesOptions') });
  } finally {
    await producer.close();
    await closeConnections();
  }
  emit({ ids: [node.job.id, ...(node.children || []).map((c) => c.job.id)] });
});
