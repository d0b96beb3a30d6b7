"""The sizes of a chaos run: the full ones and the tiny ones of ``--quick``."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Sizes:
    kill9_workers: int = 3
    kill9_concurrency: int = 4
    kill9_jobs: int = 600
    #: Jobs a second, under the workers' capacity (3 x 4 / 0.3 s = 40/s; 27/s with one of
    #: them killed): no backlog, so a recovered job (queued at the back) runs at once.
    kill9_rate: float = 25.0
    kill9_sleep: float = 0.3
    kill9_lock: float = 2.0
    kill9_stalled: float = 1.0
    kill9_rounds: int = 10
    kill9_every: float = 1.5
    outage_downs: tuple[float, ...] = (10.0, 30.0)
    outage_runs: int = 3
    outage_drain_delay: float = 5.0
    outage_timeout: float = 30.0
    crash_tasks: int = 4
    crash_rounds: int = 4  # each: one kill -9 of the server, then one lost reply
    crash_down: float = 1.0
    crash_gap: float = 1.5
    crash_add_retries: int = 20
    retention_small: int = 100
    retention_big: int = 1_000_000
    retention_finishes: int = 200
    #: With keep=10 each finish trims at most 100 old jobs (99 net): 10,200 finishes show
    #: the whole 1M trimmed and the cost after it, unless the budget ends the run first.
    retention_big_finishes: int = 10_200
    retention_budget_s: float = 60.0


FULL = Sizes()
QUICK = Sizes(
    kill9_workers=2,
    kill9_jobs=60,
    kill9_rate=20.0,
    kill9_rounds=2,
    kill9_every=1.0,
    outage_downs=(1.0,),
    outage_runs=1,
    outage_timeout=15.0,
    crash_rounds=1,
    crash_down=0.5,
    crash_gap=0.6,
    retention_big=5000,
    retention_finishes=30,
    retention_big_finishes=120,
    retention_budget_s=10.0,
)
