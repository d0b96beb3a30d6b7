"""The child side of the process pool (``corral._processes`` is the parent's): run as
``python -m corral._child SOCKET_FD WARN_FD SPEC``, it imports the processor ``SPEC`` once, says
whether it is async, then runs one job at a time for as long as its parent keeps it.

Frames both ways are a 4-byte big-endian length and orjson (no pickle): the parent sends
``["job", seq, queue, id, fields, token, deadline, soft_deadline]`` and ``["reply", call, ok,
...]``; the child answers ``["done", seq, value]`` or ``["fail", seq, type, message, traceback,
unrecoverable]``, and asks ``["call", call, seq, method, args]`` for the job methods that act
in Redis. A soft timeout comes as the job's ``seq`` written to the warn pipe: an async child
cancels the job's task; a sync one also gets SIGUSR1, whose handler raises
:class:`~corral.errors.JobTimeoutWarning` in the main thread, where the job runs, so even a
busy loop sees it. A pipe apart from the socket, so that the handler can read it at any time
without cutting into a frame the job's own calls are reading or writing.
"""

from __future__ import annotations

import os
import signal
import sys

if __name__ == "__main__":
    # First of all, in the child only (the parent imports this module too): a Ctrl-C or a
    # SIGTERM sent to the whole process group is for the parent, which decides what becomes
    # of the running jobs (they are not to die with it half-done).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)

import asyncio
import functools
import importlib
import inspect
import socket
import struct
from collections.abc import Callable
from types import FrameType
from typing import Any

import orjson

from corral import errors
from corral._child_job import (
    _STATE,
    AsyncChildJob,
    ChildJob,
    _AsyncLink,
    _Conn,
    _done_frame,
    _fail_frame,
    _frame,
    _make_job,
    _read_warns,
    _soft_message,
    _type_name,
    _warned_at_start,
)
from corral.errors import JobTimeoutWarning, failure_reason
from corral.job import JobRecord

#: Environment variables the parent sets: its ``sys.path`` (JSON) and its pid.
SYS_PATH_ENV = "CORRAL_CHILD_SYS_PATH"
PARENT_ENV = "CORRAL_CHILD_PARENT"

_HEADER = struct.Struct(">I")
_PR_SET_PDEATHSIG = 1


# --- sync jobs -----------------------------------------------------------------------


def _on_warn_signal(signum: int, frame: FrameType | None) -> None:
    """SIGUSR1: read the warn pipe, and raise the warning in the job when it is for the job
    running now and the processor (not this module's bookkeeping around it) is running."""
    st = _STATE
    st.warned |= _read_warns(st.warn_fd)
    job = st.job
    if job is None or st.seq not in st.warned:
        return
    st.warned.discard(st.seq)
    job.soft_timed_out = True
    if not st.running or frame is None or frame.f_code is _run_sync.__code__:
        return  # the processor has not started or has returned: the flag is all it gets
    if st.in_call:
        st.raise_after_call = True
        return
    raise JobTimeoutWarning(_soft_message(job))


def _run_sync(fn: Callable[[Any], Any], job: JobRecord, seq: int) -> bytes:
    # The signal handler never raises while this frame is the one running (see above), so a
    # warning cannot land between the processor's return and the bookkeeping.
    st = _STATE
    st.running = True
    try:
        value = fn(job)
    except BaseException as exc:
        st.running = False
        return _fail_frame(seq, exc)
    st.running = False
    return _done_frame(seq, value)


def _serve_sync(conn: _Conn, fn: Callable[[Any], Any]) -> None:
    st = _STATE
    signal.signal(signal.SIGUSR1, _on_warn_signal)
    while True:
        msg = conn.recv()
        if msg is None:
            return  # EOF between jobs: the parent retired this child, or is gone
        if msg[0] != "job":
            continue  # a late reply to a call of a job that ended (cannot happen when sync)
        seq = msg[1]
        try:
            job = _make_job(ChildJob, msg)
        except Exception as exc:
            conn.send(_fail_frame(seq, exc))
            continue
        st.seq = seq
        st.job = job
        if _warned_at_start(job, seq):
            job.soft_timed_out = True  # too early to raise: the processor sees the flag
        reply = _run_sync(fn, job, seq)
        with st.lock:  # after any call a thread of the job has begun; none can begin after
            st.job = None
            st.raise_after_call = False
            conn.send(reply)


# --- async jobs ----------------------------------------------------------------------


async def _run_async(fn: Callable[[Any], Any], job: JobRecord) -> tuple[bool, Any]:
    # SystemExit and KeyboardInterrupt would end the child's loop: they fail the job instead.
    try:
        return True, await fn(job)
    except asyncio.CancelledError:
        raise
    except BaseException as exc:
        return False, exc


async def _serve_async(sock: socket.socket, fn: Callable[[Any], Any]) -> None:
    st = _STATE
    loop = asyncio.get_running_loop()
    reader, writer = await asyncio.open_unix_connection(sock=sock)
    link = st.link = _AsyncLink(writer)
    task: asyncio.Future[tuple[bool, Any]] | None = None

    def on_warn() -> None:
        st.warned |= _read_warns(st.warn_fd)
        if st.warn_eof:  # a pipe at EOF stays readable: stop watching it
            loop.remove_reader(st.warn_fd)
        job = st.job
        if job is not None and task is not None and st.seq in st.warned:
            st.warned.discard(st.seq)
            job.soft_timed_out = True
            task.cancel()

    def finished(done: asyncio.Future[tuple[bool, Any]], *, seq: int, job: JobRecord) -> None:
        nonlocal task
        task = None
        st.job = None
        if done.cancelled():
            cancelled = asyncio.CancelledError()
            exc = JobTimeoutWarning(_soft_message(job)) if job.soft_timed_out else cancelled
            writer.write(_fail_frame(seq, exc))
            return
        ok, value = done.result()
        writer.write(_done_frame(seq, value) if ok else _fail_frame(seq, value))

    loop.add_reader(st.warn_fd, on_warn)
    while True:
        try:
            header = await reader.readexactly(4)
            msg = orjson.loads(await reader.readexactly(_HEADER.unpack(header)[0]))
        except asyncio.IncompleteReadError:
            break  # EOF: the parent retired this child, or is gone
        kind = msg[0]
        if kind == "reply":
            future = link.calls.get(msg[1])
            if future is not None and not future.done():
                future.set_result(msg)
        elif kind == "job":
            seq = msg[1]
            try:
                job = _make_job(AsyncChildJob, msg)
            except Exception as exc:
                writer.write(_fail_frame(seq, exc))
                continue
            st.seq = seq
            st.job = job
            task = asyncio.ensure_future(_run_async(fn, job))
            task.add_done_callback(functools.partial(finished, seq=seq, job=job))
            if _warned_at_start(job, seq):
                job.soft_timed_out = True
                # After the task's first step, so that the processor's own try can catch it.
                loop.call_soon(task.cancel)
    if task is not None:
        task.cancel()


# --- start ----------------------------------------------------------------------------


def load(spec: str) -> Callable[..., Any]:
    """Import ``"package.module:function"`` (dotted attributes allowed after the colon).

    Raises:
        ProcessorImportError: naming the module and what went wrong.
    """
    module_name, _, attr = spec.partition(":")
    try:
        obj: Any = importlib.import_module(module_name)
    except BaseException as exc:
        raise errors.ProcessorImportError(
            f"cannot import module {module_name!r} for processor {spec!r}: "
            f"{_type_name(exc)}: {failure_reason(exc)}"
        ) from exc
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise errors.ProcessorImportError(
                f"module {module_name!r} has no attribute {attr!r} (processor {spec!r})"
            ) from None
    if not callable(obj):
        raise errors.ProcessorImportError(
            f"processor {spec!r} is not callable (it is {type(obj).__name__})"
        )
    return obj  # type: ignore[no-any-return]


def _die_with_parent() -> None:
    """Linux: SIGKILL this process when its parent dies (even by SIGKILL), so that no job keeps
    running unseen while another worker takes it again once its lock expires."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # pragma: no cover - a libc without prctl
        return
    parent = os.environ.get(PARENT_ENV)
    if parent and os.getppid() != int(parent):
        os._exit(1)  # the parent died before prctl took effect


def _is_async(fn: Callable[..., Any]) -> bool:
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None)  # noqa: B004 - an object with an async __call__
    )


def main(argv: list[str]) -> int:
    _die_with_parent()
    fd, warn_fd, spec = int(argv[1]), int(argv[2]), argv[3]
    path = os.environ.get(SYS_PATH_ENV)
    if path:
        sys.path[:] = orjson.loads(path)
    sock = socket.socket(fileno=fd)
    os.set_blocking(warn_fd, False)
    _STATE.warn_fd = warn_fd
    try:
        fn = load(spec)
    except errors.ProcessorImportError as exc:
        sock.sendall(_frame(["import_error", str(exc)]))
        return 1
    is_async = _is_async(fn)
    sock.sendall(_frame(["ready", is_async]))
    if is_async:
        signal.signal(signal.SIGUSR1, signal.SIG_IGN)
        asyncio.run(_serve_async(sock, fn))
    else:
        _STATE.conn = _Conn(sock)
        _serve_sync(_STATE.conn, fn)
    return 0


if __name__ == "__main__":
    # Run as corral._child, not as __main__: one copy of this module, whose functions the
    # signal handler knows by identity, whatever a processor imports.
    from corral._child import main as _main

    sys.exit(_main(sys.argv))
