"""Watch a queue's events, wait for one job's result, and resume a listener from an id."""

import asyncio

from corral import AsyncJob, AsyncQueue, AsyncQueueEvents, JobFailedError, Worker
from corral.events import Completed, Failed


async def translate(job: AsyncJob) -> str:
    await job.update_progress(50)
    if not job.data["text"]:
        raise ValueError("nothing to translate")
    return job.data["text"].upper()


async def main() -> None:
    async with AsyncQueue("translations") as queue:
        # Start empty: the embedded server keeps the last run's jobs and events.
        await queue.obliterate(force=True)
    events = AsyncQueueEvents("translations")  # from now on ("$")
    events.on("completed", lambda e: print(f"completed {e.job_id}: {e.returnvalue!r}"))
    events.on("failed", lambda e: print(f"failed {e.job_id}: {e.failed_reason}"))
    listening = asyncio.create_task(events.run())
    await asyncio.sleep(0.1)  # let the listener take its place in the stream

    async with AsyncQueue("translations") as queue:
        hello = await queue.add("translate", {"text": "hello"})
        empty = await queue.add("translate", {"text": ""})
        worker = Worker("translations", translate)
        running = asyncio.create_task(worker.run_async())

        print("result:", await hello.wait_until_finished(timeout=10))
        try:
            await empty.wait_until_finished(timeout=10)
        except JobFailedError as exc:
            print("failure:", exc.failed_reason)

        await worker.close()
        await running
    await asyncio.sleep(0.2)  # the listener prints what it heard
    await events.close()
    await listening

    # A listener that starts later resumes from any id it was given: here, the beginning.
    async with AsyncQueueEvents("translations", last_event_id="0") as replay:
        outcomes = []
        while (event := await replay.next_event(timeout=0.5)) is not None:
            if isinstance(event, (Completed, Failed)):
                outcomes.append(f"{event.name}:{event.job_id}")
        print("replayed:", outcomes)


if __name__ == "__main__":
    asyncio.run(main())
