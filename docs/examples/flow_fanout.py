"""Fan-out / fan-in with a flow: one parent job waits for its children, then sums them.

The children live in another queue than the parent, and each queue has its own worker.
"""

import asyncio

from corral import AsyncFlowProducer, AsyncJob, AsyncQueue, FlowJob, Worker


async def count_words(job: AsyncJob) -> int:
    return len(job.data["text"].split())


async def total(job: AsyncJob) -> dict[str, int]:
    counts = await job.get_children_values()  # {"bull:fanout-pages:<id>": 4, ...}
    return {"pages": len(counts), "words": sum(counts.values())}


async def main() -> None:
    for name in ("fanout-books", "fanout-pages"):
        async with AsyncQueue(name) as queue:
            await queue.obliterate(force=True)  # start empty: the embedded server keeps old jobs
    pages = ["the quick brown fox", "jumps over", "the lazy dog"]
    async with AsyncFlowProducer() as flows:
        node = await flows.add(
            FlowJob(
                "book",
                "fanout-books",
                {"title": "pangram"},
                children=[FlowJob("page", "fanout-pages", {"text": text}) for text in pages],
            )
        )
        print("parent waits for", len(node.children), "children:", await node.job.get_state())

    workers = [Worker("fanout-pages", count_words, concurrency=3), Worker("fanout-books", total)]
    running = [asyncio.create_task(w.run_async()) for w in workers]
    async with AsyncQueue("fanout-books") as books:
        while await books.get_job_state(node.job.id) not in ("completed", "failed"):
            await asyncio.sleep(0.02)
        book = await books.get_job(node.job.id)
    for worker in workers:
        await worker.close()
    await asyncio.gather(*running)
    assert book is not None
    print("book:", book.returnvalue)


if __name__ == "__main__":
    asyncio.run(main())
