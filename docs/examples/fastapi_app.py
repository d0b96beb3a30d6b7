"""A FastAPI app that hands work to corral (docs/frameworks.md): an endpoint enqueues, another
tells a job's state, a third waits for its result up to a timeout; the queue is opened and
closed by the app's lifespan; the worker is another process (``corral worker``).

Serve it with ``uvicorn fastapi_app:app`` and run ``corral worker fastapi_app:make_thumbnail -q
thumbnails-api`` beside it. Run as a script, it starts that worker as a subprocess and drives
the app with FastAPI's test client, printing what the docs quote.
"""

import asyncio
import os
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from corral import AsyncQueue, Job, JobFailedError

QUEUE = "thumbnails-api"


def make_thumbnail(job: Job) -> dict[str, Any]:
    """The job, run by the worker process: a plain function runs in the worker's threads."""
    width = job.data["width"]
    if width <= 0:
        raise ValueError(f"width must be positive, got {width}")
    return {"thumbnail": f"{job.data['image']}@{width}w"}


class ThumbnailRequest(BaseModel):
    image: str
    width: int = 128


def create_app(queue_name: str = QUEUE, connection: str | None = None) -> FastAPI:
    """The app, on ``queue_name`` (tests give theirs); ``connection=None``: CORRAL_REDIS_URL."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # One queue (one connection pool) for the app's life, on the app's event loop.
        app.state.queue = AsyncQueue(queue_name, connection=connection)
        try:
            yield
        finally:
            await app.state.queue.close()

    app = FastAPI(lifespan=lifespan)

    def queue_of(request: Request) -> AsyncQueue:
        queue: AsyncQueue = request.app.state.queue
        return queue

    @app.post("/thumbnails", status_code=202)
    async def enqueue(body: ThumbnailRequest, request: Request) -> dict[str, str]:
        job = await queue_of(request).add("thumbnail", body.model_dump(), attempts=1)
        return {"id": job.id}

    @app.get("/thumbnails/{job_id}")
    async def status(job_id: str, request: Request) -> dict[str, Any]:
        job = await queue_of(request).get_job(job_id)
        if job is None:
            raise HTTPException(404, f"no job {job_id}")
        state = await job.get_state()
        return {"id": job.id, "state": str(state), "result": job.returnvalue}

    @app.get("/thumbnails/{job_id}/result")
    async def result(job_id: str, request: Request, timeout: float = 5.0) -> JSONResponse:
        job = await queue_of(request).get_job(job_id)
        if job is None:
            raise HTTPException(404, f"no job {job_id}")
        try:
            value = await job.wait_until_finished(timeout=timeout)
        except TimeoutError:
            # Not finished yet: 202, and the client asks again (or polls the status).
            state = await job.get_state()
            return JSONResponse({"id": job_id, "state": str(state)}, status_code=202)
        except JobFailedError as exc:
            return JSONResponse({"id": job_id, "state": "failed", "reason": str(exc)}, 422)
        return JSONResponse({"id": job_id, "state": "completed", "result": value})

    return app


app = create_app()


def start_worker(queue_name: str, url: str | None) -> subprocess.Popen[str]:
    """``corral worker fastapi_app:make_thumbnail`` in a process of its own, as in production."""
    corral = shutil.which("corral", path=os.path.dirname(sys.executable)) or "corral"
    command = [corral, "worker", "fastapi_app:make_thumbnail", "-q", queue_name]
    if url:
        command += ["--url", url]
    # Importable from here, and run from the caller's directory: its embedded server is ours.
    here = os.path.dirname(os.path.abspath(__file__))
    path = os.pathsep.join(filter(None, [here, os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path}
    return subprocess.Popen(
        command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )


async def main() -> None:
    import httpx

    from corral import Queue

    url = os.environ.get("CORRAL_REDIS_URL")  # the tests give their server; else the embedded one
    with Queue(QUEUE, connection=url) as queue:
        queue.obliterate(force=True)  # a fresh queue each run
    app = create_app(connection=url)
    transport = httpx.ASGITransport(app=app)
    # The test client of an ASGI app: httpx on the app itself, inside the app's lifespan.
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://app") as client,
    ):
        reply = await client.post("/thumbnails", json={"image": "cat.png", "width": 64})
        job_id = reply.json()["id"]
        early = await client.get(f"/thumbnails/{job_id}/result", params={"timeout": 0.1})
        print("before a worker runs:", early.status_code, early.json()["state"])
        worker = start_worker(QUEUE, url)
        try:
            done = await client.get(f"/thumbnails/{job_id}/result", params={"timeout": 30})
            print("result:", done.status_code, done.json()["result"])
            print("status:", (await client.get(f"/thumbnails/{job_id}")).json()["state"])
            reply = await client.post("/thumbnails", json={"image": "dog.png", "width": 0})
            bad = reply.json()["id"]
            failed = await client.get(f"/thumbnails/{bad}/result", params={"timeout": 30})
            print("bad width:", failed.status_code, failed.json()["reason"])
            print("unknown job:", (await client.get("/thumbnails/999")).status_code)
        finally:
            worker.terminate()
            worker.communicate(timeout=30)
        print("worker exit code:", worker.returncode)


if __name__ == "__main__":
    asyncio.run(main())
