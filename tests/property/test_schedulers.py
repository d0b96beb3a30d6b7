"""Job schedulers: ``upsert_job_scheduler`` with every argument hostile, then the worker's
``schedule_next_iteration`` on the iteration it made (a pattern croniter takes at upsert but
cannot step through must not break the worker)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import redis
from hypothesis import given, settings
from hypothesis import strategies as st

from corral import AsyncQueue, Worker
from tests.property import strategies as s
from tests.property.known import skip_known
from tests.property.support import assert_consistent, attempt, examples, fresh
from tests.property.test_add import job_options

PATTERNS = [
    "* * * * *",
    "*/5 * * * * *",
    "0 0 30 2 *",  # February 30th: valid fields, never fires
    "0 0 31 4 *",
    "0 0 29 2 1",
    "59 23 31 12 *",
    "@daily",
    "@reboot",
    "61 * * * *",
    "* * * * * * *",
    "0 0 L * *",
    "H * * * *",
    "0 0 * * 8",
    "*/0 * * * *",
    "1-0 * * * *",
    "",
    " ",
    "\n* * * * *",
]
ZONES = [
    "UTC",
    "Europe/Paris",
    "America/St_Johns",
    "Pacific/Kiritimati",
    "Etc/GMT+12",
    "x" * 300,
    "Europe/" + "A" * 5000,
    "../../etc/passwd",
    "/etc/localtime",
    "",
    "utc",
]
dates = st.one_of(
    st.none(),
    s.ints,
    st.sampled_from(
        [
            datetime(1, 1, 1),
            datetime(9999, 12, 31, tzinfo=timezone.utc),
            datetime(2038, 1, 19, 3, 14, 8, tzinfo=timezone.utc),
            datetime.now(timezone.utc) + timedelta(days=1),
            datetime.now(timezone.utc) - timedelta(days=1),
        ]
    ),
    s.anything,
)
templates = st.one_of(
    st.none(),
    st.tuples(s.names(huge=False), s.data),
    st.tuples(s.names(huge=False), s.data, job_options),
    st.fixed_dictionaries(
        {},
        optional={
            "name": s.names(huge=False),
            "data": s.data,
            "opts": job_options,
            "x": s.anything,
        },
    ),
    s.anything,
)
upsert_args = st.fixed_dictionaries(
    {
        "scheduler_id": st.one_of(st.sampled_from(["s", "a:b", "{s}", "s*", "repeat"]), s.names()),
        "every": st.one_of(st.none(), st.floats(0.001, 3600), s.durations),
        "cron": st.one_of(st.none(), st.sampled_from(PATTERNS), s.names(huge=False)),
    },
    optional={
        "tz": st.one_of(st.sampled_from(ZONES), s.anything),
        "limit": st.one_of(st.integers(1, 3), s.numbers),
        "start_date": dates,
        "end_date": dates,
        "immediately": st.one_of(st.booleans(), s.anything),
        "template": templates,
        "now_ms": st.one_of(st.none(), st.integers(0, 2**42), s.numbers),
    },
)

WORDS = [
    "scheduler id",
    "every",
    "cron",
    "tz",
    "time zone",
    "limit",
    "start_date",
    "end_date",
    "immediately",
    "template",
    "now_ms",
    "job name",
    "data",
    "size_limit",
    "run",
    "pattern",
]


@settings(max_examples=examples(250))
@given(args=upsert_args, existing=st.booleans())
async def test_upsert_job_scheduler(
    raw: redis.Redis,
    r: redis.Redis,
    redis_url: str,
    queue: AsyncQueue,
    args: dict[str, Any],
    existing: bool,
) -> None:
    skip_known("upsert_job_scheduler", **args)
    fresh(raw)
    if existing:  # an upsert over a scheduler that exists takes another path in the script
        sid = args["scheduler_id"]
        if isinstance(sid, str):
            await attempt(raw, lambda: queue.upsert_job_scheduler(sid, every=60), names=WORDS)
    what = f"upsert_job_scheduler(**{args!r:.400})"
    outcome = await attempt(
        raw, lambda: queue.upsert_job_scheduler(**args), names=[*WORDS, *args], what=what
    )
    if not outcome.ok:
        return
    sid = args["scheduler_id"]
    scheduler = await attempt(raw, lambda: queue.get_job_scheduler(sid), what="get_job_scheduler")
    assert scheduler.ok and scheduler.value is not None, f"{what} wrote no scheduler"
    job = outcome.value
    if job is not None:
        assert job.id.startswith(f"repeat:{sid}:"), job.id
        assert_consistent(r, after=what)
        # The worker takes the iteration when it is due, and schedules the next one.
        worker = Worker("q", None, connection=redis_url, lock_duration=60)
        try:
            await attempt(raw, worker.get_next_job, what=f"get_next_job after {what}")
        finally:
            await worker.close()
        assert_consistent(r, after=f"the next iteration after {what}")
