"""Retries with exponential backoff, a custom strategy, and errors that must not be retried."""

import asyncio

from corral import AsyncJob, AsyncQueue, UnrecoverableError, Worker
from corral.options import Backoff


async def call_api(job: AsyncJob) -> str:
    if job.data["kind"] == "bad-request":
        raise UnrecoverableError("400: the request itself is wrong")  # never retried
    if job.attempts_made < 2:  # attempts finished before this one
        raise ConnectionError("503: try again later")
    return f"ok after {job.attempts_made + 1} attempts"


async def main() -> None:
    async with AsyncQueue("retries-demo", backoff_types=["linear"]) as queue:
        await queue.obliterate(force=True)  # start empty: the embedded server keeps old jobs
        flaky = await queue.add(
            "flaky", {"kind": "flaky"}, attempts=5, backoff=Backoff.exponential(0.05)
        )
        linear = await queue.add(
            "linear", {"kind": "flaky"}, attempts=3, backoff={"type": "linear", "delay": 0.02}
        )
        bad = await queue.add("bad", {"kind": "bad-request"}, attempts=5)

        worker = Worker(
            "retries-demo",
            call_api,
            concurrency=3,
            # A custom backoff type: attempts_made is the number of failed attempts so far.
            backoff_strategies={"linear": lambda made, delay_ms, error, job: made * delay_ms},
            retry_on=(ConnectionError, TimeoutError),
        )
        running = asyncio.create_task(worker.run_async())
        while await queue.get_job_counts("completed", "failed") != {"completed": 2, "failed": 1}:
            await asyncio.sleep(0.02)
        await worker.close()
        await running

        for job_id in (flaky.id, linear.id, bad.id):
            job = await queue.get_job(job_id)
            assert job is not None
            print(f"{job.name}: attempts={job.attempts_made}", job.returnvalue or job.failed_reason)


if __name__ == "__main__":
    asyncio.run(main())
