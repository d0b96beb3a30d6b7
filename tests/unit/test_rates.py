"""The pure rate and percentile math of corral._rates (no server)."""

from __future__ import annotations

import pytest

from corral._rates import (
    MetricsSample,
    choose_rate,
    parse_metrics,
    percentile,
    processing_times_ms,
    rate_from_metrics,
)

T0 = 1_700_000_000_000


def test_parse_metrics_of_a_hash_and_of_none() -> None:
    assert parse_metrics(["5", str(T0), "0"], None) == MetricsSample(5, T0, 0, None)
    assert parse_metrics(["9", str(T0), "4"], "3") == MetricsSample(9, T0, 4, 3)
    assert parse_metrics([None, None, None], None) is None  # no worker records metrics
    assert parse_metrics(["5", None, None], None) is None
    assert parse_metrics(["five", str(T0), "0"], None) is None  # not BullMQ's layout


def test_jobs_since_the_last_point_within_the_first_minute() -> None:
    # The first finish sets prevTS and prevCount 0: every job counted is in the window.
    sample = MetricsSample(count=5, prev_ts=T0, prev_count=0, last_point=None)
    assert rate_from_metrics(sample, T0) == 5
    assert rate_from_metrics(sample, T0 + 59_999) == 5


def test_the_last_point_fills_the_rest_of_the_window() -> None:
    # 10 jobs in the minute before the point, 2 since it, 15 s ago: 2 + 10 * 45/60.
    sample = MetricsSample(count=30, prev_ts=T0, prev_count=28, last_point=10)
    assert rate_from_metrics(sample, T0 + 15_000) == pytest.approx(9.5)
    assert rate_from_metrics(sample, T0) == 12


def test_an_idle_queue_falls_toward_zero() -> None:
    sample = MetricsSample(count=30, prev_ts=T0, prev_count=18, last_point=50)
    assert rate_from_metrics(sample, T0 + 60_000) == 12  # 12 jobs over exactly one minute
    assert rate_from_metrics(sample, T0 + 120_000) == 6
    assert rate_from_metrics(sample, T0 + 3_600_000) == pytest.approx(0.2)


def test_a_clock_behind_the_workers_does_not_go_negative() -> None:
    sample = MetricsSample(count=3, prev_ts=T0, prev_count=5, last_point=None)
    assert rate_from_metrics(sample, T0 - 1000) == 0


def test_choose_prefers_metrics_unless_the_finished_set_counts_more() -> None:
    sample = MetricsSample(count=40, prev_ts=T0, prev_count=0, last_point=None)
    # Jobs removed on completion: the set holds none of them, the metrics count them.
    assert choose_rate(sample, 0, T0 + 1000) == (40.0, "metrics")
    assert choose_rate(sample, 40, T0 + 1000) == (40.0, "metrics")
    # Workers without metrics finish jobs too (or the metrics are old ones).
    assert choose_rate(sample, 41, T0 + 1000) == (41.0, "finished")
    assert choose_rate(None, 7, T0) == (7.0, "finished")
    assert choose_rate(None, 0, T0) == (0.0, "finished")


def test_processing_times_skip_incomplete_hashes() -> None:
    pairs = [("100", "350"), (None, None), ("100", None), ("x", "5"), ("500", "400"), ("0", "0")]
    assert processing_times_ms(pairs) == [250]  # "0": a job never started, not a 0 ms one


def test_percentile_is_nearest_rank() -> None:
    values = list(range(1, 101))  # 1..100
    assert (percentile(values, 50), percentile(values, 95), percentile(values, 100)) == (
        50,
        95,
        100,
    )
    assert percentile([7], 50) == percentile([7], 95) == 7
    assert percentile([30, 10, 20], 50) == 20  # unsorted input
    assert percentile([], 50) is None
    with pytest.raises(ValueError, match="q must be"):
        percentile([1], 0)
