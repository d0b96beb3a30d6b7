"""An agent job behind a FastAPI app (docs/agents.md): an endpoint enqueues an LLM-style job whose
fake model streams tokens to the browser over SSE, the job waits for an approval sent by
another endpoint without holding its worker, and a flaky tool call is retried with backoff.

Run it as a script: it starts a worker with one slot, drives the app with httpx as a browser
would, and prints the approval flow. Serve ``app`` with uvicorn to use it from a browser.
"""

import asyncio
import json
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
from fastapi import FastAPI, Request, Response
from pydantic import BaseModel

from corral import AsyncJob, AsyncQueue, Worker
from corral.sse import job_events

URL = os.environ.get("CORRAL_REDIS_URL")  # the tests give their server; else the embedded one
queue = AsyncQueue("agents", connection=URL)
tool_calls = {"n": 0}


async def fake_model(prompt: str) -> AsyncIterator[str]:
    """A model that yields tokens with delays, as an LLM's streaming API does (no network)."""
    for token in f"Dear customer, about {prompt}: we will refund you.".split(" "):
        await asyncio.sleep(0.005)
        yield token


async def publish(text: str) -> dict[str, Any]:
    """A flaky tool: the first call times out, the next ones work."""
    tool_calls["n"] += 1
    if tool_calls["n"] == 1:
        raise ConnectionError("mail API timed out")
    return {"sent": True, "words": len(text.split())}


async def agent(job: AsyncJob) -> dict[str, Any]:
    async def write_draft() -> str:
        tokens = []
        async for token in fake_model(job.data["prompt"]):
            tokens.append(token)
            await job.stream({"token": token})  # to the browser, as it is written
        return " ".join(tokens)

    # Each step runs once: the job runs again after its approval and after a retry, and gets
    # the recorded draft back instead of paying the model twice.
    draft = await job.step("draft", write_draft)
    if job.attempts_made == 0:
        await job.stream({"waiting_for": "approval"})
    approval = await job.wait_for_signal("approval", timeout=3600)  # parks: the slot is free
    if not approval["ok"]:
        return {"published": False, "reason": approval.get("reason")}
    sent = await job.step("publish", lambda: publish(draft))  # raises: retried with backoff
    return {"published": True, "by": approval["by"], **sent}


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    yield
    await queue.close()


app = FastAPI(lifespan=lifespan)


class ReplyRequest(BaseModel):
    prompt: str


class Approval(BaseModel):
    ok: bool
    by: str | None = None
    reason: str | None = None


@app.post("/replies", status_code=201)
async def start(body: ReplyRequest) -> dict[str, str]:
    job = await queue.add(
        "reply", {"prompt": body.prompt}, attempts=3, backoff={"type": "fixed", "delay": 0.05}
    )
    return {"job": job.id}


@app.get("/replies/{job_id}/events")
async def events(job_id: str, request: Request) -> Response:
    return job_events(queue, job_id, request)


@app.post("/replies/{job_id}/approval")
async def approve(job_id: str, body: Approval) -> dict[str, str]:
    outcome = await queue.signal(job_id, "approval", body.model_dump(exclude_none=True))
    return {"outcome": outcome}


def sse_events(text: str) -> list[tuple[str, Any]]:
    """(event, data) of each message of an event stream."""
    found = []
    for block in text.split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        if "event" in fields:
            found.append((fields["event"], json.loads(fields["data"])))
    return found


async def until(check: Any) -> None:
    while not await check():
        await asyncio.sleep(0.01)


async def main() -> None:
    await queue.obliterate(force=True)  # start empty: the embedded server keeps old jobs
    worker = Worker("agents", agent, connection=URL, concurrency=1)
    running = asyncio.create_task(worker.run_async())
    transport = httpx.ASGITransport(app=app)
    async with lifespan(app), httpx.AsyncClient(transport=transport, base_url="http://t") as web:
        job_id = (await web.post("/replies", json={"prompt": "order 42"})).json()["job"]
        print("enqueued: job", job_id)
        job = await queue.get_job(job_id)
        assert job is not None
        await until(job.is_delayed)
        counts = await queue.get_job_counts("active", "delayed")
        print(f"parked: state={await job.get_state()} active={counts['active']} (1 slot, free)")
        side = await queue.add("reply", {"prompt": "order 43"})
        await until(side.is_delayed)  # the free slot ran another job meanwhile, up to its wait
        print("meanwhile: job", side.id, "ran on the free slot and parked too")
        approval = {"ok": True, "by": "ada"}
        reply = await web.post(f"/replies/{job_id}/approval", json=approval)
        print("signal:", reply.json()["outcome"])
        result = await job.wait_until_finished(timeout=30)
        print("resumed, completed:", result)
        await job.refresh()
        print("tool calls:", tool_calls["n"], "attempts:", job.attempts_made)
        stream = sse_events((await web.get(f"/replies/{job_id}/events")).text)
        tokens = [data["token"] for event, data in stream if event == "chunk" and "token" in data]
        print("sse:", " ".join(tokens))
        print("sse end:", stream[-1][0], stream[-1][1]["state"])
        steps = await job.get_steps()
        print("draft written once:", steps["draft"] == " ".join(tokens), "steps:", sorted(steps))
        reply = await web.post(f"/replies/{side.id}/approval", json={"ok": False, "reason": "no"})
        print("second:", reply.json()["outcome"], await side.wait_until_finished(timeout=30))
    await worker.close()
    await running


if __name__ == "__main__":
    asyncio.run(main())
