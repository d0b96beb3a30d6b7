"""CPU-bound jobs in child processes: progress and logs reach Redis, a crash or a timeout
kills only its child, and the pool replaces it."""

import asyncio

from corral import AsyncQueue, Worker


async def main() -> None:
    async with AsyncQueue("cpu-demo") as queue:
        await queue.obliterate(force=True)  # start empty: the embedded server keeps old jobs
        primes = await queue.add("primes", {"below": 1_000_000})
        crash = await queue.add("crash", {})
        forever = await queue.add("forever", {}, timeout=0.5)
        after = await queue.add("primes", {"below": 100})

        worker = Worker(
            "cpu-demo",
            "cpu_jobs.tasks:run",  # importable by name: each child imports it once
            processes=2,
            max_memory_mb=500,  # a child over this is killed: "memory limit" failure
            max_jobs_per_child=100,  # then replaced by a fresh one
        )
        summary = await worker.run_async(burst=True)
        print(f"completed={summary.completed} failed={summary.failed}")

        for job_id in (primes.id, crash.id, forever.id, after.id):
            job = await queue.get_job(job_id)
            assert job is not None
            print(f"{job.name}:", job.returnvalue or job.failed_reason)
        logs, _ = await (await queue.get_job(primes.id)).get_logs()  # type: ignore[union-attr]
        print("logged:", logs[0].startswith("counted in child"))


if __name__ == "__main__":
    asyncio.run(main())
