import math
import random

from corral.backoff import MAX_DOUBLINGS, reconnect_delay, retry_delay_ms
from corral.bounds import MAX_TIMESTAMP_MS
from corral.retry import RETRY_MARGIN_MS, bounded_delay, whole_ms


def test_no_backoff_retries_at_once() -> None:
    assert retry_delay_ms(None, 3) == 0


def test_fixed_and_number() -> None:
    assert retry_delay_ms(300, 2) == 300
    assert retry_delay_ms({"type": "fixed", "delay": 500}, 4) == 500


def test_exponential_doubles_per_attempt() -> None:
    b = {"type": "exponential", "delay": 3000}
    assert [retry_delay_ms(b, n) for n in (1, 2, 3)] == [3000, 6000, 12000]
    # delay * 2 ** (attempts_made - 1), attempts_made counting the attempt that just failed.
    assert retry_delay_ms(b, 7) == 192_000


def test_jitter_stays_within_bounds() -> None:
    b = {"type": "exponential", "delay": 1000, "jitter": 0.5}
    rng = random.Random(7)
    delays = [retry_delay_ms(b, 3, rand=rng) for _ in range(500)]
    assert all(2000 <= d <= 4000 for d in delays)
    assert len(set(delays)) > 100


def test_unknown_type_retries_at_once() -> None:
    assert retry_delay_ms({"type": "custom", "delay": 9}, 1) == 0


def test_a_long_outage_never_overflows_the_reconnect_delay() -> None:
    # 2.0 ** 1024 overflows a float: a worker retrying a refused connection every 0.25 s
    # reached it after about four minutes, and crashed.
    for failures in (1, 5, 1025, 10**6):
        assert 0 < reconnect_delay(failures) <= 0.25


def test_a_long_exponential_run_stays_a_finite_whole_number() -> None:
    b = {"type": "exponential", "delay": 1000, "jitter": 0.5}
    for made in (60, 1100, 10**6):
        delay = retry_delay_ms(b, made)
        assert isinstance(delay, int) and 0 < delay <= 1000 * 2**MAX_DOUBLINGS


def test_a_retry_is_due_before_the_last_exact_score() -> None:
    now = 1_780_000_000_000
    assert bounded_delay(5000, now) == 5000
    assert bounded_delay(2**80, now) == MAX_TIMESTAMP_MS - RETRY_MARGIN_MS - now
    assert bounded_delay(5000, MAX_TIMESTAMP_MS) == 0


def test_a_custom_strategys_odd_numbers_are_whole_ms() -> None:
    assert whole_ms(12.6) == 13
    assert whole_ms(-5) == 0
    assert whole_ms(math.nan) == 0
    assert whole_ms(math.inf) == MAX_TIMESTAMP_MS
