"""Size tests of reads and of one big job: listing a million finished jobs, a parent's 100k
children, a job of 10 MB; each call bounded in server time (``server_timer``)."""

from __future__ import annotations

import redis

from corral import Queue
from tests.limits.conftest import ServerTimer

JOBS = 1_000_000
CHILDREN = 100_000

BUILD_FINISHED = """
for i = tonumber(ARGV[1]), tonumber(ARGV[1]) + tonumber(ARGV[2]) - 1 do
  redis.call("ZADD", KEYS[1], i, tostring(i))
end
"""

BUILD_PROCESSED = """
for i = tonumber(ARGV[1]), tonumber(ARGV[1]) + tonumber(ARGV[2]) - 1 do
  redis.call("HSET", KEYS[1], "bull:cq:" .. i, '{"i":' .. i .. '}')
  redis.call("SADD", KEYS[2], "bull:cq:p" .. i)
end
"""


def test_listing_a_million_finished_jobs(
    queue: Queue, r: redis.Redis, server_timer: ServerTimer
) -> None:
    for first in range(0, JOBS, 100_000):
        r.eval(BUILD_FINISHED, 1, "bull:q:completed", first, 100_000)
    server_timer.reset()
    # The ids, as get_jobs reads them (the million HGETALLs after them are one each).
    ids = queue._ranged_ids(["completed"], 0, -1, False)
    server_timer.check("list the ids of 1M completed jobs")
    assert len(ids) == JOBS and ids[0] == str(JOBS - 1) and ids[-1] == "0"


def test_reading_the_children_of_a_parent_of_100k(
    queue: Queue, r: redis.Redis, server_timer: ServerTimer
) -> None:
    r.hset("bull:q:P", mapping={"name": "p", "data": "{}", "opts": "{}", "timestamp": 1})
    for first in range(0, CHILDREN, 50_000):
        r.eval(BUILD_PROCESSED, 2, "bull:q:P:processed", "bull:q:P:dependencies", first, 50_000)
    job = queue.get_job("P")
    assert job is not None
    server_timer.reset()
    values = job.get_children_values()
    dependencies = job.get_dependencies()
    counts = job.get_dependencies_count()
    server_timer.check("read the 100k processed and 100k pending children of a parent")
    assert len(values) == CHILDREN and len(dependencies["unprocessed"]) == CHILDREN
    assert counts["processed"] == counts["unprocessed"] == CHILDREN


def test_a_job_of_10_mb(queue: Queue, server_timer: ServerTimer) -> None:
    data = {"blob": "x" * (10 * 1024 * 1024)}
    server_timer.reset()
    job = queue.add("big", data)
    found = queue.get_job(job.id)
    job.update_data({**data, "more": 1})
    server_timer.check("add, read and update a job of 10 MB")
    assert found is not None and found.data == data
