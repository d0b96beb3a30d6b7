"""What the agents and the server leave behind, read back: the worker agents' records
(ready, start, end lines), an events stream, tracebacks in the agents' stderr."""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path
from typing import Any

import redis

from bench.chaos.processes import Agent, Run


def read_records(directory: Path) -> list[dict[str, Any]]:
    """Every line the worker agents wrote to ``directory`` (a line cut by kill -9 is skipped)."""
    out = []
    for path in directory.glob("*.jsonl"):
        for line in path.read_text().splitlines():
            with contextlib.suppress(ValueError):
                out.append(json.loads(line))
    return out


def ready_records(directory: Path) -> dict[int, dict[str, Any]]:
    return {r["pid"]: r for r in read_records(directory) if r.get("ev") == "ready"}


def wait_ready(run: Run, directory: Path, agents: list[Agent], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while True:
        ready = ready_records(directory)
        if all(a.pid in ready for a in agents):
            for a in agents:
                run.check_corral(ready[a.pid]["corral"])
            return
        for a in agents:
            if not a.alive():
                raise RuntimeError(f"worker {a.pid} exited before ready:\n{a.stderr()[-3000:]}")
        if time.monotonic() > deadline:
            raise RuntimeError("workers not ready in time")
        time.sleep(0.02)


def first_start(directory: Path, job_id: str, timeout: float) -> float | None:
    """When job ``job_id`` first started (polling the records), or None after ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for r in read_records(directory):
            if r.get("ev") == "start" and r.get("job") == job_id:
                return float(r["t"])
        time.sleep(0.002)
    return None


def read_events(c: redis.Redis, key: str) -> list[tuple[str, dict[str, str]]]:
    out: list[tuple[str, dict[str, str]]] = []
    low = "-"
    while True:
        batch = c.xrange(key, min=low, max="+", count=10_000)
        if not batch:
            return out
        out += batch
        low = "(" + batch[-1][0]


def tracebacks(agents: list[Agent]) -> int:
    return sum(a.stderr().count("Traceback") for a in agents)
