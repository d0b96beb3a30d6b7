"""Add jobs, then work them with an async processor until the queue is empty.

Run it with no settings to use the embedded server (./.corral), or point it anywhere with
CORRAL_REDIS_URL=redis://localhost:6379/0.
"""

import asyncio

from corral import AsyncQueue, Job, Worker


async def send_email(job: Job) -> dict[str, str]:
    await asyncio.sleep(0.01)  # talk to the mail server here
    if job.data["to"].endswith("@invalid"):
        raise ValueError(f"cannot deliver to {job.data['to']}")
    return {"status": "sent", "to": job.data["to"]}


async def main() -> None:
    async with AsyncQueue("quickstart-emails") as queue:
        await queue.obliterate(force=True)  # start empty: the embedded server keeps old jobs
        for to in ["ada@example.com", "alan@example.com", "bob@invalid"]:
            await queue.add("welcome", {"to": to})

        worker = Worker("quickstart-emails", send_email, concurrency=5)
        running = asyncio.create_task(worker.run_async())
        while (await queue.get_job_counts("waiting", "active")) != {"waiting": 0, "active": 0}:
            await asyncio.sleep(0.05)
        await worker.close()
        await running

        counts = await queue.get_job_counts("completed", "failed")
        print(f"completed={counts['completed']} failed={counts['failed']}")
        job = await queue.get_job("1")
        assert job is not None
        print("job 1 returned", job.returnvalue)


if __name__ == "__main__":
    asyncio.run(main())
