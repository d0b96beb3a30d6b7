"""A job in steps: it parks itself in delayed between steps (BullMQ's step-job pattern)."""

import asyncio

from corral import AsyncJob, AsyncQueue, DelayedError, Worker
from corral.clock import now_ms


async def onboarding(job: AsyncJob) -> str:
    step = job.data.get("step", "welcome")
    print("step:", step)
    if step == "welcome":
        await job.update_data({**job.data, "step": "follow-up"})
        await job.move_to_delayed(now_ms() + 50)  # e.g. two days in real life
        raise DelayedError()  # tells the worker the job was moved, not failed
    return "onboarded"


async def main() -> None:
    async with AsyncQueue("onboarding") as queue:
        await queue.obliterate(force=True)  # start empty: the embedded server keeps old jobs
        job = await queue.add("user-42", {"user": 42})
        worker = Worker("onboarding", onboarding)
        running = asyncio.create_task(worker.run_async())
        while not await job.is_completed():
            await asyncio.sleep(0.02)
        await worker.close()
        await running
        await job.refresh()
        print("result:", job.returnvalue, "attempts:", job.attempts_made)


if __name__ == "__main__":
    asyncio.run(main())
