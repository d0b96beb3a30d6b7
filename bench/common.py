"""What the Python producer and worker processes share with their Node twins (bench/node)."""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

from redis.asyncio import Redis

PREFIX = "bull"
QUEUE = "bench"


def make_data(i: int, payload: int) -> dict[str, Any]:
    """Job ``i``'s data, the same as ``makeData`` in bench/node/common.mjs: ``{"i": i}``, or a
    fixed string that makes the JSON exactly ``payload`` bytes long."""
    if payload > 0:
        return {"p": "x" * max(0, payload - 8)}
    return {"i": i}


def wall_ms() -> float:
    """Wall-clock time in ms, sub-ms resolution: comparable with the Node side's wallMs()."""
    return time.time_ns() / 1e6


def url() -> str:
    found = os.environ.get("REDIS_URL")
    if not found:
        sys.exit("env REDIS_URL is not set")
    return found


async def connect(max_connections: int | None = None) -> Redis:
    """A client of the benchmark server, connected (the clock never counts the handshake).

    Made as corral makes its own from a URL; ``max_connections`` overrides the pool size.
    """
    extra = {"max_connections": max_connections} if max_connections else {}
    client = Redis.from_url(url(), decode_responses=True, **extra)
    await client.ping()
    return client


def parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--mode", required=True)
    p.add_argument("--count", type=int, default=0)
    p.add_argument("--concurrency", type=int, default=1)
    p.add_argument("--chunk", type=int, default=1000)
    p.add_argument("--rate", type=float, default=200)
    p.add_argument("--payload", type=int, default=0)
    p.add_argument("--max-connections", type=int, default=None)
    # drain workers only: the processor's kind, and how many child processes run it (0: none)
    p.add_argument("--processor", choices=("async", "sync"), default="async")
    p.add_argument("--processes", type=int, default=0)
    return p
