"""Deduplication modes and an idempotency window that outlives the job it remembers."""

import asyncio

from corral import AsyncJob, AsyncQueue, Worker
from corral.dedup import Dedup


async def work(job: AsyncJob) -> dict[str, int]:
    if job.name == "charge":
        return {"charged": job.data["cents"]}
    return {"done": job.data["n"]}  # sync and reindex


async def main() -> None:
    async with AsyncQueue("payments") as queue:
        # Start empty: the embedded server keeps the last run's jobs, dedup and idempotency keys.
        await queue.obliterate(force=True)
        # Simple: while the first job is unfinished, the same id adds nothing.
        first = await queue.add("sync", {"n": 1}, deduplication=Dedup("sync-crm"))
        same = await queue.add("sync", {"n": 2}, deduplication=Dedup("sync-crm"))
        print("simple:", first.id == same.id)

        # Debounce: a burst of adds; only the last one, 0.2 s after it, runs.
        debounce = Dedup("reindex", ttl=0.2, extend=True, replace=True)
        for n in range(3):
            last = await queue.add("reindex", {"n": n}, delay=0.2, deduplication=debounce)
        print("debounced to:", last.data)

        # Idempotency: the same key within the window returns the first job and its result,
        # even though remove_on_complete deleted that job.
        paid = await queue.add(
            "charge",
            {"cents": 1250},
            idempotency_key="order-1042",
            idempotency_window=3600,
            remove_on_complete=True,
        )
        worker = Worker("payments", work, concurrency=5)
        running = asyncio.create_task(worker.run_async())
        await paid.wait_until_finished(timeout=10)
        while await queue.get_job_counts("waiting", "delayed") != {"waiting": 0, "delayed": 0}:
            await asyncio.sleep(0.05)
        await worker.close()
        await running

        again = await queue.add("charge", {"cents": 1250}, idempotency_key="order-1042")
        print("idempotent:", again.id == paid.id, again.returnvalue)
        print("job still stored:", await queue.get_job(paid.id) is not None)


if __name__ == "__main__":
    asyncio.run(main())
