"""`corral top` driven in a pseudo-terminal (pexpect): it draws the seeded queues, redraws
when they change, says so when the server goes away, and quits on q and on Ctrl-C with exit
status 0 and the terminal's modes put back. Without a terminal it prints one frame."""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
from collections.abc import Iterator

import pytest
import redis
from click.testing import CliRunner, Result
from rich.console import Console

from corral import Queue
from corral.cli_top import Frame, problem_line, render, top_command
from tests.conftest import ServerProcess, free_port, running_server
from tests.test_cli import ROOT

pexpect = pytest.importorskip("pexpect")

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX terminals only")

#: ``corral top`` in a fresh interpreter. Registered here too, so that the tests do not
#: depend on corral/cli.py registering it (adding a command twice is harmless).
TOP = [
    sys.executable,
    "-c",
    "from corral.cli import main; from corral.cli_top import COMMANDS\n"
    "for c in COMMANDS: main.add_command(c)\n"
    "main()",
    "top",
]
#: Where rich's alternate screen is left and the cursor shown again.
LEAVE_SCREEN = b"\x1b[?1049l"
SHOW_CURSOR = b"\x1b[?25h"


def row(name: str, *counts: int, paused: bool = False) -> re.Pattern[bytes]:
    """A queue's row of the view, its first counts as given (spaces only between cells;
    "(paused)" is styled)."""
    mark = rb"(\x1b\[[0-9;]*m)* \(paused\)(\x1b\[[0-9;]*m)*" if paused else b""
    cells = b"".join(b" +%d" % n for n in counts)
    return re.compile(rb"\n" + re.escape(name.encode()) + mark + cells + b" ")


def seed(url: str) -> None:
    with Queue("emails", connection=url) as queue:
        for i in range(3):
            queue.add("send", {"to": f"user{i}@example.com"})
        queue.add("send", {"to": "later@example.com"}, delay=3600)
        queue.add("send", {"to": "vip@example.com"}, priority=1)
    with Queue("reports", connection=url) as queue:
        queue.add("nightly", {"day": "d1"})


class Top:
    """``corral top`` in a terminal of 30x160, run by a shell that prints the terminal's
    modes (``stty -g``) before and after it, and its exit status."""

    def __init__(self, *args: str) -> None:
        env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
        env["TERM"] = "xterm-256color"
        command = shlex.join([*TOP, *args])
        self.child = pexpect.spawn(
            "/bin/sh",
            # The trap keeps the shell alive through Ctrl-C (which the whole foreground
            # group gets) to report the status; top itself gets the default handler back.
            ["-c", f"trap : INT TERM; stty -g; {command}; echo rc=$?; stty -g"],
            cwd=str(ROOT),
            env=env,
            dimensions=(30, 160),
            timeout=30,
        )
        self.child.expect(rb"([0-9a-f:]+)\r\n")
        self.modes_before = self.child.match.group(1)

    def expect(self, pattern: re.Pattern[bytes] | bytes) -> bytes:
        """Wait for ``pattern``; the frame it was drawn in (the output since the cursor last
        went home, up to the match)."""
        self.child.expect(pattern)
        seen = bytes(self.child.before + self.child.after)
        return seen.rsplit(b"\x1b[H", 1)[-1]

    def finish(self) -> tuple[int, bytes]:
        """The exit status, and what was written from the last frame on; checks that the
        terminal's modes are the ones it started with."""
        self.child.expect(rb"rc=(\d+)\r\n([0-9a-f:]+)\r\n")
        status, modes_after = int(self.child.match.group(1)), self.child.match.group(2)
        tail = self.child.before
        self.child.expect(pexpect.EOF)
        assert modes_after == self.modes_before  # cbreak mode undone
        return status, tail

    def close(self) -> None:
        self.child.close(force=True)


@pytest.fixture
def top() -> Iterator[list[Top]]:
    """The ``Top`` runs of a test, killed at its end if still running."""
    runs: list[Top] = []
    yield runs
    for run in runs:
        run.close()


def start(runs: list[Top], *args: str) -> Top:
    run = Top(*args)
    runs.append(run)
    return run


def test_top_draws_the_queues_and_redraws_when_they_change(redis_url: str, top: list[Top]) -> None:
    seed(redis_url)
    run = start(top, "--url", redis_url, "--interval", "0.2")
    frame = run.expect(row("reports", 1, 0, 0))  # the last row: the frame is whole
    assert row("emails", 3, 1, 1, 0).search(frame)  # waiting, prioritized, delayed, active
    assert b"corral top" in frame and b"oldest" in frame and b"p95" in frame
    with Queue("emails", connection=redis_url) as queue:
        queue.add_bulk([("send", {"to": "new@example.com"}), ("send", {"to": "n2@example.com"})])
        queue.pause()
    frame = run.expect(row("emails", 5, 1, 1, paused=True))
    run.child.send("q")
    status, tail = run.finish()
    assert status == 0
    assert LEAVE_SCREEN in tail and SHOW_CURSOR in tail
    assert b"Traceback" not in tail


def test_top_quits_on_ctrl_c_with_status_0(redis_url: str, top: list[Top]) -> None:
    seed(redis_url)
    run = start(top, "--url", redis_url, "--interval", "0.2", "emails")
    frame = run.expect(row("emails", 3, 1, 1))
    assert b"reports" not in frame  # only the queue named
    run.child.sendintr()
    status, tail = run.finish()
    assert status == 0, tail[-3000:]
    assert LEAVE_SCREEN in tail and b"Traceback" not in tail and b"Aborted" not in tail


def test_top_quits_on_sigterm_with_status_0(redis_url: str, top: list[Top]) -> None:
    seed(redis_url)
    run = start(top, "--url", redis_url, "--interval", "0.2")
    run.expect(row("reports", 1, 0, 0))
    os.killpg(run.child.pid, signal.SIGTERM)  # the shell (which traps it) and top
    status, tail = run.finish()
    assert status == 0
    assert LEAVE_SCREEN in tail and b"Traceback" not in tail


@pytest.fixture
def own_server() -> Iterator[ServerProcess]:
    """A server of this test alone, which it stops and starts again."""
    yield from running_server("top")


def test_top_says_when_the_server_goes_away_and_comes_back(
    own_server: ServerProcess, top: list[Top]
) -> None:
    url = own_server.url
    seed(url)
    run = start(top, "--url", url, "--interval", "0.2")
    run.expect(row("emails", 3, 1, 1))
    own_server.stop()
    # The problem comes first in the frame, the rows read before it went away next.
    frame = run.expect(re.compile(rb"server unreachable, retrying.*?\nreports", re.DOTALL))
    assert row("emails", 3, 1, 1).search(frame)
    own_server.start()  # the same port, empty (no persistence)
    with Queue("emails", connection=url) as queue:
        queue.add("send", {"to": "again@example.com"})
    frame = run.expect(row("emails", 1, 0, 0))
    assert b"unreachable" not in frame
    run.child.send("q")
    assert run.finish()[0] == 0


def test_top_without_a_terminal_prints_one_frame(redis_url: str) -> None:
    seed(redis_url)
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    proc = subprocess.run(
        [*TOP, "--url", redis_url],
        cwd=ROOT,
        env=env,
        capture_output=True,
        timeout=30,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    assert (proc.returncode, proc.stderr) == (0, b"")
    lines = proc.stdout.decode().splitlines()
    assert lines[0].startswith(f"corral top  bull at {redis_url}")
    assert lines[1].split() == ["done", "failed", "oldest"]  # two-line headers
    assert lines[2].split() == [
        "queue", "wait", "prio", "delay", "active", "children", "done", "failed",
        "/min", "/min", "waiting", "p50", "p95", "workers",
    ]  # fmt: skip
    assert lines[3].split()[:8] == ["emails", "3", "1", "1", "0", "0", "0", "0"]
    assert lines[4].split()[:3] == ["reports", "1", "0"]
    assert b"\x1b" not in proc.stdout  # no screen switching, no styles


def cli(*args: str) -> Result:
    return CliRunner().invoke(top_command, list(args))


def one_line_error(result: Result, code: int) -> str:
    assert result.exit_code == code, (result.stdout, result.stderr)
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    return lines[0]


def test_top_errors_are_one_line(redis_url: str) -> None:
    line = one_line_error(cli("nope", "--url", redis_url), 1)
    assert line == "Error: no such queue 'nope' (no bull:nope:* keys)"
    url = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    assert one_line_error(cli("--url", url), 1).startswith(
        f"Error: cannot reach the server at {url}: "
    )
    assert "Invalid value for '--interval'" in one_line_error(cli("--interval", "0"), 2)
    assert one_line_error(cli("--url", "http://x/0"), 2).startswith(
        "Error: --url is not a usable Redis URL"
    )


def _frame(problem: str | None = None) -> Frame:
    row = {
        "name": "thumbnails",
        "paused": False,
        "counts": {
            "waiting": 2286, "prioritized": 0, "delayed": 0, "active": 4,
            "waiting-children": 0, "completed": 678, "failed": 32,
        },
        "workers": 1,
        "oldest_waiting_age_s": 90.0,
        "rates_per_min": {"completed": 463.0, "failed": 22.3},
        "rate_source": {"completed": "metrics", "failed": "metrics"},
        "p50_ms": 567,
        "p95_ms": 1784,
    }  # fmt: skip
    return Frame("bull", "redis://h:1/0", 2.0, [row], 0.0, problem)


def _text(frame: Frame, width: int) -> list[str]:
    console = Console(width=width, record=True, color_system=None)
    console.print(render(frame, width))
    return console.export_text().splitlines()


def test_a_narrow_view_leaves_columns_out_in_order() -> None:
    wide = _text(_frame(), 120)
    assert wide[2].split() == [
        "queue", "wait", "prio", "delay", "active", "children", "done", "failed",
        "/min", "/min", "waiting", "p50", "p95", "workers",
    ]  # fmt: skip
    assert wide[3].split() == [
        "thumbnails", "2286", "0", "0", "4", "0", "678", "32", "463", "22.3", "1.5m",
        "567ms", "1.8s", "1",
    ]  # fmt: skip
    assert "children" not in _text(_frame(), 100)[2]
    narrow = _text(_frame(), 80)[2].split()
    assert narrow == ["queue", "wait", "active", "done", "failed", "/min", "/min", "waiting",
                      "p95", "workers"]  # fmt: skip
    assert all(len(line) <= 80 for line in _text(_frame(), 80))
    tiny = _text(_frame(), 64)
    assert "…" not in "".join(tiny)  # columns left out rather than cut short
    assert tiny[-1].split() == ["thumbnails", "2286", "4", "678", "32", "463", "22.3", "1"]


def test_the_problem_is_shown_above_the_last_rows() -> None:
    lines = _text(_frame("server unreachable, retrying (refused)"), 120)
    assert lines[1] == "server unreachable, retrying (refused)"
    assert lines[-1].split()[0] == "thumbnails"
    empty = Frame("bull", "redis://h:1/0", 2.0, [], 0.0)
    assert _text(empty, 120)[1] == "no queues under prefix 'bull'"


def test_problem_lines() -> None:
    refused = redis.ConnectionError("Error 111 connecting to h:1.\nConnection refused.")
    assert problem_line(refused, "redis://h:1/0") == (
        "server unreachable, retrying (Error 111 connecting to h:1. Connection refused.)"
    )
    assert problem_line(redis.TimeoutError("Timeout reading"), None).startswith(
        "server unreachable, retrying ("
    )
    auth = problem_line(redis.AuthenticationError("invalid password"), "redis://:x@h:1/0")
    assert auth.startswith("authentication failed at redis://:***@h:1/0") and auth.endswith(
        "; retrying"
    )
    refused_command = problem_line(redis.ResponseError("NOSCRIPT"), None)
    assert refused_command == "the server refused a command: NOSCRIPT; retrying"
