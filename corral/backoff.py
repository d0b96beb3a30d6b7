"""Retry delays: BullMQ's fixed and exponential backoff, with optional jitter. Pure math."""

from __future__ import annotations

import random
from typing import Any

#: The most doublings an exponential delay makes.
MAX_DOUBLINGS = 48


def retry_delay_ms(backoff: Any, attempts_made: int, *, rand: random.Random | None = None) -> int:
    """The delay before the next attempt, in ms, from a job's ``opts.backoff``.

    Args:
        backoff: ``None``, a number (fixed delay in ms) or ``{"type", "delay", "jitter"}``.
        attempts_made: attempts finished so far, the failing one included (>= 1).

    Fixed waits ``delay``; exponential waits ``delay * 2 ** (attempts_made - 1)``, at most
    ``maxDelay`` when set (a corral addition). With
    ``jitter`` j in 0..1 the delay is drawn from ``[(1 - j) * d, d]``. Unknown types give 0
    (an immediate retry) rather than losing the job; corral validates types when adding.
    """
    if backoff is None:
        return 0
    if isinstance(backoff, (int, float)):
        return max(0, int(backoff))
    kind = backoff.get("type")
    delay = int(backoff.get("delay") or 0)
    if kind == "exponential":
        # Doublings past 48 (8,900 years of 1 ms) only make a number too big for a float.
        delay = delay * 2 ** min(max(0, attempts_made - 1), MAX_DOUBLINGS)
    elif kind != "fixed":
        return 0
    cap = backoff.get("maxDelay")
    if cap is not None:
        delay = min(delay, int(cap))
    jitter = float(backoff.get("jitter") or 0)
    if jitter > 0:
        low = delay * (1 - jitter)
        delay = int((rand or random).uniform(low, delay))
    return delay


def reconnect_delay(failures: int, *, base: float = 0.05, cap: float = 0.25) -> float:
    """Seconds to wait before try ``failures + 1`` at a server that is away: doubling from
    ``base``, at most ``cap``, with jitter (a random half of it) so that many clients that lost
    the server together do not come back in step. Never 0: nothing retries in a busy loop.
    """
    # Bounded exponent: a float overflows at 2.0 ** 1024, which a worker waiting four
    # minutes for a server that refuses connections reaches.
    delay: float = min(cap, base * 2.0 ** min(max(0, failures - 1), MAX_DOUBLINGS))
    return delay * random.uniform(0.5, 1.0)
