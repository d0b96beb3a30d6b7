"""``corral dlq QUEUE list|replay|purge``: look at a dead-letter queue and act on it.

:mod:`corral.cli` adds :data:`COMMANDS` to its ``main`` group. QUEUE is the dead-letter
queue (what ``dead_letter_queue=`` named); each subcommand wraps a call of
:class:`~corral._sync.dead_letter_queue.DeadLetterQueue`, prints one line per dead letter (or
one JSON document with ``--json``), and reports errors as one line on stderr
(:mod:`corral._cli_errors`): exit 1 for a runtime failure (no such queue or job, the server),
2 for a usage error (naming no job and no ``--all``, or both).
"""

from __future__ import annotations

import json
import time
from typing import Any

import click

from corral._cli_errors import (
    CommandFailure,
    OneLineCommand,
    OneLineGroup,
    UsageFailure,
    cli_errors,
)
from corral._cli_options import json_option, prefix_option, url_option
from corral._sync.dead_letter_queue import DeadLetterQueue
from corral.cli_inspect import connect, open_queue
from corral.dead_letter import DeadLetter
from corral.errors import InvalidOptionError, JobNotFoundError


def _queue_name(ctx: click.Context) -> str:
    assert ctx.parent is not None
    name: str = ctx.parent.params["queue_name"]
    return name


def _open(client: Any, prefix: str, name: str) -> DeadLetterQueue:
    open_queue(client, prefix, name)  # refuses a bad name, or a queue with no keys
    return DeadLetterQueue(name, connection=client, prefix=prefix)


def _age(ms: int) -> str:
    seconds = max(0.0, time.time() - ms / 1000)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f}{unit} ago"
    return f"{seconds:.0f}s ago"


def _line(letter: DeadLetter) -> str:
    reason = " ".join((letter.failed_reason or "").split())
    if len(reason) > 60:
        reason = reason[:59] + "…"
    replayed = f"  replayed as {letter.replayed_as}" if letter.replayed_as else ""
    return (
        f"{letter.id}  {letter.queue}/{letter.job_id}  {letter.name}  "
        f"{letter.attempts_made} attempts  {_age(letter.dead_lettered_at)}  {reason}{replayed}"
    )


@click.group("dlq", cls=OneLineGroup)
@click.argument("queue_name", metavar="QUEUE")
def dlq_group(queue_name: str) -> None:
    """Look at the dead-letter queue QUEUE: list its dead letters, replay them into the
    queues they failed in, purge it."""


@dlq_group.command("list", cls=OneLineCommand)
@click.option("--limit", type=click.IntRange(min=0), default=100, show_default=True, help="0: all.")
@prefix_option
@url_option
@json_option
@click.pass_context
@cli_errors
def list_command(
    ctx: click.Context, limit: int, prefix: str, url: str | None, as_json: bool
) -> None:
    """The dead letters of QUEUE, oldest first: id, origin queue/id, name, attempts, when,
    why, and the job a replay added."""
    name = _queue_name(ctx)
    with connect(url) as client:
        dlq = _open(client, prefix, name)
        letters = dlq.get_dead_letters(0, limit - 1 if limit else -1)
        total = dlq.count()
    if as_json:
        click.echo(
            json.dumps(
                {
                    "queue": name,
                    "total": total,
                    "dead_letters": [letter.to_dict() for letter in letters],
                }
            )
        )
        return
    for letter in letters:
        click.echo(_line(letter))
    shown = f"{len(letters)} of {total}" if len(letters) < total else f"{total}"
    click.echo(f"{shown} jobs in {name}")


@dlq_group.command("replay", cls=OneLineCommand)
@click.argument("job_ids", nargs=-1, metavar="[ID]...")
@click.option("--all", "everything", is_flag=True, help="Every dead letter of QUEUE.")
@prefix_option
@url_option
@json_option
@click.pass_context
@cli_errors
def replay_command(
    ctx: click.Context,
    job_ids: tuple[str, ...],
    everything: bool,
    prefix: str,
    url: str | None,
    as_json: bool,
) -> None:
    """Add dead letters back to the queues they failed in (the IDs given, or --all), each
    once: one replayed before says which job it became."""
    if bool(job_ids) == everything:
        raise UsageFailure("give dead-letter ids or --all, not both and not neither")
    name = _queue_name(ctx)
    refused: dict[str, str] = {}
    with connect(url) as client:
        dlq = _open(client, prefix, name)
        if everything:
            done = dlq.replay_all()
        else:
            done = []
            for job_id in job_ids:
                try:
                    done.append(dlq.replay(job_id))
                except (JobNotFoundError, InvalidOptionError) as exc:
                    refused[job_id] = str(exc)
    if as_json:
        click.echo(
            json.dumps({"queue": name, "replayed": [d.to_dict() for d in done], "refused": refused})
        )
    else:
        for d in done:
            verb = "already replayed" if d.already else "replayed"
            click.echo(f"{verb} {d.id} as job {d.job_id} of {d.queue}")
    if refused:
        first = next(iter(refused.values()))
        more = f" (and {len(refused) - 1} more)" if len(refused) > 1 else ""
        raise CommandFailure(f"{first}{more}")


@dlq_group.command("purge", cls=OneLineCommand)
@click.option("--replayed", is_flag=True, help="Only the dead letters that were replayed.")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@prefix_option
@url_option
@json_option
@click.pass_context
@cli_errors
def purge_command(
    ctx: click.Context, replayed: bool, yes: bool, prefix: str, url: str | None, as_json: bool
) -> None:
    """Delete the jobs of QUEUE (with --replayed, only those replayed)."""
    name = _queue_name(ctx)
    with connect(url) as client:
        dlq = _open(client, prefix, name)
        if not yes:
            what = "the replayed dead letters" if replayed else "every job"
            click.confirm(f"delete {what} of {name}?", abort=True)
        count = dlq.purge(replayed_only=replayed)
    if as_json:
        click.echo(json.dumps({"queue": name, "purged": count}))
    else:
        click.echo(f"purged {count} jobs from {name}")


COMMANDS = [dlq_group]
