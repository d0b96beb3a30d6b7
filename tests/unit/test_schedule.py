"""corral.schedule: validation and run times, without a server."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest

from corral import InvalidOptionError
from corral.schedule import JobScheduler, Schedule, cron_next

UTC = timezone.utc
# 2026-03-28 23:59:58.500 UTC: Paris moves from +01:00 to +02:00 at 01:00 UTC the next day.
NOW = int(datetime(2026, 3, 28, 23, 59, 58, 500_000, UTC).timestamp() * 1000)


def ms(*args: int, tz: timezone | ZoneInfo = UTC) -> int:
    return int(datetime(*args, tzinfo=tz).timestamp() * 1000)


# -- every ---------------------------------------------------------------------------------


def test_every_first_run_is_now_and_next_keeps_the_phase() -> None:
    s = Schedule.build(every=2)
    assert s.every == 2000
    assert s.first_run(NOW) == NOW
    # Taken on time: previous + every.
    assert s.next_run(NOW, NOW + 15) == NOW + 2000
    # Taken late (after 3 more ticks passed): missed ticks are skipped, the phase is kept.
    assert s.next_run(NOW, NOW + 7_100) == NOW + 8000
    # Taken exactly at a tick: the next is after it.
    assert s.next_run(NOW, NOW + 2000) == NOW + 4000
    # Taken before its time (promoted): still after the previous run.
    assert s.next_run(NOW, NOW - 500) == NOW + 2000


def test_every_accepts_timedelta_and_start_date() -> None:
    start = NOW + 10_000
    s = Schedule.build(every=timedelta(minutes=1), start_date=start)
    assert s.every == 60_000
    assert s.first_run(NOW) == start
    # A start date in the past changes nothing.
    assert Schedule.build(every=1, start_date=NOW - 5).first_run(NOW) == NOW


def test_every_restart_is_the_next_multiple() -> None:
    # What BullMQ does when a stopped scheduler is upserted again with the same timing.
    s = Schedule.build(every=0.7)
    assert s.restart_run(1_796_045_020_109) == 1_796_045_020_700


def test_every_stops_once_end_date_has_passed() -> None:
    s = Schedule.build(every=1, end_date=NOW + 2_500)
    assert s.next_run(NOW + 2000, NOW + 2010) == NOW + 3000  # created before the end: kept
    assert s.next_run(NOW + 2000, NOW + 2_501) is None


# -- cron ----------------------------------------------------------------------------------


def test_cron_seconds_come_first_in_six_fields() -> None:
    s = Schedule.build(cron="*/5 * * * * *", tz="UTC")
    assert s.first_run(ms(2026, 1, 1, 0, 0, 1)) == ms(2026, 1, 1, 0, 0, 5)
    # Five fields: minute first.
    s5 = Schedule.build(cron="30 9 * * *", tz="UTC")
    assert s5.first_run(ms(2026, 1, 1, 0, 0, 1)) == ms(2026, 1, 1, 9, 30)


def test_cron_next_is_strictly_after_now() -> None:
    at = ms(2026, 1, 1, 0, 0, 5)
    assert cron_next("*/5 * * * * *", "UTC", at) == at + 5000
    assert cron_next("*/5 * * * * *", "UTC", at - 1) == at


def test_cron_time_zone_and_dst() -> None:
    paris = ZoneInfo("Europe/Paris")
    s = Schedule.build(cron="0 9 * * *", tz="Europe/Paris")
    # 09:00 in Paris is 08:00 UTC in winter and 07:00 UTC once summer time starts.
    first = s.first_run(NOW)
    assert first == ms(2026, 3, 29, 9, 0, tz=paris) == ms(2026, 3, 29, 7, 0)
    assert s.next_run(first, first + 10) == ms(2026, 3, 30, 7, 0)
    assert Schedule.build(cron="0 9 * * *", tz="UTC").first_run(NOW) == ms(2026, 3, 29, 9, 0)


def test_cron_without_tz_reads_local_time() -> None:
    s = Schedule.build(cron="0 9 * * *")
    first = s.first_run(NOW)
    local = datetime.fromtimestamp(first / 1000)
    assert (local.hour, local.minute, local.second) == (9, 0, 0)
    assert first > NOW


def test_cron_start_end_and_immediately() -> None:
    now = ms(2026, 1, 1, 0, 0, 0) + 200
    s = Schedule.build(cron="* * * * * *", tz="UTC", start_date=now + 1300, end_date=now + 2900)
    # First tick at or after the start date; none after the end date.
    assert s.first_run(now) == ms(2026, 1, 1, 0, 0, 2)
    assert s.next_run(ms(2026, 1, 1, 0, 0, 2), ms(2026, 1, 1, 0, 0, 2) + 5) == ms(
        2026, 1, 1, 0, 0, 3
    )
    assert s.next_run(ms(2026, 1, 1, 0, 0, 3), ms(2026, 1, 1, 0, 0, 3) + 5) is None
    # A tick exactly at the start date counts.
    exact = Schedule.build(cron="* * * * * *", tz="UTC", start_date=ms(2026, 1, 1, 0, 0, 5))
    assert exact.first_run(now) == ms(2026, 1, 1, 0, 0, 5)
    yearly = Schedule.build(cron="0 0 1 1 *", tz="UTC", immediately=True)
    assert yearly.first_run(now) == now
    assert yearly.next_run(now, now + 3) == ms(2027, 1, 1)


def test_cron_aliases() -> None:
    assert Schedule.build(cron="@daily", tz="UTC").first_run(NOW) == ms(2026, 3, 29)


# -- dates, fields, limits -----------------------------------------------------------------


def test_dates_as_datetime_or_ms() -> None:
    start = datetime(2030, 1, 1, tzinfo=UTC)
    s = Schedule.build(every=1, start_date=start, end_date=ms(2031, 1, 1), limit=3)
    assert s.start_date == ms(2030, 1, 1)
    assert s.end_date == ms(2031, 1, 1)
    assert list(s.fields().items()) == [
        ("limit", "3"),
        ("startDate", str(ms(2030, 1, 1))),
        ("endDate", str(ms(2031, 1, 1))),
        ("every", "1000"),
    ]
    c = Schedule.build(cron="0 0 * * *", tz="Asia/Tokyo")
    assert list(c.fields().items()) == [("tz", "Asia/Tokyo"), ("pattern", "0 0 * * *")]


def test_from_fields_reads_node_hashes() -> None:
    node = {
        "name": "cs",
        "tz": "America/New_York",
        "pattern": "* * * * * *",
        "startDate": "1796044965293",
        "endDate": "1796044966793",
        "offset": "0",
        "ic": "1",
    }
    s = Schedule.from_fields(node)
    assert s == Schedule(
        pattern="* * * * * *",
        tz="America/New_York",
        start_date=1796044965293,
        end_date=1796044966793,
    )
    sched = JobScheduler.from_hash("cstart", node, 1796044966000.0)
    assert sched.name == "cs" and sched.next_run == 1796044966000
    assert sched.iteration_count == 1 and sched.template.data is None
    assert sched.schedule == s


def test_check_runs_refuses_an_end_before_the_first_run() -> None:
    with pytest.raises(InvalidOptionError, match="end_date"):
        Schedule.build(every=1, end_date=NOW - 1).check_runs(NOW)
    assert Schedule.build(every=1, end_date=NOW).check_runs(NOW) == NOW


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "exactly one of every"),
        ({"every": 1, "cron": "* * * * *"}, "exactly one of every"),
        ({"every": 0}, "every must be at least 1 ms"),
        ({"every": -2}, "every must be a finite number >= 0"),
        ({"every": 0.0001}, "every must be at least 1 ms"),
        ({"every": float("inf")}, "every must be a finite number >= 0"),
        ({"every": "5"}, "every must be seconds"),
        ({"cron": "61 * * * *"}, "invalid cron pattern '61 \\* \\* \\* \\*'"),
        ({"cron": "61 * * * *"}, "minute 61 is out of range 0-59"),
        ({"cron": "0 24 * * *"}, "hour 24 is out of range 0-23"),
        ({"cron": "60 0 0 * * *"}, "second 60 is out of range 0-59"),
        ({"cron": "1-70/5 * * * *"}, "minute 70 is out of range 0-59"),
        ({"cron": "0 0 1 13 *"}, "month 13 is out of range 1-12"),
        ({"cron": "not a cron"}, "invalid cron pattern 'not a cron'"),
        ({"cron": "* * *"}, "invalid cron pattern"),
        ({"cron": "* * * * * * *"}, "invalid cron pattern"),
        ({"cron": ""}, "cron must be"),
        ({"cron": "* * * * *", "tz": "Mars/Olympus"}, "unknown time zone 'Mars/Olympus'"),
        ({"cron": "* * * * *", "tz": "../etc"}, "unknown time zone"),
        ({"every": 1, "limit": 0}, "limit must be an integer from 1 to"),
        ({"every": 1, "limit": 2**70}, "limit must be an integer from 1 to"),
        ({"every": 1e300}, "every must be at most"),
        ({"every": 1, "start_date": 2**70}, "start_date must be a datetime or epoch ms from 0"),
        ({"every": 1, "start_date": datetime(1, 1, 1)}, "start_date must be from 1970"),
        ({"every": 1, "end_date": datetime(9999, 12, 31)}, "end_date must be from 1970"),
        ({"cron": "0 0 30 2 *"}, "never fires"),
        ({"cron": "0 0 31 4 *"}, "never fires"),
        ({"cron": "* * * * *", "tz": "A" * 5000}, "tz must be at most 255 characters"),
        ({"cron": "* * * * *", "tz": "Europe/Paris" + "x" * 200}, "unknown time zone"),
        ({"cron": "* * * * *", "tz": "\ud800"}, "tz must be valid text"),
        ({"every": 1, "limit": True}, "limit must be an integer from 1 to"),
        ({"every": 1, "start_date": 10, "end_date": 5}, "start_date .* is after end_date"),
        ({"every": 1, "start_date": -1}, "start_date must be"),
        ({"every": 1, "end_date": "tomorrow"}, "end_date must be"),
        ({"every": 1, "immediately": 1}, "immediately must be"),
    ],
)
def test_invalid_schedules(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidOptionError, match=message):
        Schedule.build(**kwargs)  # type: ignore[arg-type]
