"""Wall-clock time in epoch milliseconds, the unit of every timestamp BullMQ stores."""

from __future__ import annotations

import time


def now_ms() -> int:
    """The current time in epoch ms."""
    return time.time_ns() // 1_000_000


def monotonic() -> float:
    """Seconds on a clock that never goes back, for deadlines."""
    return time.monotonic()
