"""Many processes on one scheduler: 8 upserting it over and over, 4 working it.

What must hold (and is asserted): every run (tick) is processed exactly once; runs stay on the
scheduler's phase, whole multiples of ``every`` apart; a tick is skipped only when the run
before it was taken after that tick had passed (BullMQ skips missed runs rather than bursting
them), which an idle test machine should not do but a loaded one may, so it is checked
against the time each run was created rather than assumed; no upsert creates a second pending
iteration or loses one; and when everything stops exactly one iteration is pending, the one
the scheduler is scored at.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from itertools import pairwise
from pathlib import Path

import redis

ROOT = Path(__file__).resolve().parent.parent
EVERY_MS = 150
#: Ticks to process: 20 at least, with a margin for the first one waiting for workers.
TICKS = 22


def spawn(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.fixtures.scheduler_procs", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )


def ready(procs: list[subprocess.Popen[str]]) -> None:
    """Wait until each process has said it is ready (they start in parallel)."""
    for proc in procs:
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        assert line == "ready", f"process {proc.args} did not start: {line!r}"


def wait_for(check: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def run_ms(job_id: str) -> int:
    return int(job_id.rsplit(":", 1)[1])


def test_one_iteration_per_tick(redis_url: str, r: redis.Redis) -> None:
    # The check below reads each iteration's first `added` event: keep every event.
    r.hset("bull:q:meta", "opts.maxLenEvents", 1_000_000)
    procs: list[subprocess.Popen[str]] = []
    try:
        workers = [spawn("work", redis_url, "q") for _ in range(4)]
        procs += workers
        upserters = [
            spawn("upsert", redis_url, "q", "tick", str(EVERY_MS / 1000)) for _ in range(8)
        ]
        procs += upserters
        ready(procs)
        r.set("test:go", 1)  # all 8 upsert at once, then again every 10-40 ms
        wait_for(lambda: r.llen("test:processed") >= TICKS, 60, f"{TICKS} processed runs")
        r.set("test:stop", 1)
        for proc in upserters:
            assert proc.wait(20) == 0
        for proc in workers:
            proc.send_signal(signal.SIGTERM)  # graceful: the running job finishes
        for proc in workers:
            assert proc.wait(20) == 0
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()

    assert int(r.get("test:upserts") or 0) >= 8 * 10  # the upserters did run alongside
    processed: list[str] = r.lrange("test:processed", 0, -1)  # type: ignore[assignment]
    assert len(processed) >= TICKS
    # Each run processed exactly once.
    assert len(set(processed)) == len(processed)
    runs = sorted(map(run_ms, processed))
    assert all(job_id.startswith("repeat:tick:") for job_id in processed)

    # When each iteration was created: its first `added` event (server time, ms).
    created: dict[str, int] = {}
    for event_id, fields in r.xrange("bull:q:events", "-", "+"):
        if fields["event"] == "added":
            created.setdefault(fields["jobId"], int(event_id.split("-")[0]))
    for before, after in pairwise(runs):
        gap = after - before
        assert gap > 0 and gap % EVERY_MS == 0, (before, after)
        if gap > EVERY_MS:
            # A skip: only allowed when the run after `before` was created once the tick
            # following `before` had passed, i.e. `before` was taken late.
            assert created[f"repeat:tick:{after}"] >= before + EVERY_MS, (before, after)

    # Nothing was lost or doubled by the upserts: every iteration ever created was processed,
    # except the one pending now, which is the scheduler's current one.
    score = r.zscore("bull:q:repeat", "tick")
    assert score is not None
    current = f"repeat:tick:{int(score)}"
    assert set(created) == set(processed) | {current}
    pending = (
        r.lrange("bull:q:wait", 0, -1)
        + r.lrange("bull:q:active", 0, -1)
        + r.zrange("bull:q:delayed", 0, -1)
        + r.zrange("bull:q:prioritized", 0, -1)
    )
    assert pending == [current]
    assert r.zcard("bull:q:completed") == len(processed)
