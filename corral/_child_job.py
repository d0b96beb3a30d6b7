"""The child's half of the pool's frames, and the job objects a processor in a child process
gets: :class:`ChildJob` (sync) and :class:`AsyncChildJob`, whose ``update_progress``, ``log``
and ``update_data`` each ask the parent (one frame each way), which does them on the real job.
``corral._child`` runs them.
"""

from __future__ import annotations

import asyncio
import collections
import datetime
import inspect
import os
import socket
import struct
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

import orjson

from corral import _codec, errors
from corral._async.job_stream import DEFAULT_STREAM_MAX_LEN, DEFAULT_STREAM_TTL
from corral._provenance import attach as attach_provenance
from corral.errors import JobTimeoutWarning, UnrecoverableError, failure_reason, storable_text
from corral.job import JobRecord

_HEADER = struct.Struct(">I")
_MAIN_THREAD = threading.get_ident()


class _AsyncLink:
    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self.writer = writer
        self.calls: dict[int, asyncio.Future[list[Any]]] = {}


class _State:
    """What the sync signal handler and the job methods share with the loop (one per child)."""

    def __init__(self) -> None:
        self.conn: _Conn | None = None
        self.link: _AsyncLink | None = None
        self.warn_fd = -1
        #: The job running now (None between jobs) and its sequence number.
        self.job: JobRecord | None = None
        self.seq = -1
        #: Seqs read from the warn pipe for jobs not (yet) running: one can be read before the
        #: job frame it follows, or after the job it was for ended (stale: dropped).
        self.warned: set[int] = set()
        #: True while the processor runs (sync): only then may the handler raise.
        self.running = False
        #: True while a job method exchanges frames: a raise there would cut a frame, so the
        #: handler leaves the warning to the method, which raises it once the reply is in.
        self.in_call = False
        self.raise_after_call = False
        self.calls = 0
        self.lock = threading.Lock()
        self.warn_eof = False
        #: The seq of the job whose processor called ``discard()``: its failure is final.
        self.discarded = -1


_STATE = _State()


# --- frames ------------------------------------------------------------------------------


def _frame(msg: Any) -> bytes:
    body = orjson.dumps(msg)
    return _HEADER.pack(len(body)) + body


class _Conn:
    """The blocking socket to the parent, used by a sync child."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = bytearray()  # the start of a frame cut short, growing in place
        self.frames: collections.deque[Any] = collections.deque()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def recv(self) -> Any:
        """The next frame; ``None`` at EOF (the parent closed its end, or is gone)."""
        frames = self.frames
        while not frames:
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                return None
            buf: bytes | bytearray = chunk
            if self.buf:
                self.buf += chunk
                buf = self.buf
            pos, size = 0, len(buf)
            while size - pos >= 4:
                (n,) = _HEADER.unpack_from(buf, pos)
                end = pos + 4 + n
                if end > size:
                    break
                frames.append(orjson.loads(buf[pos + 4 : end]))
                pos = end
            if buf is not chunk:
                del self.buf[:pos]
            elif pos < size:  # (else self.buf is empty already)
                self.buf = bytearray(chunk[pos:])
        return frames.popleft()


def _read_warns(fd: int) -> set[int]:
    """Drain the warn pipe: the seqs written to it (8 bytes each, atomic pipe writes)."""
    seqs: set[int] = set()
    while True:
        try:
            data = os.read(fd, 4096)
        except (BlockingIOError, InterruptedError):
            return seqs
        if not data:  # the parent is gone: EOF on the socket ends this child soon
            _STATE.warn_eof = True
            return seqs
        for i in range(0, len(data) - 7, 8):
            seqs.add(int.from_bytes(data[i : i + 8], "big"))


def _soft_message(job: JobRecord) -> str:
    # The in-process runners' words; the job's own option gives the time (a worker default
    # does not reach the child, which then says less).
    soft = job.soft_timeout
    text = "soft timeout: still running"
    return f"{text} after {soft:g} s" if soft else text


def _type_name(exc: BaseException) -> str:
    cls = type(exc)
    module = cls.__module__
    return cls.__qualname__ if module == "builtins" else f"{module}.{cls.__qualname__}"


def _fail_frame(seq: int, exc: BaseException) -> bytes:
    # Every text made storable: a message with a lone surrogate appears raw in the traceback.
    try:
        text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    except Exception:  # a __str__ that raises, met again by the formatting
        text = f"{_type_name(exc)} (its traceback cannot be formatted)"
    unrecoverable = isinstance(exc, UnrecoverableError) or _STATE.discarded == seq
    return _frame(
        [
            "fail",
            seq,
            storable_text(_type_name(exc)),
            failure_reason(exc),
            storable_text(text),
            unrecoverable,
        ]
    )


def _done_frame(seq: int, value: Any) -> bytes:
    if inspect.isawaitable(value):
        if inspect.iscoroutine(value):
            value.close()  # never awaited: say so in the job, not as a RuntimeWarning
        return _fail_frame(
            seq, TypeError("the processor returned an awaitable: declare it with async def")
        )
    try:
        return _frame(["done", seq, value])
    except (TypeError, orjson.JSONEncodeError) as exc:
        return _fail_frame(seq, TypeError(f"return value is not JSON serializable: {exc}"))


def _call_frame(job: JobRecord, method: str, args: list[Any]) -> tuple[int, bytes]:
    st = _STATE
    if st.job is not job:
        # A call of a job that ended (from a thread or task it left behind) must not reach
        # the job the child runs now.
        raise RuntimeError(f"job {job.id} is over: {method}() cannot reach it any more")
    for value in args:
        _codec.encode_data(value)  # refuses what JSON cannot carry, as the job method does
    st.calls += 1
    return st.calls, _frame(["call", st.calls, st.seq, method, args])


def _reply_value(reply: list[Any]) -> Any:
    """The value of a ``reply`` frame, or raise what the parent's job method raised: the same
    class when it is one of corral's, else a RuntimeError naming it."""
    if reply[2]:
        return reply[3]
    type_name, message = reply[3], reply[4]
    module, _, name = type_name.rpartition(".")
    cls = getattr(errors, name, None) if module == "corral.errors" else None
    if isinstance(cls, type) and issubclass(cls, Exception):
        try:
            exc = cls(message)
        except TypeError:  # a constructor that takes more than the message
            exc = cls.__new__(cls)
            Exception.__init__(exc, message)
        raise exc
    raise RuntimeError(f"{type_name}: {message}")


def _seconds(value: Any) -> float | None:
    """A duration (seconds or a ``timedelta``) as seconds for the frame; the parent checks it."""
    if value is None or isinstance(value, (int, float)):
        return value
    if isinstance(value, datetime.timedelta):
        return value.total_seconds()
    raise errors.InvalidOptionError(f"a duration must be seconds or a timedelta, got {value!r}")


def _signal_outcome(job: JobRecord, name: str, outcome: list[Any]) -> Any:
    """What the parent's wait_for_signal did (corral._child_calls), raised or returned here."""
    kind, value = outcome
    if kind == "timeout":
        raise errors.SignalTimeout(name, int(value), job_id=job.id)
    if kind == "parked":
        job.delay = int(value)
        raise errors.DelayedError(f"job {job.id} waits for signal {name!r} (parked in delayed)")
    return value


# --- the job objects ------------------------------------------------------------------


class ChildJob(JobRecord):
    """The job as a sync processor in a child process sees it: the record, with
    ``deadline``/``soft_deadline`` set, and the methods whose work the parent does on the real
    job (each a request frame, then the reply)."""

    __slots__ = ()

    def _call(self, method: str, args: list[Any]) -> Any:
        st = _STATE
        conn = st.conn
        assert conn is not None
        main = threading.get_ident() == _MAIN_THREAD
        # The lock makes each exchange whole when threads of the job call too.
        with st.lock:
            call, data = _call_frame(self, method, args)
            st.in_call = main
            try:
                conn.send(data)
                while True:
                    reply = conn.recv()
                    if reply is None:  # the parent is gone: nothing to report to
                        os._exit(1)
                    if reply[0] == "reply" and reply[1] == call:
                        break
            finally:
                if main:
                    st.in_call = False
        if main and st.raise_after_call:
            st.raise_after_call = False
            raise JobTimeoutWarning(_soft_message(self))
        return _reply_value(reply)

    def discard(self) -> None:
        """Make this attempt the last: if it fails, the job fails for good (see
        ``Job.discard``). Nothing is sent: the failure says so when it is reported."""
        _STATE.discarded = _STATE.seq

    def update_progress(self, progress: int | float | dict[str, Any] | list[Any]) -> None:
        """Store the job's progress (see ``Job.update_progress``)."""
        self._call("update_progress", [progress])
        self.progress = progress

    def log(self, line: str) -> int:
        """Append ``line`` to the job's log; returns how many lines it holds now."""
        return int(self._call("log", [line]))

    def update_data(self, data: Any) -> None:
        """Replace the job's data (see ``Job.update_data``)."""
        self._call("update_data", [data])
        self.data = data

    def stream(
        self, chunk: Any, *, max_len: int = DEFAULT_STREAM_MAX_LEN, ttl: float = DEFAULT_STREAM_TTL
    ) -> str:
        """Append ``chunk`` to the job's stream of partial results (see ``Job.stream``)."""
        return str(self._call("stream", [chunk, max_len, _seconds(ttl)]))

    def wait_for_signal(self, name: str, *, timeout: float | None = None) -> Any:
        """The payload of the job's signal ``name``, or park the job until it comes (see
        ``Job.wait_for_signal``)."""
        return _signal_outcome(self, name, self._call("wait_for_signal", [name, _seconds(timeout)]))

    def step(self, name: str, fn: Callable[[], Any]) -> Any:
        """Run ``fn()`` once for this job and return its result, recorded (see ``Job.step``)."""
        found, value = self._call("step_recorded", [name])
        if found:
            return value
        result = fn()
        if inspect.iscoroutine(result):
            result.close()
            raise errors.InvalidOptionError(
                f"step {name!r}: fn is async; a plain function's job runs plain functions"
            )
        return self._call("step", [name, result])

    def get_steps(self) -> dict[str, Any]:
        """The job's recorded steps: name -> result."""
        return dict(self._call("get_steps", []))


class AsyncChildJob(JobRecord):
    """:class:`ChildJob` for an async processor: the same methods, as coroutines."""

    __slots__ = ()

    async def _call(self, method: str, args: list[Any]) -> Any:
        link = _STATE.link
        assert link is not None
        call, data = _call_frame(self, method, args)
        future: asyncio.Future[list[Any]] = asyncio.get_running_loop().create_future()
        link.calls[call] = future
        try:
            link.writer.write(data)
            reply = await future
        finally:
            link.calls.pop(call, None)
        return _reply_value(reply)

    def discard(self) -> None:
        """Make this attempt the last: if it fails, the job fails for good (see
        ``AsyncJob.discard``). Nothing is sent: the failure says so when it is reported."""
        _STATE.discarded = _STATE.seq

    async def update_progress(self, progress: int | float | dict[str, Any] | list[Any]) -> None:
        """Store the job's progress (see ``AsyncJob.update_progress``)."""
        await self._call("update_progress", [progress])
        self.progress = progress

    async def log(self, line: str) -> int:
        """Append ``line`` to the job's log; returns how many lines it holds now."""
        return int(await self._call("log", [line]))

    async def update_data(self, data: Any) -> None:
        """Replace the job's data (see ``AsyncJob.update_data``)."""
        await self._call("update_data", [data])
        self.data = data

    async def stream(
        self, chunk: Any, *, max_len: int = DEFAULT_STREAM_MAX_LEN, ttl: float = DEFAULT_STREAM_TTL
    ) -> str:
        """Append ``chunk`` to the job's stream of partial results (see ``AsyncJob.stream``)."""
        return str(await self._call("stream", [chunk, max_len, _seconds(ttl)]))

    async def wait_for_signal(self, name: str, *, timeout: float | None = None) -> Any:
        """The payload of the job's signal ``name``, or park the job until it comes (see
        ``AsyncJob.wait_for_signal``)."""
        outcome = await self._call("wait_for_signal", [name, _seconds(timeout)])
        return _signal_outcome(self, name, outcome)

    async def step(self, name: str, fn: Callable[[], Any]) -> Any:
        """Run ``fn()`` once for this job and return its result, recorded (see
        ``AsyncJob.step``)."""
        found, value = await self._call("step_recorded", [name])
        if found:
            return value
        result = fn()
        if inspect.isawaitable(result):
            result = await result
        return await self._call("step", [name, result])

    async def get_steps(self) -> dict[str, Any]:
        """The job's recorded steps: name -> result."""
        return dict(await self._call("get_steps", []))


def _make_job(cls: type[JobRecord], msg: list[Any]) -> JobRecord:
    _, _seq, queue_name, job_id, fields, token, deadline, soft_deadline = msg
    job = cls.from_hash(queue_name, job_id, fields, token=token)
    job.deadline = deadline
    job.soft_deadline = soft_deadline
    # The provenance scope of what the processor adds, left set until the next job's: a sync
    # processor runs in this context, an async one in a task that copies it.
    attach_provenance(job)
    return job


def _warned_at_start(job: JobRecord, seq: int) -> bool:
    """Whether the job is past its soft timeout as it starts: its warning came before its
    frame was read, or its soft deadline passed while it waited for a child (a warning the
    parent gave then was a no-op)."""
    st = _STATE
    warned = seq in st.warned
    st.warned.clear()  # any other seq is of a job that ended
    soft = job.soft_deadline
    return warned or (soft is not None and time.time() >= soft)
