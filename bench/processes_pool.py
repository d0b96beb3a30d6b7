"""The child-process pool alone (no Redis): no-op jobs through N children, all submitted at once.

What a job costs the pool: one frame each way on a socketpair, the child's decode of the job
hash into a ``ChildJob``, the call, the encode of the result. Prints one JSON line: jobs/s, and
the parent's CPU per job (what a worker would pay on top of its Redis work per job: its own
rate R becomes about 1 / (1/R + parent_us_per_job)).

    .venv/bin/python -m bench.processes_pool [--jobs 100000] [--children 2] [--uvloop]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from typing import Any

from corral import _codec
from corral._processes import ChildJobSpec, ProcessPool

SPEC = "bench.processes_pool:noop"


def noop(job: Any) -> None:
    """The processor: nothing, so that only the pool's own cost is measured."""
    return None


async def _calls(method: str, args: list[Any]) -> Any:  # pragma: no cover - noop calls none
    raise RuntimeError("noop makes no calls")


def _fields(i: int) -> dict[str, str]:
    """A job hash as a worker fetches it (the fields BullMQ writes at add)."""
    return {
        "name": "noop",
        "data": _codec.dumps({"i": i}),
        "opts": '{"attempts":1}',
        "timestamp": "1700000000000",
        "delay": "0",
        "priority": "0",
        "processedOn": "1700000000001",
        "ats": "1",
    }


async def measure(jobs: int, children: int, batch: int) -> dict[str, Any]:
    pool = ProcessPool(SPEC, children)
    await pool.start()
    try:
        specs = [
            ChildJobSpec("bench", str(i), _fields(i), "token", None, None) for i in range(jobs)
        ]
        warm = [pool.submit(spec, _calls) for spec in specs[: min(1000, jobs)]]
        for run in warm:
            await run.result()
        cpu0, t0 = time.process_time(), time.perf_counter()
        # In batches of ``batch``: each submitted at once, then awaited whole.
        for start in range(0, jobs, batch):
            runs = [pool.submit(spec, _calls) for spec in specs[start : start + batch]]
            for run in runs:
                await run.result()
        elapsed, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    finally:
        await pool.close()
    return {
        "bench": "processes_pool",
        "jobs": jobs,
        "children": children,
        "in_flight": batch,
        "seconds": round(elapsed, 3),
        "jobs_per_s": round(jobs / elapsed),
        "parent_us_per_job": round(cpu / jobs * 1e6, 1),
        "loop": type(asyncio.get_running_loop()).__module__.split(".")[0],
        "python": sys.version.split()[0],
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--jobs", type=int, default=100_000)
    p.add_argument("--children", type=int, default=2)
    p.add_argument(
        "--in-flight", type=int, default=0, help="submit in batches of this many (default: all)"
    )
    p.add_argument("--uvloop", action="store_true", help="run the parent on uvloop")
    opts = p.parse_args(argv)
    batch = opts.in_flight or opts.jobs
    coro = measure(opts.jobs, opts.children, batch)
    if opts.uvloop:
        import uvloop

        result = uvloop.run(coro)
    else:
        result = asyncio.run(coro)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
