import random

from corral.backoff import retry_delay_ms


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
