"""Timeouts that stop the work, a soft warning first, and cancelling jobs from anywhere."""

import asyncio

from corral import AsyncJob, AsyncQueue, Job, JobState, JobTimeoutWarning, Worker


async def call_model(job: AsyncJob) -> str:
    if job.name == "hangs":
        await asyncio.sleep(3600)  # a request that never answers: cancelled at 0.5 s
    if job.name == "summarise":
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:  # the soft timeout cancels async code...
            if job.soft_timed_out:  # ...and says so: hand back what we have
                return "partial summary"
            raise
    if job.name == "waits":
        await asyncio.sleep(3600)  # until someone cancels it
    return "done"


def crunch(job: Job) -> str:
    total = 0
    try:
        while True:  # CPU-bound Python code in a thread
            total += sum(range(100))
    except JobTimeoutWarning:  # raised in the thread at soft_timeout
        return f"stopped early, soft_timed_out={job.soft_timed_out}"


async def main() -> None:
    async with AsyncQueue("timeouts-demo") as queue:
        await queue.obliterate(force=True)  # start empty: the embedded server keeps old jobs
        hangs = await queue.add("hangs", {}, timeout=0.5, attempts=2)
        summary = await queue.add("summarise", {}, timeout=10, soft_timeout=0.3)
        waits = await queue.add("waits", {})
        later = await queue.add("later", {}, delay=60)

        worker = Worker("timeouts-demo", call_model, concurrency=3)
        running = asyncio.create_task(worker.run_async())
        while await queue.get_job_state(waits.id) != JobState.ACTIVE:
            await asyncio.sleep(0.01)
        print("cancel active:", await queue.cancel(waits.id, "user closed the tab"))
        print("cancel delayed:", await queue.cancel(later.id, "not needed"))
        while await queue.get_job_counts("completed", "failed") != {"completed": 1, "failed": 3}:
            await asyncio.sleep(0.02)
        await worker.close()
        await running

        for job_id in (hangs.id, summary.id, waits.id, later.id):
            job = await queue.get_job(job_id)
            assert job is not None
            print(f"{job.name}: attempts={job.attempts_made}", job.returnvalue or job.failed_reason)

    async with AsyncQueue("crunch-demo") as queue:
        await queue.obliterate(force=True)
        job = await queue.add("crunch", {}, timeout=5, soft_timeout=0.2)
        summary_of_run = await Worker("crunch-demo", crunch).run_async(burst=True)
        done = await queue.get_job(job.id)
        assert done is not None
        print("crunch:", done.returnvalue, f"({summary_of_run.completed} completed)")


if __name__ == "__main__":
    asyncio.run(main())
