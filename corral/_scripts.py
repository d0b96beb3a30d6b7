"""Lua scripts: loading, ``-- @include`` expansion, and the shape of their answers.

Each ``_lua/<name>.lua`` is one state transition with a header that lists KEYS, ARGV,
returns and error codes. Sources are read once with ``importlib.resources``; their SHA1 is
what ``EVALSHA`` sends, and the I/O layer (``_async/_redis.py``) loads a script on
``NOSCRIPT`` and retries. This module does no I/O, so the sync and async APIs share it.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from importlib import resources
from typing import Any

from corral._codec import text

_INCLUDE = re.compile(r"^-- @include (\w+)\s*$", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class Script:
    """One expanded Lua script and its SHA1."""

    name: str
    source: str
    sha: str


def _read(relative: str) -> str:
    return resources.files("corral").joinpath(f"_lua/{relative}").read_text(encoding="utf-8")


def _expand(source: str) -> str:
    seen: set[str] = set()

    def include(match: re.Match[str]) -> str:
        name = match.group(1)
        if name in seen:
            return ""
        seen.add(name)
        return _read(f"include/{name}.lua")

    return _INCLUDE.sub(include, source)


def load(name: str) -> Script:
    """Read ``_lua/<name>.lua`` with its includes expanded."""
    source = _expand(_read(f"{name}.lua"))
    return Script(name, source, hashlib.sha1(source.encode()).hexdigest())


ADD_JOB = load("add_job")
ADD_JOBS = load("add_jobs")
MOVE_TO_ACTIVE = load("move_to_active")
MOVE_TO_FINISHED = load("move_to_finished")
EXTEND_LOCKS = load("extend_locks")
CHECK_STALLED = load("check_stalled")
FINISH_JOBS = load("finish_jobs")
RELEASE_FETCHED = load("release_fetched")
#: Remote cancel (queue.cancel); workers hear of an active job's on QueueKeys.cancel_channel.
CANCEL_JOB = load("cancel_job")


@dataclass(frozen=True, slots=True)
class FetchNext:
    """What a worker asks of a fetch: how many jobs, and how to lock them.

    Job ``i`` of the fetch gets the lock token ``f"{token_base}:{first_seq + i}"``.
    """

    count: int
    token_base: str
    first_seq: int
    lock_ms: int
    worker_name: str = ""
    #: Jobs recovered from stalls more often than this fail at fetch.
    max_stalled: int = 1
    #: The worker's limiter: at most ``limit_max`` jobs per ``limit_ms`` (0: none).
    limit_max: int = 0
    limit_ms: int = 0
    #: BullMQ's metrics: data points kept per minute series (0: none). Read by
    #: move_to_finished.lua only (its ARGV[19]), which finishes a job before fetching.
    metrics_points: int = 0
    #: The worker's dead-letter queue ("": none), for the jobs a call fails for good whose
    #: opts name none: move_to_active.lua's ARGV[12], move_to_finished.lua's ARGV[20];
    #: the finisher passes it last to finish_jobs.lua.
    dead_letter_queue: str = ""

    def args(self) -> list[Any]:
        return [
            self.count,
            self.token_base,
            self.first_seq,
            self.lock_ms,
            self.worker_name,
            self.max_stalled,
            self.limit_max,
            self.limit_ms,
            self.metrics_points,
            self.dead_letter_queue,
        ]


#: A finish that takes no next job.
NO_FETCH = FetchNext(0, "", 0, 0)


@dataclass(frozen=True, slots=True)
class Fetched:
    """A job a worker took: its id, its lock token, and the job hash as it was taken."""

    job_id: str
    token: str
    fields: dict[str, str]


def parse_fetched(raw: list[Any], start: int) -> list[Fetched]:
    """Read the ``id, token, HGETALL`` triples a fetch appends from index ``start``."""
    jobs = []
    for i in range(start, len(raw), 3):
        flat = raw[i + 2]
        if flat and isinstance(flat[0], bytes):
            flat = [text(v) for v in flat]
        pairs = iter(flat)
        fields = dict(zip(pairs, pairs, strict=False))  # HGETALL's flat pairs (always even)
        jobs.append(Fetched(text(raw[i]), text(raw[i + 1]), fields))
    return jobs


RELEASE_PARENTS = load("release_parents")
