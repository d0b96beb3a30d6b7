"""``corral top``: a live full-screen view of every queue, refreshed until ``q`` or Ctrl-C.

:mod:`corral.cli` adds :data:`COMMANDS` to its ``main`` group. Each refresh reads, for every
queue, what ``corral stats`` reads (counts per state, workers, the oldest waiting job, jobs
finished per minute) and the p50/p95 processing time of the last :data:`RECENT_JOBS` completed
jobs. Like ``corral stats`` it only reads.

A reader thread polls the server and the main thread draws (rich's ``Live`` on the alternate
screen) and reads keys (the terminal in cbreak mode, restored in a ``finally``), so ``q``
answers at once even while the server does not. A server that goes away is shown as
"server unreachable, retrying" above the last counts read; the first read failing is an
error (one line, exit status 1), as for ``corral stats``. When stdout is not a terminal one
frame is printed and the command exits.
"""

from __future__ import annotations

import os
import select
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from datetime import datetime
from types import FrameType
from typing import Any

import click
import redis
from redis import Redis
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from corral import _rates
from corral._cli_errors import CommandFailure, OneLineCommand, cli_errors, describe
from corral._sync.queue import Queue
from corral.cli_inspect import (
    STATES,
    _age,
    _console,
    connect,
    discover_queues,
    open_queue,
    queue_stats,
    rate_text,
    worker_counts,
)
from corral.connection import configured_url, masked_url

#: Completed jobs whose processing time the percentiles are taken over (the last finished).
RECENT_JOBS = 100
#: Column headers of the states (short: the view has many columns).
_HEADERS = {
    "waiting": "wait",
    "prioritized": "prio",
    "delayed": "delay",
    "waiting-children": "children",
    "completed": "done",
}
#: The columns left out, in this order, of a view too narrow for them all.
_DROPPED_FIRST = ("children", "prio", "p50", "delay", "oldest\nwaiting", "p95")


def processing_times(client: Redis, queue: Queue, last: int = RECENT_JOBS) -> list[int]:
    """``finishedOn - processedOn`` (ms) of the last ``last`` completed jobs, two round
    trips: the ids from the completed set (scored by finishedOn), then one pipeline of
    ``HMGET``."""
    ids = client.zrevrange(queue.keys.completed, 0, last - 1)
    if not ids:
        return []
    pipe = client.pipeline(transaction=False)
    for job_id in ids:
        pipe.hmget(queue.keys.job(str(job_id)), "processedOn", "finishedOn")
    return _rates.processing_times_ms(pipe.execute())


def queue_row(client: Redis, queue: Queue, workers: int) -> dict[str, Any]:
    """One queue of the view: ``corral stats``'s entry plus ``p50_ms``/``p95_ms``."""
    row = queue_stats(client, queue, workers)
    times = processing_times(client, queue)
    row["p50_ms"] = _rates.percentile(times, 50)
    row["p95_ms"] = _rates.percentile(times, 95)
    return row


@dataclass
class Source:
    """What to read: the QUEUEs named (each checked once, at the start), or every queue of
    the prefix, found again at each refresh (queues come and go)."""

    client: Redis
    prefix: str
    named: list[str]
    _queues: dict[str, Queue] = field(default_factory=dict)

    def check(self) -> None:
        """Fail as ``corral stats`` does on a QUEUE named that does not exist."""
        for name in self.named:
            self._queues[name] = open_queue(self.client, self.prefix, name)

    def read(self) -> list[dict[str, Any]]:
        names = self.named or discover_queues(self.client, self.prefix)
        queues = []
        for name in names:
            queue = self._queues.get(name)
            if queue is None:
                queue = self._queues[name] = Queue(name, connection=self.client, prefix=self.prefix)
            queues.append(queue)
        workers = worker_counts(self.client, queues)  # one CLIENT LIST per refresh
        return [queue_row(self.client, queue, workers[queue.name]) for queue in queues]


@dataclass
class Frame:
    """What one drawing shows."""

    prefix: str
    where: str
    interval: float
    rows: list[dict[str, Any]]
    #: When ``rows`` were read (epoch seconds).
    read_at: float
    #: Why the last read failed ("server unreachable, retrying..."), or ``None``.
    problem: str | None = None


def _ms(value: float | None) -> str:
    if value is None:
        return "-"
    if value < 1000:
        return f"{value:.0f}ms"
    return _age(value / 1000)


def _columns(row: dict[str, Any]) -> dict[str, str]:
    """The cells of one queue's row, by header (the queue's name apart)."""
    return {
        **{_HEADERS.get(state, state): str(row["counts"][state]) for state in STATES},
        "done\n/min": rate_text(row["rates_per_min"]["completed"]),
        "failed\n/min": rate_text(row["rates_per_min"]["failed"]),
        "oldest\nwaiting": _age(row["oldest_waiting_age_s"]),
        "p50": _ms(row["p50_ms"]),
        "p95": _ms(row["p95_ms"]),
        "workers": str(row["workers"]),
    }


def _fit(headers: list[str], cells: list[dict[str, str]], width: int) -> list[str]:
    """``headers`` less the :data:`_DROPPED_FIRST` ones needed for the table to fit in
    ``width`` columns (rich would cut every cell short instead)."""
    kept = list(headers)

    def needed() -> int:
        widths = [max(len(line) for line in h.splitlines()) for h in kept]
        for i, header in enumerate(kept):
            widths[i] = max([widths[i], *(len(c[header]) for c in cells)])
        return sum(widths) + 2 * len(widths)  # two spaces between columns

    for header in _DROPPED_FIRST:
        if needed() <= width:
            break
        kept.remove(header)
    return kept


def render(frame: Frame, width: int = 120) -> RenderableType:
    """The view: a header line, the problem (if any), and one table row per queue; columns
    are left out when ``width`` is too narrow for them all (about 100 columns)."""
    stamp = datetime.fromtimestamp(frame.read_at).strftime("%H:%M:%S")
    header = Text.assemble(
        ("corral top", "bold"),
        f"  {frame.prefix} at {frame.where}  read {stamp}  every {frame.interval:g}s  ",
        ("q", "bold"),
        " quits",
    )
    parts: list[RenderableType] = [header]
    if frame.problem is not None:
        parts.append(Text(frame.problem, style="bold red"))
    if not frame.rows:
        parts.append(Text(f"no queues under prefix {frame.prefix!r}"))
        return Group(*parts)
    cells = [_columns(row) for row in frame.rows]
    names = [
        Text(row["name"]) + (Text(" (paused)", style="yellow") if row["paused"] else "")
        for row in frame.rows
    ]
    name_width = max(4, *(len(name) for name in names))
    shown = _fit(list(cells[0]), cells, width - name_width)
    table = Table(box=None, padding=(0, 1), header_style="bold", pad_edge=False)
    table.add_column("queue", no_wrap=True, vertical="bottom")
    for header_text in shown:
        table.add_column(header_text, justify="right", no_wrap=True, vertical="bottom")
    for name, row_cells in zip(names, cells, strict=True):
        table.add_row(name, *(row_cells[h] for h in shown))
    parts.append(table)
    return Group(*parts)


def problem_line(exc: BaseException, url: str | None) -> str:
    """The line shown while the server cannot be read (the header names the server)."""
    unreachable = (redis.ConnectionError, redis.TimeoutError, OSError)
    if isinstance(exc, unreachable) and not isinstance(exc, redis.AuthenticationError):
        return f"server unreachable, retrying ({' '.join(str(exc).split())})"
    message, _ = describe(exc, url)  # a password changed meanwhile, an ACL...
    return f"{message}; retrying"


class Reader(threading.Thread):
    """Reads the server every ``interval`` seconds and hands each result (rows, or the line
    saying why the read failed) to the main thread, waking it through a pipe."""

    def __init__(self, source: Source, interval: float, wake_fd: int, url: str | None) -> None:
        super().__init__(name="corral-top-reader", daemon=True)
        self.source = source
        self.interval = interval
        self.wake_fd = wake_fd
        self.url = url
        self.stopping = threading.Event()
        self._lock = threading.Lock()
        self._latest: list[dict[str, Any]] | str | None = None

    def take(self) -> list[dict[str, Any]] | str | None:
        """The newest result not yet taken."""
        with self._lock:
            latest, self._latest = self._latest, None
        return latest

    def run(self) -> None:
        while not self.stopping.wait(self.interval):
            try:
                result: list[dict[str, Any]] | str = self.source.read()
            except Exception as exc:  # shown in the view; the next read retries
                result = problem_line(exc, self.url)
            if self.stopping.is_set():
                return
            with self._lock:
                self._latest = result
            with suppress(OSError):
                os.write(self.wake_fd, b"r")


@contextmanager
def cbreak(fd: int | None) -> Iterator[None]:
    """Keys arrive one at a time, unechoed (Ctrl-C still interrupts); the terminal's modes
    are put back however the block ends."""
    if fd is None:
        yield
        return
    import termios  # POSIX only, as is the live view
    import tty

    saved = termios.tcgetattr(fd)
    try:
        tty.setcbreak(fd)
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


@contextmanager
def _signals_wake(wake_fd: int, quitting: threading.Event) -> Iterator[None]:
    """Ctrl-C (SIGINT) and SIGTERM quit like ``q``; SIGWINCH redraws at the new size.

    The handlers only set ``quitting`` and wake the main loop: an exception raised wherever
    the signal lands (in rich's ``Live`` while it enters the alternate screen) could leave
    the terminal in it.
    """

    def on_quit(signum: int, frame: FrameType | None) -> None:
        quitting.set()
        with suppress(OSError):
            os.write(wake_fd, b"q")

    def on_winch(signum: int, frame: FrameType | None) -> None:
        with suppress(OSError):
            os.write(wake_fd, b"w")

    handlers = {signal.SIGINT: on_quit, signal.SIGTERM: on_quit, signal.SIGWINCH: on_winch}
    saved = {signum: signal.signal(signum, handler) for signum, handler in handlers.items()}
    try:
        yield
    finally:
        for signum, old in saved.items():
            signal.signal(signum, old)


def run_live(
    console: Console, reader: Reader, frame: Frame, wake_read: int, quitting: threading.Event
) -> None:
    """Draw and redraw until ``q``, or until ``quitting`` is set (Ctrl-C, SIGTERM)."""
    key_fd = sys.stdin.fileno() if sys.stdin is not None and sys.stdin.isatty() else None
    watched = [wake_read] + ([key_fd] if key_fd is not None else [])
    with (
        cbreak(key_fd),
        Live(
            render(frame, console.width),
            console=console,
            screen=True,
            auto_refresh=False,
            redirect_stdout=False,
            redirect_stderr=False,
        ) as live,
    ):
        reader.start()
        while True:
            ready, _, _ = select.select(watched, [], [], frame.interval)
            if quitting.is_set():
                return
            if key_fd is not None and key_fd in ready:
                keys = os.read(key_fd, 64)
                if not keys or b"q" in keys or b"Q" in keys:  # no more keys: quit too
                    return
            if wake_read in ready:
                os.read(wake_read, 64)
                latest = reader.take()
                if isinstance(latest, str):
                    frame.problem = latest
                elif latest is not None:
                    frame.rows, frame.read_at, frame.problem = latest, time.time(), None
                live.update(render(frame, console.width), refresh=True)
            elif not ready:
                silent = time.time() - frame.read_at
                # A read that hangs (a server that stopped answering, packets dropped) fails
                # only when TCP gives up: say so before.
                if frame.problem is None and silent > 3 * frame.interval + 5:
                    frame.problem = f"server not answering for {silent:.0f}s, retrying"
                    live.update(render(frame, console.width), refresh=True)


@click.command("top", cls=OneLineCommand)
@click.argument("queues", nargs=-1, metavar="[QUEUE]...")
@click.option(
    "--interval",
    "-n",
    type=click.FloatRange(0.1, 3600),
    default=2.0,
    show_default=True,
    help="Seconds between refreshes.",
)
@click.option("--prefix", default="bull", show_default=True, help="Key prefix.")
@click.option(
    "--url",
    default=None,
    help="Redis URL (default: $CORRAL_REDIS_URL, $REDIS_URL, or the embedded server).",
)
@cli_errors
def top_command(queues: tuple[str, ...], interval: float, prefix: str, url: str | None) -> None:
    """A live view of each QUEUE (every queue of the prefix when none is named): counts per
    state, completed and failed jobs per minute, the oldest waiting job, p50/p95 processing
    time of the last completed jobs, and workers. Press q (or Ctrl-C) to quit.

    When stdout is not a terminal, one frame is printed and the command exits.

    Exit status 0; 1 when a QUEUE named does not exist, or the server cannot be used at the
    start (later it is retried, and the view says so).
    """
    # Ctrl-C is how a user quits (also during the first read): exit status 0.
    with suppress(KeyboardInterrupt):
        _top(list(queues), interval, prefix, url)


def _top(queues: list[str], interval: float, prefix: str, url: str | None) -> None:
    found = configured_url(url)
    where = masked_url(found) if found else "the embedded server"
    with connect(url) as client:
        source = Source(client, prefix, queues)
        source.check()
        frame = Frame(prefix, where, interval, source.read(), time.time())
        if not sys.stdout.isatty():
            console = _console()
            console.print(render(frame, console.width))
            return
        if sys.platform == "win32":
            raise CommandFailure(
                "the live view needs a POSIX terminal (Linux, macOS); "
                "'corral top | more' prints one frame"
            )
        wake_read, wake_write = os.pipe()
        reader = Reader(source, interval, wake_write, url)
        try:
            quitting = threading.Event()
            with _signals_wake(wake_write, quitting):
                run_live(Console(), reader, frame, wake_read, quitting)
        finally:
            reader.stopping.set()
            # A read in progress is not waited for long (the thread is a daemon): that is
            # what lets q answer while the server does not. Its pipe stays open until it
            # ends, so that it never writes to a descriptor reused meanwhile.
            if reader.ident is not None:  # started (Ctrl-C may come before)
                reader.join(timeout=1)
            if not reader.is_alive():
                os.close(wake_read)
                os.close(wake_write)


#: What :mod:`corral.cli` registers on ``main``.
COMMANDS = (top_command,)
