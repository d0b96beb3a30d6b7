"""A processor module for `corral worker`: plain functions run in a thread pool.

    corral worker processors:resize --queue images --concurrency 4

Running this file adds two jobs and works them in-process, to show both outcomes.
"""

import asyncio

from corral import AsyncQueue, Job, UnrecoverableError, Worker


def resize(job: Job) -> dict[str, object]:
    width = job.data.get("width")
    if not isinstance(width, int) or width <= 0:
        # No retry can fix bad input: fail now, whatever `attempts` says.
        raise UnrecoverableError(f"width must be a positive integer, got {width!r}")
    return {"path": job.data["path"], "width": width}


async def main() -> None:
    async with AsyncQueue("images") as queue:
        await queue.obliterate(force=True)  # start empty: the embedded server keeps old jobs
        await queue.add("resize", {"path": "cat.png", "width": 320}, attempts=3)
        bad = await queue.add("resize", {"path": "dog.png", "width": -1}, attempts=3)

        worker = Worker("images", resize, concurrency=2)
        running = asyncio.create_task(worker.run_async())
        while await queue.get_job_counts("completed", "failed") != {"completed": 1, "failed": 1}:
            await asyncio.sleep(0.05)
        await worker.close()
        await running

        failed = await queue.get_job(bad.id)
        assert failed is not None
        print("failed job says:", failed.failed_reason)
        print("attempts made:", failed.attempts_made)


if __name__ == "__main__":
    asyncio.run(main())
