"""``corral schedulers QUEUE list|upsert|remove``: a queue's job schedulers from a shell.

:mod:`corral.cli` adds :data:`COMMANDS` to its ``main`` group. Each subcommand wraps the
queue's scheduler API (``Queue.get_job_schedulers``, ``upsert_job_scheduler``,
``remove_job_scheduler``): a rich table or one JSON document (``--json``, schema in
docs/cli.md), errors as one line on stderr (:mod:`corral._cli_errors`). A bad cron pattern,
time zone or date is a usage error (exit 2), checked before the server is reached; an unknown
queue or scheduler id is a runtime failure (exit 1), as ``corral remove`` has for jobs.
"""

from __future__ import annotations

import json
import os
from datetime import datetime, timezone
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from corral import clock
from corral._cli_errors import (
    CommandFailure,
    OneLineCommand,
    OneLineGroup,
    UsageFailure,
    cli_errors,
    cli_option_names,
)
from corral._cli_options import (
    JOB_OPTION_NAMES,
    job_options,
    job_options_from,
    json_option,
    parse_date,
    prefix_option,
    read_data,
    url_option,
)
from corral._sync.queue import Queue
from corral.cli_completion import complete_queue
from corral.cli_inspect import connect, open_queue
from corral.options import JobOptions, check_name
from corral.schedule import JobScheduler, Schedule, check_tz

#: Python names in the scheduler API's messages -> this command's flags.
SCHEDULER_OPTION_NAMES = {
    **JOB_OPTION_NAMES,
    "every": "--every",
    "invalid cron pattern": "invalid --pattern",
    "cron pattern": "--pattern",
    "unknown time zone": "unknown --tz",
    "tz": "--tz",
    "limit": "--limit",
    "start_date": "--start-date",
    "end_date": "--end-date",
    "template name": "--name",
}


def _console() -> Console:
    """120 columns when the output is not a terminal and ``COLUMNS`` is not set, as the
    other tables of the CLI."""
    console = Console()
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console.width = 120
    return console


def _queue_name() -> str:
    """The QUEUE given to the group (``corral schedulers QUEUE ...``)."""
    parent = click.get_current_context().parent
    assert parent is not None
    return str(parent.params["queue_name"])


def scheduler_document(scheduler: JobScheduler) -> dict[str, Any]:
    """One scheduler for ``--json`` (times and ``every`` in ms, as stored)."""
    return {
        "id": scheduler.id,
        "name": scheduler.name,
        "pattern": scheduler.pattern,
        "every": scheduler.every,
        "tz": scheduler.tz,
        "limit": scheduler.limit,
        "start_date": scheduler.start_date,
        "end_date": scheduler.end_date,
        "offset": scheduler.offset,
        "iteration_count": scheduler.iteration_count,
        "next_run": scheduler.next_run,
        "template": {
            "name": scheduler.template.name,
            "data": scheduler.template.data,
            "opts": scheduler.template.opts,
        },
    }


def _duration(ms: int) -> str:
    """``90000`` -> ``1m30s``; ``1500`` -> ``1.5s``."""
    if ms % 1000:
        return f"{ms / 1000:g}s"
    seconds = ms // 1000
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if seconds >= size:
            parts.append(f"{seconds // size}{unit}")
            seconds %= size
    return "".join(parts) or "0s"


def _when(ms: int | None, tz: str | None) -> str:
    """A run time in the scheduler's time zone (else local time), and how far it is."""
    if ms is None:
        return "-"
    zone = check_tz(tz) if tz else None
    at = datetime.fromtimestamp(ms / 1000, timezone.utc).astimezone(zone)
    delta = (ms - clock.now_ms()) / 1000
    relative = f"in {_duration(round(delta) * 1000)}" if delta >= 0 else "due"
    return f"{at.isoformat(sep=' ', timespec='seconds')} ({relative})"


def _schedule_text(scheduler: JobScheduler) -> str:
    if scheduler.pattern is not None:
        return f"cron {scheduler.pattern}"
    return f"every {_duration(scheduler.every or 0)}"


@click.group("schedulers", cls=OneLineGroup)
@click.argument("queue_name", metavar="QUEUE", shell_complete=complete_queue)
def schedulers_group(queue_name: str) -> None:
    """List, create or change, and remove the job schedulers of QUEUE."""


@schedulers_group.command("list", cls=OneLineCommand)
@prefix_option
@url_option
@json_option
@cli_errors
def list_command(prefix: str, url: str | None, as_json: bool) -> None:
    """The schedulers of QUEUE, the next to run first.

    Exit status 0 (also when there is none); 1 when QUEUE does not exist or the server
    cannot be used.
    """
    name = _queue_name()
    with connect(url) as client:
        found = open_queue(client, prefix, name).get_job_schedulers(asc=True)
    if as_json:
        documents = [scheduler_document(s) for s in found]
        click.echo(json.dumps({"queue": name, "prefix": prefix, "schedulers": documents}, indent=2))
        return
    if not found:
        click.echo(f"no schedulers in {name}")
        return
    noun = "scheduler" if len(found) == 1 else "schedulers"
    table = Table(title=f"{name}: {len(found)} {noun}", title_justify="left")
    for column in ("id", "schedule", "next run", "tz", "runs", "template"):
        table.add_column(column, no_wrap=column in ("id", "next run"))
    for s in found:
        runs = f"{s.iteration_count}/{s.limit}" if s.limit is not None else str(s.iteration_count)
        table.add_row(
            s.id, _schedule_text(s), _when(s.next_run, s.tz), s.tz or "-", runs, s.template.name
        )
    _console().print(table)


@schedulers_group.command("upsert", cls=OneLineCommand)
@click.argument("scheduler_id", metavar="ID")
@click.option("--every", type=float, default=None, help="Seconds between runs.")
@click.option(
    "--pattern",
    default=None,
    metavar="CRON",
    help="Cron pattern: 5 fields, or 6 with seconds first ('*/10 * * * * *').",
)
@click.option("--tz", default=None, help="IANA time zone of --pattern (default: local time).")
@click.option("--immediately", is_flag=True, help="With --pattern: run once now too.")
@click.option("--limit", type=int, default=None, help="At most N runs.")
@click.option("--start-date", default=None, help="No run before: ISO 8601 or epoch ms.")
@click.option("--end-date", default=None, help="No run after: ISO 8601 or epoch ms.")
@click.option("--name", default=None, help="Job name of each run [default: ID].")
@click.option("--data", default=None, metavar="JSON|@FILE|-", help="Job data of each run.")
@job_options
@prefix_option
@url_option
@json_option
@cli_errors
def upsert_command(
    scheduler_id: str,
    every: float | None,
    pattern: str | None,
    tz: str | None,
    immediately: bool,
    limit: int | None,
    start_date: str | None,
    end_date: str | None,
    name: str | None,
    data: str | None,
    prefix: str,
    url: str | None,
    as_json: bool,
    **job: Any,
) -> None:
    """Create the scheduler ID of QUEUE, or change its timing and job template (the count
    of runs made is kept): --every SECONDS or --pattern CRON.

    Exit status 0; 2 for a bad pattern, time zone, date or job option (nothing is written);
    1 when the server cannot be used.
    """
    queue_name = _queue_name()
    if (every is None) == (pattern is None):
        raise UsageFailure("give --every SECONDS or --pattern CRON (one of them)")
    if immediately and pattern is None:
        raise UsageFailure("--immediately goes with --pattern (--every runs first now)")
    timing: dict[str, Any] = {
        "every": every,
        "cron": pattern,
        "tz": tz,
        "limit": limit,
        "start_date": None if start_date is None else parse_date("--start-date", start_date),
        "end_date": None if end_date is None else parse_date("--end-date", end_date),
        "immediately": immediately,
    }
    template: dict[str, Any] = {
        "name": scheduler_id if name is None else name,
        "data": None if data is None else read_data(data),
        "opts": job_options_from(job),
    }
    with cli_option_names(SCHEDULER_OPTION_NAMES):
        # The pure checks first: a bad pattern is a usage error even with no server.
        check_name("scheduler id", scheduler_id, colon=False)
        Schedule.build(**timing).check_runs(clock.now_ms())
        check_name("template name", template["name"])
        JobOptions.build(template["opts"])
        with connect(url) as client:
            queue = Queue(queue_name, connection=client, prefix=prefix)
            pending = queue.upsert_job_scheduler(scheduler_id, template=template, **timing)
            scheduler = queue.get_job_scheduler(scheduler_id)
    if scheduler is None:  # removed by someone else in between
        raise CommandFailure(f"scheduler {scheduler_id!r} was removed while it was upserted")
    job_id = pending.id if pending is not None else None
    if as_json:
        document = {"queue": queue_name, "scheduler": scheduler_document(scheduler)}
        click.echo(json.dumps({**document, "job_id": job_id}))
        return
    if job_id is None:
        click.echo(f"upserted {scheduler_id}: no run left (its end date has passed)")
        return
    click.echo(
        f"upserted {scheduler_id}: {_schedule_text(scheduler)}, next run "
        f"{_when(scheduler.next_run, scheduler.tz)}, job {job_id}"
    )


@schedulers_group.command("remove", cls=OneLineCommand)
@click.argument("scheduler_id", metavar="ID")
@prefix_option
@url_option
@json_option
@cli_errors
def remove_command(scheduler_id: str, prefix: str, url: str | None, as_json: bool) -> None:
    """Delete the scheduler ID of QUEUE and its pending run (a run in progress finishes).

    Exit status 0; 1 when QUEUE or the scheduler does not exist, or the server cannot be
    used.
    """
    queue_name = _queue_name()
    with connect(url) as client:
        queue = open_queue(client, prefix, queue_name)
        if not queue.remove_job_scheduler(scheduler_id):
            raise CommandFailure(f"no such scheduler {scheduler_id!r} in queue {queue_name!r}")
    if as_json:
        click.echo(json.dumps({"queue": queue_name, "removed": scheduler_id}))
    else:
        click.echo(f"removed scheduler {scheduler_id}")


#: What :mod:`corral.cli` registers on ``main``.
COMMANDS = (schedulers_group,)
