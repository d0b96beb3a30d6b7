"""Job options as the CLI spells them, shared by ``corral enqueue`` and ``corral schedulers
QUEUE upsert`` (whose job template takes the same ones).

Each value is parsed here into what ``Queue.add`` takes (``--backoff exponential:0.5`` into
``{"type": "exponential", "delay": 0.5}``...); the range checks stay in :mod:`corral.options`,
whose messages name the Python parameters: :data:`JOB_OPTION_NAMES` maps them to the CLI's
flags for :func:`corral._cli_errors.cli_option_names`. A value this module cannot parse is a
:class:`~corral._cli_errors.UsageFailure` naming the flag (exit status 2).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import click

from corral._cli_errors import UsageFailure
from corral.options import BUILTIN_BACKOFF_TYPES

F = TypeVar("F", bound=Callable[..., Any])

#: The options every command that talks to a server shares.
url_option = click.option(
    "--url",
    default=None,
    help="Redis URL (default: $CORRAL_REDIS_URL, $REDIS_URL, or the embedded server).",
)
prefix_option = click.option("--prefix", default="bull", show_default=True, help="Key prefix.")
json_option = click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")

#: Python parameter (or phrase of a message) -> the flag of the CLI that sets it.
JOB_OPTION_NAMES = {
    "job_id": "--job-id",
    "delay": "--delay",
    "priority": "--priority",
    "lifo": "--lifo",
    "attempts": "--attempts",
    "backoff": "--backoff",
    "backoff delay": "--backoff delay",
    "remove_on_complete": "--remove-on-complete",
    "remove_on_fail": "--remove-on-fail",
    "keep_logs": "--keep-logs",
    "timeout": "--timeout",
    "soft_timeout": "--soft-timeout",
    "deduplication id": "--dedup-id",
    "deduplication ttl": "--dedup-ttl",
    "deduplication extend": "--dedup-extend",
    "a ttl to extend": "--dedup-ttl",
    "an idempotency_key": "--idempotency-key",
    "idempotency_key": "--idempotency-key",
    "idempotency_window": "--idempotency-window",
    "prefix": "--prefix",
    "reason": "--reason",
}

_BACKOFF_FORM = "SECONDS, fixed:SECONDS or exponential:SECONDS"
_RETENTION_FORM = "true, false, a count N, or age=SECONDS[,count=N]"


def read_data(value: str, option: str = "--data") -> Any:
    """A ``--data`` value: JSON text, ``@path`` (a file of JSON) or ``-`` (stdin)."""
    source = ""
    if value == "-":
        text = sys.stdin.read()
        source = " (from stdin)"
    elif value.startswith("@"):  # no JSON document starts with '@'
        path = Path(value[1:])
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            raise UsageFailure(f"{option} {value}: the file is not UTF-8 text") from None
        except OSError as exc:
            raise UsageFailure(
                f"{option} {value}: cannot read {str(path)!r}: {exc.strerror or exc}"
            ) from None
        source = f" (from {str(path)!r})"
    else:
        text = value
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:  # RecursionError: nested too deep
        raise UsageFailure(f"{option} is not valid JSON{source}: {exc}") from None


def _seconds(option: str, text: str, form: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise UsageFailure(f"{option} must be {form}, got {text!r}") from None


def parse_backoff(text: str) -> dict[str, Any]:
    """``--backoff``: ``SECONDS`` (fixed), ``fixed:SECONDS`` or ``exponential:SECONDS``."""
    kind, sep, delay = text.partition(":")
    if not sep:
        kind, delay = "fixed", text
    if kind not in BUILTIN_BACKOFF_TYPES:
        raise UsageFailure(f"--backoff must be {_BACKOFF_FORM}, got {text!r}")
    return {"type": kind, "delay": _seconds("--backoff", delay, _BACKOFF_FORM)}


def parse_retention(option: str, text: str) -> bool | int | dict[str, int]:
    """``--remove-on-complete`` / ``--remove-on-fail``: ``true`` (remove at once),
    ``false`` (keep), ``N`` (keep the last N) or ``age=SECONDS[,count=N]``."""
    lowered = text.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered.lstrip("-").isdigit():
        if lowered.startswith("-"):
            raise UsageFailure(
                f"{option} N must be a count of jobs to keep, 0 or more, got {text!r}"
            )
        return int(lowered)
    limits: dict[str, int] = {}
    for part in lowered.split(","):
        key, sep, number = part.partition("=")
        key = key.strip()
        if not sep or key not in ("age", "count") or key in limits:
            raise UsageFailure(f"{option} must be {_RETENTION_FORM}, got {text!r}")
        try:
            limits[key] = int(number)
        except ValueError:
            raise UsageFailure(f"{option} {key} must be a whole number, got {text!r}") from None
    return limits


def parse_date(option: str, text: str) -> datetime | int:
    """A date: epoch milliseconds, or ISO 8601 (``2026-12-01T09:00+01:00``; without an
    offset it is local time)."""
    if text.isdigit():
        return int(text)
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        raise UsageFailure(
            f"{option} must be an ISO 8601 date (2026-12-01T09:00+01:00) or epoch ms, got {text!r}"
        ) from None


_JOB_OPTIONS: list[Callable[[Any], Any]] = [
    click.option("--priority", type=int, default=None, help="1 (first) .. 2097151."),
    click.option("--attempts", type=int, default=None, help="How many times the job may run."),
    click.option(
        "--backoff",
        default=None,
        metavar="[TYPE:]SECONDS",
        help="Wait before a retry: SECONDS (fixed), fixed:SECONDS or exponential:SECONDS "
        "(doubling from SECONDS).",
    ),
    click.option("--lifo", is_flag=True, default=False, help="Run it before the waiting jobs."),
    click.option(
        "--remove-on-complete",
        default=None,
        metavar="WHEN",
        help="Once completed: true (remove it), N (keep the last N) or age=S[,count=N].",
    ),
    click.option(
        "--remove-on-fail",
        default=None,
        metavar="WHEN",
        help="Once failed for good: as --remove-on-complete.",
    ),
    click.option("--keep-logs", type=int, default=None, help="Keep the last N log lines."),
    click.option("--timeout", type=float, default=None, help="Seconds an attempt may run."),
    click.option(
        "--soft-timeout", type=float, default=None, help="Seconds before the job is warned."
    ),
]

#: The parameter names of :func:`job_options`, as click passes them.
JOB_OPTION_PARAMS = (
    "priority",
    "attempts",
    "backoff",
    "lifo",
    "remove_on_complete",
    "remove_on_fail",
    "keep_logs",
    "timeout",
    "soft_timeout",
)


def job_options(func: F) -> F:
    """Add the job options of :data:`JOB_OPTION_PARAMS` to a command."""
    for decorate in reversed(_JOB_OPTIONS):
        func = decorate(func)
    return func


def job_options_from(params: dict[str, Any]) -> dict[str, Any]:
    """Pop the :func:`job_options` values out of ``params``; return those given, as
    ``Queue.add``'s keyword options."""
    given = {name: params.pop(name) for name in JOB_OPTION_PARAMS}
    options: dict[str, Any] = {}
    for name, value in given.items():
        if value is None or (name == "lifo" and not value):
            continue
        if name == "backoff":
            value = parse_backoff(value)
        elif name in ("remove_on_complete", "remove_on_fail"):
            value = parse_retention("--" + name.replace("_", "-"), value)
        options[name] = value
    return options
