"""How long a worker's run lasts (burst, a job budget, a time budget) and what it did. Pure.

A burst worker drains its queue and exits: once nothing is waiting, nothing runs, and no
delayed job is due within ``burst_wait`` seconds. ``max_jobs`` and ``max_time`` bound any
run, burst or not. Serverless functions and cron-started containers use these (see
docs/serverless.md).
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field
from typing import Literal

from corral import options
from corral.clock import monotonic
from corral.errors import InvalidOptionError
from corral.options import Duration

#: Why a run ended: ``close()`` or a signal, the queue was drained (burst), or a budget.
StopReason = Literal["closed", "drained", "max_jobs", "max_time"]


@dataclass(slots=True)
class RunSummary:
    """What one :meth:`Worker.run` did: the outcomes the server confirmed, and why it ended."""

    completed: int = 0
    #: Jobs that failed for good (no attempts left, or never retried).
    failed: int = 0
    #: Attempts that failed and were retried.
    retried: int = 0
    stopped: StopReason = "closed"

    @property
    def processed(self) -> int:
        """Attempts that ended: completed + failed + retried."""
        return self.completed + self.failed + self.retried


@dataclass(slots=True)
class RunLimits:
    """A run's bounds, checked."""

    burst: bool = False
    burst_wait_ms: int = 0
    max_jobs: int | None = None
    max_time_s: float | None = None
    started_at: float = field(default_factory=monotonic)
    #: Jobs taken so far (each counts once, however its attempt ends).
    taken: int = 0
    outcomes: collections.Counter[str] = field(default_factory=collections.Counter)

    @classmethod
    def build(
        cls,
        *,
        burst: bool,
        burst_wait: Duration,
        max_jobs: int | None,
        max_time: Duration | None,
    ) -> RunLimits:
        if not isinstance(burst, bool):
            raise InvalidOptionError(f"burst must be True or False, got {burst!r}")
        wait_ms = options.duration_ms("burst_wait", burst_wait)
        if wait_ms and not burst:
            raise InvalidOptionError("burst_wait needs burst=True")
        return cls(
            burst=burst,
            burst_wait_ms=wait_ms,
            max_jobs=None if max_jobs is None else options.int_option("max_jobs", max_jobs, 1),
            max_time_s=None
            if max_time is None
            else options.positive_ms("max_time", max_time) / 1000,
        )

    def tally(self, outcome: str) -> None:
        """An attempt ended: "completed", "failed" (for good) or "retry"."""
        self.outcomes[outcome] += 1

    def room(self, wanted: int) -> int:
        """How many of ``wanted`` more jobs may be taken."""
        if self.max_jobs is None:
            return wanted
        return max(0, min(wanted, self.max_jobs - self.taken))

    def time_left(self) -> float | None:
        if self.max_time_s is None:
            return None
        return self.max_time_s - (monotonic() - self.started_at)

    def summary(self, stopped: StopReason) -> RunSummary:
        o = self.outcomes
        return RunSummary(o["completed"], o["failed"], o["retry"], stopped)
