"""The least ACL permissions corral needs, tested: a user limited to exactly the rules of
:func:`acl_rules` (the keys and channels of the prefix, the :data:`COMMANDS`) runs every path
(producers, workers of both kinds of processors, events, flows, schedulers, cancels, getters,
admin calls, the CLI), and a user missing one of them gets a configuration error naming it,
not a hang or a retry loop.

The list was found by running :func:`exercise` as the default user and reading the server's
``INFO commandstats`` (commands run by scripts count there, and are checked against the ACL
like any other), then confirmed by this test; docs/deployment.md gives the same rules (a test
compares them).
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest
import redis

from corral import (
    AsyncFlowProducer,
    AsyncJob,
    AsyncQueue,
    AsyncQueueEvents,
    ConfigurationError,
    FlowJob,
    Job,
    Queue,
    Worker,
)
from corral.errors import server_error_kind
from corral.events import Completed
from tests.test_worker import drive

ROOT = Path(__file__).resolve().parents[2]
PREFIX = "bull"
PASSWORD = "s3cret"  # as in docs/deployment.md
DOCS = ROOT / "docs" / "deployment.md"
#: The commands corral runs (from its code and its scripts), by name: what docs/deployment.md
#: gives in ``ACL SETUSER``.
COMMANDS = (
    # connections: the server check (INFO), connection names, redis-py's client info,
    # get_workers (CLIENT LIST), health checks, durable adds (WAIT)
    "info", "ping", "hello", "client|setname", "client|setinfo", "client|list", "wait",
    # scripts: every state change is one (loaded once per connection, then run by SHA)
    "evalsha", "script|load", "time",
    # what the scripts and the getters read and write
    "get", "set", "incr", "del", "unlink", "exists", "pexpire", "pttl", "scan",
    "hget", "hset", "hsetnx", "hmget", "hgetall", "hdel", "hexists", "hlen", "hkeys",
    "hincrby", "hscan",
    "lpush", "rpush", "lrange", "llen", "lrem", "lset", "lpos", "ltrim", "rpoplpush",
    "sadd", "srem", "scard", "smembers", "sscan",
    "zadd", "zrem", "zscore", "zcard", "zcount", "zrange", "zrangebyscore", "zrevrange",
    "zrevrangebyscore", "zremrangebyrank", "zpopmin", "bzpopmin",
    "xadd", "xtrim", "xread", "xrevrange",
    "multi", "exec",
    # the cancel channel
    "publish", "subscribe", "unsubscribe",
)  # fmt: skip


#: A command called by a script: ``rcall("ZADD", ...)`` or ``redis.call('zadd', ...)``.
SCRIPT_CALL = re.compile(r"""(?:rcall|redis\.p?call)\(\s*["']([A-Za-z]+)["']""")


def acl_rules(prefix: str = PREFIX, commands: tuple[str, ...] = COMMANDS) -> list[str]:
    """``ACL SETUSER corral <rules>``: the keys and channels of ``prefix``, the commands."""
    return [
        "on",
        f">{PASSWORD}",
        "resetkeys",
        f"~{prefix}:*",
        "resetchannels",
        f"&{prefix}:*",
        "-@all",
        *(f"+{c}" for c in commands),
    ]


def user_url(base: str, user: str = "corral") -> str:
    parts = urlsplit(base)
    return urlunsplit(parts._replace(netloc=f"{user}:{PASSWORD}@{parts.netloc}"))


async def exercise(url: str) -> None:
    """Every path of corral once, on ``url``: fails on any refused call."""
    started = asyncio.Event()

    async def process(job: AsyncJob) -> Any:
        if job.name == "long":
            started.set()
            await asyncio.sleep(3600)  # until cancelled
        await job.update_progress(10)
        await job.log("async")
        return 1

    def process_sync(job: Job) -> Any:
        job.update_progress(10)
        job.log("thread")
        return 2

    async with (
        AsyncQueue("acl", connection=url) as queue,
        AsyncFlowProducer(connection=url) as flows,
        AsyncQueueEvents("acl", connection=url, last_event_id="0") as events,
    ):
        # producers
        await queue.add("one", {"n": 1}, job_id="one")
        await queue.add_bulk([("bulk", {"n": i}, {}) for i in range(3)])
        await queue.add("delayed", {}, delay=3600)
        await queue.add("prioritized", {}, priority=3)
        await queue.add("dedup", {}, deduplication={"id": "d1"})
        await flows.add(FlowJob("parent", "acl", children=[FlowJob("child", "acl", {})]))
        await queue.upsert_job_scheduler("every-hour", every=3600, template=("tick", {}))
        waiting = await queue.add("to-cancel", {})
        assert await queue.cancel(waiting.id, "before it ran") == "failed"
        long = await queue.add("long", {})
        # an async worker, and the cancel of the job it runs
        worker = Worker("acl", process, connection=url, concurrency=4)

        async def settled() -> bool:
            if started.is_set() and await queue.get_job_state(long.id) == "active":
                await queue.cancel(long.id, "while it ran")
            counts = await queue.get_job_counts("waiting", "active", "prioritized")
            return started.is_set() and not any(counts.values())

        await drive(worker, settled, timeout=60)
        # events
        while not isinstance(await asyncio.wait_for(events.next_event(), 30), Completed):
            pass
        # getters and admin calls
        assert (await queue.get_job("one")) is not None
        await queue.get_job_counts()
        await queue.get_jobs(["completed", "failed", "delayed"])
        await queue.get_job_logs("one")
        await queue.get_metrics("completed")
        await queue.get_counts_per_priority([3])
        await queue.get_job_schedulers()
        await queue.get_workers()
        await queue.get_deduplication_job_id("d1")
        await queue.pause()
        assert await queue.is_paused()
        await queue.resume()
        await queue.promote_jobs()
        await queue.retry_jobs(state="failed")
        await queue.clean(0, 100, "completed")
        await queue.trim_events(1000)
        await queue.publish_event("custom", {"a": "b"})
        await queue.remove("one")
        await queue.remove_job_scheduler("every-hour")
    # a plain-function worker (the blocking twin of the client) and the blocking API
    with Queue("acl", connection=url) as sync_queue:
        sync_queue.add("sync", {})
        assert sync_queue.get_job_counts("waiting")["waiting"] >= 1
    sync_worker = Worker("acl", process_sync, connection=url)
    await asyncio.wait_for(sync_worker.run_async(burst=True), 60)
    # the CLI
    for args in (
        ("enqueue", "acl", "from-cli", "--job-id", "cli-1"),
        ("cancel", "acl", "cli-1"),
    ):
        done = corral(*args, "--url", url)
        assert done.returncode == 0, done.stderr
    async with AsyncQueue("acl", connection=url) as queue:
        await queue.obliterate(force=True)


def corral(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("CORRAL_REDIS_URL", None)
    env.pop("REDIS_URL", None)
    return subprocess.run(
        [sys.executable, "-m", "corral.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=ROOT,
    )


@pytest.fixture
def admin(backend_url: str) -> Any:
    client = redis.Redis.from_url(backend_url, decode_responses=True)
    yield client
    client.close()


async def test_a_user_with_exactly_the_documented_permissions_runs_every_path(
    admin: redis.Redis, backend_url: str
) -> None:
    admin.acl_setuser("corral", reset=True)
    admin.execute_command("ACL", "SETUSER", "corral", *acl_rules())
    admin.config_resetstat()
    await exercise(user_url(backend_url))
    assert admin.acl_log() == []  # nothing was refused, not even quietly
    used = {name.removeprefix("cmdstat_") for name in admin.info("commandstats")}
    # AUTH is open to every user; the rest of what ran is in the list.
    assert used - {"auth", "acl|setuser", "config|resetstat", "acl|log"} <= set(COMMANDS)


def test_every_command_the_scripts_call_is_in_the_list() -> None:
    """A script that starts calling a new command must bring it into the documented list."""
    called: set[str] = set()
    for path in (ROOT / "corral" / "_lua").rglob("*.lua"):
        called |= {m.lower() for m in SCRIPT_CALL.findall(path.read_text())}
    assert "zadd" in called  # the pattern finds them
    assert called <= set(COMMANDS), sorted(called - set(COMMANDS))


def without(drop: str) -> list[str]:
    """The documented rules less one: a command, or every key or channel."""
    if drop == "keys":
        return [r for r in acl_rules() if r != f"~{PREFIX}:*"]
    if drop == "channels":
        return [r for r in acl_rules() if r != f"&{PREFIX}:*"]
    return acl_rules(commands=tuple(c for c in COMMANDS if c != drop))


@pytest.mark.parametrize(
    ("drop", "named"),
    [
        ("evalsha", "'evalsha' command"),
        ("xadd", "ACL failure in script: .* 'xadd' command"),  # refused inside a script
        ("bzpopmin", "'bzpopmin' command"),
        ("subscribe", "'subscribe' command"),
        ("info", "'info' command"),
        ("channels", "access a channel"),
        ("keys", "access a key"),
        # Fetching works, finishing does not: the finish's refusal stops the worker too.
        ("zadd", "job 1: .*'zadd' command"),
    ],
)
async def test_a_worker_missing_one_permission_stops_with_a_configuration_error(
    admin: redis.Redis, backend_url: str, drop: str, named: str
) -> None:
    async with AsyncQueue("acl", connection=backend_url) as queue:
        await queue.add("x")  # fetched, it makes the worker run scripts (and their XADDs)
    admin.execute_command("ACL", "SETUSER", "corral", "reset", *without(drop))

    async def process(job: AsyncJob) -> None:
        return None

    # drain_delay: a worker stopping waits for its blocking read to end.
    worker = Worker("acl", process, connection=user_url(backend_url), drain_delay=1)
    # A generous bound, not a measurement: a refusal retried as an outage would never end.
    with pytest.raises(ConfigurationError, match=named):
        await asyncio.wait_for(worker.run_async(), 30)
    await worker.close()


@pytest.mark.parametrize("drop", ["evalsha", "xadd", "keys"])
async def test_a_producer_missing_one_permission_gets_an_error_naming_it(
    admin: redis.Redis, backend_url: str, drop: str
) -> None:
    admin.execute_command("ACL", "SETUSER", "corral", "reset", *without(drop))
    async with AsyncQueue("acl", connection=user_url(backend_url)) as queue:
        with pytest.raises(redis.ResponseError) as caught:
            await queue.add("x")
    assert server_error_kind(caught.value) == "configuration"
    assert ("key" if drop == "keys" else f"'{drop}' command") in str(caught.value)


def test_the_docs_give_exactly_these_rules() -> None:
    lines = DOCS.read_text().splitlines()
    command = [line.split() for line in lines if line.startswith("ACL SETUSER corral ")]
    acl_file = [line.split() for line in lines if line.startswith("user corral ")]
    assert command == [["ACL", "SETUSER", "corral", *acl_rules()]]
    assert acl_file == [["user", "corral", *acl_rules()]]
