"""``corral signal``: send a job the signal its ``wait_for_signal`` waits for (an approval
from a shell, a script or a webhook's handler).

:mod:`corral.cli` adds :data:`COMMANDS` to its ``main`` group. The command is a thin wrapper
of ``Queue.signal``: it prints one line saying whether the job was woken or the signal kept
for it (one JSON document with ``--json``), and reports errors as one line on stderr
(:mod:`corral._cli_errors`): exit 1 for a runtime failure (no such queue or job, a finished
job, the server), 2 for a usage error (bad ``--data`` JSON, an empty name).
"""

from __future__ import annotations

import json

import click

from corral._cli_errors import OneLineCommand, cli_errors
from corral._cli_options import json_option, prefix_option, read_data, url_option
from corral.cli_inspect import connect, open_queue


@click.command("signal", cls=OneLineCommand)
@click.argument("queue_name", metavar="QUEUE")
@click.argument("job_id", metavar="ID")
@click.argument("name", metavar="NAME")
@click.option(
    "--data",
    default=None,
    metavar="JSON|@FILE|-",
    help="The signal's payload (default: null).",
)
@prefix_option
@url_option
@json_option
@cli_errors
def signal_command(
    queue_name: str,
    job_id: str,
    name: str,
    data: str | None,
    prefix: str,
    url: str | None,
    as_json: bool,
) -> None:
    """Send job ID of QUEUE the signal NAME; wake the job if it is parked waiting for it.

    A job not waiting for it yet keeps the signal: its wait returns it at once.
    """
    payload = None if data is None else read_data(data)
    with connect(url) as client:
        queue = open_queue(client, prefix, queue_name)
        outcome = queue.signal(job_id, name, payload)
    if as_json:
        document = {"queue": queue_name, "job": job_id, "signal": name, "outcome": outcome}
        click.echo(json.dumps(document))
    elif outcome == "woken":
        click.echo(f"signal {name!r} sent: job {job_id} woken (a worker takes it next)")
    else:
        click.echo(f"signal {name!r} kept for job {job_id} (it is not parked waiting for it)")


COMMANDS = [signal_command]
