"""Size tests of removals: a flow parent with 100k children, and drain, clean and obliterate
of many jobs, each call bounded in server time (see conftest.py: ``server_timer``).

The data is written server-side by a small Lua helper (20k-50k jobs per call), so building
1M jobs takes seconds, not the minutes 1M adds would. The shape is what corral writes (hash
fields, lists and zsets of BullMQ's layout), without the events of a real add.

Drain, clean and obliterate run on 300k jobs in the suite (``CORRAL_LIMITS_JOBS=1000000``
runs the issue's 1M): a bounded call costs the same at both sizes, while an unbounded one is
already seconds at 300k, and the three 1M cases take a minute of building and deleting.
"""

from __future__ import annotations

import os

import redis

from corral import Queue
from corral._sync import job_removal
from tests.limits.conftest import ServerTimer

JOBS = int(os.environ.get("CORRAL_LIMITS_JOBS", "300000"))
CHILDREN = 100_000

BUILD_CHILDREN = """
local prefix, parent_id, n, first = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local parent_key = prefix .. parent_id
local parent = '{"id":"' .. parent_id .. '","queueKey":"' .. string.sub(prefix, 1, -2) .. '"}'
for i = first, first + n - 1 do
  local id = "c" .. i
  redis.call("HSET", prefix .. id, "name", "c", "data", "{}", "opts", '{"attempts":0}',
    "timestamp", 1, "delay", 0, "priority", 0, "parentKey", parent_key, "parent", parent)
  redis.call("LPUSH", prefix .. "wait", id)
  redis.call("SADD", parent_key .. ":dependencies", prefix .. id)
end
return n
"""

BUILD_JOBS = """
local prefix, where, n, first, ts = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]),
  ARGV[5]
for i = first, first + n - 1 do
  local id = tostring(i)
  redis.call("HSET", prefix .. id, "name", "j", "data", "{}", "opts", '{"attempts":0}',
    "timestamp", ts, "finishedOn", ts)
  if where == "wait" then
    redis.call("LPUSH", prefix .. "wait", id)
  else
    redis.call("ZADD", prefix .. where, i, id)
  end
end
return n
"""


def build_parent(r: redis.Redis, n: int) -> None:
    """Parent ``P`` (waiting-children) of ``c0`` .. ``c<n-1>``, all in wait."""
    r.hset("bull:q:P", mapping={"name": "p", "data": "{}", "opts": "{}", "timestamp": 1})
    r.zadd("bull:q:waiting-children", {"P": 1})
    for first in range(0, n, 20_000):
        r.eval(BUILD_CHILDREN, 0, "bull:q:", "P", min(20_000, n - first), first)


def build_jobs(r: redis.Redis, where: str, n: int, *, first: int = 0, ts: int = 1) -> None:
    for start in range(first, first + n, 50_000):
        r.eval(BUILD_JOBS, 0, "bull:q:", where, min(50_000, first + n - start), start, ts)


def job_keys(r: redis.Redis) -> int:
    return sum(1 for _ in r.scan_iter(match="bull:q:[0-9c]*", count=10_000))


def test_removing_a_parent_of_100k_children(
    queue: Queue, r: redis.Redis, server_timer: ServerTimer
) -> None:
    build_parent(r, CHILDREN)
    r.lpush("bull:q:wait", "other")
    r.hset("bull:q:other", mapping={"name": "o", "data": "{}"})
    server_timer.reset()
    assert queue.remove("P") is True
    server_timer.check("remove a parent of 100k children")
    assert r.exists("bull:q:P", "bull:q:c0", f"bull:q:c{CHILDREN - 1}") == 0
    assert r.lrange("bull:q:wait", 0, -1) == ["other"]


def test_removing_the_unprocessed_children_of_a_parent_of_50k(
    queue: Queue, r: redis.Redis, server_timer: ServerTimer
) -> None:
    build_parent(r, 50_000)
    job = queue.get_job("P")
    assert job is not None
    server_timer.reset()
    assert job_removal.remove_unprocessed(job) == 50_000
    server_timer.check("remove the 50k unprocessed children of a parent")
    assert r.lrange("bull:q:wait", 0, -1) == ["P"]  # released, as after its last child


def test_drain_of_many_jobs(queue: Queue, r: redis.Redis, server_timer: ServerTimer) -> None:
    build_jobs(r, "wait", JOBS)
    server_timer.reset()
    queue.drain()
    server_timer.check(f"drain {JOBS} jobs")
    assert r.llen("bull:q:wait") == 0
    assert job_keys(r) == 0


def test_clean_of_many_jobs(queue: Queue, r: redis.Redis, server_timer: ServerTimer) -> None:
    build_jobs(r, "completed", JOBS)
    server_timer.reset()
    assert len(queue.clean(0, 0, "completed")) == JOBS
    server_timer.check(f"clean {JOBS} completed jobs")
    assert r.zcard("bull:q:completed") == 0


def test_clean_of_a_list_whose_end_is_kept(
    queue: Queue, r: redis.Redis, server_timer: ServerTimer
) -> None:
    # 100k new jobs at the end clean reads first (the oldest end), 100k old ones behind them:
    # each old one was found with an LREM reading the 100k kept entries (2 s per call).
    build_jobs(r, "wait", 100_000, ts=2**41)
    build_jobs(r, "wait", 100_000, first=100_000)
    server_timer.reset()
    assert len(queue.clean(60, 0, "wait")) == 100_000
    server_timer.check("clean 100k jobs of wait behind 100k kept ones")
    assert r.llen("bull:q:wait") == 100_000


def test_obliterate_of_many_jobs(queue: Queue, r: redis.Redis, server_timer: ServerTimer) -> None:
    build_jobs(r, "wait", JOBS // 2)
    build_jobs(r, "completed", JOBS // 2, first=JOBS // 2)
    server_timer.reset()
    queue.obliterate()
    server_timer.check(f"obliterate {JOBS} jobs")
    assert r.dbsize() == 0


def test_retry_jobs_moves_a_bounded_batch_whatever_the_count(
    queue: Queue, r: redis.Redis, server_timer: ServerTimer
) -> None:
    build_jobs(r, "failed", 100_000)
    server_timer.reset()
    assert queue.retry_jobs(count=10**6) == 100_000
    server_timer.check("retry 100k failed jobs with count=1M")
    assert r.llen("bull:q:wait") == 100_000
