# Generated from tests/_async/test_removal_chunks.py by scripts/unasync.py: do not edit.
"""Removing a tree in chunks (corral._sync.job_removal), with the chunk sizes made tiny so that
small trees take the path big ones take: the outcome is the one of a single call, and the
state between chunks is always one a queue can be in."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import redis

from corral import Queue, JobLockedError, _scripts, clock
from corral._sync import job_removal
from tests._sync.support import events, snapshot
from tests._sync.test_job import T, activate, build_flow
from tests._sync.test_queue_admin import job_hashes


@pytest.fixture(autouse=True)
def tiny_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(job_removal, "ATOMIC_JOBS", 0)  # every tree goes in chunks
    monkeypatch.setattr(job_removal, "CHUNK", 2)
    monkeypatch.setattr(job_removal, "READ_BATCH", 3)
    monkeypatch.setattr(job_removal, "SWEEP", 8)
    monkeypatch.setattr(job_removal, "SLACK", 2)


def spy(queue: Queue, after: Callable[[str], None] | None = None) -> list[str]:
    """Record the name of every script the queue runs; ``after(name)`` runs after each."""
    names: list[str] = []
    run = queue._run

    def recorded(script: _scripts.Script, args: list[Any]) -> Any:
        reply = run(script, args)
        names.append(script.name)
        if after is not None:
            after(script.name)
        return reply

    queue._run = recorded  # type: ignore[method-assign]
    return names


def parent_with_children(r: redis.Redis, n: int, *, unrelated: int = 0, queue: str = "q") -> None:
    """Parent ``P`` (waiting-children) of ``c0`` .. ``c<n-1>`` in wait; ``unrelated`` jobs
    ``u<i>`` are pushed between them (``u<i>`` after ``c<i>``)."""
    base = f"bull:{queue}:"
    r.hset(base + "P", mapping={"name": "p", "data": "{}", "opts": "{}", "timestamp": T})
    r.zadd(base + "waiting-children", {"P": T})
    for i in range(n):
        r.hset(base + f"c{i}", mapping={"name": "c", "data": "{}", "parentKey": base + "P"})
        r.sadd(base + "P:dependencies", base + f"c{i}")
        r.lpush(base + "wait", f"c{i}")
        if i < unrelated:
            r.hset(base + f"u{i}", mapping={"name": "u", "data": "{}"})
            r.lpush(base + "wait", f"u{i}")


def test_a_tree_in_chunks_ends_as_in_one_call(queue: Queue, r: redis.Redis) -> None:
    build_flow(r)
    r.lpush("bull:q:wait", "unrelated")
    job = queue.get_job("parent")
    assert job is not None
    names = spy(queue)
    job.remove()
    assert names.count("remove_jobs") >= 2
    assert sorted(r.keys("*")) == ["bull:other:events", "bull:q:events", "bull:q:wait"]
    assert r.lrange("bull:q:wait", 0, -1) == ["unrelated"]
    assert events(r, "other") == [{"event": "removed", "jobId": "c2", "prev": "waiting-children"}]
    assert sorted(events(r)[:-1], key=lambda e: e["jobId"]) == [
        {"event": "removed", "jobId": "c1", "prev": "wait"},
        {"event": "removed", "jobId": "c3", "prev": "completed"},
        {"event": "removed", "jobId": "g1", "prev": "delayed"},
    ]
    assert events(r)[-1] == {"event": "removed", "jobId": "parent", "prev": "waiting-children"}


@pytest.mark.parametrize("how", ["active", "locked"])
def test_an_active_job_refuses_before_anything_is_written(
    queue: Queue, r: redis.Redis, how: str
) -> None:
    build_flow(r)
    r.zrem("bull:q:delayed", "g1")
    if how == "active":
        r.lpush("bull:q:active", "g1")
    else:
        r.set("bull:q:g1:lock", "tok:1")
    job = queue.get_job("parent")
    assert job is not None
    before = snapshot(r)
    with pytest.raises(JobLockedError, match="nothing was removed"):
        job.remove()
    assert snapshot(r) == before


def test_children_in_a_long_wait_list(queue: Queue, r: redis.Redis) -> None:
    # 60 entries: longer than SWEEP, so the places of the children are read first.
    parent_with_children(r, 30, unrelated=30)
    others = [e for e in r.lrange("bull:q:wait", 0, -1) if e.startswith("u")]
    assert queue.remove("P") is True
    assert r.lrange("bull:q:wait", 0, -1) == others
    assert r.exists(*(f"bull:q:c{i}" for i in range(30)), "bull:q:P") == 0
    removed = [e["jobId"] for e in events(r) if e["event"] == "removed"]
    assert sorted(removed[:-1]) == sorted(f"c{i}" for i in range(30))
    assert removed[-1] == "P"


def test_a_parent_inside_the_removal_is_never_released(
    queue: Queue, r: redis.Redis
) -> None:
    # 8 children in chunks of 2: the parent goes with the last two, never alone after them.
    parent_with_children(r, 8, unrelated=4)
    seen: list[bool] = []

    def check(name: str) -> None:
        if name == "remove_jobs" and r.exists("bull:q:P"):
            # Between two calls the parent still waits, and for a child that is there.
            seen.append(r.zscore("bull:q:waiting-children", "P") is not None)
            assert r.scard("bull:q:P:dependencies") > 0
            assert "P" not in r.lrange("bull:q:wait", 0, -1)

    spy(queue, check)
    queue.remove("P")
    assert seen and all(seen)
    assert not any(e["event"] == "waiting" for e in events(r))


def test_a_child_taken_meanwhile_is_kept_with_its_parent(
    queue: Queue, r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    parent_with_children(r, 6)
    taken: list[Any] = []
    find_places = job_removal._Tree.find_places

    def then_take(tree: job_removal._Tree) -> None:
        find_places(tree)
        if not taken:
            taken.append(activate(queue))  # a worker takes c0 (the oldest) meanwhile

    monkeypatch.setattr(job_removal._Tree, "find_places", then_take)
    with pytest.raises(JobLockedError, match="became active during the removal; 5 jobs"):
        queue.remove("P")
    # The parent still waits for the child a worker holds, and for nothing else.
    assert r.smembers("bull:q:P:dependencies") == {"bull:q:c0"}
    assert r.zscore("bull:q:waiting-children", "P") is not None
    assert r.exists(*(f"bull:q:c{i}" for i in range(1, 6))) == 0
    # When the child completes, its parent runs, as after any last child.
    taken[0].move_to_completed("done")
    assert r.lrange("bull:q:wait", 0, -1) == ["P"]


def test_a_child_added_meanwhile_goes_in_another_pass(
    queue: Queue, r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    parent_with_children(r, 5)
    find_places = job_removal._Tree.find_places
    calls: list[int] = []

    def then_add(tree: job_removal._Tree) -> None:
        find_places(tree)
        if not calls:
            r.hset("bull:q:late", mapping={"name": "c", "data": "{}", "parentKey": "bull:q:P"})
            r.sadd("bull:q:P:dependencies", "bull:q:late")
            r.lpush("bull:q:wait", "late")
        calls.append(1)

    monkeypatch.setattr(job_removal._Tree, "find_places", then_add)
    queue.remove("P")
    assert len(calls) == 2
    assert r.exists("bull:q:P", "bull:q:late") == 0
    assert r.llen("bull:q:wait") == 0


def test_jobs_in_no_state_and_dangling_dependencies(
    queue: Queue, r: redis.Redis
) -> None:
    parent_with_children(r, 1)
    for i in range(20):  # a wait list longer than SWEEP
        r.lpush("bull:q:wait", f"u{i}")
    r.hset("bull:q:stray", mapping={"name": "c", "data": "{}", "parentKey": "bull:q:P"})
    r.sadd("bull:q:P:dependencies", "bull:q:stray", "bull:q:gone")
    queue.remove("P")
    assert r.exists("bull:q:P", "bull:q:stray", "bull:q:c0", "bull:q:P:dependencies") == 0
    assert r.lrange("bull:q:wait", 0, -1) == [f"u{i}" for i in reversed(range(20))]
    prev = {e["jobId"]: e["prev"] for e in events(r)}
    assert prev == {"c0": "wait", "stray": "unknown", "P": "waiting-children"}


def test_the_parent_outside_the_removal_is_released(
    queue: Queue, r: redis.Redis
) -> None:
    # O waits for P (whose subtree goes in chunks) and for B.
    parent_with_children(r, 4)
    r.hset("bull:q:O", mapping={"name": "o", "data": "{}", "opts": "{}", "timestamp": T})
    r.zadd("bull:q:waiting-children", {"O": T})
    r.sadd("bull:q:O:dependencies", "bull:q:P", "bull:q:B")
    r.hset("bull:q:P", "parentKey", "bull:q:O")
    r.hset("bull:q:B", mapping={"name": "b", "data": "{}", "parentKey": "bull:q:O"})
    r.zadd("bull:q:delayed", {"B": T * 4096})
    queue.remove("P")
    assert r.smembers("bull:q:O:dependencies") == {"bull:q:B"}
    assert r.zscore("bull:q:waiting-children", "O") is not None
    queue.remove("B")
    assert r.lrange("bull:q:wait", 0, -1) == ["O"]


def test_remove_unprocessed_children_in_chunks(queue: Queue, r: redis.Redis) -> None:
    parent_with_children(r, 5, unrelated=3)
    # c5 has a child of its own that a worker holds: c5 and its subtree stay.
    r.hset("bull:q:c5", mapping={"name": "c", "data": "{}", "parentKey": "bull:q:P"})
    r.sadd("bull:q:P:dependencies", "bull:q:c5")
    r.zadd("bull:q:waiting-children", {"c5": T})
    r.hset("bull:q:g", mapping={"name": "g", "data": "{}", "parentKey": "bull:q:c5"})
    r.sadd("bull:q:c5:dependencies", "bull:q:g")
    r.lpush("bull:q:active", "g")
    job = queue.get_job("P")
    assert job is not None
    assert job_removal.remove_unprocessed(job) == 5
    assert r.smembers("bull:q:P:dependencies") == {"bull:q:c5"}
    assert r.exists("bull:q:c5", "bull:q:g") == 2
    assert r.zscore("bull:q:waiting-children", "P") is not None
    # Without the active grandchild, the last pending children go and the parent runs.
    r.delete("bull:q:active")
    assert job_removal.remove_unprocessed(job) == 2
    assert r.lrange("bull:q:wait", 0, -1)[0] == "P"
    assert sorted(r.lrange("bull:q:wait", 1, -1)) == ["u0", "u1", "u2"]


@pytest.mark.parametrize("chunked", [False, True])
def test_remove_unprocessed_children_keeps_the_mark_of_a_flow_being_added(
    queue: Queue, r: redis.Redis, monkeypatch: pytest.MonkeyPatch, chunked: bool
) -> None:
    if not chunked:
        monkeypatch.setattr(job_removal, "ATOMIC_JOBS", 1000)
    parent_with_children(r, 3)
    mark = "bull:q:x-flow:f1:"  # release_parents.lua: its children are still to come
    r.sadd("bull:q:P:dependencies", mark)
    job = queue.get_job("P")
    assert job is not None
    names = spy(queue)
    assert job_removal.remove_unprocessed(job) == 3
    assert ("remove_jobs" in names) is chunked
    assert r.smembers("bull:q:P:dependencies") == {mark}
    assert r.zscore("bull:q:waiting-children", "P") is not None


@pytest.mark.parametrize("script", ["remove_job", "remove_unprocessed_children"])
def test_a_tree_over_the_budget_of_one_call_is_refused_untouched(
    queue: Queue, r: redis.Redis, script: str
) -> None:
    build_flow(r)
    r.lpush("bull:q:wait", "unrelated")
    before = snapshot(r)
    args: list[Any] = [queue._job_prefix, "parent"]
    if script == "remove_job":
        args.append("1")
    reply = queue._run(_scripts.load(script), [*args, 2, 1_000_000])
    assert reply == job_removal.TOO_BIG
    assert snapshot(r) == before
    # The list entries to search count too: one job in a list longer than the budget.
    reply = queue._run(_scripts.load(script), [*args, 100, 1])
    assert reply == job_removal.TOO_BIG
    assert snapshot(r) == before


# -- clean() of a list: entries marked in place and dropped together ---------------------------


def test_clean_of_a_list_keeps_the_order_of_what_stays(
    queue: Queue, r: redis.Redis
) -> None:
    now = clock.now_ms()
    # From the tail (oldest end): 3 old, 1 new, 2 old, 1 new, 1 old: a run at the end goes
    # with one LTRIM, the others are marked and dropped with one LREM.
    ages = ["old", "old", "old", "new", "old", "old", "new", "old"]
    for i, age in enumerate(ages):
        ts = now - 60_000 if age == "old" else now
        r.hset(f"bull:q:j{i}", mapping={"name": "j", "data": "{}", "timestamp": ts})
        r.lpush("bull:q:wait", f"j{i}")
    assert queue.clean(30, 4, "wait") == ["j0", "j1", "j2", "j4"]
    assert r.lrange("bull:q:wait", 0, -1) == ["j7", "j6", "j5", "j3"]
    assert queue.clean(30, 0, "wait") == ["j5", "j7"]
    assert r.lrange("bull:q:wait", 0, -1) == ["j6", "j3"]
    assert job_hashes(r) == ["bull:q:j3", "bull:q:j6"]


# -- queue-wide scripts: a call does a bounded batch whatever it is asked ----------------------


def seed(r: redis.Redis, where: str, n: int) -> None:
    with r.pipeline(transaction=False) as pipe:
        for i in range(n):
            pipe.hset(f"bull:q:{i}", mapping={"name": "j", "data": "{}", "timestamp": T})
            if where == "wait":
                pipe.lpush("bull:q:wait", str(i))
            else:
                pipe.zadd(f"bull:q:{where}", {str(i): i})
        pipe.execute()


@pytest.mark.parametrize(
    ("script", "where", "args", "answer", "left"),
    [
        ("drain_queue", "wait", ["0", 10**6], 500, 500),
        ("obliterate_queue", "wait", ["0", 10**6], 1, 500),
        ("promote_jobs", "delayed", [10**6], 1000, 500),
        ("retry_jobs", "failed", ["failed", 10**6, T], 1000, 500),
    ],
)
def test_a_bulk_script_moves_at_most_1000_jobs_a_call(
    queue: Queue,
    r: redis.Redis,
    script: str,
    where: str,
    args: list[Any],
    answer: int,
    left: int,
) -> None:
    seed(r, where, 1500)
    assert queue._run(_scripts.load(script), [queue._job_prefix, *args]) == answer
    if where == "wait":
        assert r.llen("bull:q:wait") == left
    else:
        assert r.zcard(f"bull:q:{where}") == left
