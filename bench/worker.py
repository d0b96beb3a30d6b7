"""``python -m bench.worker --mode drain|latency --concurrency C [--count N] [--processor
async|sync] [--processes P]``: a corral Worker on queue "bench" (default options but
concurrency), in its own process.

The twin of bench/node/worker.mjs (same protocol and output): prints READY once connected,
starts on a GO line from stdin, then

- drain: no-op processor (bench/processors.py): ``async def`` on the event loop, a plain
  function in the worker's threads (``--processor sync``), or either one by name in P child
  processes (``--processes P``, ``Worker(..., "bench.processors:noop", processes=P)``: the
  pool starts inside ``run_async``, after GO, so the harness does not time the first jobs);
  closes on a STOP line (or EOF); stdout ``{"ok": true}``;
- latency: the processor records ``now - job.data["t"]`` in ms; once N jobs were seen it
  closes; stdout ``{"latencies_ms": [...]}``.

``--queues Q [--queue-start K]`` (drain mode, the scale curves of bench/curves.py): one lanes
worker, ``Worker({"bench-K": C, ..., "bench-(K+Q-1)": C}, ...)``, C slots reserved for each of
the Q queues (strict lanes: no borrowing), instead of one worker of queue "bench".

With env ``BENCH_CPROFILE=path`` the run (GO to close) is profiled with cProfile into ``path``.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

import corral
from bench import processors
from bench.common import QUEUE, connect, parser, wall_ms
from corral import Worker
from corral.worker import run_event_loop


async def _line() -> str:
    return (await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)).strip()


async def main() -> None:
    p = parser(__doc__ or "")
    p.add_argument("--queues", type=int, default=0)
    p.add_argument("--queue-start", type=int, default=0)
    a = p.parse_args()
    latencies: list[float] = []
    done = asyncio.Event()

    async def record(job: Any) -> None:
        latencies.append(wall_ms() - job.data["t"])
        if len(latencies) >= a.count:
            done.set()

    if a.mode not in ("drain", "latency"):
        raise SystemExit(f"unknown mode {a.mode}")
    client = await connect(a.max_connections)
    name = "noop" if a.processor == "sync" else "noop_async"
    processor: Any = getattr(processors, name) if a.mode == "drain" else record
    extra: dict[str, Any] = {}
    if a.processes and a.mode == "drain":
        processor, extra["processes"] = f"bench.processors:{name}", a.processes
    if a.queues and a.mode == "drain":
        lanes = {
            f"{QUEUE}-{j}": a.concurrency for j in range(a.queue_start, a.queue_start + a.queues)
        }
        worker = Worker(lanes, processor, connection=client, **extra)
    else:
        worker = Worker(QUEUE, processor, connection=client, concurrency=a.concurrency, **extra)
    # Connect and check the server now, as Node's waitUntilReady() does (each lane's worker).
    for inner in getattr(worker, "workers", [worker]):
        await inner._open()
    print("READY", flush=True)
    go = await _line()
    if go != "GO":
        raise SystemExit(f"expected GO, got {go!r}")

    profile = None
    if os.environ.get("BENCH_CPROFILE"):
        import cProfile

        profile = cProfile.Profile()
        profile.enable()
    running = asyncio.create_task(worker.run_async())
    if a.mode == "drain":
        await _line()  # STOP or EOF
    else:
        await done.wait()
    await worker.close()
    await running
    if profile is not None:
        profile.disable()
        profile.dump_stats(os.environ["BENCH_CPROFILE"])
    await client.aclose()
    out: dict[str, Any] = {"ok": True} if a.mode == "drain" else {"latencies_ms": latencies}
    out["corral"] = corral.__file__  # the harness checks that its snapshot was measured
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    # The loop Worker.run() uses: uvloop when installed (make bench installs corral[dev]).
    run_event_loop(main())
