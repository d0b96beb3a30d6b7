"""A worker process for the kill -9 tests::

    python -m tests.faults.subworker URL QUEUE TAG

Its processor counts each start in the hash ``faults:runs`` (job id -> starts, over every
process), prints ``started:<job id>`` on stdout, sleeps ``data["ms"]`` and returns
``{"worker": TAG}`` (what the probes of ``harness.assert_consuming`` look for). Short lock and
stall settings; a high ``max_stalled_count``, so that a job whose workers are killed again and
again still completes. Logs go to stderr, at INFO, with their tracebacks if any.
"""

from __future__ import annotations

import asyncio
import logging
import sys

from corral import AsyncJob, Worker


def main(url: str, queue: str, tag: str) -> None:
    async def process(job: AsyncJob) -> dict[str, str]:
        client = await job.queue.client()
        await client.hincrby("faults:runs", job.id, 1)
        print(f"started:{job.id}", flush=True)
        await asyncio.sleep(int((job.data or {}).get("ms", 0)) / 1000)
        return {"worker": tag}

    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(levelname)s %(name)s %(message)s"
    )
    worker = Worker(
        queue,
        process,
        connection=url,
        name=tag,
        concurrency=2,
        lock_duration=1,
        stalled_interval=0.5,
        max_stalled_count=100,
        drain_delay=1,
    )
    worker.run()


if __name__ == "__main__":
    main(*sys.argv[1:4])
