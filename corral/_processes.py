"""Child-process processors, the parent side: a pool of N fresh interpreters (``python -m
corral._child``, never a fork of the parent's running loop) that each import the processor
``"package.module:function"`` once and then run one job at a time.

The parent owns every decision: which child runs which job (FIFO while all are busy), when a
child is killed (its job's timeout, a cancel, ``max_memory_mb``, close) and what the attempt's
error then is. A job's run ends only once its child is reaped, so the caller settles the job
when nothing can be running it any more. A child that dies any way is replaced at once; one
that ran ``max_jobs_per_child`` jobs is retired (EOF on its socket) and replaced.

Per job, a no-op costs one frame each way on a ``socketpair`` (4-byte length + orjson): no
process, thread or poll per job. ``corral._child`` describes the frames.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import importlib
import os
import socket
import subprocess
import sys
from typing import Any

import orjson

from corral import options
from corral._child import PARENT_ENV, SYS_PATH_ENV
from corral._child_run import (
    _HAS_PROC,
    CallHandler,
    ChildJobSpec,
    ChildRun,
    PoolClosedError,
    _Child,
    _frame,
    _rss_bytes,
    _type_name,
    _UnrecoverableChildJobError,
    describe_exit,
)
from corral._imports import check_spec
from corral.errors import (
    ChildJobError,
    ChildProcessDied,
    ConfigurationError,
    MemoryLimitError,
    ProcessorImportError,
    failure_reason,
)

__all__ = [
    "CallHandler",
    "ChildJobSpec",
    "ChildRun",
    "PoolClosedError",
    "ProcessPool",
    "describe_exit",
]

#: How often the parent reads the RSS of each busy child when ``max_memory_mb`` is set (s).
MEMORY_POLL_INTERVAL = 0.1

#: Replacements in a row that may die while importing before the pool gives up.
MAX_START_FAILURES = 3


class ProcessPool:
    """Runs ``"package.module:function"`` in ``size`` child processes, one job each at a time.

    Args:
        spec: the processor, importable as ``"package.module:function"``.
        size: how many children.
        max_memory_mb: kill a child whose resident memory goes over this while it runs a job
            (polled every 0.1 s; /proc on Linux, psutil elsewhere); the job fails with
            ``MemoryLimitError``. A child found over it after a job is retired.
        max_jobs_per_child: retire a child (and start a new one) after this many jobs.

    Example::

        pool = ProcessPool("myapp.tasks:resize", 2)
        await pool.start()
        run = pool.submit(ChildJobSpec("images", "1", fields, None, None, None), calls)
        print(await run.result())
        await pool.close()
    """

    def __init__(
        self,
        spec: str,
        size: int,
        *,
        max_memory_mb: int | None = None,
        max_jobs_per_child: int | None = None,
    ) -> None:
        self.spec = check_spec(spec)
        self.size = options.int_option("processes", size, 1)
        self.max_memory_mb = (
            None if max_memory_mb is None else options.int_option("max_memory_mb", max_memory_mb, 1)
        )
        self.max_jobs_per_child = (
            None
            if max_jobs_per_child is None
            else options.int_option("max_jobs_per_child", max_jobs_per_child, 1)
        )
        if self.max_memory_mb is not None and not _HAS_PROC:
            try:
                importlib.import_module("psutil")
            except ImportError:
                raise ConfigurationError(
                    "max_memory_mb needs /proc (Linux) or psutil: pip install psutil"
                ) from None
        #: Whether the processor is a coroutine function (known once started).
        self.is_async = False
        #: Set once a replacement child cannot import the processor: every run fails with it.
        self.broken: ProcessorImportError | None = None
        self._children: set[_Child] = set()
        self._idle: list[_Child] = []
        self._pending: collections.deque[ChildRun] = collections.deque()
        #: Replacements being started, and runs waiting for their calls to end.
        self._tasks: set[asyncio.Task[Any]] = set()
        #: One per child: reaps it (never cancelled, or a child could be left unreaped).
        self._watchers: set[asyncio.Task[None]] = set()
        self._poller: asyncio.Task[None] | None = None
        #: Job method calls being answered (cancelled at close: the jobs are over).
        self._answers: set[asyncio.Task[None]] = set()
        self._closed = asyncio.Event()
        self._started = False
        self._closing = False
        self._seq = 0
        self._start_failures = 0

    @property
    def pids(self) -> list[int]:
        """The pids of the child processes alive now (starting, running or retiring)."""
        return sorted(child.pid for child in self._children)

    # --- start and close ------------------------------------------------------------

    async def start(self) -> None:
        """Spawn ``size`` children and wait until each imported the processor (``is_async``
        then says whether it is a coroutine function).

        Raises:
            ProcessorImportError: naming the module and the import error (the child's); no
                child is left running.
        """
        if self._started:
            raise ConfigurationError("the process pool was started already")
        self._started = True
        try:
            children = [await self._spawn() for _ in range(self.size)]
            outcomes = await asyncio.gather(
                *(asyncio.shield(child.ready) for child in children), return_exceptions=True
            )
            if self._closing:
                raise PoolClosedError("the process pool was closed while it started")
            for outcome in outcomes:
                if isinstance(outcome, BaseException):
                    raise self._start_error(outcome)
        except BaseException:
            await self.close()
            raise
        self.is_async = bool(outcomes[0])
        for child in children:
            if child.state == "starting":  # not one that died since (the watcher replaced it)
                child.state = "idle"
                self._idle.append(child)
        if self.max_memory_mb is not None:
            self._poller = asyncio.ensure_future(self._poll_memory())

    def _start_error(self, error: BaseException) -> BaseException:
        if isinstance(error, ChildProcessDied):
            return ProcessorImportError(
                f"the child process importing processor {self.spec!r} {error.how}"
            )
        return error

    async def close(self) -> None:
        """Kill every child (SIGKILL) and reap it. Jobs still running end with the error given
        to their :meth:`ChildRun.kill`, else ``PoolClosedError``, as do the queued ones.
        Returns when no child process is alive."""
        self._closing = True
        self._closed.set()
        error = PoolClosedError("the process pool was closed")
        while self._pending:
            self._pending.popleft()._set_error(error)
        if self._poller is not None:
            self._poller.cancel()
        for task in list(self._answers):
            task.cancel()
        # Replacements are not cancelled: one cut inside create_subprocess_exec could leave a
        # process nobody knows of. They see _closing and kill what they started.
        while self._children or self._tasks or self._watchers:
            for child in list(self._children):
                run = child.run
                if run is not None and run._kill_error is None:
                    run._kill_error = error
                if child.state != "killed":
                    child.kill()
            waits = [asyncio.shield(child.exited) for child in self._children]
            await asyncio.gather(*waits, *self._tasks, *self._watchers, return_exceptions=True)

    def _keep(self, task: asyncio.Task[Any]) -> None:
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _spawn(self) -> _Child:
        """Start one child process; it says when it is ready (``child.ready``)."""
        loop = asyncio.get_running_loop()
        parent_sock, child_sock = socket.socketpair()
        warn_r, warn_w = os.pipe()
        env = dict(os.environ)
        env[SYS_PATH_ENV] = orjson.dumps(sys.path).decode()
        env[PARENT_ENV] = str(os.getpid())
        try:
            process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "corral._child",
                str(child_sock.fileno()),
                str(warn_r),
                self.spec,
                pass_fds=(child_sock.fileno(), warn_r),
                stdin=subprocess.DEVNULL,
                env=env,
                cwd=os.getcwd(),
            )
        except BaseException:
            parent_sock.close()
            os.close(warn_w)
            raise
        finally:
            child_sock.close()
            os.close(warn_r)
        os.set_blocking(warn_w, False)
        child = _Child(self, process, warn_w)
        self._children.add(child)
        watcher = asyncio.ensure_future(self._watch(child))
        self._watchers.add(watcher)
        watcher.add_done_callback(self._watchers.discard)
        try:
            await loop.create_unix_connection(lambda: child.link, sock=parent_sock)
        except BaseException:
            child.kill()
            parent_sock.close()
            raise
        if self._closing:
            child.kill()
        return child

    async def _replace(self) -> None:
        """Start a child in place of one that died or retired."""
        if self._start_failures:
            delay = min(5.0, 0.2 * 2**self._start_failures)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._closed.wait(), delay)
        if self._closing:
            return
        try:
            child = await self._spawn()
            await asyncio.shield(child.ready)
        except ProcessorImportError as exc:
            self._break(exc)
            return
        except (ChildProcessDied, OSError) as exc:
            if self._closing:
                return
            self._start_failures += 1
            if self._start_failures >= MAX_START_FAILURES:
                self._break(
                    ProcessorImportError(
                        f"cannot start a child process for processor {self.spec!r}:"
                        f" {failure_reason(exc)}"
                    )
                )
            else:
                self._keep(asyncio.ensure_future(self._replace()))
            return
        self._start_failures = 0
        if child.state == "starting":
            self._make_idle(child)

    def _break(self, error: ProcessorImportError) -> None:
        """No child can start any more (the processor's code changed under the worker)."""
        if self._closing:
            return
        self.broken = error
        while self._pending:
            self._pending.popleft()._set_error(error)

    # --- jobs -------------------------------------------------------------------------

    def submit(self, job: ChildJobSpec, calls: CallHandler) -> ChildRun:
        """Queue ``job`` for the next idle child (FIFO); returns at once."""
        run = ChildRun(self, job, calls)
        if self._closing or not self._started:
            run._set_error(PoolClosedError("the process pool is not running"))
        elif self.broken is not None:
            run._set_error(self.broken)
        elif self._idle:
            self._dispatch(self._idle.pop(), run)
        else:
            self._pending.append(run)
        return run

    def _dispatch(self, child: _Child, run: ChildRun) -> None:
        self._seq += 1
        seq = self._seq
        child.state = "busy"
        child.run = run
        child.seq = seq
        run._child = child
        run._seq = seq
        job = run.job
        child.link.write(
            _frame(
                [
                    "job",
                    seq,
                    job.queue_name,
                    job.job_id,
                    job.fields,
                    job.token,
                    job.deadline,
                    job.soft_deadline,
                ]
            )
        )

    def _make_idle(self, child: _Child) -> None:
        if self._pending:
            self._dispatch(child, self._pending.popleft())
        else:
            child.state = "idle"
            self._idle.append(child)

    def _on_frame(self, child: _Child, msg: list[Any]) -> None:
        state = child.state
        if state == "killed":
            return  # whatever it says now, its run ends with the error it was killed for
        kind = msg[0]
        if kind == "done" or kind == "fail":
            run = child.run
            if run is None or msg[1] != child.seq:
                return self._protocol_error(child, msg)
            child.run = None
            child.jobs += 1
            if kind == "done":
                self._settle(run, msg[2], None)
            else:
                _, _, type_name, message, remote_traceback, unrecoverable = msg
                cls = _UnrecoverableChildJobError if unrecoverable else ChildJobError
                error = cls(message, type_name=type_name, remote_traceback=remote_traceback)
                self._settle(run, None, error)
            self._after_job(child)
        elif kind == "call":
            run = child.run
            if run is None or msg[2] != child.seq:  # the child refuses those itself
                return self._protocol_error(child, msg)
            task = asyncio.ensure_future(self._answer(child, run, msg[1], msg[3], msg[4]))
            self._answers.add(task)
            task.add_done_callback(self._answers.discard)
            if run._inflight is None:
                run._inflight = set()
            run._inflight.add(task)
            task.add_done_callback(run._inflight.discard)
        elif kind == "ready" and state == "starting":
            if not child.ready.done():
                child.ready.set_result(bool(msg[1]))
        elif kind == "import_error" and state == "starting":
            if not child.ready.done():
                child.ready.set_exception(ProcessorImportError(msg[1]))
        else:
            self._protocol_error(child, msg)

    def _protocol_error(self, child: _Child, what: Any) -> None:
        """The child sent what it never should: kill it (its job fails saying so)."""
        text = str(what)[:100]
        child.error = ChildProcessDied(f"sent a frame out of turn ({text}) and was killed")
        child.kill()

    def _after_job(self, child: _Child) -> None:
        limit = self.max_jobs_per_child
        if limit is not None and child.jobs >= limit:
            return self._retire(child)
        if self.max_memory_mb is not None:
            rss = _rss_bytes(child.pid)
            if rss is not None and rss > self.max_memory_mb << 20:
                return self._retire(child)
        if not self._closing:
            self._make_idle(child)

    def _retire(self, child: _Child) -> None:
        """EOF on its socket: the child exits between jobs; a new one takes its place now."""
        child.state = "retiring"
        transport = child.link.transport
        if transport is not None:
            transport.close()
        if not self._closing:
            self._keep(asyncio.ensure_future(self._replace()))

    def _settle(self, run: ChildRun, value: Any, error: BaseException | None) -> None:
        """Give ``run`` its outcome, after the job method calls it started have ended (so
        a progress update cannot land after the job is settled)."""
        if run._inflight:
            self._keep(asyncio.ensure_future(self._settle_later(run, value, error)))
        elif error is None:
            run._set_result(value)
        else:
            run._set_error(error)

    async def _settle_later(self, run: ChildRun, value: Any, error: BaseException | None) -> None:
        inflight = list(run._inflight or ())
        if error is not None and not isinstance(error, ChildJobError):
            for task in inflight:  # the child is dead: nobody waits for their replies
                task.cancel()
        await asyncio.gather(*inflight, return_exceptions=True)
        if error is None:
            run._set_result(value)
        else:
            run._set_error(error)

    async def _answer(
        self, child: _Child, run: ChildRun, call: int, method: str, args: list[Any]
    ) -> None:
        try:
            value = await run._calls(method, args)
            reply = _frame(["reply", call, True, value])
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            reply = _frame(["reply", call, False, _type_name(exc), failure_reason(exc)])
        if child.state in ("busy", "idle"):
            child.link.write(reply)

    async def _watch(self, child: _Child) -> None:
        """Reap the child, end its run, and start a replacement when it died unasked."""
        returncode = await child.process.wait()
        os.close(child.warn_w)
        transport = child.link.transport
        if transport is not None:
            transport.close()
        self._children.discard(child)
        if child in self._idle:
            self._idle.remove(child)
        how = describe_exit(returncode)
        was_ready = child.ready.done() and child.ready.exception() is None
        if not child.ready.done():
            child.ready.set_exception(ChildProcessDied(how))
            child.ready.exception()
        run = child.run
        child.run = None
        if run is not None:
            error = run._kill_error or child.error or ChildProcessDied(how)
            if run._inflight:
                await self._settle_later(run, None, error)
            else:
                run._set_error(error)
        child.exited.set_result(None)
        if was_ready and child.state != "retiring" and not self._closing:
            self._keep(asyncio.ensure_future(self._replace()))

    async def _poll_memory(self) -> None:
        limit_mb = self.max_memory_mb
        assert limit_mb is not None
        limit = limit_mb << 20
        while True:
            await asyncio.sleep(MEMORY_POLL_INTERVAL)
            for child in list(self._children):
                if child.state != "busy":
                    continue
                rss = _rss_bytes(child.pid)
                if rss is not None and rss > limit:
                    # MB rounded up: a child 1 byte over 100 MB did use 101 (started to).
                    child.error = MemoryLimitError(
                        f"memory limit: the child process used {-(-rss >> 20)} MB,"
                        f" over max_memory_mb={limit_mb}"
                    )
                    child.kill()
