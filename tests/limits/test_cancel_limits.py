"""Size test of ``queue.cancel``: the job it looks for at the far end of a 1M-entry wait list.

Zsets are looked up by ZSCORE; only wait (and the legacy paused list) must be searched, once,
from the right end where the oldest jobs are. The newest job, at the left end, is the worst
case: one scan of the whole list inside one call (``server_timer``).
"""

from __future__ import annotations

import redis

from corral import JobState, Queue
from tests.limits.conftest import ServerTimer

WAITING = 1_000_000

BUILD_WAIT = """
for i = tonumber(ARGV[1]), tonumber(ARGV[1]) + tonumber(ARGV[2]) - 1 do
  redis.call("LPUSH", KEYS[1], "w" .. i)
end
"""


def test_cancel_the_newest_of_a_million_waiting_jobs(
    queue: Queue, r: redis.Redis, server_timer: ServerTimer
) -> None:
    for first in range(0, WAITING, 200_000):
        r.eval(BUILD_WAIT, 1, "bull:q:wait", first, 200_000)
    newest = queue.add("n", None)  # LPUSH: the left end, the last one a right-end scan meets
    oldest = "w0"
    r.hset(f"bull:q:{oldest}", mapping={"name": "n", "data": "{}", "opts": "{}", "timestamp": 1})
    server_timer.reset()
    assert queue.cancel(newest.id, "worst case") is JobState.FAILED
    server_timer.check("cancel the newest of 1M waiting jobs (a scan of the whole wait list)")
    assert queue.cancel(oldest, "best case") is JobState.FAILED
    server_timer.check("cancel the oldest of 1M waiting jobs")
    assert r.llen("bull:q:wait") == WAITING - 1
