"""Drive real Node BullMQ 6.7.0 (installed by `make test` into tests/interop/node_modules)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).parent
SCRIPTS = HERE / "node"


def first_line(proc: subprocess.Popen[str]) -> str:
    """The first line ``proc`` printed (stripped), read from its pipe a byte at a time.

    What it prints next must stay in the pipe: :meth:`Node.result`'s ``communicate()`` reads
    the pipe's descriptor, not the buffer of ``proc.stdout``, so a buffered ``readline()``
    that also took the result line (a script that finishes at once prints both together)
    would leave ``communicate()`` nothing to read.
    """
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    line = bytearray()
    while not line.endswith(b"\n"):
        byte = os.read(fd, 1)
        if not byte:
            break
        line += byte
    return line.decode().strip()


class Node:
    """Runs the scripts of tests/interop/node against one Redis URL."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.env = {**os.environ, "REDIS_URL": url, "INTEROP_TIMEOUT_MS": "60000"}

    def run(self, script: str, *args: object, env: dict[str, str] | None = None) -> Any:
        """Run a script to its end and return the JSON it printed."""
        proc = subprocess.run(
            ["node", str(SCRIPTS / script), *map(str, args)],
            env={**self.env, **(env or {})},
            capture_output=True,
            text=True,
            timeout=90,
            check=False,
        )
        assert proc.returncode == 0, f"{script} exited {proc.returncode}: {proc.stderr}"
        return json.loads(proc.stdout.strip().splitlines()[-1])

    def start(self, script: str, *args: object) -> subprocess.Popen[str]:
        """Start a script that prints READY once it listens; return when it is ready."""
        proc = subprocess.Popen(
            ["node", str(SCRIPTS / script), *map(str, args)],
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        line = first_line(proc)
        if line != "READY":
            proc.kill()
            raise AssertionError(f"{script} did not get ready: {line!r} {proc.stderr.read()}")  # type: ignore[union-attr]
        return proc

    @staticmethod
    def result(proc: subprocess.Popen[str], timeout: float = 60) -> Any:
        out, err = proc.communicate(timeout=timeout)
        assert proc.returncode == 0, f"exited {proc.returncode}: {err}"
        lines = out.strip().splitlines()
        assert lines, f"exited 0 without printing its result: {err}"
        return json.loads(lines[-1])


@pytest.fixture(scope="session")
def node_ready() -> None:
    if shutil.which("node") is None or not (HERE / "node_modules" / "bullmq").is_dir():
        pytest.fail(
            "Node BullMQ is not installed: run `make test`, or "
            "`npm install --prefix tests/interop --no-package-lock`"
        )


@pytest.fixture
def node(node_ready: None, redis_url: str) -> Iterator[Node]:
    yield Node(redis_url)
