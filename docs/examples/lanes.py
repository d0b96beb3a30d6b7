"""Lanes: one worker serving a chat queue and a reports queue, with slots reserved for each."""

import asyncio
from collections import Counter

from corral import AsyncJob, AsyncQueue, Worker

running: Counter[str] = Counter()
most: Counter[str] = Counter()
gate = asyncio.Event()


async def handle(job: AsyncJob) -> str:
    running[job.queue_name] += 1
    most[job.queue_name] = max(most[job.queue_name], running[job.queue_name])
    try:
        if job.name == "report":
            if running["reports"] == 3:  # every slot busy with reports: let them go
                gate.set()
            await asyncio.wait_for(gate.wait(), 5)
        return f"{job.name} {job.data['n']}"
    finally:
        running[job.queue_name] -= 1


async def main() -> None:
    async with AsyncQueue("chat") as chat, AsyncQueue("reports") as reports:
        for queue in (chat, reports):
            await queue.obliterate(force=True)  # start empty: the embedded server keeps old jobs
        # Strict lanes: a backlog of slow reports never takes the chat lane's two slots.
        await reports.add_bulk([("report", {"n": n}) for n in range(6)])
        worker = Worker({"chat": 2, "reports": 1}, handle)
        run = asyncio.create_task(worker.run_async())
        while not running["reports"]:
            await asyncio.sleep(0.01)
        reply = await chat.add("reply", {"n": 1})
        print("chat answered:", await reply.wait_until_finished(timeout=10))
        print("reports running meanwhile:", running["reports"])
        gate.set()
        while (await reports.get_job_counts("completed"))["completed"] < 6:
            await asyncio.sleep(0.01)
        await worker.close()
        summary = await run
        print("completed:", summary.completed, summary.stopped, "most at once:", dict(most))

        # Borrowing: the idle chat lane lends its slots to the reports.
        gate.clear()
        most.clear()
        await reports.add_bulk([("report", {"n": n}) for n in range(6)])
        worker = Worker({"chat": 2, "reports": 1}, handle, borrow=True)
        summary = await worker.run_async(burst=True)
        print("with borrow:", summary.completed, "reports at once:", most["reports"])


asyncio.run(main())
