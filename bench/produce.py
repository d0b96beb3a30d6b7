"""``python -m bench.produce --mode single|bulk|paced --count N [--chunk C] [--rate R]
[--payload BYTES]``: add N jobs named "bench" to queue "bench" with corral's AsyncQueue.

The twin of bench/node/produce.mjs (same modes, data and output):

- single: ``await queue.add(...)`` one at a time;
- bulk: ``await queue.add_bulk(...)`` in chunks of C;
- paced: ``queue.add`` at R jobs per second, each job's data ``{"t": enqueue time in ms}``.

The clock starts once the connection is ready and stops when the last add returned.
stdout: ``{"count": N, "elapsed_s": seconds}``.
"""

from __future__ import annotations

import asyncio
import json
import time

import corral
from bench.common import QUEUE, connect, make_data, parser, wall_ms
from corral import AsyncQueue
from corral.worker import run_event_loop


async def main() -> None:
    a = parser(__doc__ or "").parse_args()
    client = await connect()
    queue = AsyncQueue(QUEUE, connection=client)
    await queue.client()  # corral's one-time server check, outside the clock
    t0 = time.perf_counter()
    if a.mode == "single":
        for i in range(a.count):
            await queue.add("bench", make_data(i, a.payload))
    elif a.mode == "bulk":
        for start in range(0, a.count, a.chunk):
            await queue.add_bulk(
                [
                    ("bench", make_data(i, a.payload))
                    for i in range(start, min(a.count, start + a.chunk))
                ]
            )
    elif a.mode == "paced":
        for i in range(a.count):
            wait = t0 + i / a.rate - time.perf_counter()
            if wait > 0:
                await asyncio.sleep(wait)
            await queue.add("bench", {"t": wall_ms()})
    else:
        raise SystemExit(f"unknown mode {a.mode}")
    elapsed = time.perf_counter() - t0
    await queue.close()
    await client.aclose()
    print(
        json.dumps({"count": a.count, "elapsed_s": elapsed, "corral": corral.__file__}), flush=True
    )


if __name__ == "__main__":
    # The loop Worker.run() uses: uvloop when installed (make bench installs corral[dev]).
    run_event_loop(main())
