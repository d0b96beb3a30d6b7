"""``python -m bench.produce --mode single|bulk|paced --count N [--chunk C] [--rate R]
[--payload BYTES]``: add N jobs named "bench" to queue "bench" with corral's AsyncQueue.

The twin of bench/node/produce.mjs (same modes, data and output):

- single: ``await queue.add(...)`` one at a time;
- bulk: ``await queue.add_bulk(...)`` in chunks of C;
- paced: ``queue.add`` at R jobs per second, each job's data ``{"t": enqueue time in ms}``.

Options of the scale curves (bench/curves.py), single and bulk modes; none of them given, the
jobs are the ones above:

- ``--queues Q [--queue-start K]``: add N jobs to each of the Q queues "bench-K" ..
  "bench-(K+Q-1)", one after the other, instead of N to "bench";
- ``--offset I``: the first job's data is ``{"i": I}`` (several fill processes, distinct data);
- ``--priorities P``: job i gets ``priority = 1 + i % P``;
- ``--delay-until MS``: every job is delayed until the epoch time MS (its delay is computed
  as its chunk is built; a job built after MS gets a 1 ms delay, and ``"overran": true`` is
  reported);
- ``--remove-on-complete N``: each job keeps at most the last N completed jobs;
- ``--mode adds --fill F --bulk B``: a bulk add of F jobs (untimed: it tops the queue up),
  then N single adds and B jobs by bulk add in chunks of C, each timed; stdout also has
  ``"bulk": B, "bulk_elapsed_s": seconds``.

The clock starts once the connections are ready and stops when the last add returned.
stdout: ``{"count": jobs added, "elapsed_s": seconds}``.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import corral
from bench.common import QUEUE, connect, make_data, parser, wall_ms
from corral import AsyncQueue
from corral.worker import run_event_loop


def curve_options(a: Any, i: int, overran: list[bool]) -> dict[str, Any]:
    """Job ``i``'s options from the scale-curve flags (empty when none is given)."""
    opts: dict[str, Any] = {}
    if a.priorities:
        opts["priority"] = 1 + i % a.priorities
    if a.delay_until:
        left = a.delay_until - wall_ms()
        if left < 1:
            overran.append(True)
        opts["delay"] = max(1.0, left) / 1000
    if a.remove_on_complete is not None:
        opts["remove_on_complete"] = a.remove_on_complete
    return opts


def item(a: Any, i: int, overran: list[bool]) -> tuple[Any, ...]:
    """A bulk item with the scale-curve options."""
    return ("bench", make_data(i, a.payload), curve_options(a, i, overran))


def curve_flags(a: Any) -> bool:
    """Whether any scale-curve option is given (none: the plain jobs of the workloads)."""
    return bool(a.priorities or a.delay_until or a.remove_on_complete is not None)


async def singles(queue: AsyncQueue, a: Any, first: int, end: int, overran: list[bool]) -> None:
    if not curve_flags(a):  # the plain loop of the single_add workload
        for i in range(first, end):
            await queue.add("bench", make_data(i, a.payload))
        return
    for i in range(first, end):
        await queue.add("bench", make_data(i, a.payload), **curve_options(a, i, overran))


async def bulk(queue: AsyncQueue, a: Any, first: int, end: int, overran: list[bool]) -> None:
    if not curve_flags(a):  # the plain chunks of the bulk_add workload
        for start in range(first, end, a.chunk):
            stop = min(end, start + a.chunk)
            await queue.add_bulk([("bench", make_data(i, a.payload)) for i in range(start, stop)])
        return
    for start in range(first, end, a.chunk):
        await queue.add_bulk([item(a, i, overran) for i in range(start, min(end, start + a.chunk))])


async def main() -> None:
    p = parser(__doc__ or "")
    p.add_argument("--queues", type=int, default=0)
    p.add_argument("--queue-start", type=int, default=0)
    p.add_argument("--offset", type=int, default=0)
    p.add_argument("--priorities", type=int, default=0)
    p.add_argument("--delay-until", type=float, default=0)
    p.add_argument("--remove-on-complete", type=int, default=None)
    p.add_argument("--fill", type=int, default=0)
    p.add_argument("--bulk", type=int, default=0)
    a = p.parse_args()
    client = await connect()
    names = [f"{QUEUE}-{j}" for j in range(a.queue_start, a.queue_start + a.queues)] or [QUEUE]
    queues = [AsyncQueue(name, connection=client) for name in names]
    for queue in queues:
        await queue.client()  # corral's one-time server check, outside the clock
    overran: list[bool] = []
    t0 = time.perf_counter()
    if a.mode == "adds":
        await bulk(queues[0], a, 0, a.fill, overran)
        t0 = time.perf_counter()
        await singles(queues[0], a, 0, a.count, overran)
        t1 = time.perf_counter()
        await bulk(queues[0], a, 0, a.bulk, overran)
        out = {"bulk": a.bulk, "bulk_elapsed_s": time.perf_counter() - t1, "elapsed_s": t1 - t0}
    else:
        for queue in queues:
            if a.mode == "single":
                await singles(queue, a, a.offset, a.offset + a.count, overran)
            elif a.mode == "bulk":
                await bulk(queue, a, a.offset, a.offset + a.count, overran)
            elif a.mode == "paced":
                for i in range(a.count):
                    wait = t0 + i / a.rate - time.perf_counter()
                    if wait > 0:
                        await asyncio.sleep(wait)
                    await queue.add("bench", {"t": wall_ms()})
            else:
                raise SystemExit(f"unknown mode {a.mode}")
        out = {"elapsed_s": time.perf_counter() - t0}
    for queue in queues:
        await queue.close()
    await client.aclose()
    out.update(count=a.count * len(queues), corral=corral.__file__)
    if overran:
        out["overran"] = True
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    # The loop Worker.run() uses: uvloop when installed (make bench installs corral[dev]).
    run_event_loop(main())
