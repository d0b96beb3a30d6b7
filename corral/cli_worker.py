"""``corral worker``: run a processor on a queue from a shell, one log line per job.

:mod:`corral.cli` adds :data:`COMMANDS` to its ``main`` group. The command configures the
process's logging (the root logger, only while it runs: nothing happens at import) with one
of two formatters, ``text`` for people and ``json`` (one object per line) for log pipelines;
the library's own records (``corral.worker``'s "server away / back"...) go through the same
one, and so do Python warnings, each shown once per run. It hooks the worker's ``active``,
``completed`` and ``failed`` events (emitted in this process, also for jobs that run in child
processes) to log each attempt of each job on stderr; ``active`` and ``completed`` are hooked
only when INFO records are let through, so a worker run at ``--log-level warning`` does nothing
more per successful job. A banner line and the run's summary line go to stdout. Errors are one
line on stderr (:mod:`corral._cli_errors`): 2 for usage errors, 1 for runtime failures; a
server that cannot be reached is waited for (logged once), not an error.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping
from typing import Any

import click

from corral import backoff
from corral._async.job import AsyncJob
from corral._cli_errors import OneLineCommand, UsageFailure, cli_errors, cli_option_names
from corral._cli_options import prefix_option, url_option
from corral._log_format import (
    FIELDS,
    LOG_FORMATS,
    LOG_LEVELS,
    emit_line,
    worker_logging,
)
from corral._version import __version__
from corral.clock import now_ms
from corral.errors import ChildJobError, ConfigurationError, failure_reason, server_error_kind
from corral.retry import RetryPolicy

#: The logger of the per-job lines.
JOB_LOGGER = "corral.jobs"
#: The keys every job line of the json format has (``None`` when they do not apply).
JOB_KEYS = (
    "event",
    "queue",
    "job_id",
    "job_name",
    "attempt",
    "attempts",
    "duration_ms",
    "error",
    "retry_delay_ms",
)
#: A failure's message is cut there: one line in the log, not the processor's whole output.
MAX_ERROR_CHARS = 500

#: The Python parameter names the worker's messages use -> the command's options.
WORKER_OPTION_NAMES = {
    "concurrency": "--concurrency",
    "processes": "--processes",
    "max_memory_mb": "--max-memory-mb",
    "max_jobs_per_child": "--max-jobs-per-child",
    "timeout": "--timeout",
    "soft_timeout": "--soft-timeout",
    "burst=True": "--burst",
    "burst_wait": "--burst-wait",
    "max_jobs": "--max-jobs",
    "max_time": "--max-time",
    "shards": "--shards",
    "prefix": "--prefix",
    "queue_name": "--queue",
    "borrow=True": "--borrow",
    "spare": "--spare",
}

#: The CLI's worker has no retry_on / no_retry_on / custom backoff: the default policy is
#: the one it applies, so a failed attempt's fate can be told before the finish is sent.
_POLICY = RetryPolicy()


# -- the lines of a job ------------------------------------------------------------------------


def error_text(error: BaseException) -> str:
    """``Type: message`` of a failed attempt, on one line (the message is the job's
    ``failedReason``; an error from a child process is named by the child's type)."""
    if isinstance(error, ChildJobError):
        name = error.type_name.rpartition(".")[2]
    else:
        name = type(error).__name__
    reason = failure_reason(error)
    text = reason if reason == name or reason.startswith(name + ":") else f"{name}: {reason}"
    text = " ".join(text.split())
    return text if len(text) <= MAX_ERROR_CHARS else text[: MAX_ERROR_CHARS - 3] + "..."


def retry_delay(job: AsyncJob, error: BaseException) -> tuple[int | None, bool]:
    """The ms before the job's next attempt (``None``: it failed for good), and whether that
    is the longest of a jittered backoff's range (the worker draws its own)."""
    delay = _POLICY.retry_delay(job, error)
    spec = job.opts.get("backoff")
    if delay is None or not isinstance(spec, Mapping) or not spec.get("jitter"):
        return delay, False
    return backoff.retry_delay_ms({**spec, "jitter": 0}, job.attempts_made + 1), True


class JobLog:
    """The worker's event callbacks that log a line per attempt's start, end and failure."""

    def __init__(self, logger: logging.Logger) -> None:
        self._log = logger

    def attach(self, worker: Any) -> None:
        """Listen to the events whose lines the logger lets through, and to nothing else."""
        if self._log.isEnabledFor(logging.INFO):
            worker.on("active", self.active)
            worker.on("completed", self.completed)
        if self._log.isEnabledFor(logging.WARNING):
            worker.on("failed", self.failed)

    def _line(
        self, level: int, job: AsyncJob, msg: str, event: str, attempt: int, **extra: Any
    ) -> None:
        fields = {
            "event": event,
            "queue": job.queue_name,
            "job_id": job.id,
            "job_name": job.name,
            "attempt": attempt,
            "attempts": job.max_attempts,
            "duration_ms": None,
            "error": None,
            "retry_delay_ms": None,
            **extra,
        }
        self._log.log(level, msg, extra={FIELDS: fields})

    @staticmethod
    def _duration(job: AsyncJob) -> int | None:
        # processedOn is the fetch's time on this worker's clock: the attempt's start.
        return None if job.processed_on is None else max(0, now_ms() - job.processed_on)

    def active(self, job: AsyncJob) -> None:
        attempt = job.attempts_made + 1
        self._line(
            logging.INFO,
            job,
            f"{job.queue_name}: job {job.id} {job.name} started "
            f"(attempt {attempt}/{job.max_attempts})",
            "active",
            attempt,
        )

    def completed(self, job: AsyncJob, result: Any) -> None:
        attempt = job.attempts_made  # the finish counted this attempt
        took = self._duration(job)
        self._line(
            logging.INFO,
            job,
            f"{job.queue_name}: job {job.id} {job.name} completed{_in(took)} "
            f"(attempt {attempt}/{job.max_attempts})",
            "completed",
            attempt,
            duration_ms=took,
        )

    def failed(self, job: AsyncJob, error: BaseException) -> None:
        attempt = job.attempts_made + 1  # emitted before the finish counts it
        took = self._duration(job)
        text = error_text(error)
        delay, at_most = retry_delay(job, error)
        head = f"{job.queue_name}: job {job.id} {job.name} failed"
        counted = f"(attempt {attempt}/{job.max_attempts}): {text}"
        if delay is None:
            msg, event = f"{head} for good{_in(took)} {counted}", "failed"
        else:
            when = f"up to {delay} ms" if at_most else f"{delay} ms"
            msg, event = f"{head}{_in(took)} {counted}; retrying in {when}", "retrying"
        self._line(
            logging.WARNING,
            job,
            msg,
            event,
            attempt,
            duration_ms=took,
            error=text,
            retry_delay_ms=delay,
        )


def _in(took: int | None) -> str:
    return "" if took is None else f" in {took} ms"


# -- the banner --------------------------------------------------------------------------------


def server_description(url: str | None) -> str:
    """The server the worker will use, its password masked, or ``embedded data_dir=...``."""
    from corral import server
    from corral.connection import configured_url, masked_url

    found = configured_url(url)
    if found:
        return masked_url(found)
    return f"embedded data_dir={server.resolve_data_dir()}"


def banner_fields(
    worker: Any, url: str | None, processes: int | None, shards: int, name: str | None
) -> dict[str, Any]:
    lanes = getattr(worker, "lanes", None)
    return {
        "event": "started",
        "server": server_description(url),
        "queue": ",".join(f"{q}:{n}" for q, n in lanes.items()) if lanes else worker.queue_name,
        "concurrency": worker.concurrency,
        "processes": processes or 0,
        "prefix": worker.prefix,
        "name": name,
        "pid": os.getpid(),
        "version": __version__,
        "shards": shards,
        "borrow": bool(getattr(worker, "borrow", False)),
        "spare": getattr(worker, "spare", 0),
    }


def banner_text(fields: Mapping[str, Any]) -> str:
    shown = ["server", "queue", "concurrency", "processes", "prefix", "name", "pid", "shards"]
    parts = [
        f"{key}={fields[key]}"
        for key in shown
        if fields[key] is not None and not (key == "shards" and fields[key] == 1)
    ]
    if fields.get("borrow"):
        parts.append(f"borrow=True spare={fields.get('spare', 0)}")
    return f"corral worker {fields['version']}: " + " ".join(parts)


# -- the command -------------------------------------------------------------------------------


def parse_queues(values: tuple[str, ...], borrow: bool) -> str | dict[str, int]:
    """The ``--queue`` options: one queue name, or lanes ``NAME:SLOTS`` (each given once)."""
    if not any(":" in value for value in values):
        if len(values) > 1:
            raise UsageFailure("several --queue need their slots: --queue NAME:SLOTS for each lane")
        if borrow:
            raise UsageFailure("--borrow needs lanes: --queue NAME:SLOTS for each queue")
        return values[0]
    lanes: dict[str, int] = {}
    for value in values:
        name, _, slots = value.rpartition(":")
        if not name or not slots.isdigit() or int(slots) < 1:
            raise UsageFailure(
                f"--queue {value!r}: give every lane as NAME:SLOTS (SLOTS a positive integer)"
            )
        if name in lanes:
            raise UsageFailure(f"--queue {name!r} is given twice")
        lanes[name] = int(slots)
    return lanes


def _import_processor(spec: str, app_dir: str | None) -> None:
    from corral._imports import import_processor

    if app_dir is not None:
        # First on sys.path, as uvicorn's --app-dir; child processes inherit sys.path.
        sys.path.insert(0, os.path.abspath(app_dir))
    from corral.errors import ProcessorImportError

    try:
        import_processor(spec)
    except ProcessorImportError as exc:
        raise UsageFailure(f"Invalid value for PROCESSOR: {exc}") from None


@click.command("worker", cls=OneLineCommand)
@click.argument("processor")
@click.option(
    "--app-dir",
    type=click.Path(exists=True, file_okay=False),
    default=None,
    help="Import PROCESSOR's module from this directory [default: the current directory].",
)
@click.option(
    "--queue",
    "-q",
    "queue_name",
    required=True,
    multiple=True,
    help="Queue to work on; repeat as NAME:SLOTS to serve lanes (slots reserved per queue).",
)
@click.option(
    "--borrow", is_flag=True, help="With lanes: an idle lane lends its free slots to the others."
)
@click.option(
    "--spare",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="With --borrow: free slots an idle lane keeps unlent for its next jobs.",
)
@click.option(
    "--concurrency",
    "-c",
    default=None,
    type=click.IntRange(min=1),
    help="Jobs at once [default: --processes, or 1].",
)
@click.option("--name", default=None, help="Worker name, stored on jobs as processedBy.")
@url_option
@prefix_option
@click.option(
    "--processes",
    "-p",
    default=None,
    type=click.IntRange(min=1),
    help="Run PROCESSOR in this many child processes.",
)
@click.option(
    "--max-memory-mb", type=click.IntRange(min=1), default=None, help="Per child process."
)
@click.option(
    "--max-jobs-per-child",
    type=click.IntRange(min=1),
    default=None,
    help="Replace a child process after this many jobs.",
)
@click.option("--timeout", type=float, default=None, help="Seconds an attempt may run.")
@click.option("--soft-timeout", type=float, default=None, help="Seconds before a warning.")
@click.option(
    "--burst", is_flag=True, help="Exit once the queue is drained (nothing waiting or due)."
)
@click.option(
    "--burst-wait",
    type=float,
    default=0.0,
    show_default=True,
    help="With --burst: wait for delayed jobs due within this many seconds.",
)
@click.option("--max-jobs", type=click.IntRange(min=1), default=None, help="Exit after N jobs.")
@click.option("--max-time", type=float, default=None, help="Exit after this many seconds.")
@click.option(
    "--fail-on-job-failure",
    is_flag=True,
    help="Exit with status 1 when a job failed for good during the run.",
)
@click.option(
    "--shards",
    type=click.IntRange(1, 256),
    default=1,
    show_default=True,
    help="Work a sharded queue of this many shards (the producers' count).",
)
@click.option(
    "--log-level",
    type=click.Choice(LOG_LEVELS, case_sensitive=False),
    default="info",
    show_default=True,
    envvar="CORRAL_LOG_LEVEL",
    help="Log from this level up ($CORRAL_LOG_LEVEL too): info has a line per job's start "
    "and end, warning only failures.",
)
@click.option(
    "--log-format",
    type=click.Choice(LOG_FORMATS, case_sensitive=False),
    default="text",
    show_default=True,
    envvar="CORRAL_LOG_FORMAT",
    help="text (for people) or json (one object per line) ($CORRAL_LOG_FORMAT too).",
)
@cli_errors
def worker_command(
    processor: str,
    app_dir: str | None,
    queue_name: tuple[str, ...],
    borrow: bool,
    spare: int,
    concurrency: int | None,
    name: str | None,
    url: str | None,
    prefix: str,
    processes: int | None,
    max_memory_mb: int | None,
    max_jobs_per_child: int | None,
    timeout: float | None,
    soft_timeout: float | None,
    burst: bool,
    burst_wait: float,
    max_jobs: int | None,
    max_time: float | None,
    fail_on_job_failure: bool,
    shards: int,
    log_level: str,
    log_format: str,
) -> None:
    """Run PROCESSOR (module:function) on the jobs of a queue until SIGINT or SIGTERM (or,
    with --burst, --max-jobs or --max-time, until the run is over). Lanes: --queue
    interactive:8 --queue background:4 [--borrow] serves both queues, 8 and 4 slots each.

    Logs a line per job's start, end and failure on stderr; prints a banner and the run's
    summary on stdout. Exit status 0 (1 with --fail-on-job-failure when a job failed for
    good); 2 with a one-line error for bad input, 1 when the server refuses the worker.
    """
    from corral._burst import RunLimits
    from corral.worker import Worker

    with worker_logging(log_level, log_format.lower()) as formatter:
        # Logging first: a processor module that calls logging.basicConfig() at import
        # then adds no second handler.
        _import_processor(processor, app_dir)
        queues = parse_queues(queue_name, borrow)
        lanes: dict[str, Any] = {"borrow": borrow, "spare": spare}
        if not isinstance(queues, dict):
            if spare:
                raise UsageFailure("--spare needs lanes (--queue NAME:SLOTS) and --borrow")
            lanes = {}
        with cli_option_names(WORKER_OPTION_NAMES):
            # Checked before the banner: the run's bounds are refused only by run().
            RunLimits.build(
                burst=burst, burst_wait=burst_wait, max_jobs=max_jobs, max_time=max_time
            )
            worker = Worker(
                queues,
                processor,
                connection=url,
                prefix=prefix,
                concurrency=concurrency,
                name=name,
                processes=processes,
                max_memory_mb=max_memory_mb,
                max_jobs_per_child=max_jobs_per_child,
                timeout=timeout,
                soft_timeout=soft_timeout,
                shards=shards,
                **lanes,
            )
        JobLog(logging.getLogger(JOB_LOGGER)).attach(worker)
        fields = banner_fields(worker, url, processes, shards, name)
        emit_line(sys.stdout, formatter, banner_text(fields), fields)
        try:
            summary = worker.run(
                burst=burst, burst_wait=burst_wait, max_jobs=max_jobs, max_time=max_time
            )
        except ConfigurationError as exc:
            # The connection's check names the worker but hides redis-py's error: the
            # wrong password, the missing permission, which cli_errors names (auth...).
            refused = exc.__cause__ or exc.__context__
            if isinstance(refused, Exception) and server_error_kind(refused) == "configuration":
                raise refused from None
            raise
        stopped = {
            "event": "stopped",
            "stopped": summary.stopped,
            "completed": summary.completed,
            "failed": summary.failed,
            "retried": summary.retried,
        }
        emit_line(
            sys.stdout,
            formatter,
            f"corral worker: {summary.stopped}: {summary.completed} completed, "
            f"{summary.failed} failed, {summary.retried} retried",
            stopped,
        )
    if fail_on_job_failure and summary.failed:
        raise SystemExit(1)


#: The commands :mod:`corral.cli` adds to its group.
COMMANDS = [worker_command]
