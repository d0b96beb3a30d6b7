"""The bad-input table: every refused input names the problem and writes nothing."""

from __future__ import annotations

import dataclasses
import datetime
import enum
import math
import uuid
from datetime import timedelta
from typing import Any

import pytest
import redis

from corral import InvalidOptionError, Queue, Worker
from corral.options import Backoff


class Opaque:
    pass


#: (id, name, data, options, message) for Queue.add.
ADD_CASES: list[tuple[str, str, Any, dict[str, Any], str]] = [
    ("negative delay", "a", {}, {"delay": -1}, "delay must be a finite number >= 0, got -1"),
    ("nan delay", "a", {}, {"delay": math.nan}, "delay must be a finite number >= 0, got nan"),
    ("inf delay", "a", {}, {"delay": math.inf}, "delay must be a finite number >= 0, got inf"),
    ("negative timedelta", "a", {}, {"delay": timedelta(seconds=-1)}, "delay must be a finite"),
    ("string delay", "a", {}, {"delay": "5"}, "delay must be seconds or a timedelta, got '5'"),
    ("priority too big", "a", {}, {"priority": 2_097_152}, "priority must be an integer from 0"),
    ("priority negative", "a", {}, {"priority": -1}, "priority must be an integer from 0"),
    ("priority float", "a", {}, {"priority": 1.5}, "priority must be an integer from 0"),
    ("priority bool", "a", {}, {"priority": True}, "priority must be an integer from 0"),
    (
        "attempts zero",
        "a",
        {},
        {"attempts": 0},
        "attempts must be an integer from 1 to 2147483647, got 0",
    ),
    (
        "attempts str",
        "a",
        {},
        {"attempts": "3"},
        "attempts must be an integer from 1 to 2147483647, got '3'",
    ),
    (
        "unknown backoff type",
        "a",
        {},
        {"backoff": {"type": "expo", "delay": 1}},
        "unknown backoff type 'expo'",
    ),
    (
        "jitter above 1",
        "a",
        {},
        {"backoff": Backoff.exponential(1, jitter=1.5)},
        "backoff jitter must be a number from 0 to 1, got 1.5",
    ),
    (
        "jitter negative",
        "a",
        {},
        {"backoff": Backoff.fixed(1, jitter=-0.1)},
        "backoff jitter must be a number from 0 to 1",
    ),
    ("negative backoff", "a", {}, {"backoff": -5}, "backoff must be a finite number >= 0"),
    ("backoff junk", "a", {}, {"backoff": "soon"}, "backoff must be seconds, a Backoff or a dict"),
    ("set data", "a", {1, 2}, {}, "data must be JSON-serializable: Type is not JSON serializable"),
    ("bytes data", "a", b"x", {}, "data must be JSON-serializable"),
    ("nan data", "a", {"x": math.nan}, {}, "nan is not a JSON number"),
    ("inf in list", "a", [1, math.inf], {}, "inf is not a JSON number"),
    ("object data", "a", {"o": Opaque()}, {}, "data must be JSON-serializable"),
    ("over size limit", "a", {"t": "x" * 100}, {"size_limit": 50}, "over size_limit=50"),
    ("empty name", "", {}, {}, "job name must be a non-empty string"),
    ("long name", "n" * 1025, {}, {}, "job name must be at most 1024 characters"),
    ("id with colon", "a", {}, {"job_id": "a:b"}, "job_id must not contain ':'"),
    ("digit id", "a", {}, {"job_id": "123"}, "job_id must not be all digits, got '123'"),
    ("long id", "a", {}, {"job_id": "i" * 256}, "job_id must be at most 255 characters"),
    ("unknown option", "a", {}, {"delya": 1}, "unknown job option 'delya' (did you mean 'delay'?)"),
    ("bad retention", "a", {}, {"remove_on_complete": -2}, "remove_on_complete must be True"),
    ("lifo not bool", "a", {}, {"lifo": "yes"}, "lifo must be True or False, got 'yes'"),
    ("negative keep_logs", "a", {}, {"keep_logs": -1}, "keep_logs must be an integer from 0 to"),
]


@pytest.fixture
def queue(redis_url: str) -> Any:
    with Queue("v", connection=redis_url) as q:
        q.add("seed")  # so the queue's keys exist: an error must not add or change any
        yield q


@pytest.mark.parametrize(
    ("name", "data", "options", "message"),
    [case[1:] for case in ADD_CASES],
    ids=[case[0] for case in ADD_CASES],
)
def test_add_refuses(
    queue: Queue, r: redis.Redis, name: str, data: Any, options: dict[str, Any], message: str
) -> None:
    before = (r.dbsize(), r.get("bull:v:id"), r.xlen("bull:v:events"))
    with pytest.raises(InvalidOptionError) as info:
        queue.add(name, data, **options)
    assert message in str(info.value)
    assert (r.dbsize(), r.get("bull:v:id"), r.xlen("bull:v:events")) == before


def test_add_bulk_is_all_or_nothing(queue: Queue, r: redis.Redis) -> None:
    before = (r.dbsize(), r.get("bull:v:id"))
    with pytest.raises(InvalidOptionError, match=r"add_bulk item 2: priority must be"):
        queue.add_bulk([("a", {}), ("b", {}, {"delay": 1}), ("c", {}, {"priority": -4})])
    with pytest.raises(InvalidOptionError, match=r"add_bulk item 0: expected \(name, data\)"):
        queue.add_bulk(["just-a-name"])  # type: ignore[list-item]
    with pytest.raises(InvalidOptionError, match="add_bulk item 1: options must be a dict"):
        queue.add_bulk([("a", {}), ("b", {}, 5)])  # type: ignore[list-item]
    assert (r.dbsize(), r.get("bull:v:id")) == before


@pytest.mark.parametrize(
    ("name", "kwargs", "message"),
    [
        ("", {}, "queue name must be a non-empty string"),
        ("a:b", {}, "queue name must not contain ':'"),
        ("q" * 1025, {}, "queue name must be at most 1024 characters"),
        ("ok", {"prefix": ""}, "prefix must be a non-empty string"),
        ("ok", {"default_job_options": {"attempts": 0}}, "attempts must be an integer from 1 to"),
        ("ok", {"default_job_options": {"atempts": 2}}, "unknown job option 'atempts'"),
        ("ok", {"default_job_options": {"job_id": "x"}}, "cannot hold 'job_id'"),
        ("ok", {"default_job_options": {"timestamp": 1}}, "cannot hold 'timestamp'"),
    ],
)
def test_queue_construction_refuses(
    redis_url: str, r: redis.Redis, name: str, kwargs: dict[str, Any], message: str
) -> None:
    before = r.dbsize()
    with pytest.raises(InvalidOptionError, match=message.replace("(", r"\(")):
        Queue(name, connection=redis_url, **kwargs)
    assert r.dbsize() == before


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"concurrency": 0}, "concurrency must be an integer from 1 to 2147483647, got 0"),
        ({"concurrency": 2.5}, "concurrency must be an integer from 1 to"),
        ({"lock_duration": -1}, "lock_duration must be a finite number >= 0"),
        ({"drain_delay": math.nan}, "drain_delay must be a finite number >= 0"),
        # Zero would busy-loop (a lock that expires as it is set, a check without end).
        ({"lock_duration": 0}, "lock_duration must be more than 0, got 0"),
        ({"stalled_interval": 0}, "stalled_interval must be more than 0, got 0"),
        ({"drain_delay": 0.0001}, "drain_delay must be more than 0, got 0.0001"),
    ],
)
def test_worker_construction_refuses(redis_url: str, kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidOptionError, match=message):
        Worker("v", lambda job: None, connection=redis_url, **kwargs)


def test_worker_needs_a_callable(redis_url: str) -> None:
    with pytest.raises(InvalidOptionError, match="processor must be callable, got 42"):
        Worker("v", 42, connection=redis_url)  # type: ignore[arg-type]


def test_unknown_state_is_refused(queue: Queue) -> None:
    with pytest.raises(InvalidOptionError, match="unknown job state 'finished'; known: active"):
        queue.get_job_counts("finished")
    assert queue.get_job_counts("wait", "paused") == {"wait": 1, "paused": 0}


class Colour(enum.Enum):
    RED = "red"


@dataclasses.dataclass
class Point:
    x: int
    y: int


def test_a_few_python_types_are_written_as_the_json_they_stand_for(queue: Queue) -> None:
    # docs/jobs.md "Bad input": these are converted (orjson's forms), and the processor gets
    # the JSON back, not the Python object.
    when = datetime.datetime(2026, 12, 2, 9, 30, tzinfo=datetime.timezone.utc)
    ident = uuid.UUID("12345678-1234-5678-1234-567812345678")
    data = {
        "at": when,
        "day": when.date(),
        "id": ident,
        "colour": Colour.RED,
        "point": Point(1, 2),
    }
    job = queue.add("typed", data)
    stored = queue.get_job(job.id)
    assert stored is not None and stored.data == {
        "at": "2026-12-02T09:30:00+00:00",
        "day": "2026-12-02",
        "id": "12345678-1234-5678-1234-567812345678",
        "colour": "red",
        "point": {"x": 1, "y": 2},
    }
