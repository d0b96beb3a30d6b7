"""An LLM-style pipeline: summarise chunks in parallel, then merge the summaries.

The model calls are simulated; a real pipeline calls its model client where `fake_model`
is. The chunks ask to fail the parent if one of them cannot be summarised, and a flaky chunk
is retried with backoff before that would happen.
"""

import asyncio

from corral import AsyncFlowProducer, AsyncJob, AsyncQueue, FlowJob, Worker
from corral.options import Backoff

CALLS: dict[str, int] = {}


async def fake_model(prompt: str) -> str:
    """Stands in for an LLM API call: the first call for 'flaky' text times out."""
    CALLS[prompt] = CALLS.get(prompt, 0) + 1
    await asyncio.sleep(0.01)
    if "flaky" in prompt and CALLS[prompt] == 1:
        raise TimeoutError("model timed out")
    return prompt.split(":", 1)[1].strip().split(".")[0]


async def summarise(job: AsyncJob) -> dict[str, str]:
    summary = await fake_model(f"summarise: {job.data['text']}")
    return {"chunk": job.data["n"], "summary": summary}


async def merge(job: AsyncJob) -> str:
    parts = sorted((await job.get_children_values()).values(), key=lambda p: p["chunk"])
    return " / ".join(p["summary"] for p in parts)


async def main() -> None:
    for name in ("llm-merge", "llm-chunks"):
        async with AsyncQueue(name) as queue:
            await queue.obliterate(force=True)  # start empty: the embedded server keeps old jobs
    chunks = [
        "Flows run children first. Then the parent.",
        "A flaky model call is retried. Backoff spaces the tries.",
        "The parent reads every result. It merges them.",
    ]
    chunk_options = {
        "attempts": 3,
        "backoff": Backoff.exponential(0.05),
        "fail_parent_on_failure": True,  # no half-merged answer if a chunk gives up
    }
    async with AsyncFlowProducer() as flows:
        node = await flows.add(
            FlowJob(
                "merge",
                "llm-merge",
                {"doc": "guide.md"},
                children=[
                    FlowJob("summarise", "llm-chunks", {"n": n, "text": text}, chunk_options)
                    for n, text in enumerate(chunks)
                ],
            )
        )

    workers = [Worker("llm-chunks", summarise, concurrency=3), Worker("llm-merge", merge)]
    running = [asyncio.create_task(w.run_async()) for w in workers]
    async with AsyncQueue("llm-merge") as merges:
        while await merges.get_job_state(node.job.id) not in ("completed", "failed"):
            await asyncio.sleep(0.02)
        result = await merges.get_job(node.job.id)
    for worker in workers:
        await worker.close()
    await asyncio.gather(*running)
    assert result is not None
    print("model calls:", sum(CALLS.values()))
    print("merged:", result.returnvalue)


if __name__ == "__main__":
    asyncio.run(main())
