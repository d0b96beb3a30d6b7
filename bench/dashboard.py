"""What the dashboard costs the server: search, deep pages, and idle live streams.

``python -m bench.dashboard [--jobs 100000] [--failed 1000000] [--sse-clients 50]
[--seconds 30] [--only search,pages,sse]`` starts its own valkey-server (as ``make bench``
does) and measures:

- search: a search of ``--jobs`` waiting jobs (data ~200 bytes each) for a needle found in
  none, so it scans everything, request after request with the dashboard's settings (chunk
  1000, budget 50 ms, limit 50): the wall time, the chunks, and each chunk's server time from
  SLOWLOG (every EVALSHA logged). Then the same scan done client-side (LRANGE + a pipeline of
  HMGET name/data/failedReason per chunk, matched in Python), the design search.py did not
  pick, with the bytes it carries.
- pages: the first and the 20000th page (50 jobs) of a ``--failed``-job failed set read the
  way the dashboard reads a page: ZREVRANGE of the page, then one HGETALL pipeline.
- sse: ``--sse-clients`` real HTTP clients on one uvicorn serving a tiny Starlette app with
  :func:`corral.dashboard.streams.sse_response`, idle for ``--seconds``: the server's CPU
  (``INFO cpu`` used_cpu_sys + used_cpu_user) and the commands it processed in that time,
  beside the same measure of the server with no client at all.

Jobs are written straight into BullMQ's layout with pipelines (not through ``add()``), fast.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import statistics
import time
from typing import Any

import httpx
import orjson
import redis
import redis.asyncio
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from bench.run import Server
from corral import AsyncQueue
from corral._codec import text
from corral.dashboard.live import LiveHub
from corral.dashboard.search import search_jobs
from corral.dashboard.streams import sse_response

PAGE = 50


def seed(r: redis.Redis, queue: str, count: int, state: str, data_bytes: int) -> None:
    """``count`` jobs in BullMQ's layout: hashes, and their ids in ``wait`` or ``failed``."""
    now = int(time.time() * 1000)
    filler = "x" * max(0, data_bytes - 30)
    pipe = r.pipeline(transaction=False)
    for i in range(1, count + 1):
        data = orjson.dumps({"n": i, "text": filler}).decode()
        fields = {
            "name": "report",
            "data": data,
            "opts": '{"attempts":0}',
            "timestamp": now,
            "delay": 0,
            "priority": 0,
        }
        if state == "failed":
            fields.update(
                failedReason="upstream timed out", finishedOn=now + i, atm=1, processedOn=now
            )
            pipe.zadd(f"bull:{queue}:failed", {str(i): now + i})
        else:
            pipe.lpush(f"bull:{queue}:wait", str(i))
        pipe.hset(f"bull:{queue}:{i}", mapping=fields)
        if i % 10_000 == 0:
            pipe.execute()
    pipe.execute()
    r.set(f"bull:{queue}:id", count)


async def search_everything(url: str) -> dict[str, Any]:
    async with AsyncQueue("search", connection=url) as queue:
        started = time.perf_counter()
        requests = 0
        server_ms = 0.0
        cursor = None
        while True:
            page = await search_jobs(queue, "needle-found-nowhere", cursor=cursor)
            requests += 1
            server_ms += page.server_ms
            assert not page.jobs
            cursor = page.cursor
            if cursor is None:
                break
        return {
            "seconds": time.perf_counter() - started,
            "requests": requests,
            "scanned": page.scanned,
            "script_ms": server_ms,
        }


def search_client_side(r: redis.Redis, needle: str, chunk: int = 1000) -> dict[str, Any]:
    started = time.perf_counter()
    size = r.llen("bull:search:wait")
    carried = 0
    hits = 0
    for offset in range(0, size, chunk):
        ids = r.lrange("bull:search:wait", -(offset + chunk), -(offset + 1))
        pipe = r.pipeline(transaction=False)
        for job_id in ids:
            pipe.hmget(f"bull:search:{job_id}", "name", "data", "failedReason")
        for job_id, fields in zip(ids, pipe.execute(), strict=True):
            carried += sum(len(f) for f in fields if f)
            texts = [job_id, *(f for f in fields if f)]
            hits += any(needle in t.lower() for t in texts)
    assert hits == 0
    return {"seconds": time.perf_counter() - started, "bytes": carried}


def bench_search(srv: Server, jobs: int) -> None:
    r = srv.client
    seed(r, "search", jobs, "waiting", 200)
    r.config_set("slowlog-log-slower-than", 0)
    r.config_set("slowlog-max-len", 100_000)
    r.slowlog_reset()
    result = asyncio.run(search_everything(srv.url))
    entries = r.slowlog_get(100_000)
    commands = [(e["duration"], text(e["command"])) for e in entries]
    # The chunks of the waiting list (the other states are empty: one tiny call each).
    chunks = [d for d, c in commands if "EVALSHA" in c.upper() and " waiting " in c]
    empty = sum(1 for _, c in commands if "EVALSHA" in c.upper()) - len(chunks)
    r.config_set("slowlog-log-slower-than", 10_000)
    chunk_ms = sorted(d / 1000 for d in chunks)
    print(f"search of {jobs:,} jobs (data ~200 B), needle absent, chunk 1000, budget 50 ms:")
    print(
        f"  {result['seconds']:.2f} s wall, {result['requests']} requests, "
        f"{len(chunks)} chunks of 1000 (+ {empty} calls on the empty states), "
        f"{result['scanned']:,} jobs scanned"
    )
    print(
        f"  server time per chunk (SLOWLOG): median {statistics.median(chunk_ms):.2f} ms, "
        f"p99 {chunk_ms[int(len(chunk_ms) * 0.99) - 1]:.2f} ms, max {chunk_ms[-1]:.2f} ms; "
        f"total {sum(chunk_ms):.0f} ms (script's own clock: {result['script_ms']:.0f} ms)"
    )
    client = search_client_side(r, "needle-found-nowhere")
    print(
        f"  client-side design (LRANGE + HMGET pipeline per chunk, match in Python): "
        f"{client['seconds']:.2f} s wall, {client['bytes'] / 1e6:.1f} MB carried"
    )
    r.execute_command("FLUSHALL", "SYNC")


def read_page(r: redis.Redis, start: int) -> float:
    started = time.perf_counter()
    ids = r.zrevrange("bull:pages:failed", start, start + PAGE - 1)
    pipe = r.pipeline(transaction=False)
    for job_id in ids:
        pipe.hgetall(f"bull:pages:{job_id}")
    hashes = pipe.execute()
    elapsed = time.perf_counter() - started
    assert len(hashes) == PAGE and all(hashes)
    return elapsed * 1000


def bench_pages(srv: Server, failed: int) -> None:
    r = srv.client
    started = time.perf_counter()
    seed(r, "pages", failed, "failed", 200)
    seeded = time.perf_counter() - started
    print(f"page reads of a {failed:,}-job failed set (seeded in {seeded:.0f} s):")
    for number in (1, 20_000):
        start = (number - 1) * PAGE
        if start + PAGE > failed:
            continue
        times = sorted(read_page(r, start) for _ in range(21))
        print(
            f"  page {number:>6} (ZREVRANGE {start} {start + PAGE - 1} + 50 HGETALL): "
            f"median {statistics.median(times):.2f} ms, max {times[-1]:.2f} ms"
        )
    r.execute_command("FLUSHALL", "SYNC")


def server_load(r: redis.Redis) -> tuple[float, int]:
    cpu = r.info("cpu")
    stats = r.info("stats")
    return (
        float(cpu["used_cpu_sys"]) + float(cpu["used_cpu_user"]),
        int(stats["total_commands_processed"]),
    )


async def idle_sse(srv: Server, clients: int, seconds: float) -> None:
    async def connect() -> redis.asyncio.Redis:
        return redis.asyncio.Redis.from_url(srv.url, decode_responses=True)

    # The server's own background work (serverCron) in the same time, with no client at all.
    cpu, commands = server_load(srv.client)
    await asyncio.sleep(seconds)
    cpu_after, commands_after = server_load(srv.client)
    baseline = cpu_after - cpu
    print(
        f"no client for {seconds:.0f} s: server CPU {baseline * 1000:.0f} ms, "
        f"{commands_after - commands - 2} commands besides the 2 INFO of the measure"
    )
    hub = LiveHub(connect)
    await hub.start()

    async def live(request: Request) -> Response:
        return sse_response(hub, ["emails", "reports"], request)

    app = Starlette(routes=[Route("/live", live)])
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off", ws="none"))
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        await asyncio.sleep(0.01)
    async with httpx.AsyncClient(timeout=None) as http:
        streams = [http.stream("GET", f"http://127.0.0.1:{port}/live") for _ in range(clients)]
        responses = [await s.__aenter__() for s in streams]
        for response in responses:  # every tab has its first state
            async for line in response.aiter_lines():
                if line.startswith("data: "):
                    break
        cpu, commands = server_load(srv.client)
        await asyncio.sleep(seconds)
        cpu_after, commands_after = server_load(srv.client)
        for s in streams:
            await s.__aexit__(None, None, None)
    await hub.close()
    server.should_exit = True
    await serving
    sock.close()
    # server_load itself sends 2 INFO commands.
    print(
        f"{clients} idle SSE clients for {seconds:.0f} s: server CPU "
        f"{(cpu_after - cpu) * 1000:.0f} ms ({100 * (cpu_after - cpu) / seconds:.2f}% of a core; "
        f"{(cpu_after - cpu - baseline) * 1000:+.0f} ms over no client), "
        f"{commands_after - commands - 2} commands besides the 2 INFO of the measure"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.dashboard", description=__doc__)
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--failed", type=int, default=1_000_000)
    parser.add_argument("--sse-clients", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--only", default="search,pages,sse")
    args = parser.parse_args(argv)
    parts = set(args.only.split(","))
    srv = Server()
    try:
        if "search" in parts:
            bench_search(srv, args.jobs)
        if "pages" in parts:
            bench_pages(srv, args.failed)
        if "sse" in parts:
            asyncio.run(idle_sse(srv, args.sse_clients, args.seconds))
    finally:
        srv.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
