"""Jobs finished per minute and processing-time percentiles, from numbers already read.

Pure: :mod:`corral.cli_inspect`, :mod:`corral.cli_top` and the dashboard read the server and
pass what they read here (:func:`queue_rate_reads` only queues the reads on their pipeline).
Two sources give a per-minute rate of a queue's completed (or failed) jobs:

- BullMQ's metrics (``K:metrics:<kind>``), kept when workers run with
  ``metrics_max_data_points`` (Node: ``metrics: {maxDataPoints}``). They count every finish,
  also of jobs that retention removes at once, but only of the workers that record them.
- The finished sets: ``K:completed`` and ``K:failed`` are scored by ``finishedOn``, so a
  ``ZCOUNT`` over the last minute counts the jobs finished in it, whoever ran them, but not
  those already removed (``remove_on_complete``).

:func:`choose_rate` prefers the metrics and falls back to the larger finished-set count.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from corral._keys import QueueKeys

#: The window of a rate: one minute, in ms.
WINDOW_MS = 60_000
#: The finished states a rate per minute is given for.
RATE_KINDS = ("completed", "failed")
#: Replies :func:`queue_rate_reads` adds to a pipeline.
RATE_READS = 3 * len(RATE_KINDS)

#: Where a rate came from: BullMQ's metrics, or a count over the finished set.
RateSource = Literal["metrics", "finished"]


@dataclass(frozen=True, slots=True)
class MetricsSample:
    """What ``K:metrics:<kind>`` held: the running ``count``, and ``prev_ts``/``prev_count``,
    the time and count when the last data point was taken (for the first finish: its time and
    0); ``last_point`` is the newest data point of ``K:metrics:<kind>:data``, ``None`` when
    there is none yet."""

    count: int
    prev_ts: int
    prev_count: int
    last_point: int | None


def parse_metrics(fields: Sequence[str | None], last_point: str | None) -> MetricsSample | None:
    """The sample of ``HMGET K:metrics:<kind> count prevTS prevCount`` and ``LINDEX
    K:metrics:<kind>:data 0``; ``None`` when no worker has recorded metrics (or the hash is
    not one that BullMQ's layout would write)."""
    try:
        count, prev_ts, prev_count = (int(x) if x is not None else None for x in fields)
        point = int(last_point) if last_point is not None else None
    except ValueError:
        return None
    if count is None or prev_ts is None:
        return None
    return MetricsSample(count, prev_ts, prev_count or 0, point)


def rate_from_metrics(sample: MetricsSample, now_ms: int) -> float:
    """Jobs per minute over the last minute, estimated from BullMQ's metrics.

    The jobs since the last data point (``count - prev_count``) finished within the
    ``elapsed`` ms since ``prev_ts``. Within the first minute after it, the rest of the
    window is taken from the last data point, in proportion to the part of the minute it
    covers (a sliding-window estimate). Later, no finish has come to write a point: the jobs
    since ``prev_ts`` are spread over all of that time, so the rate falls toward 0 while the
    queue is idle rather than staying at its last value.
    """
    since = max(sample.count - sample.prev_count, 0)
    elapsed = max(now_ms - sample.prev_ts, 0)
    if elapsed >= WINDOW_MS:
        return since * WINDOW_MS / elapsed
    before = sample.last_point or 0
    return since + before * (WINDOW_MS - elapsed) / WINDOW_MS


def choose_rate(
    sample: MetricsSample | None, finished_in_window: int, now_ms: int
) -> tuple[float, RateSource]:
    """The rate per minute and its source.

    ``finished_in_window`` is the ``ZCOUNT`` of the finished set over the last minute. The
    metrics are used when some worker records them, unless the finished set counts more:
    then workers without metrics are finishing jobs too (or the metrics are left over from
    workers gone), and the count, exact for the jobs it sees, is the better lower bound.
    """
    if sample is not None:
        rate = rate_from_metrics(sample, now_ms)
        if rate >= finished_in_window:
            return rate, "metrics"
    return float(finished_in_window), "finished"


def processing_times_ms(pairs: Iterable[Sequence[str | None]]) -> list[int]:
    """``finishedOn - processedOn`` of each ``(processedOn, finishedOn)`` pair read from job
    hashes, skipping jobs that lack either (removed meanwhile) or whose clocks disagree."""
    times = []
    for processed_on, finished_on in pairs:
        try:
            started, ended = int(processed_on or 0), int(finished_on or 0)
        except ValueError:
            continue
        if started > 0 and ended >= started:  # 0: never started, or the field is missing
            times.append(ended - started)
    return times


def percentile(values: Sequence[float], q: float) -> float | None:
    """The nearest-rank ``q`` percentile (0 < q <= 100) of ``values``; ``None`` when empty.

    Nearest rank gives a value that was observed, which is what a percentile of a few dozen
    jobs should show (no interpolation between two of them).
    """
    if not 0 < q <= 100:
        raise ValueError(f"q must be in (0, 100], got {q!r}")
    if not values:
        return None
    ordered = sorted(values)
    rank = math.ceil(q / 100 * len(ordered))
    return ordered[max(rank, 1) - 1]


def queue_rate_reads(pipe: Any, keys: QueueKeys, now_ms: int) -> None:
    """Queue on ``pipe`` (a redis-py pipeline of either API) the :data:`RATE_READS` reads
    that :func:`rates_from` turns into rates: each kind's metrics hash and newest data point,
    and how many jobs its finished set got in the last minute."""
    for kind in RATE_KINDS:
        metrics = keys.key(f"metrics:{kind}")
        pipe.hmget(metrics, "count", "prevTS", "prevCount")
        pipe.lindex(f"{metrics}:data", 0)
        # The finished sets are scored by finishedOn. No upper bound: a worker whose clock is
        # a little ahead of this one finished its jobs "in the future".
        pipe.zcount(keys.key(kind), now_ms - WINDOW_MS, "+inf")


def rates_from(
    replies: Sequence[Any], now_ms: int
) -> tuple[dict[str, float], dict[str, RateSource]]:
    """Jobs per minute of each kind (rounded to 0.1) and where each came from, from the
    replies of :func:`queue_rate_reads`."""
    rates: dict[str, float] = {}
    sources: dict[str, RateSource] = {}
    for i, kind in enumerate(RATE_KINDS):
        fields, point, finished = replies[3 * i : 3 * i + 3]
        rate, source = choose_rate(parse_metrics(fields, point), int(finished), now_ms)
        rates[kind] = round(rate, 1)
        sources[kind] = source
    return rates, sources
