"""Health checks and Prometheus metrics: the call, the HTTP endpoint, the job time histograms."""

import asyncio
import json
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from corral import AsyncJob, AsyncQueue, Worker
from corral.health import HealthReport, asgi_app, check_health_async
from corral.prometheus import JobTimes


async def resize(job: AsyncJob) -> dict[str, int]:
    return {"width": job.data["width"] // 2}


async def get(app: Any, path: str) -> tuple[int, Any]:
    """Call an ASGI app as a server would (uvicorn, or a mount in Starlette/FastAPI)."""
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app({"type": "http", "method": "GET", "path": path}, receive, send)
    return sent[0]["status"], json.loads(sent[1]["body"])


async def until(queue: AsyncQueue, ok: bool) -> HealthReport:
    """Check the queue until its health is ``ok``."""
    while True:
        report = await check_health_async(queue, min_workers=1, max_waiting_age=60)
        if report.ok is ok:
            return report
        await asyncio.sleep(0.05)


async def main() -> None:
    async with AsyncQueue("thumbnails") as queue:
        await queue.obliterate(force=True)  # start empty: the embedded server keeps old jobs
        for width in (640, 1024, 2048):
            await queue.add("resize", {"width": width})
        report = await check_health_async(queue, min_workers=1)
        print("no worker:", report.ok, report.reasons, "waiting:", report.waiting)

        registry = CollectorRegistry()  # or the default one, served by start_http_server
        worker = Worker("thumbnails", resize)
        JobTimes(registry).attach(worker)
        task = asyncio.create_task(worker.run_async())
        report = await until(queue, ok=True)
        print("with a worker:", report.ok, "workers:", report.workers)
        health = asgi_app([queue], min_workers=1)
        status, doc = await get(health, "/healthz")
        print("GET /healthz:", status, doc["ok"])

        while (await queue.get_job_counts("completed"))["completed"] < 3:
            await asyncio.sleep(0.05)
        await worker.close()
        await task
        await until(queue, ok=False)
        status, doc = await get(health, "/healthz")
        print("after close:", status, doc["queues"][0]["reasons"])

    text = generate_latest(registry).decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name.endswith("_count"):
                print(f"{sample.name}{sample.labels}: {sample.value:g}")


asyncio.run(main())
