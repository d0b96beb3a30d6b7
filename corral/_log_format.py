"""Log lines of a command that runs for long (``corral worker``): a ``text`` formatter for
people and a ``json`` one (an object per line) for log pipelines, the process's logging set up
with one of them while the command runs, and Python warnings shown as log lines, once each.

A record carries the fields of a structured line (a job's) in its ``corral_fields``
attribute (:data:`FIELDS`): the json format puts them in the object; the text one shows only
the message.
"""

from __future__ import annotations

import logging
import sys
import time
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, TextIO

import click
import orjson

#: The levels ``--log-level`` takes.
LOG_LEVELS = ("debug", "info", "warning", "error")
#: The formats ``--log-format`` takes.
LOG_FORMATS = ("text", "json")
#: The logger of the banner and the summary (stdout), as the json format names them.
RUN_LOGGER = "corral.cli"
#: The LogRecord attribute that carries the fields of a structured line.
FIELDS = "corral_fields"


def utc_timestamp(created: float) -> str:
    """``created`` (epoch seconds) as ISO 8601 UTC with milliseconds: ``...T13:11:08.488Z``."""
    seconds = int(created)
    millis = int((created - seconds) * 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{millis:03d}Z"


class TextFormatter(logging.Formatter):
    """``2026-12-02T13:11:08.488Z INFO  cli: job 17 resize completed in 212 ms (attempt
    1/3)``: one line, then the traceback of a record that has one on the lines after."""

    def format(self, record: logging.LogRecord) -> str:
        line = f"{utc_timestamp(record.created)} {record.levelname:<5} {record.getMessage()}"
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        if record.stack_info:
            line += "\n" + self.formatStack(record.stack_info)
        return line


class JsonFormatter(logging.Formatter):
    """One JSON object per record: ``ts``, ``level``, ``logger``, ``msg``, the fields of a
    structured line (a job's: ``corral.cli_worker.JOB_KEYS``), and ``exc`` (the traceback)
    when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": utc_timestamp(record.created),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        fields = getattr(record, FIELDS, None)
        if isinstance(fields, Mapping):
            out.update(fields)
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        if record.stack_info:
            out["stack"] = self.formatStack(record.stack_info)
        # A value JSON cannot carry (an object in a library's record) is shown as its str().
        return orjson.dumps(out, default=str).decode()


def make_formatter(log_format: str) -> logging.Formatter:
    return JsonFormatter() if log_format == "json" else TextFormatter()


def emit_line(
    stream: TextIO, formatter: logging.Formatter, msg: str, fields: Mapping[str, Any]
) -> None:
    """Write one INFO line of :data:`RUN_LOGGER` to ``stream`` (the banner, the summary),
    whatever the log level: they are the command's output, not its log."""
    record = logging.LogRecord(RUN_LOGGER, logging.INFO, __file__, 0, msg, None, None)
    setattr(record, FIELDS, fields)
    click.echo(formatter.format(record), file=stream)


@contextmanager
def worker_logging(level: str, log_format: str) -> Iterator[logging.Formatter]:
    """Log the process's records to stderr with the chosen format from ``level`` up, and
    Python warnings as log lines (each once), until the block ends; then put back what was
    there (the command may run in-process, under click's test runner).

    ``debug`` is corral's own debug lines: other libraries' (redis-py's) stay at INFO.
    """
    formatter = make_formatter(log_format)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter)
    root, ours = logging.getLogger(), logging.getLogger("corral")
    before = root.level, ours.level
    wanted = logging.getLevelName(level.upper())
    root.addHandler(handler)
    root.setLevel(max(wanted, logging.INFO))
    ours.setLevel(wanted if wanted < logging.INFO else logging.NOTSET)
    try:
        with warnings_as_log_lines():
            yield formatter
    finally:
        root.removeHandler(handler)
        root.setLevel(before[0])
        ours.setLevel(before[1])


@contextmanager
def warnings_as_log_lines() -> Iterator[None]:
    """Show each warning as one WARNING line of ``py.warnings`` (no source line), once per
    distinct message: the server's maxmemory-policy warning comes from every connection the
    worker opens, and says the same thing each time."""
    shown: set[tuple[type[Warning], str]] = set()
    previous = warnings.showwarning
    log = logging.getLogger("py.warnings")

    def show(
        message: Warning | str,
        category: type[Warning],
        filename: str,
        lineno: int,
        file: TextIO | None = None,
        line: str | None = None,
    ) -> None:
        key = (category, str(message))
        if key not in shown:
            shown.add(key)
            log.warning("%s", message)

    warnings.showwarning = show
    try:
        yield
    finally:
        warnings.showwarning = previous
