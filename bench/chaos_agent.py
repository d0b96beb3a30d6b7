"""The processes of ``python -m bench.chaos``: a corral worker, producers, each in its own
process so that the harness can ``kill -9`` it.

``python -m bench.chaos_agent ROLE --url URL --queue Q [options]``:

- ``worker``: a :class:`corral.Worker` whose async processor appends ``{"ev": "start", "job",
  "pid", "token", "t"}`` to ``<records>/<pid>.jsonl`` first thing (one ``write`` on an
  ``O_APPEND`` file, so a line survives ``kill -9`` and never interleaves), then sleeps
  ``--sleep`` s and appends ``"end"``. Its first line is ``"ready"`` (once connected), with
  ``corral.__file__``, the worker's lock-token base and the SHA1 of every script. SIGTERM
  closes it (``close_grace`` 1 s).
- ``produce``: ``--count`` jobs (data ``{"i": i}``, options ``--opts`` JSON): ``add_bulk`` in
  chunks of ``--chunk``, or with ``--rate R`` one ``add`` at a time, R a second; stdout
  READY once connected, then ``{"count", "elapsed_s", "corral"}``.
- ``adder``: ``--tasks`` concurrent tasks add jobs with data ``{"seq": n}`` one at a time
  until a line on stdin. The queue gets ``add_retries=--add-retries`` if this corral's
  ``AsyncQueue`` takes it; else the task itself sends a failed add again, as often, 0.1 s
  apart. An add that raised in the end is counted, and its task waits 0.1 s. stdout: READY,
  then ``{"acked": [...], "raised": [[seq, error], ...], "met_errors": [seq, ...], ...}``.
- ``add-on-demand``: for every stdin line ``ADD <tag>``, a new queue (own connection) adds
  one job with data ``{"tag": tag}``; stdout ``{"tag", "id", "t_sent", "t_acked", "tries"}``.

Times are ``time.time()`` (the machine's clock, shared by every process and the server).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import inspect
import json
import os
import signal
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from redis.asyncio import Redis

import corral
from corral import AsyncQueue, Worker
from corral.worker import run_event_loop


def _args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("role", choices=["worker", "produce", "adder", "add-on-demand"])
    p.add_argument("--url", required=True)
    p.add_argument("--queue", required=True)
    # worker
    p.add_argument("--records", help="directory of the run records")
    p.add_argument("--concurrency", type=int, default=1)
    p.add_argument("--sleep", type=float, default=0.0)
    p.add_argument("--lock", type=float, default=30.0)
    p.add_argument("--stalled", type=float, default=30.0)
    p.add_argument("--max-stalled", type=int, default=1)
    p.add_argument("--drain-delay", type=float, default=5.0)
    p.add_argument("--preload-scripts", type=int, default=0, help="SCRIPT LOAD them first")
    # producers
    p.add_argument("--count", type=int, default=0)
    p.add_argument("--chunk", type=int, default=1000)
    p.add_argument("--rate", type=float, default=0.0, help="produce: adds a second (0: bulk)")
    p.add_argument("--opts", default="{}", help="job options of produce, JSON")
    p.add_argument("--tasks", type=int, default=4)
    p.add_argument("--add-retries", type=int, default=20)
    return p.parse_args()


def _scripts() -> dict[str, Any]:
    """Every script of this corral by name (the harness reads SLOWLOG by their SHA1)."""
    from corral import _scripts as scripts

    return {v.name: v for v in vars(scripts).values() if isinstance(v, scripts.Script)}


class Records:
    """This process's ``<dir>/<pid>.jsonl``: one ``write`` per line, kept across ``kill -9``."""

    def __init__(self, directory: str) -> None:
        path = Path(directory) / f"{os.getpid()}.jsonl"
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def write(self, **rec: Any) -> None:
        rec.setdefault("t", time.time())
        rec["pid"] = os.getpid()
        os.write(self.fd, (json.dumps(rec) + "\n").encode())


async def worker(a: argparse.Namespace) -> None:
    assert a.records
    records = Records(a.records)

    async def process(job: Any) -> str:
        records.write(ev="start", job=job.id, token=job.token)
        if a.sleep:
            await asyncio.sleep(a.sleep)
        records.write(ev="end", job=job.id)
        return "ok"

    w = Worker(
        a.queue,
        process,
        connection=a.url,
        concurrency=a.concurrency,
        lock_duration=a.lock,
        stalled_interval=a.stalled,
        max_stalled_count=a.max_stalled,
        drain_delay=a.drain_delay,
    )
    await w._open()  # connected and checked before "ready", as bench/worker.py does
    scripts = _scripts()
    if a.preload_scripts:
        client = Redis.from_url(a.url)
        for script in scripts.values():
            await client.script_load(script.source)
        await client.aclose()
    records.write(
        ev="ready",
        corral=corral.__file__,
        token_base=getattr(w, "_token_base", None),
        scripts={name: script.sha for name, script in scripts.items()},
    )
    loop = asyncio.get_running_loop()
    closing: list[asyncio.Task[None]] = []
    loop.add_signal_handler(
        signal.SIGTERM, lambda: closing.append(loop.create_task(w.close(grace=1.0)))
    )
    await w.run_async()
    for task in closing:
        await task


async def produce(a: argparse.Namespace) -> None:
    opts = json.loads(a.opts)
    queue = AsyncQueue(a.queue, connection=a.url)
    await queue.client()
    print("READY", flush=True)
    t0 = time.perf_counter()
    if a.rate > 0:
        for i in range(a.count):
            wait = t0 + i / a.rate - time.perf_counter()
            if wait > 0:
                await asyncio.sleep(wait)
            await queue.add("chaos", {"i": i}, **opts)
    else:
        for start in range(0, a.count, a.chunk):
            end = min(a.count, start + a.chunk)
            await queue.add_bulk([("chaos", {"i": i}, opts) for i in range(start, end)])
    elapsed = time.perf_counter() - t0
    await queue.close()
    print(json.dumps({"count": a.count, "elapsed_s": elapsed, "corral": corral.__file__}))


def _queue_options(a: argparse.Namespace) -> dict[str, Any]:
    """``add_retries`` where this corral has it (the tree before the reliability work has not)."""
    accepted = inspect.signature(AsyncQueue.__init__).parameters
    return {"add_retries": a.add_retries} if "add_retries" in accepted else {}


async def adder(a: argparse.Namespace) -> None:
    extra = _queue_options(a)
    queue = AsyncQueue(a.queue, connection=a.url, **extra)
    await queue.client()
    # Where corral cannot resend an add, the producer does, as users had to: the same add
    # again after an error, up to add_retries times, 0.1 s apart.
    app_resends = 0 if extra else a.add_retries
    # Transport errors each add call met, counted on the queue's script calls (a private
    # method of both trees: the call that ran and lost its reply is seen here).
    errors: Counter[asyncio.Task[Any] | None] = Counter()
    run_script = queue._run

    async def counted(*args: Any, **kwargs: Any) -> Any:
        try:
            return await run_script(*args, **kwargs)
        except Exception:
            errors[asyncio.current_task()] += 1
            raise

    queue._run = counted  # type: ignore[method-assign]
    acked: list[int] = []
    raised: list[tuple[int, str]] = []
    met_errors: list[int] = []
    seq = 0
    stop = asyncio.Event()

    async def task() -> None:
        nonlocal seq
        me = asyncio.current_task()
        while not stop.is_set():
            n = seq
            seq += 1
            errors[me] = 0
            for attempt in range(app_resends + 1):
                try:
                    await queue.add("chaos", {"seq": n})
                except Exception as exc:
                    errors[me] += 1
                    if attempt < app_resends:
                        await asyncio.sleep(0.1)
                        continue
                    raised.append((n, type(exc).__name__))
                    await asyncio.sleep(0.1)
                else:
                    acked.append(n)
                break
            if errors[me]:
                met_errors.append(n)

    tasks = [asyncio.create_task(task()) for _ in range(a.tasks)]
    print("READY", flush=True)
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, sys.stdin.readline)
    stop.set()
    await asyncio.gather(*tasks)
    with contextlib.suppress(Exception):
        await queue.close()
    print(
        json.dumps(
            {
                "acked": acked,
                "raised": raised,
                "met_errors": met_errors,
                "queue_options": extra,
                "app_resends": app_resends,
                "corral": corral.__file__,
            }
        ),
        flush=True,
    )


async def add_on_demand(a: argparse.Namespace) -> None:
    loop = asyncio.get_running_loop()
    print(json.dumps({"ready": True, "corral": corral.__file__}), flush=True)
    while True:
        line = (await loop.run_in_executor(None, sys.stdin.readline)).split()
        if not line:
            return
        tag = line[1] if len(line) > 1 else ""
        t_sent = time.time()
        tries = 0
        job_id = None
        error = None
        while time.time() - t_sent < 30:
            tries += 1
            queue = AsyncQueue(a.queue, connection=a.url)  # a new connection for each add
            try:
                job = await queue.add("chaos", {"tag": tag})
                job_id = job.id
                break
            except Exception as exc:
                error = f"{type(exc).__name__}: {exc}"
                await asyncio.sleep(0.01)
            finally:
                with contextlib.suppress(Exception):
                    await queue.close()
        out = {"tag": tag, "id": job_id, "t_sent": t_sent, "t_acked": time.time()}
        print(json.dumps({**out, "tries": tries, "error": error}), flush=True)


def main() -> None:
    a = _args()
    role = {"worker": worker, "produce": produce, "adder": adder, "add-on-demand": add_on_demand}
    run_event_loop(role[a.role](a))


if __name__ == "__main__":
    main()
