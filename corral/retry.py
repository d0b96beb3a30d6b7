"""Whether a failed attempt is retried, and after how long. Pure.

BullMQ's rules: a job runs at most ``opts.attempts`` times; ``UnrecoverableError`` fails it
at once; the delay comes from ``opts.backoff`` (fixed, exponential, or a custom strategy
registered on the worker). corral adds ``retry_on`` / ``no_retry_on`` exception filters.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from corral import backoff
from corral.bounds import MAX_TIMESTAMP_MS
from corral.errors import UnrecoverableError
from corral.job import JobRecord

#: A custom backoff strategy: ``(attempts_made, delay_ms, error, job) -> delay ms``.
BackoffStrategy = Callable[[int, int, BaseException, JobRecord], float]


@dataclass(frozen=True)
class RetryPolicy:
    """A worker's rules for failed attempts.

    Args:
        strategies: custom backoff types by name, used when ``opts.backoff.type`` names one.
        retry_on: when given, only these exception types are retried.
        no_retry_on: these exception types fail the job at once.
    """

    strategies: Mapping[str, BackoffStrategy] = field(default_factory=dict)
    retry_on: tuple[type[BaseException], ...] | None = None
    no_retry_on: tuple[type[BaseException], ...] = ()

    def retry_delay(self, job: JobRecord, error: BaseException) -> int | None:
        """The delay in ms before the next attempt, or ``None`` when the job fails for good.

        ``job.attempts_made`` counts attempts finished before this one.
        """
        made = job.attempts_made + 1
        if made >= job.max_attempts or isinstance(error, UnrecoverableError):
            return None
        if isinstance(error, self.no_retry_on):
            return None
        if self.retry_on is not None and not isinstance(error, self.retry_on):
            return None
        spec: Any = job.opts.get("backoff")
        if isinstance(spec, Mapping) and spec.get("type") in self.strategies:
            custom = self.strategies[spec["type"]]
            return whole_ms(custom(made, int(spec.get("delay") or 0), error, job))
        return backoff.retry_delay_ms(spec, made)


def whole_ms(delay: float) -> int:
    """A custom strategy's delay as whole ms: NaN or negative is 0, infinity the longest."""
    value = float(delay)
    if math.isnan(value) or value <= 0:
        return 0
    return MAX_TIMESTAMP_MS if math.isinf(value) else round(value)


#: How far before ``MAX_TIMESTAMP_MS`` a bounded retry is due: the finish script adds the
#: delay to its own clock, a little later than the one the bound was taken on.
RETRY_MARGIN_MS = 86_400_000


def bounded_delay(delay: int, now_ms: int) -> int:
    """``delay`` cut so that the retry comes a day before ``MAX_TIMESTAMP_MS`` (2039-09-07),
    the last run time a delayed job's score holds exactly (a long exponential run, or a
    strategy's infinity, would store ``inf`` and a score no client reads back)."""
    return max(0, min(delay, MAX_TIMESTAMP_MS - RETRY_MARGIN_MS - now_ms))
