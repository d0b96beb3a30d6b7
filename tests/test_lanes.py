"""Worker({queue: slots}, ...) against a real server: each lane keeps its reserved slots under a
backlog in another lane; with borrow an idle lane's slots run the other lanes' jobs and come
back as those jobs end; closing and cancelling settle every lane; the CLI and bad input."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from typing import Any

import pytest

from corral import AsyncJob, AsyncQueue, InvalidOptionError, Worker
from corral._lanes import LanesWorker
from corral.cli_worker import parse_queues
from tests.faults.harness import eventually
from tests.test_cli import cli


class Gates:
    """Jobs that run until released one by one (by job id), counting who runs per lane."""

    def __init__(self) -> None:
        self.running: dict[str, set[str]] = {}
        self.most: dict[str, int] = {}
        self.started: list[str] = []
        self._open: dict[str, asyncio.Event] = {}

    def count(self, lane: str) -> int:
        return len(self.running.get(lane, ()))

    def release(self, job_id: str) -> None:
        self._open.setdefault(job_id, asyncio.Event()).set()

    def release_all(self) -> None:
        self._all = True
        for gate in self._open.values():
            gate.set()

    _all = False

    async def process(self, job: AsyncJob) -> str:
        lane, key = job.queue_name, f"{job.queue_name}/{job.id}"
        mine = self.running.setdefault(lane, set())
        mine.add(key)
        self.most[lane] = max(self.most.get(lane, 0), len(mine))
        self.started.append(key)
        gate = self._open.setdefault(key, asyncio.Event())
        if self._all:
            gate.set()
        try:
            await gate.wait()
        finally:
            mine.discard(key)
        return key


@pytest.fixture
async def queues(redis_url: str) -> AsyncIterator[tuple[AsyncQueue, AsyncQueue]]:
    fast = AsyncQueue("fast", connection=redis_url)
    slow = AsyncQueue("slow", connection=redis_url)
    yield fast, slow
    await fast.close()
    await slow.close()


async def stop(worker: Worker, task: asyncio.Task[Any], gates: Gates) -> None:
    gates.release_all()
    await worker.close()
    await task


async def test_a_backlog_in_one_lane_leaves_the_others_slots_free(
    queues: tuple[AsyncQueue, AsyncQueue], redis_url: str
) -> None:
    fast, slow = queues
    await slow.add_bulk([("batch", None)] * 20)
    gates = Gates()
    worker = Worker({"fast": 2, "slow": 2}, gates.process, connection=redis_url)
    assert isinstance(worker, LanesWorker) and worker.concurrency == 4
    task = asyncio.create_task(worker.run_async())
    try:
        await eventually(lambda: gates.count("slow") == 2, "the slow lane full")
        await fast.add_bulk([("click", None)] * 2)
        # Every slow job still runs: the fast jobs took slots nobody else could have.
        await eventually(lambda: gates.count("fast") == 2, "both fast jobs started")
        assert gates.count("slow") == 2
        assert (await slow.get_job_counts("active", "waiting")) == {"active": 2, "waiting": 18}
        gates.release("fast/1")
        await eventually(lambda: gates.count("fast") == 1, "a fast job done")
        assert gates.most == {"slow": 2, "fast": 2}
    finally:
        await stop(worker, task, gates)


async def test_without_borrow_a_lane_never_runs_more_than_its_count(
    queues: tuple[AsyncQueue, AsyncQueue], redis_url: str
) -> None:
    fast, slow = queues
    await slow.add_bulk([("batch", None)] * 10)
    gates = Gates()
    worker = Worker({"fast": 3, "slow": 1}, gates.process, connection=redis_url)
    task = asyncio.create_task(worker.run_async())
    try:
        await eventually(lambda: gates.count("slow") == 1, "the slow lane full")
        # A fast job run and done: the fetch loops went round while 3 slots stayed free.
        job = await fast.add("click")
        gates.release(f"fast/{job.id}")
        await eventually(lambda: "fast/1" in gates.started, "the fast job started")
        await eventually(lambda: gates.count("fast") == 0, "the fast job done")
        for n in range(1, 4):  # each slow job that ends hands its one slot to the next
            gates.release(f"slow/{n}")
            await eventually(lambda n=n: f"slow/{n + 1}" in gates.started, f"slow/{n + 1}")  # type: ignore[misc]
        assert gates.most == {"slow": 1, "fast": 1}
        assert (await slow.get_job_counts("active"))["active"] == 1
    finally:
        await stop(worker, task, gates)


async def test_borrowed_slots_go_back_as_the_borrowed_jobs_end(
    queues: tuple[AsyncQueue, AsyncQueue], redis_url: str
) -> None:
    fast, slow = queues
    await slow.add_bulk([("batch", None)] * 20)
    gates = Gates()
    worker = Worker({"fast": 3, "slow": 1}, gates.process, connection=redis_url, borrow=True)
    assert isinstance(worker, LanesWorker)
    policy = worker._policy
    task = asyncio.create_task(worker.run_async())
    try:
        # The fast lane is idle: the slow lane borrows its three slots.
        await eventually(lambda: gates.count("slow") == 4, "slow borrowed every slot")
        await fast.add_bulk([("click", None)] * 2)
        await eventually(lambda: policy.lanes["fast"].wanting, "the fast lane wants its slots")
        assert gates.count("fast") == 0  # nothing is preempted
        gates.release("slow/1")  # a borrowed slot ends: it goes back, not to slow/5
        await eventually(lambda: gates.count("fast") == 1, "a fast job on its slot back")
        assert gates.count("slow") == 3
        gates.release("slow/2")
        await eventually(lambda: gates.count("fast") == 2, "the other fast job")
        assert gates.count("slow") == 2
        assert "slow/5" not in gates.started
        # The fast lane's work is done: the slow lane borrows its slots again.
        gates.release("fast/1")
        gates.release("fast/2")
        await eventually(lambda: gates.count("slow") == 4, "slow borrowing again")
        assert (await fast.get_job_counts("completed"))["completed"] == 2
        assert gates.most["slow"] == 4 and gates.most["fast"] == 2
    finally:
        await stop(worker, task, gates)


async def test_an_idle_lane_keeps_its_spare_slots_for_its_next_jobs(
    queues: tuple[AsyncQueue, AsyncQueue], redis_url: str
) -> None:
    fast, slow = queues
    await slow.add_bulk([("batch", None)] * 20)
    gates = Gates()
    worker = Worker(
        {"fast": 3, "slow": 1}, gates.process, connection=redis_url, borrow=True, spare=1
    )
    task = asyncio.create_task(worker.run_async())
    try:
        await eventually(lambda: gates.count("slow") == 3, "slow borrowed all but the spare")
        await fast.add("click")
        # The fast job starts on the spare slot while every slow job still runs.
        await eventually(lambda: gates.count("fast") == 1, "the fast job on the spare slot")
        assert gates.count("slow") == 3 and gates.most["slow"] == 3
    finally:
        await stop(worker, task, gates)


async def test_a_lane_with_work_keeps_its_slots_from_borrowers(
    queues: tuple[AsyncQueue, AsyncQueue], redis_url: str
) -> None:
    fast, slow = queues
    await fast.add_bulk([("click", None)] * 10)
    await slow.add_bulk([("batch", None)] * 10)
    gates = Gates()
    worker = Worker({"fast": 2, "slow": 2}, gates.process, connection=redis_url, borrow=True)
    task = asyncio.create_task(worker.run_async())
    try:
        await eventually(lambda: gates.count("fast") + gates.count("slow") == 4, "all slots")
        assert gates.count("fast") == gates.count("slow") == 2
        for n in range(1, 5):  # a lane whose queue has work gets each of its slots back
            gates.release(f"fast/{n}")
            await eventually(lambda n=n: f"fast/{n + 2}" in gates.started, f"fast/{n + 2}")  # type: ignore[misc]
            assert gates.count("slow") == 2
        assert gates.most == {"fast": 2, "slow": 2}
    finally:
        await stop(worker, task, gates)


async def test_plain_functions_may_run_on_borrowed_slots(
    queues: tuple[AsyncQueue, AsyncQueue], redis_url: str
) -> None:
    _, slow = queues
    await slow.add_bulk([("batch", None)] * 4)
    lock = threading.Lock()
    running: list[str] = []
    release = threading.Event()

    def process(job: Any) -> None:
        with lock:
            running.append(job.id)
        release.wait(30)

    worker = Worker({"fast": 2, "slow": 1}, process, connection=redis_url, borrow=True)
    task = asyncio.create_task(worker.run_async(burst=True))
    try:
        # Three threads at once in the slow lane: its pool is sized for every slot.
        await eventually(lambda: len(running) == 3, "three threads in the slow lane")
        release.set()
        summary = await task
    finally:
        release.set()
        await worker.close()
    assert (summary.completed, summary.stopped) == (4, "drained")


async def test_a_burst_drains_every_lane_and_events_come_from_each(
    queues: tuple[AsyncQueue, AsyncQueue], redis_url: str
) -> None:
    fast, slow = queues
    await fast.add_bulk([("click", {"i": i}) for i in range(5)])
    await slow.add_bulk([("batch", {"i": i}) for i in range(7)])
    completed: list[str] = []

    async def process(job: AsyncJob) -> int:
        return int(job.data["i"])

    worker = Worker({"fast": 2, "slow": 1}, process, connection=redis_url, borrow=True)
    worker.on("completed", lambda job, result: completed.append(job.queue_name))
    summary = await worker.run_async(burst=True)
    assert (summary.completed, summary.stopped) == (12, "drained")
    assert sorted(completed) == ["fast"] * 5 + ["slow"] * 7
    assert (await slow.get_job_counts("completed"))["completed"] == 7


async def test_max_jobs_counts_over_the_lanes(
    queues: tuple[AsyncQueue, AsyncQueue], redis_url: str
) -> None:
    fast, slow = queues
    await fast.add_bulk([("click", None)] * 10)
    await slow.add_bulk([("batch", None)] * 10)
    worker = Worker({"fast": 2, "slow": 2}, lambda job: None, connection=redis_url)
    summary = await worker.run_async(max_jobs=7)
    assert (summary.completed, summary.stopped) == (7, "max_jobs")
    done = (await fast.get_job_counts("completed"))["completed"]
    done += (await slow.get_job_counts("completed"))["completed"]
    assert done == 7
    for queue in queues:
        assert (await queue.get_job_counts("active"))["active"] == 0


@pytest.mark.parametrize("how", ["close", "cancel"])
async def test_closing_or_cancelling_puts_every_lanes_jobs_back(
    queues: tuple[AsyncQueue, AsyncQueue], redis_url: str, how: str
) -> None:
    fast, slow = queues
    await fast.add_bulk([("click", None)] * 3)
    await slow.add_bulk([("batch", None)] * 6)
    gates = Gates()
    worker = Worker({"fast": 2, "slow": 1}, gates.process, connection=redis_url, borrow=True)
    task = asyncio.create_task(worker.run_async())
    await eventually(lambda: gates.count("fast") + gates.count("slow") == 3, "every slot busy")
    if how == "close":
        await worker.close(grace=0)
        summary = await task
        assert summary.stopped == "closed"
    else:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    # The cut jobs went back to wait, none is left active, none ran to its end.
    assert (await fast.get_job_counts("active", "waiting")) == {"active": 0, "waiting": 3}
    assert (await slow.get_job_counts("active", "waiting")) == {"active": 0, "waiting": 6}
    assert not worker.workers[0]._slots.leases and not worker.workers[1]._slots.leases


def test_the_sync_run_serves_the_lanes(redis_url: str) -> None:
    from corral import Queue

    with Queue("fast", connection=redis_url) as fast, Queue("slow", connection=redis_url) as slow:
        fast.add("click", {"n": 1})
        slow.add("batch", {"n": 2})
        worker = Worker({"fast": 1, "slow": 1}, lambda job: job.data["n"], connection=redis_url)
        summary = worker.run(burst=True)
        assert (summary.completed, summary.stopped) == (2, "drained")
        assert [job.returnvalue for job in fast.get_completed() + slow.get_completed()] == [1, 2]


async def test_get_next_job_asks_the_lanes_in_order(
    queues: tuple[AsyncQueue, AsyncQueue], redis_url: str
) -> None:
    fast, slow = queues
    await slow.add("batch")
    await fast.add("click")
    worker = Worker({"fast": 1, "slow": 1}, None, connection=redis_url)
    try:
        taken = [await worker.get_next_job() for _ in range(3)]
        assert [job.queue_name if job else None for job in taken] == ["fast", "slow", None]
        for job in taken:
            if job is not None:
                await job.move_to_completed("ok")
    finally:
        await worker.close()


# -- bad input ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("lanes", "settings", "error"),
    [
        ({}, {}, "at least one queue"),
        ({"a": 0}, {}, "slots of lane 'a'"),
        ({"a": 1.5}, {}, "slots of lane 'a'"),
        ({"a": True}, {}, "slots of lane 'a'"),
        ({"a:b": 1}, {}, "lane"),
        ({"": 1}, {}, "lane"),
        ({1: 1}, {}, "a lane's name must be a queue name"),
        ({"a": 1}, {"borrow": "yes"}, "borrow must be True or False"),
        ({"a": 1, "b": 2}, {"concurrency": 3}, r"concurrency with lanes \(a:1, b:2\)"),
        ({"a": 1}, {"limiter": {"max": 1, "duration": 1}}, "a rate limit counts per queue"),
        ({"a": 1}, {"processes": 2}, "processes with lanes"),
        ({"a": 1}, {"shards": 2}, "shards with lanes"),
        ({"a": 1}, {"spare": 1}, "spare needs borrow=True"),
    ],
)
def test_what_a_lanes_worker_refuses(lanes: Any, settings: dict[str, Any], error: str) -> None:
    with pytest.raises(InvalidOptionError, match=error):
        Worker(lanes, "tests.fixtures.processors:shout", **settings)


def test_a_lanes_worker_has_no_single_marker_nor_settable_concurrency() -> None:
    worker = Worker({"a": 2, "b": 3}, lambda job: None)
    assert worker.lanes == {"a": 2, "b": 3} and worker.queue_name == "a,b"
    with pytest.raises(InvalidOptionError, match="marker per queue"):
        _ = worker.keys_marker
    with pytest.raises(InvalidOptionError, match="sum of its lanes' counts"):
        worker.concurrency = 4

    class Mine(Worker):
        pass

    with pytest.raises(InvalidOptionError, match="lanes need the class Worker itself"):
        Mine({"a": 1}, lambda job: None)


# -- the command line --------------------------------------------------------------------------


def test_parse_queues() -> None:
    assert parse_queues(("emails",), False) == "emails"
    assert parse_queues(("interactive:8", "background:4"), True) == {
        "interactive": 8,
        "background": 4,
    }
    assert parse_queues(("only:3",), False) == {"only": 3}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-q", "a", "-q", "b"], "several --queue need their slots"),
        (["-q", "a", "--borrow"], "--borrow needs lanes"),
        (["-q", "a:2", "-q", "b"], "--queue 'b': give every lane as NAME:SLOTS"),
        (["-q", "a:0"], "--queue 'a:0': give every lane"),
        (["-q", "a:x"], "--queue 'a:x': give every lane"),
        (["-q", ":3"], "--queue ':3': give every lane"),
        (["-q", "a:1", "-q", "a:2"], "--queue 'a' is given twice"),
        (["-q", "a:1", "-q", "b:2", "-c", "4"], "--concurrency with lanes (a:1, b:2)"),
        (["-q", "a:1", "-p", "2"], "--processes with lanes"),
        (["-q", "a:1", "--shards", "2"], "--shards with lanes"),
        (["-q", "a:1", "--spare", "1"], "--spare needs --borrow"),
        (["-q", "a", "--spare", "1"], "--spare needs lanes"),
    ],
)
def test_the_cli_refuses_bad_lanes(args: list[str], message: str) -> None:
    result = cli("worker", "tests.fixtures.processors:shout", "--url", "redis://x:1/0", *args)
    assert result.exit_code == 2, (result.stdout, result.stderr)
    assert message in result.stderr, result.stderr
    assert result.stdout == ""


def test_the_cli_serves_lanes(redis_url: str) -> None:
    from corral import Queue

    with Queue("fast", connection=redis_url) as fast, Queue("slow", connection=redis_url) as slow:
        fast.add("shout", {"text": "hi"})
        slow.add("shout", {"text": "there"})
    args = ["-q", "fast:2", "-q", "slow:1", "--borrow", "--spare", "1", "--url", redis_url]
    args.append("--burst")
    result = cli("worker", "tests.fixtures.processors:shout", *args)
    assert result.exit_code == 0, result.stderr
    banner = result.stdout.splitlines()[0]
    assert "queue=fast:2,slow:1 concurrency=3" in banner and "borrow=True spare=1" in banner, banner
    assert "fast: job 1 shout completed in " in result.stderr
    assert "slow: job 1 shout completed in " in result.stderr
    assert "corral worker: drained: 2 completed, 0 failed, 0 retried" in result.stdout
