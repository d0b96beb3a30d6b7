"""The child-process pool alone (corral._processes, corral._child): no Redis.

The processors are in tests/fixtures/child_processors.py; the call handler is a recorder that
also tells when a job runs (the processor logs "started"), so that tests wait on that rather
than on time.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from corral import _codec, _processes
from corral._imports import spec_of
from corral._processes import ChildJobSpec, ChildRun, PoolClosedError, ProcessPool
from corral.errors import (
    ChildJobError,
    ChildProcessDied,
    InvalidOptionError,
    MemoryLimitError,
    ProcessorImportError,
    UnrecoverableError,
)

pytestmark = pytest.mark.asyncio(loop_scope="module")

ROOT = Path(__file__).resolve().parent.parent
SYNC = "tests.fixtures.child_processors:act"
ASYNC = "tests.fixtures.child_processors:async_act"
#: How long a condition may take under a loaded machine before the test fails.
PATIENCE = 30.0


def spec(do: str, job_id: str = "1", **data: Any) -> ChildJobSpec:
    fields = {
        "name": "task",
        "data": _codec.dumps({"do": do, **data}),
        "opts": '{"attempts":2}',
        "timestamp": "1700000000000",
        "atm": "1",
    }
    return ChildJobSpec("q", job_id, fields, "tok-1", None, None)


class Calls:
    """A call handler that records what the child asked for and answers a line count."""

    def __init__(self, fail: Exception | None = None) -> None:
        self.calls: list[tuple[str, list[Any]]] = []
        self.fail = fail
        self.started = asyncio.Event()
        self.ticks = 0

    async def __call__(self, method: str, args: list[Any]) -> Any:
        if args == ["started"]:
            self.started.set()
            return 1
        if args == ["tick"]:
            self.ticks += 1
            return 1
        self.calls.append((method, args))
        if self.fail is not None:
            raise self.fail
        return len(self.calls)


async def until(condition: Callable[[], bool], what: str) -> None:
    """Wait for ``condition`` (checked every 10 ms), up to PATIENCE seconds."""
    deadline = time.monotonic() + PATIENCE
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


def alive(pid: int) -> bool:
    """Whether ``pid`` is a process that has not exited (a zombie has: it awaits its reaper)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def my_children(spec: str) -> list[int]:
    """The child processes of this test process running ``spec`` (zombies included: a child
    the pool did not reap is still there)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read().split(b"\0")
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue
        if ppid == os.getpid() and b"corral._child" in cmdline and spec.encode() in cmdline:
            found.append(int(entry))
    return found


async def started(run: ChildRun, calls: Calls) -> int:
    await asyncio.wait_for(calls.started.wait(), PATIENCE)
    assert run.started and run.pid is not None
    return run.pid


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def pool() -> AsyncIterator[ProcessPool]:
    p = ProcessPool(SYNC, 2)
    await p.start()
    yield p
    await p.close()


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def apool() -> AsyncIterator[ProcessPool]:
    p = ProcessPool(ASYNC, 1)
    await p.start()
    yield p
    await p.close()


# --- values, calls, errors ---------------------------------------------------------------


async def test_sync_processor_gets_the_job_and_returns_its_value(pool: ProcessPool) -> None:
    assert not pool.is_async
    job = ChildJobSpec("q", "7", spec("job").fields, "tok-9", time.time() + 60, time.time() + 30)
    got = await pool.submit(job, Calls()).result()
    assert got["type"] == "ChildJob"
    assert (got["name"], got["queue"], got["token"], got["attempts_made"]) == (
        "task",
        "q",
        "tok-9",
        1,
    )
    assert got["deadline"] == job.deadline and got["soft_deadline"] == job.soft_deadline
    assert 0 < got["time_left"] <= 60
    assert got["soft_timed_out"] is False
    assert (await pool.submit(spec("echo", value=[1, "a"]), Calls()).result())["echo"] == [1, "a"]


async def test_big_frames_cross_whole_both_ways(pool: ProcessPool) -> None:
    big = "é" * 3_000_000  # 6 MB of UTF-8: many reads each way
    runs = [pool.submit(spec("echo", str(i), value=big + str(i)), Calls()) for i in range(3)]
    for i, run in enumerate(runs):
        assert (await run.result())["echo"] == big + str(i)


async def test_async_processor_returns_its_value(apool: ProcessPool) -> None:
    assert apool.is_async
    got = await apool.submit(spec("echo", value={"k": 1}), Calls()).result()
    assert got["echo"] == {"k": 1} and got["type"] == "AsyncChildJob"


@pytest.mark.parametrize("which", ["sync", "async"])
async def test_job_methods_reach_the_handler(
    which: str, pool: ProcessPool, apool: ProcessPool
) -> None:
    calls = Calls()
    got = await (pool if which == "sync" else apool).submit(spec("calls"), calls).result()
    progress = 42 if which == "sync" else {"step": 1}
    line = "a line" if which == "sync" else "async line"
    assert calls.calls == [
        ("update_progress", [progress]),
        ("log", [line]),
        ("update_data", [{"do": "calls", "updated": True}]),
    ]
    # log() returns what the handler answered; the job object keeps what it sent.
    assert got == {"count": 2, "progress": progress, "data": {"do": "calls", "updated": True}}


@pytest.mark.parametrize("which", ["sync", "async"])
async def test_a_handler_error_is_raised_in_the_child(
    which: str, pool: ProcessPool, apool: ProcessPool
) -> None:
    p = pool if which == "sync" else apool
    corral_error = Calls(fail=InvalidOptionError("log line is too long"))
    got = await p.submit(spec("call_error", line="x"), corral_error).result()
    assert got == {"type": "corral.errors.InvalidOptionError", "str": "log line is too long"}
    other = Calls(fail=KeyError("gone"))
    got = await p.submit(spec("call_error", line="x"), other).result()
    assert got == {"type": "builtins.RuntimeError", "str": "KeyError: 'gone'"}


async def test_a_call_with_what_json_cannot_carry_is_refused_in_the_child(
    pool: ProcessPool,
) -> None:
    calls = Calls()
    got = await pool.submit(spec("bad_call"), calls).result()
    assert got["type"] == "corral.errors.InvalidOptionError" and "JSON" in got["str"]
    assert calls.calls == []  # nothing was sent


async def test_processor_errors_come_back_as_child_job_errors(
    pool: ProcessPool, apool: ProcessPool
) -> None:
    with pytest.raises(ChildJobError) as info:
        await pool.submit(spec("raise", value=3), Calls()).result()
    assert str(info.value) == "bad value 3" and info.value.type_name == "ValueError"
    assert "in act" in info.value.remote_traceback
    assert "ValueError: bad value 3" in info.value.remote_traceback
    assert not isinstance(info.value, UnrecoverableError)

    with pytest.raises(ChildJobError) as info:
        await pool.submit(spec("unrecoverable"), Calls()).result()
    assert isinstance(info.value, UnrecoverableError)
    assert info.value.type_name == "corral.errors.UnrecoverableError"

    with pytest.raises(ChildJobError, match=r"^return value is not JSON serializable: "):
        await pool.submit(spec("set"), Calls()).result()
    with pytest.raises(ChildJobError) as info:  # a message JSON cannot carry as it is
        await pool.submit(spec("surrogate"), Calls()).result()
    assert str(info.value) == "bad \\ud800 text" and "bad \\ud800" in info.value.remote_traceback
    with pytest.raises(ChildJobError, match=r"^SystemExit: 3$"):  # it fails the job, not the child
        await pool.submit(spec("exit_call"), Calls()).result()
    with pytest.raises(ChildJobError, match="missing") as info:
        await apool.submit(spec("raise"), Calls()).result()
    assert info.value.type_name == "KeyError"


async def test_threads_of_a_job_call_too_and_a_late_call_is_refused() -> None:
    p = ProcessPool(SYNC, 1)
    await p.start()
    try:
        calls = Calls()
        assert await p.submit(spec("thread_calls"), calls).result() == "ok"
        lines = sorted(args[0] for method, args in calls.calls)
        assert lines == sorted(["main"] + [f"t{n}" for n in range(3) for _ in range(5)])
        later = Calls()
        got = await p.submit(spec("check_thread"), later).result()
        assert got == ["job 1 is over: log() cannot reach it any more"]
        assert later.calls == [] and calls.calls[-1] != ("log", ["late"])
    finally:
        await p.close()


class SlowCalls(Calls):
    """Answers the line "late" only once released."""

    def __init__(self) -> None:
        super().__init__()
        self.waiting = False
        self.release = asyncio.Event()

    async def __call__(self, method: str, args: list[Any]) -> Any:
        if args == ["late"]:
            self.waiting = True
            await self.release.wait()
        return await super().__call__(method, args)


async def test_a_run_ends_after_the_calls_its_job_left_running(apool: ProcessPool) -> None:
    calls = SlowCalls()
    run = apool.submit(spec("fire_and_forget"), calls)
    await until(lambda: calls.waiting, "the late call")
    assert not run.done  # the job returned, but its log line is not written yet
    calls.release.set()
    assert await run.result() == "returned"
    assert calls.calls == [("log", ["late"])]
    # kill() then: the call is cancelled, the child (on to other work) is left alone.
    calls = SlowCalls()
    run = apool.submit(spec("fire_and_forget"), calls)
    await until(lambda: calls.waiting, "the late call")
    pid = run.pid
    await run.kill(Stopped("too late"))
    assert await run.result() == "returned" and calls.calls == []
    assert pid in apool.pids and alive(pid)


# --- crashes, memory, recycling ----------------------------------------------------------


@pytest.mark.parametrize(
    ("do", "how"),
    [
        ("segfault", "was killed by SIGSEGV (a segmentation fault)"),
        ("exit", "exited with status 3"),
        ("sigkill", "was killed by SIGKILL (the out-of-memory killer, or another process)"),
    ],
)
async def test_a_crash_fails_the_job_saying_how_and_the_child_is_replaced(
    do: str, how: str, pool: ProcessPool
) -> None:
    run = pool.submit(spec(do), Calls())
    with pytest.raises(ChildProcessDied) as info:
        await run.result()
    assert info.value.how == how
    assert str(info.value) == f"the child process running the job {how}"
    dead = run.pid
    assert dead is not None and not alive(dead)
    await until(lambda: len(pool.pids) == 2 and dead not in pool.pids, "the replacement")
    # Both children run jobs: two at once, each sleeping until the other has started.
    first, second = Calls(), Calls()
    runs = [pool.submit(spec("sleep"), first), pool.submit(spec("sleep"), second)]
    assert {await started(runs[0], first), await started(runs[1], second)} == set(pool.pids)
    for r in runs:
        await r.kill(RuntimeError("done with it"))
    assert (await pool.submit(spec("echo", value=1), Calls()).result())["echo"] == 1


async def test_memory_limit_kills_the_child_and_fails_the_job() -> None:
    p = ProcessPool(SYNC, 1, max_memory_mb=100)
    await p.start()
    try:
        run = p.submit(spec("hog", mb=300), Calls())
        with pytest.raises(MemoryLimitError) as info:
            await run.result()
        assert re.fullmatch(
            r"memory limit: the child process used \d+ MB, over max_memory_mb=100",
            str(info.value),
        )
        assert int(str(info.value).split()[6]) > 100
        assert run.pid is not None and not alive(run.pid)
        assert (await p.submit(spec("echo", value=2), Calls()).result())["echo"] == 2
    finally:
        await p.close()


async def test_a_child_found_over_the_limit_after_a_job_is_retired(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_processes, "MEMORY_POLL_INTERVAL", 3600)  # no poll sees it run
    p = ProcessPool(SYNC, 1, max_memory_mb=100)
    await p.start()
    try:
        run = p.submit(spec("hog_return", mb=150), Calls())
        assert await run.result() == "kept"  # the job is not failed for it
        got = await p.submit(spec("echo"), Calls()).result()
        pid = run.pid
        assert pid is not None and got["pid"] != pid
        await until(lambda: not alive(pid), "the retired child to exit")
    finally:
        await p.close()


async def test_a_child_is_recycled_after_max_jobs_per_child_and_no_job_is_lost() -> None:
    p = ProcessPool(SYNC, 1, max_jobs_per_child=3)
    await p.start()
    try:
        # All submitted at once to the one child: they run in order, three per process.
        runs = [p.submit(spec("echo", str(i), value=i), Calls()) for i in range(10)]
        got = [await run.result() for run in runs]
    finally:
        await p.close()
    assert [g["echo"] for g in got] == list(range(10))
    pids = [g["pid"] for g in got]
    assert len(set(pids)) == 4
    assert [pids[i] for i in (0, 3, 6, 9)] == list(dict.fromkeys(pids))  # in FIFO order
    assert all(pids[i] == pids[i - i % 3] for i in range(10))


# --- import errors -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("processor", "expected"),
    [
        (
            "tests.fixtures.no_such_module:act",
            "cannot import module 'tests.fixtures.no_such_module' for processor "
            "'tests.fixtures.no_such_module:act': ModuleNotFoundError: No module named "
            "'tests.fixtures.no_such_module'",
        ),
        (
            "tests.fixtures.child_broken_import:act",
            "cannot import module 'tests.fixtures.child_broken_import' for processor "
            "'tests.fixtures.child_broken_import:act': ImportError: a dependency of this "
            "module is missing",
        ),
        (
            "tests.fixtures.child_processors:nope",
            "module 'tests.fixtures.child_processors' has no attribute 'nope' "
            "(processor 'tests.fixtures.child_processors:nope')",
        ),
        (
            "tests.fixtures.child_processors:not_callable",
            "processor 'tests.fixtures.child_processors:not_callable' is not callable (it is int)",
        ),
    ],
)
async def test_start_fails_naming_the_module_and_the_error(processor: str, expected: str) -> None:
    p = ProcessPool(processor, 2)
    with pytest.raises(ProcessorImportError) as info:
        await p.start()
    assert str(info.value) == expected
    assert p.pids == [] and my_children(processor) == []
    with pytest.raises(PoolClosedError):
        await p.submit(spec("echo"), Calls()).result()


async def test_a_replacement_that_cannot_import_breaks_the_pool(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = tmp_path / "changing_processor.py"
    module.write_text("import os\ndef act(job):\n    os._exit(1)\n")
    monkeypatch.syspath_prepend(str(tmp_path))  # the children get the parent's sys.path
    p = ProcessPool("changing_processor:act", 1)
    await p.start()
    try:
        module.write_text("raise ImportError('deployed away')\n")  # the code changes on disk
        with pytest.raises(ChildProcessDied):
            await p.submit(spec("any"), Calls()).result()
        await until(lambda: p.broken is not None, "the replacement to fail")
        assert "ImportError: deployed away" in str(p.broken)
        with pytest.raises(ProcessorImportError, match="deployed away"):
            await p.submit(spec("any"), Calls()).result()
        await until(lambda: p.pids == [], "the failed replacement to exit")
    finally:
        await p.close()


@pytest.mark.parametrize("bad", ["tests.fixtures.child_processors", "a b:c", ":act", "m:", 3])
async def test_a_malformed_processor_is_refused_at_once(bad: Any) -> None:
    with pytest.raises(ProcessorImportError, match=r"package\.module:function"):
        ProcessPool(bad, 1)


async def test_spec_of_names_importable_functions_only() -> None:
    from tests.fixtures import child_processors

    assert spec_of(child_processors.act) == SYNC

    def closure(job: Any) -> None:
        return None

    for bad in (lambda job: None, closure, Calls().__call__):
        with pytest.raises(ProcessorImportError, match="cannot be imported by name"):
            spec_of(bad)
    with pytest.raises(ProcessorImportError, match="importable function"):
        spec_of(42)  # type: ignore[arg-type]


async def test_bad_sizes_are_refused() -> None:
    bad: list[dict[str, Any]] = [
        {"size": 0},
        {"size": 1, "max_memory_mb": 0},
        {"size": 1, "max_jobs_per_child": -1},
    ]
    for kwargs in bad:
        with pytest.raises(InvalidOptionError):
            ProcessPool(SYNC, **kwargs)


# --- soft timeout ------------------------------------------------------------------------


async def test_warn_raises_in_a_busy_loop_which_can_catch_it(pool: ProcessPool) -> None:
    calls = Calls()
    run = pool.submit(spec("spin"), calls)
    await started(run, calls)
    run.warn()
    assert await run.result() == {"caught": "soft timeout: still running", "soft_timed_out": True}


async def test_warn_uncaught_fails_the_job_with_the_warning(pool: ProcessPool) -> None:
    calls = Calls()
    fields = spec("spin_uncaught").fields | {"opts": '{"x-soft-timeout":1500}'}
    run = pool.submit(ChildJobSpec("q", "1", fields, None, None, None), calls)
    await started(run, calls)
    run.warn()
    with pytest.raises(ChildJobError, match=r"^soft timeout: still running after 1\.5 s$") as info:
        await run.result()
    assert info.value.type_name == "corral.errors.JobTimeoutWarning"
    assert not isinstance(info.value, UnrecoverableError)


async def test_warn_during_a_job_method_call_comes_out_of_the_call(pool: ProcessPool) -> None:
    calls = Calls()
    run = pool.submit(spec("spin_calls"), calls)
    await started(run, calls)
    run.warn()
    assert await run.result() == {"soft_timed_out": True}
    # The frames stayed whole: the same child runs the next job.
    assert (await pool.submit(spec("echo", value=5), Calls()).result())["echo"] == 5


async def test_warn_before_start_or_after_the_end_does_nothing(pool: ProcessPool) -> None:
    first, second = Calls(), Calls()
    busy = [pool.submit(spec("sleep"), first), pool.submit(spec("sleep"), second)]
    queued = pool.submit(spec("echo", value=1), Calls())
    await started(busy[0], first)
    await started(busy[1], second)
    assert not queued.started
    queued.warn()  # not started: nothing to warn
    for run in busy:
        await run.kill(RuntimeError("stop"))
    assert (await queued.result())["echo"] == 1
    queued.warn()  # over: nothing either; the child runs the next job unwarned
    again = pool.submit(spec("echo", value=2), Calls())
    assert (await again.result())["echo"] == 2


async def test_warn_cancels_an_async_processor(apool: ProcessPool) -> None:
    calls = Calls()
    run = apool.submit(spec("sleep_catch"), calls)
    await started(run, calls)
    run.warn()
    assert await run.result() == {"cancelled": True, "soft_timed_out": True}

    calls = Calls()
    run = apool.submit(spec("sleep"), calls)
    await started(run, calls)
    run.warn()
    with pytest.raises(ChildJobError, match=r"^soft timeout: still running$") as info:
        await run.result()
    assert info.value.type_name == "corral.errors.JobTimeoutWarning"


async def test_a_job_past_its_soft_deadline_at_start_is_warned_there(
    pool: ProcessPool, apool: ProcessPool
) -> None:
    # It waited for a child past its soft deadline (a warn() then did nothing: not started).
    late = time.time() - 1
    job = ChildJobSpec("q", "1", spec("job").fields, None, time.time() + 60, late)
    assert (await pool.submit(job, Calls()).result())["soft_timed_out"] is True
    job = ChildJobSpec("q", "1", spec("sleep_catch").fields, None, None, late)
    assert await apool.submit(job, Calls()).result() == {"cancelled": True, "soft_timed_out": True}


# --- kill and close ----------------------------------------------------------------------


class Stopped(Exception):
    pass


@pytest.mark.parametrize("which", ["sync", "async"])
async def test_kill_returns_once_the_child_is_dead(
    which: str, pool: ProcessPool, apool: ProcessPool
) -> None:
    p = pool if which == "sync" else apool
    calls = Calls()
    run = p.submit(spec("sleep"), calls)
    pid = await started(run, calls)
    error = Stopped("timed out after 1 s")
    await run.kill(error)
    assert not alive(pid) and pid not in my_children(p.spec)
    with pytest.raises(Stopped) as info:
        await run.result()
    assert info.value is error
    assert (await p.submit(spec("echo", value=3), Calls()).result())["echo"] == 3


async def test_kill_of_a_queued_job_takes_it_out_of_the_queue(pool: ProcessPool) -> None:
    first, second = Calls(), Calls()
    busy = [pool.submit(spec("sleep"), first), pool.submit(spec("sleep"), second)]
    queued = [pool.submit(spec("echo", str(i), value=i), Calls()) for i in range(3)]
    await started(busy[0], first)
    await started(busy[1], second)
    await queued[1].kill(Stopped("cancelled"))
    with pytest.raises(Stopped, match="cancelled"):
        await queued[1].result()
    assert not queued[1].started
    for run in busy:
        await run.kill(Stopped("stop"))
    assert [(await queued[i].result())["echo"] for i in (0, 2)] == [0, 2]


async def test_close_with_children_running_leaves_no_process() -> None:
    p = ProcessPool(SYNC, 2)
    await p.start()
    first, second = Calls(), Calls()
    runs = [p.submit(spec("sleep"), first), p.submit(spec("sleep"), second)]
    queued = p.submit(spec("echo"), Calls())
    pids = {await started(runs[0], first), await started(runs[1], second)}
    assert pids == set(p.pids) and pids <= set(my_children(SYNC))
    killed = Stopped("worker closing")
    kill = asyncio.ensure_future(runs[0].kill(killed))
    await asyncio.sleep(0)  # the kill has begun (SIGKILL sent) and awaits the reaping
    await p.close()
    await kill
    assert p.pids == [] and not any(alive(pid) for pid in pids)
    assert not set(my_children(SYNC)) & pids
    with pytest.raises(Stopped):
        await runs[0].result()
    for run in (runs[1], queued):
        with pytest.raises(PoolClosedError):
            await run.result()
    with pytest.raises(PoolClosedError):
        await p.submit(spec("echo"), Calls()).result()


async def test_the_parent_keeps_its_signal_handlers() -> None:
    """Only the child ignores SIGINT and SIGTERM: importing the pool changes nothing here."""
    code = (
        "import signal, corral._processes;"
        "print(signal.getsignal(signal.SIGINT) is signal.default_int_handler,"
        " signal.getsignal(signal.SIGTERM) is signal.SIG_DFL)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.stdout.split() == ["True", "True"], out.stderr


async def test_a_child_ignores_sigint_and_sigterm(pool: ProcessPool) -> None:
    calls = Calls()
    run = pool.submit(spec("tick"), calls)
    pid = await started(run, calls)
    os.kill(pid, signal.SIGINT)
    os.kill(pid, signal.SIGTERM)
    # The job goes on: it still ticks well after the signals were delivered.
    ticks = calls.ticks
    await until(lambda: calls.ticks > ticks + 2, "ticks after the signals")
    assert not run.done and alive(pid)
    await run.kill(Stopped("stop"))


PARENT_SCRIPT = """
import asyncio, sys
from corral import _codec
from corral._processes import ChildJobSpec, ProcessPool

async def main():
    pool = ProcessPool("tests.fixtures.child_processors:act", 1)
    await pool.start()
    started = asyncio.Event()

    async def calls(method, args):
        started.set()
        return 1

    fields = {"name": "t", "data": _codec.dumps({"do": "sleep"})}
    run = pool.submit(ChildJobSpec("q", "1", fields, None, None, None), calls)
    await started.wait()
    print(run.pid, flush=True)
    await run.result()

asyncio.run(main())
"""


async def test_a_parent_killed_with_sigkill_takes_its_children_with_it() -> None:
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT_SCRIPT], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    try:
        assert parent.stdout is not None
        line = await asyncio.wait_for(asyncio.to_thread(parent.stdout.readline), PATIENCE)
        child = int(line)
        assert alive(child)
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        await until(lambda: not alive(child), "the child to die with its parent")
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        if parent.stdout is not None:
            parent.stdout.close()
