"""Worker events, progress and logs, from a plain-function processor running in a thread."""

import asyncio

from corral import AsyncQueue, Job, Worker


def encode_video(job: Job) -> dict[str, int]:
    for percent in (25, 50, 100):
        job.update_progress(percent)  # a blocking call: this function runs in a thread
    job.log(f"encoded {job.data['file']}")
    return {"frames": 1200}


async def main() -> None:
    async with AsyncQueue("videos") as queue:
        await queue.obliterate(force=True)  # start empty: the embedded server keeps old jobs
        await queue.add("encode", {"file": "intro.mp4"})
        worker = Worker("videos", encode_video, name="encoder-1")
        worker.on("progress", lambda job, percent: print(f"job {job.id}: {percent}%"))
        worker.on("completed", lambda job, result: print(f"job {job.id} done: {result}"))
        running = asyncio.create_task(worker.run_async())
        while (await queue.get_job_counts("completed"))["completed"] < 1:
            await asyncio.sleep(0.02)
        await worker.close()
        await running
        job = await queue.get_job("1")
        assert job is not None
        lines, total = await job.get_logs()
        print("logs:", lines, "processed by:", job.processed_by)
        assert total == len(lines)


if __name__ == "__main__":
    asyncio.run(main())
