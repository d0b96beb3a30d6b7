"""``corral retry``, ``promote``, ``remove``, ``clean``, ``pause``, ``resume``, ``drain`` and
``obliterate``: repair a queue from a shell.

:mod:`corral.cli` adds :data:`COMMANDS` to its ``main`` group. Each is a thin wrapper of the
queue's own call (``Queue.retry_jobs``, ``Job.retry``, ``Queue.clean``...), prints one line
per job or one summary line (or one JSON document with ``--json``), and reports errors as one
line on stderr (:mod:`corral._cli_errors`): exit 1 for a runtime failure (no such queue, a job
in another state, the server), 2 for a usage error. Naming no job where one is needed, or a
job and ``--all`` together, is a usage error.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import click

from corral._cli_errors import CommandFailure, OneLineCommand, UsageFailure, cli_errors
from corral._cli_options import json_option, prefix_option, url_option
from corral._sync.queue import Queue
from corral.cli_inspect import connect, open_queue
from corral.errors import JobError, JobNotFoundError


def _report(as_json: bool, document: dict[str, Any], line: str) -> None:
    click.echo(json.dumps(document) if as_json else line)


def _each_job(
    queue: Queue, job_ids: tuple[str, ...], act: Callable[[Any], None]
) -> tuple[list[str], dict[str, str]]:
    """Run ``act`` on each job: the ids done, and why each other one was not."""
    done: list[str] = []
    refused: dict[str, str] = {}
    for job_id in job_ids:
        job = queue.get_job(job_id)
        try:
            if job is None:
                raise JobNotFoundError(f"no job {job_id} in queue {queue.name}")
            act(job)
        except JobError as exc:
            refused[job_id] = str(exc)
            continue
        done.append(job_id)
    return done, refused


def _finish_each(
    verb: str, queue: Queue, done: list[str], refused: dict[str, str], as_json: bool
) -> None:
    """Print what a per-job command did; fail (exit 1) when a job was refused."""
    if as_json:
        click.echo(json.dumps({"queue": queue.name, verb: done, "refused": refused}))
    else:
        for job_id in done:
            click.echo(f"{verb} {job_id}")
    if refused:
        first, why = next(iter(refused.items()))
        more = f" (and {len(refused) - 1} more)" if len(refused) > 1 else ""
        # A job error's message names the job; one made here too.
        raise CommandFailure(f"{why}{more}" if first in why else f"job {first}: {why}{more}")


def _ids_or_all(job_ids: tuple[str, ...], everything: bool, flag: str) -> None:
    if bool(job_ids) == everything:
        raise UsageFailure(f"give job ids or {flag}, not both and not neither")


@click.command("retry", cls=OneLineCommand)
@click.argument("queue_name", metavar="QUEUE")
@click.argument("job_ids", nargs=-1, metavar="[ID]...")
@click.option("--all-failed", "all_failed", is_flag=True, help="Every failed job of QUEUE.")
@click.option(
    "--state",
    type=click.Choice(["failed", "completed"]),
    default="failed",
    show_default=True,
    help="The state the jobs are in.",
)
@click.option("--reset-attempts", is_flag=True, help="Count the job's attempts from 0 again.")
@prefix_option
@url_option
@json_option
@cli_errors
def retry_command(
    queue_name: str,
    job_ids: tuple[str, ...],
    all_failed: bool,
    state: str,
    reset_attempts: bool,
    prefix: str,
    url: str | None,
    as_json: bool,
) -> None:
    """Send failed (or completed) jobs of QUEUE back to wait: the IDs given, or --all-failed."""
    _ids_or_all(job_ids, all_failed, "--all-failed")
    with connect(url) as client:
        queue = open_queue(client, prefix, queue_name)
        if all_failed:
            count = queue.retry_jobs("failed")
            _report(as_json, {"queue": queue_name, "retried": count}, f"retried {count} jobs")
            return
        done, refused = _each_job(
            queue, job_ids, lambda job: job.retry(state, reset_attempts_made=reset_attempts)
        )
        _finish_each("retried", queue, done, refused, as_json)


@click.command("promote", cls=OneLineCommand)
@click.argument("queue_name", metavar="QUEUE")
@click.argument("job_ids", nargs=-1, metavar="[ID]...")
@click.option("--all", "everything", is_flag=True, help="Every delayed job of QUEUE.")
@prefix_option
@url_option
@json_option
@cli_errors
def promote_command(
    queue_name: str,
    job_ids: tuple[str, ...],
    everything: bool,
    prefix: str,
    url: str | None,
    as_json: bool,
) -> None:
    """Run delayed jobs of QUEUE now: the IDs given, or --all."""
    _ids_or_all(job_ids, everything, "--all")
    with connect(url) as client:
        queue = open_queue(client, prefix, queue_name)
        if everything:
            count = queue.promote_jobs()
            _report(as_json, {"queue": queue_name, "promoted": count}, f"promoted {count} jobs")
            return
        done, refused = _each_job(queue, job_ids, lambda job: job.promote())
        _finish_each("promoted", queue, done, refused, as_json)


@click.command("remove", cls=OneLineCommand)
@click.argument("queue_name", metavar="QUEUE")
@click.argument("job_ids", nargs=-1, required=True, metavar="ID...")
@click.option("--keep-children", is_flag=True, help="Leave the jobs' flow children.")
@prefix_option
@url_option
@json_option
@cli_errors
def remove_command(
    queue_name: str,
    job_ids: tuple[str, ...],
    keep_children: bool,
    prefix: str,
    url: str | None,
    as_json: bool,
) -> None:
    """Delete jobs of QUEUE (and their flow children); a job being processed is refused."""
    with connect(url) as client:
        queue = open_queue(client, prefix, queue_name)
        done, refused = _each_job(
            queue, job_ids, lambda job: job.remove(remove_children=not keep_children)
        )
        _finish_each("removed", queue, done, refused, as_json)


@click.command("clean", cls=OneLineCommand)
@click.argument("queue_name", metavar="QUEUE")
@click.option(
    "--state",
    type=click.Choice(["completed", "failed", "waiting", "delayed", "prioritized", "active"]),
    default="completed",
    show_default=True,
)
@click.option(
    "--older-than",
    type=click.FloatRange(min=0),
    default=0,
    show_default=True,
    help="Seconds: keep younger jobs (finished ones count from when they finished).",
)
@click.option("--limit", type=click.IntRange(min=0), default=0, help="At most N jobs (0: all).")
@prefix_option
@url_option
@json_option
@cli_errors
def clean_command(
    queue_name: str,
    state: str,
    older_than: float,
    limit: int,
    prefix: str,
    url: str | None,
    as_json: bool,
) -> None:
    """Delete the jobs of QUEUE in --state older than --older-than seconds (oldest first)."""
    with connect(url) as client:
        queue = open_queue(client, prefix, queue_name)
        removed = queue.clean(older_than, limit, state)
        document = {"queue": queue_name, "state": state, "removed": removed}
        _report(as_json, document, f"removed {len(removed)} {state} jobs")


def _queue_command(
    name: str, summary: str, act: Callable[[Queue], None], done: str
) -> click.Command:
    """A command that does one thing to a whole queue (pause, resume)."""

    @click.argument("queue_name", metavar="QUEUE")
    @prefix_option
    @url_option
    @json_option
    @cli_errors
    def command(queue_name: str, prefix: str, url: str | None, as_json: bool) -> None:
        with connect(url) as client:
            act(open_queue(client, prefix, queue_name))
        _report(as_json, {"queue": queue_name, done: True}, f"{done} {queue_name}")

    command.__doc__ = summary
    return click.command(name, cls=OneLineCommand)(command)


pause_command = _queue_command(
    "pause", "Pause QUEUE: workers take no new job until it is resumed.", Queue.pause, "paused"
)
resume_command = _queue_command("resume", "Resume a paused QUEUE.", Queue.resume, "resumed")


@click.command("drain", cls=OneLineCommand)
@click.argument("queue_name", metavar="QUEUE")
@click.option("--delayed", is_flag=True, help="Delete the delayed jobs too.")
@prefix_option
@url_option
@json_option
@cli_errors
def drain_command(
    queue_name: str, delayed: bool, prefix: str, url: str | None, as_json: bool
) -> None:
    """Delete every job of QUEUE waiting to run (active and finished jobs stay)."""
    with connect(url) as client:
        open_queue(client, prefix, queue_name).drain(delayed=delayed)
    _report(as_json, {"queue": queue_name, "drained": True}, f"drained {queue_name}")


@click.command("obliterate", cls=OneLineCommand)
@click.argument("queue_name", metavar="QUEUE")
@click.option("--force", is_flag=True, help="Delete active jobs too (their workers then fail).")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@prefix_option
@url_option
@json_option
@cli_errors
def obliterate_command(
    queue_name: str, force: bool, yes: bool, prefix: str, url: str | None, as_json: bool
) -> None:
    """Delete QUEUE whole: every job, setting, event and scheduler."""
    with connect(url) as client:
        queue = open_queue(client, prefix, queue_name)
        if not yes:
            click.confirm(f"delete queue {queue_name} and every job in it?", abort=True)
        queue.obliterate(force=force)
    _report(as_json, {"queue": queue_name, "obliterated": True}, f"obliterated {queue_name}")


COMMANDS = [
    retry_command,
    promote_command,
    remove_command,
    clean_command,
    pause_command,
    resume_command,
    drain_command,
    obliterate_command,
]
