"""Job schedulers: a heartbeat every 0.2 s and a nightly cron job; list, read, remove them."""

import asyncio
from datetime import datetime
from zoneinfo import ZoneInfo

from corral import AsyncJob, AsyncQueue, Worker


async def main() -> None:
    async with AsyncQueue("reports") as queue:
        await queue.obliterate(force=True)  # start empty: the embedded server keeps old jobs
        # Upserting is idempotent: every process may run this at start-up.
        await queue.upsert_job_scheduler(
            "heartbeat", every=0.2, template=("ping", {"host": "db-1"})
        )
        await queue.upsert_job_scheduler(
            "nightly",
            cron="0 3 * * *",  # 5 fields; 6 with seconds first: "*/30 * * * * *"
            tz="Europe/Paris",
            template=("report", {"kind": "daily"}, {"attempts": 3}),
        )
        print("schedulers:", [s.id for s in await queue.get_job_schedulers(asc=True)])

        runs: list[int] = []
        three = asyncio.Event()

        async def ping(job: AsyncJob) -> str:
            # Each run is a job "repeat:<scheduler id>:<run ms>"; taking it made the next one.
            runs.append(job.opts["repeat"]["count"])
            if len(runs) == 3:
                three.set()
            return f"pong from {job.data['host']}"

        worker = Worker("reports", ping)
        running = asyncio.create_task(worker.run_async())
        await asyncio.wait_for(three.wait(), timeout=10)
        await worker.close()
        await running
        print("heartbeat runs:", runs[:3])

        nightly = await queue.get_job_scheduler("nightly")
        assert nightly is not None and nightly.next_run is not None
        at = datetime.fromtimestamp(nightly.next_run / 1000, ZoneInfo("Europe/Paris"))
        print(f"nightly: {nightly.pattern!r} next at {at:%H:%M} Paris time, {nightly.template}")

        print("removed:", await queue.remove_job_scheduler("heartbeat"))
        print("left:", await queue.count_job_schedulers())


if __name__ == "__main__":
    asyncio.run(main())
