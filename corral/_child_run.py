"""The parent's handle on one child process of the pool (``_Child``, with ``_Link``, its end of
the socket) and on one job submitted to it (``ChildRun``); ``corral._processes`` holds the pool
that drives them, ``corral._child`` the other end.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import os
import signal
import struct
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import orjson

from corral.errors import ChildJobError, CorralError, UnrecoverableError

if TYPE_CHECKING:
    from corral._processes import ProcessPool

_HEADER = struct.Struct(">I")

#: What each usual fatal signal says about how the child died.
_SIGNAL_CAUSES: dict[int, str] = {
    signal.SIGSEGV: "a segmentation fault",
    signal.SIGKILL: "the out-of-memory killer, or another process",
    signal.SIGBUS: "a bus error",
    signal.SIGABRT: "an abort, such as a failed C assertion",
    signal.SIGFPE: "a floating-point exception",
    signal.SIGILL: "an illegal instruction",
}


@dataclass(frozen=True, slots=True)
class ChildJobSpec:
    """What a child needs to build the job: its hash as fetched, its lock token and deadlines."""

    queue_name: str
    job_id: str
    #: The job hash as fetched (decoded str values).
    fields: dict[str, str]
    token: str | None
    #: When the attempt's ``timeout`` stops it, and its soft warning (epoch seconds).
    deadline: float | None
    soft_deadline: float | None


#: Runs a job method for the child on the real job in the parent: ``("update_progress",
#: [value])``, ``("log", [line])`` -> line count, ``("update_data", [data])``. What it raises
#: goes back to the child and is raised there (the same class when it is one of
#: ``corral.errors``, else ``RuntimeError``).
CallHandler = Callable[[str, list[Any]], Awaitable[Any]]


class PoolClosedError(CorralError):
    """The process pool was closed while the job waited for a child or ran in one."""


class _UnrecoverableChildJobError(ChildJobError, UnrecoverableError):
    """A processor in a child raised an ``UnrecoverableError``: fail the job for good."""


def describe_exit(returncode: int) -> str:
    """How a child ended, for ``ChildProcessDied``: "was killed by SIGSEGV (a segmentation
    fault)", "exited with status 3"."""
    if returncode >= 0:
        return f"exited with status {returncode}"
    number = -returncode
    try:
        name = signal.Signals(number).name
    except ValueError:
        name = f"signal {number}"
    cause = _SIGNAL_CAUSES.get(number)
    return f"was killed by {name} ({cause})" if cause else f"was killed by {name}"


def _frame(msg: Any) -> bytes:
    body = orjson.dumps(msg)
    return _HEADER.pack(len(body)) + body


def _type_name(exc: BaseException) -> str:
    cls = type(exc)
    module = cls.__module__
    return cls.__qualname__ if module == "builtins" else f"{module}.{cls.__qualname__}"


_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_HAS_PROC = os.path.exists("/proc/self/statm")


def _rss_bytes(pid: int) -> int | None:
    """The resident memory of process ``pid``: /proc/<pid>/statm on Linux, psutil elsewhere."""
    if _HAS_PROC:
        try:
            with open(f"/proc/{pid}/statm", "rb") as f:
                return int(f.read().split()[1]) * _PAGE_SIZE
        except (OSError, ValueError, IndexError):
            return None
    psutil: Any = importlib.import_module("psutil")  # checked at ProcessPool(): off Linux

    try:
        return int(psutil.Process(pid).memory_info().rss)
    except psutil.Error:
        return None


class _Link(asyncio.Protocol):
    """The parent's end of one child's socket: splits the byte stream into frames."""

    def __init__(self, child: _Child) -> None:
        self.child = child
        self.buf = bytearray()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A cast, not an isinstance check: uvloop's transports do not derive from asyncio's.
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        # The usual chunk holds whole frames and is parsed as it is; the tail of a frame cut
        # short waits in a bytearray that grows in place (no copy per chunk of a big one).
        buf: bytes | bytearray = data
        if self.buf:
            self.buf += data
            buf = self.buf
        pos, size = 0, len(buf)
        on_frame = self.child.pool._on_frame
        child = self.child
        while size - pos >= 4:
            (n,) = _HEADER.unpack_from(buf, pos)
            end = pos + 4 + n
            if end > size:
                break
            try:
                on_frame(child, orjson.loads(buf[pos + 4 : end]))
            except Exception as exc:  # not JSON, or not a frame of ours: nothing to trust
                child.pool._protocol_error(child, exc)
                return
            pos = end
        if buf is not data:
            del self.buf[:pos]
        elif pos < size:  # (else self.buf is empty already)
            self.buf = bytearray(data[pos:])

    def connection_lost(self, exc: Exception | None) -> None:
        # The child is gone (its socket's only other end): take it out of the idle list at
        # once, so that no job is handed to it before the watcher has reaped it.
        child = self.child
        if child.state == "idle" and child in child.pool._idle:
            child.pool._idle.remove(child)
            child.state = "lost"

    def write(self, data: bytes) -> None:
        transport = self.transport
        if transport is not None and not transport.is_closing():
            transport.write(data)


class _Child:
    """One child process, from spawn until it is reaped."""

    __slots__ = (
        "error",
        "exited",
        "jobs",
        "link",
        "pid",
        "pool",
        "process",
        "ready",
        "run",
        "seq",
        "state",
        "warn_w",
    )

    def __init__(self, pool: ProcessPool, process: asyncio.subprocess.Process, warn_w: int):
        loop = asyncio.get_running_loop()
        self.pool = pool
        self.process = process
        self.pid = process.pid
        self.warn_w = warn_w
        self.link = _Link(self)
        #: starting -> idle <-> busy, then retiring (EOF sent), killed (SIGKILL sent) or lost
        #: (its socket closed while idle: it died).
        self.state = "starting"
        self.run: ChildRun | None = None
        self.seq = 0
        self.jobs = 0
        #: Why the pool killed this child (max_memory_mb, a broken frame), for its job.
        self.error: BaseException | None = None
        #: Set with whether the processor is async once imported; fails when it cannot be.
        self.ready: asyncio.Future[bool] = loop.create_future()
        #: Done once the child is reaped and its job's run has its outcome.
        self.exited: asyncio.Future[None] = loop.create_future()

    def kill(self) -> None:
        self.state = "killed"
        with contextlib.suppress(ProcessLookupError):  # exited already: the watcher reaps it
            self.process.kill()


class ChildRun:
    """One job submitted to the pool: where it is, and what became of it."""

    __slots__ = ("_calls", "_child", "_future", "_inflight", "_kill_error", "_pool", "_seq", "job")

    def __init__(self, pool: ProcessPool, job: ChildJobSpec, calls: CallHandler) -> None:
        self._pool = pool
        self.job = job
        self._calls = calls
        self._future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._child: _Child | None = None
        self._seq = 0
        self._kill_error: BaseException | None = None
        self._inflight: set[asyncio.Task[None]] | None = None

    async def result(self) -> Any:
        """The processor's return value (JSON-decoded).

        Raises:
            ChildJobError: the processor raised (also an ``UnrecoverableError`` when what it
                raised was one); ``type_name`` and ``remote_traceback`` say what and where.
            ChildProcessDied: the child died while running the job; ``how`` says how.
            MemoryLimitError: the child went over ``max_memory_mb`` and was killed.
            BaseException: the error given to :meth:`kill`, or ``PoolClosedError``.
        """
        # Shielded: a caller cancelled while waiting does not change how the job ends.
        return await asyncio.shield(self._future)

    @property
    def started(self) -> bool:
        """Whether a child took the job."""
        return self._child is not None

    @property
    def done(self) -> bool:
        """Whether the run has its outcome (``result()`` returns at once)."""
        return self._future.done()

    @property
    def pid(self) -> int | None:
        """The pid of the child that took the job (``None`` before one did)."""
        return None if self._child is None else self._child.pid

    def warn(self) -> None:
        """Soft timeout: set ``job.soft_timed_out`` in the child, and raise
        ``JobTimeoutWarning`` inside a plain function (SIGUSR1 to the child: its handler
        raises in the main thread, where the job runs) or cancel an async function's task.
        No-op when the job has not started or is over."""
        child = self._child
        if child is None or self._future.done() or child.run is not self:
            return
        if child.state != "busy":
            return
        try:
            # Written before the signal, and in one write of 8 bytes (atomic on a pipe): the
            # handler finds it whenever it runs. The seq tells a late warning from a current one.
            os.write(child.warn_w, self._seq.to_bytes(8, "big"))
            if not self._pool.is_async:
                os.kill(child.pid, signal.SIGUSR1)
        except (BlockingIOError, ProcessLookupError, BrokenPipeError):
            pass  # a full pipe holds warnings enough; a dead child's run ends without one

    async def kill(self, error: BaseException) -> None:
        """Hard stop (timeout, cancel, close): SIGKILL the child and return once it is reaped,
        so the caller settles the job when nothing runs it; ``result()`` then raises
        ``error``. A job not started yet is taken out of the queue and gets ``error`` too. A
        run already over is left as it is (one whose child is done with it, but whose job
        method calls are still being answered, is so once they are cancelled). The pool
        starts a replacement child."""
        if self._future.done():
            return
        child = self._child
        if child is None:
            with contextlib.suppress(ValueError):
                self._pool._pending.remove(self)
            self._set_error(error)
            return
        if child.run is not self:  # the child has moved on: never kill it for this run
            for task in list(self._inflight or ()):
                task.cancel()
            await asyncio.wait([self._future])
            return
        if self._kill_error is None:
            self._kill_error = error
        if child.state != "killed":
            child.kill()
        await asyncio.shield(child.exited)

    def _set_result(self, value: Any) -> None:
        if not self._future.done():
            self._future.set_result(value)

    def _set_error(self, error: BaseException) -> None:
        future = self._future
        if not future.done():
            future.set_exception(error)
            future.exception()  # retrieved: a run nobody awaits any more logs nothing
