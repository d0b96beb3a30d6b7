"""One logical queue over three shards: add jobs, work them all with one worker, read back."""

import asyncio

from corral import AsyncJob, AsyncShardedQueue, InvalidOptionError, Worker


async def resize(job: AsyncJob) -> int:
    return job.data["n"] * 2


async def main() -> None:
    async with AsyncShardedQueue("thumbnails", shards=3) as queue:
        await queue.obliterate(force=True)  # start empty: the embedded server keeps old jobs
        print("shards:", [shard.name for shard in queue.queues])
        await queue.add_bulk([("resize", {"n": n}) for n in range(12)])  # spread in turn
        photo = await queue.add("resize", {"n": 99}, job_id="photo-99")  # its id's shard
        again = await queue.add("resize", {"n": 99}, job_id="photo-99")
        print("same job:", again.id == photo.id, "in shard", queue.shard_index(photo.id))
        print("waiting:", (await queue.get_job_counts("waiting"))["waiting"])

        # One worker for every shard: 4 jobs at once over all of them, in fair turns.
        worker = Worker("thumbnails", resize, shards=3, concurrency=4)
        summary = await worker.run_async(burst=True)
        print("completed:", summary.completed, summary.stopped)
        done = await queue.get_job("photo-99")  # read from its shard alone
        print("photo-99 returned", done.returnvalue if done else None)

        try:
            await queue.set_global_concurrency(2)  # counted per queue: not over the shards
        except InvalidOptionError as exc:
            print("refused:", str(exc).split(":")[0])


asyncio.run(main())
