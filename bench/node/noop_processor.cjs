// The sandboxed processor of the drain_children workload (bench/node/worker.mjs passes this
// file's path to `new Worker(name, processorFile, {useWorkerThreads: false})`): a no-op, the
// twin of bench/processors.py's `noop`. CommonJS: BullMQ's child loads it with require().
module.exports = async () => {};
