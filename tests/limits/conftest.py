"""Fixtures of the size tests: a server of their own, and a timer of server-side calls.

The size tests feed the public API inputs up to 1M jobs / 100k children / 10 MB and check that
no single call holds the server for long. Server time is read from SLOWLOG, which records the
time each command ran inside the server (a script call is one EVALSHA entry).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import redis

from corral import Queue
from tests.conftest import ServerProcess, running_server

#: The goal of the issue: no script call over 50 ms of server time.
GOAL_MS = 50.0
#: What the tests assert: ten times the goal, so that a machine whose cores are all busy does
#: not fail them, while a call that is unbounded in its input (seconds at these sizes) does.
#: The figures themselves are printed (and written to $CORRAL_LIMITS_REPORT when set).
ASSERTED_MS = 10 * GOAL_MS
#: Commands shorter than this are not recorded: the longest call is what is looked for.
RECORD_FROM_US = 1000


@pytest.fixture(scope="module")
def limits_server() -> Iterator[ServerProcess]:
    yield from running_server("limits")


@pytest.fixture
def limits_url(limits_server: ServerProcess) -> Iterator[str]:
    """The size tests' server, flushed before each test."""
    with redis.Redis.from_url(limits_server.url) as client:
        # SYNC: Valkey frees a flushed keyspace in a background thread by default, which
        # would take CPU from the next test's timed calls.
        client.execute_command("FLUSHALL", "SYNC")
    yield limits_server.url


@dataclass
class Longest:
    """The longest command SLOWLOG recorded: its server time and its first words."""

    ms: float
    command: str


class ServerTimer:
    """Records the server time of every command over :data:`RECORD_FROM_US`.

    SLOWLOG records each script call, including those inside a MULTI/EXEC, but never the
    EXEC, which holds the server for all of them; the latency monitor's ``command`` event
    keeps the longest command, EXEC included (to the ms). Both are read.
    """

    def __init__(self, url: str) -> None:
        self.client = redis.Redis.from_url(url, decode_responses=True)
        self.client.config_set("slowlog-log-slower-than", RECORD_FROM_US)
        self.client.config_set("slowlog-max-len", 100_000)
        self.client.config_set("latency-monitor-threshold", RECORD_FROM_US // 1000)
        self.reset()

    def reset(self) -> None:
        self.client.slowlog_reset()
        self.client.execute_command("LATENCY", "RESET")

    def transactions(self) -> int:
        """How many transactions (EXEC) the server has run."""
        stats = self.client.info("commandstats").get("cmdstat_exec", {"calls": 0})
        return int(stats["calls"])

    def longest(self) -> Longest:
        entries = self.client.slowlog_get(100_000)
        exec_ms = 0
        for event in self.client.execute_command("LATENCY", "LATEST"):
            if event[0] == "command":
                exec_ms = int(event[3])  # the event's maximum since the reset, in ms
        if not entries:
            if exec_ms:
                return Longest(exec_ms, "a command or transaction (latency monitor)")
            return Longest(RECORD_FROM_US / 1000, "(none over 1 ms)")
        top = max(entries, key=lambda e: e["duration"])
        if exec_ms > top["duration"] / 1000 + 1:
            return Longest(exec_ms, "a transaction (latency monitor: SLOWLOG omits EXEC)")
        words = top["command"]
        if isinstance(words, bytes):
            words = words.decode(errors="replace")
        text = words if isinstance(words, str) else " ".join(str(w) for w in words)
        return Longest(top["duration"] / 1000, text[:80])

    def check(self, what: str) -> Longest:
        """Report the longest call since the last reset, and fail when it is unbounded."""
        top = self.longest()
        line = f"{what}: longest server call {top.ms:.1f} ms ({top.command})"
        print(line)
        report = os.environ.get("CORRAL_LIMITS_REPORT")
        if report:
            with open(report, "a", encoding="utf-8") as out:
                out.write(json.dumps({"case": what, "ms": top.ms, "command": top.command}) + "\n")
        assert top.ms < ASSERTED_MS, line
        self.reset()
        return top

    def close(self) -> None:
        self.client.config_set("slowlog-log-slower-than", 10_000)
        self.client.config_set("latency-monitor-threshold", 0)
        self.client.close()


@pytest.fixture
def r(limits_url: str) -> Iterator[redis.Redis]:
    """A plain client on the size tests' server (long timeout: the data is built in Lua)."""
    client = redis.Redis.from_url(limits_url, decode_responses=True, socket_timeout=120)
    yield client
    client.close()


@pytest.fixture
def queue(limits_url: str) -> Iterator[Queue]:
    q = Queue("q", connection=limits_url)
    yield q
    q.close()


@pytest.fixture
def server_timer(limits_url: str) -> Iterator[ServerTimer]:
    timer = ServerTimer(limits_url)
    yield timer
    timer.close()
