"""Size tests of add_bulk: a bulk of 200k jobs, or of 10 MB of data, never holds the server for
long, and each of its jobs is written exactly once.

add_bulk sends a bulk in calls of at most ``_bulk.CHUNK_JOBS`` jobs and ``_bulk.CHUNK_BYTES``
bytes. The suite adds 200k jobs (about 8 s, most of it the Python side of 200k adds); set
``CORRAL_LIMITS_BULK_JOBS=1000000`` to try a million by hand.
"""

from __future__ import annotations

import json
import math
import os
import time
from typing import Any

import pytest
import redis

from corral import Queue, _bulk
from tests.limits.conftest import ServerTimer

#: How many jobs the big bulk adds.
BULK_JOBS = int(os.environ.get("CORRAL_LIMITS_BULK_JOBS", "200000"))


def evalsha_calls(r: redis.Redis) -> int:
    return int(r.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0))


def settle(r: redis.Redis) -> None:
    """Wait until the server has freed what an earlier test left: valkey 8 flushes in a
    thread of its own (lazyfree-lazy-user-flush), which would slow the calls timed here."""
    deadline = time.monotonic() + 30
    while int(r.info("memory").get("lazyfree_pending_objects", 0)):
        assert time.monotonic() < deadline, "the server did not free the last test's keys"
        time.sleep(0.05)


def warm(queue: Queue, r: redis.Redis) -> None:
    """Load add_bulk's script (a first EVALSHA meets NOSCRIPT), then start from empty."""
    queue.add_bulk([("warm", None)])
    r.flushdb()
    settle(r)


def stored_data(r: redis.Redis, ids: list[str], queue: str = "q") -> list[Any]:
    """The data of the jobs ``ids``, read in pipelines of bounded size."""
    out: list[Any] = []
    for start in range(0, len(ids), 10_000):
        with r.pipeline(transaction=False) as pipe:
            for job_id in ids[start : start + 10_000]:
                pipe.hget(f"bull:{queue}:{job_id}", "data")
            out += [json.loads(data) for data in pipe.execute()]
    return out


def assert_each_once(r: redis.Redis, jobs: list[Any], data: list[Any], key: str) -> None:
    """Every item became one job, in order, holding its data, and nothing else was added."""
    assert len(jobs) == len(data)
    ids = [job.id for job in jobs]
    assert ids == [str(i) for i in range(1, len(data) + 1)]
    assert r.get("bull:q:id") == str(len(data))  # no add was counted twice
    if key.endswith("wait"):
        assert sorted(r.lrange(key, 0, -1), key=int) == ids
    else:
        assert sorted(r.zrange(key, 0, -1), key=int) == ids
    assert stored_data(r, ids) == data


def test_a_bulk_of_many_small_jobs_goes_in_short_calls(
    limits_url: str, server_timer: ServerTimer, r: redis.Redis
) -> None:
    data = list(range(BULK_JOBS))
    with Queue("q", connection=limits_url) as queue:
        warm(queue, r)
        before = evalsha_calls(r)
        server_timer.reset()
        jobs = queue.add_bulk([("j", i) for i in data])
        server_timer.check(f"add_bulk of {BULK_JOBS:,} jobs")
        assert evalsha_calls(r) - before == math.ceil(BULK_JOBS / _bulk.CHUNK_JOBS)
    assert_each_once(r, jobs, data, "bull:q:wait")


def test_a_bulk_of_jobs_with_every_option_goes_in_short_calls(
    limits_url: str, server_timer: ServerTimer, r: redis.Redis
) -> None:
    # The costliest kind of add: delayed, with a parent, deduplication and idempotency key.
    r.hset("bull:pq:p", "name", "parent")
    n = 20_000
    settle(r)
    with Queue("q", connection=limits_url) as queue:
        server_timer.reset()
        jobs = queue.add_bulk(
            [
                (
                    "j",
                    i,
                    {
                        "delay": 60 + i,
                        "attempts": 3,
                        "parent": {"id": "p", "queue": "bull:pq"},
                        "deduplication": {"id": f"d{i}", "ttl": 60},
                        "idempotency_key": f"k{i}",
                    },
                )
                for i in range(n)
            ]
        )
        server_timer.check(f"add_bulk of {n:,} jobs with every option")
    assert_each_once(r, jobs, list(range(n)), "bull:q:delayed")
    assert r.scard("bull:pq:p:dependencies") == n


@pytest.mark.parametrize("size", [10 * 1024, 1024 * 1024])
def test_a_bulk_of_10_mb_goes_in_short_calls(
    limits_url: str, server_timer: ServerTimer, r: redis.Redis, size: int
) -> None:
    count = 10 * 1024 * 1024 // size
    data = [f"{i:08d}" + "x" * (size - 10) for i in range(count)]
    with Queue("q", connection=limits_url) as queue:
        warm(queue, r)
        before = evalsha_calls(r)
        server_timer.reset()
        jobs = queue.add_bulk([("j", d) for d in data])
        server_timer.check(f"add_bulk of {count} jobs of {size // 1024} KB (10 MB)")
        assert evalsha_calls(r) - before >= 10  # at most about 1 MiB a call
    assert_each_once(r, jobs, data, "bull:q:wait")
