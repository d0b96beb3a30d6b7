"""Looking after a queue: pause, list, retry the failed, clean up, limit the pace."""

import asyncio

from corral import AsyncJob, AsyncQueue, Worker


async def flaky(job: AsyncJob) -> str:
    if job.data["n"] % 3 == 0 and job.attempts_made == 0:
        raise RuntimeError("upstream hiccup")
    return "ok"


async def until(queue: AsyncQueue, **counts: int) -> None:
    while await queue.get_job_counts(*counts) != counts:
        await asyncio.sleep(0.02)


async def main() -> None:
    async with AsyncQueue("admin-demo") as queue:
        await queue.obliterate(force=True)  # start empty: the embedded server keeps old jobs
        await queue.pause()  # workers take nothing; jobs still queue up
        await queue.add_bulk([("sync", {"n": n}) for n in range(6)])
        print("paused:", await queue.is_paused(), "waiting:", await queue.count())
        page = await queue.get_jobs(["waiting"], 0, 2, asc=True)
        print("first page:", [job.id for job in page])

        # At most 3 jobs per second across all workers, whatever their concurrency.
        await queue.set_global_rate_limit(3, 1.0)
        worker = Worker("admin-demo", flaky, concurrency=10)
        running = asyncio.create_task(worker.run_async())
        await queue.resume()
        await until(queue, completed=4, failed=2)

        retried = await queue.retry_jobs("failed")
        await until(queue, completed=6, failed=0)
        print("retried:", retried, "counts:", await queue.get_job_counts("completed", "failed"))
        await worker.close()
        await running

        removed = await queue.clean(0, 100, "completed")
        print("cleaned:", len(removed))
        await queue.obliterate()  # every key of the queue, gone


if __name__ == "__main__":
    asyncio.run(main())
