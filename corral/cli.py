"""The ``corral`` command: thin wrappers that parse arguments and call the public API."""

from __future__ import annotations

import logging
from typing import Any

import click

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
    prefix_option,
    read_data,
    url_option,
)
from corral._version import __version__


@click.group()
@click.version_option(__version__, prog_name="corral")
def main() -> None:
    """corral: BullMQ-compatible job queues for Python."""


@main.group(cls=OneLineGroup)
def server() -> None:
    """Manage the embedded Valkey server of a data directory."""


_data_dir_option = click.option(
    "--data-dir",
    type=click.Path(file_okay=False),
    default=None,
    help="Data directory (default: $CORRAL_DATA_DIR or ./.corral).",
)


@server.command("start", cls=OneLineCommand)
@_data_dir_option
def server_start(data_dir: str | None) -> None:
    """Start the embedded server (or report the one already running).

    Exit status 0; 1 with one line when the data directory cannot be used or no server
    binary is installed.
    """
    from corral import server as srv
    from corral.errors import CorralError

    try:
        st = srv.start(data_dir)
    except CorralError as exc:
        # ServerNotAvailable already says how to fix it (install the extra, or set
        # CORRAL_REDIS_URL).
        raise CommandFailure(str(exc)) from None
    except OSError as exc:  # the directory cannot be made or written
        where = exc.filename or srv.resolve_data_dir(data_dir)
        raise CommandFailure(
            f"cannot use the data directory {str(where)!r}: {exc.strerror or exc}"
        ) from None
    click.echo(f"running pid={st.pid} url={st.url} data_dir={st.data_dir}")


@server.command("stop", cls=OneLineCommand)
@_data_dir_option
def server_stop(data_dir: str | None) -> None:
    """Stop the embedded server of the data directory."""
    from corral import server as srv

    was_running = srv.stop(data_dir)
    click.echo("stopped" if was_running else "not running")


@server.command("status", cls=OneLineCommand)
@_data_dir_option
def server_status(data_dir: str | None) -> None:
    """Print whether the embedded server runs; exit status 1 when it does not."""
    from corral import server as srv

    st = srv.status(data_dir)
    if st.running:
        click.echo(f"running pid={st.pid} url={st.url} data_dir={st.data_dir}")
    else:
        click.echo(f"not running data_dir={st.data_dir}")
        raise SystemExit(1)


@main.command("demo")
@click.option("--jobs", "-n", default=300, show_default=True, type=click.IntRange(min=1))
@click.option("--concurrency", "-c", default=20, show_default=True, type=click.IntRange(min=1))
@click.option(
    "--seed", default=7, show_default=True, help="Seed of the batch (same seed, same jobs)."
)
def demo_command(jobs: int, concurrency: int, seed: int) -> None:
    """Run simulated jobs on a temporary embedded server, with a live view and a summary."""
    from corral import demo
    from corral.errors import CorralError

    try:
        demo.run(jobs=jobs, concurrency=concurrency, seed=seed)
    except CorralError as exc:
        # ServerNotAvailable already says how to fix it; DemoError says what did not finish.
        raise click.ClickException(str(exc)) from None


#: The deduplication flags of ``corral enqueue`` and their ``Dedup`` fields.
_DEDUP_FLAGS = {
    "dedup_ttl": "ttl",
    "dedup_extend": "extend",
    "dedup_replace": "replace",
    "dedup_keep_last_if_active": "keep_last_if_active",
}


def _deduplication(dedup_id: str | None, flags: dict[str, Any]) -> dict[str, Any] | None:
    """``Queue.add``'s ``deduplication`` from the ``--dedup-*`` flags (``None``: none)."""
    # Flags not given are None (--dedup-ttl) or False; a --dedup-ttl of 0 is given (and
    # refused by the option check).
    chosen = [f for f in _DEDUP_FLAGS if flags[f] is not None and flags[f] is not False]
    given = {_DEDUP_FLAGS[flag]: flags[flag] for flag in chosen}
    if dedup_id is None:
        if chosen:
            raise UsageFailure(f"--{chosen[0].replace('_', '-')} needs --dedup-id")
        return None
    return {"id": dedup_id, **given}


@main.command("enqueue", cls=OneLineCommand)
@click.argument("queue_name", metavar="QUEUE")
@click.argument("name")
@click.option(
    "--data",
    default="{}",
    show_default=True,
    metavar="JSON|@FILE|-",
    help="Job data: JSON, @FILE (a file of JSON) or - (JSON on stdin).",
)
@click.option("--job-id", default=None, help="Custom job id (an existing id adds nothing).")
@click.option("--delay", type=float, default=None, help="Seconds before the job may run.")
@job_options
@click.option(
    "--dedup-id",
    default=None,
    help="While a job with this deduplication id is unfinished, adds with it add nothing.",
)
@click.option(
    "--dedup-ttl",
    type=float,
    default=None,
    help="With --dedup-id: the id blocks adds for this many seconds, finished or not.",
)
@click.option("--dedup-extend", is_flag=True, help="With --dedup-ttl: a blocked add restarts it.")
@click.option(
    "--dedup-replace",
    is_flag=True,
    help="With --dedup-ttl and --delay: replace the job still delayed (debounce).",
)
@click.option(
    "--dedup-keep-last-if-active",
    is_flag=True,
    help="With --dedup-id: an add while the job runs is kept and runs after it.",
)
@click.option(
    "--idempotency-key",
    default=None,
    help="Within the window, a repeated add creates nothing and prints the first job's id.",
)
@click.option(
    "--idempotency-window",
    type=float,
    default=None,
    help="Seconds the idempotency key is remembered (default: one day).",
)
@url_option
@prefix_option
@click.option(
    "--retries",
    type=click.IntRange(0, 100),
    default=5,
    show_default=True,
    help="Times the add is sent again while the server is away (about 1.5 s for 5); a "
    "resend never creates a second job.",
)
@click.option(
    "--shards",
    type=click.IntRange(1, 256),
    default=1,
    show_default=True,
    help="QUEUE is a sharded queue of this many shards (the workers' count).",
)
@cli_errors
def enqueue_command(
    queue_name: str,
    name: str,
    data: str,
    job_id: str | None,
    delay: float | None,
    dedup_id: str | None,
    idempotency_key: str | None,
    idempotency_window: float | None,
    url: str | None,
    prefix: str,
    retries: int,
    shards: int,
    **flags: Any,
) -> None:
    """Add one job to QUEUE and print its id (for system cron: cron enqueues, workers run).

    Exit status 0 on success (also when the job existed: its id is printed); 2 with a
    one-line error for bad input (nothing is written); 1 when the server cannot be used.
    """
    from corral._sync.sharded_queue import ShardedQueue

    payload = read_data(data)
    options: dict[str, Any] = {
        key: value
        for key, value in {
            "job_id": job_id,
            "delay": delay,
            **job_options_from(flags),
            "deduplication": _deduplication(dedup_id, flags),
            "idempotency_key": idempotency_key,
            "idempotency_window": idempotency_window,
        }.items()
        if value is not None
    }
    # The error, if it comes to that, is the one line: not the warnings of each retry. The
    # level is put back after (the command may run in-process, under click's test runner).
    queue_logger = logging.getLogger("corral.queue")
    level = queue_logger.level
    queue_logger.setLevel(logging.ERROR)
    try:
        with (
            cli_option_names(JOB_OPTION_NAMES),
            ShardedQueue(
                queue_name, shards=shards, connection=url, prefix=prefix, add_retries=retries
            ) as queue,  # shards=1 is the plain queue
        ):
            job = queue.add(name, payload, **options)
    finally:
        queue_logger.setLevel(level)
    click.echo(job.id)


@main.command("cancel", cls=OneLineCommand)
@click.argument("queue_name", metavar="QUEUE")
@click.argument("job_id")
@click.option("--reason", default="", help="Why (kept as failedReason: 'cancelled: <reason>').")
@url_option
@prefix_option
@cli_errors
def cancel_command(queue_name: str, job_id: str, reason: str, url: str | None, prefix: str) -> None:
    """Cancel job JOB_ID of QUEUE: it fails for good, or its worker is told to stop it.

    Exit status 0 when the job was cancelled (or its worker asked to stop it); 1 with a
    one-line error for an unknown or finished job, or a server that cannot be used; 2 for
    bad input.
    """
    from corral._sync.queue import Queue
    from corral.job import JobState

    # The queue's own connection (not cli_inspect's shared client), which knows Cluster URLs;
    # an unknown queue is an unknown job of that queue.
    with cli_option_names(JOB_OPTION_NAMES), Queue(queue_name, connection=url, prefix=prefix) as q:
        state = q.cancel(job_id, reason)
    if state is JobState.ACTIVE:
        click.echo(f"cancelling {job_id} (active: its worker stops it)")
    else:
        click.echo(f"cancelled {job_id}")


def _register_commands() -> None:
    # One module per noun, added to the group here: worker (corral/cli_worker.py), stats,
    # jobs and job (corral/cli_inspect.py), retry, promote, remove, clean, pause, resume, drain
    # and obliterate (corral/cli_manage.py), health and metrics (corral/cli_ops.py),
    # schedulers (corral/cli_schedulers.py) and completion (corral/cli_completion.py), which
    # then gives every QUEUE argument and --queue option the completion of queue names.
    from corral import (
        cli_completion,
        cli_dashboard,
        cli_dlq,
        cli_inspect,
        cli_manage,
        cli_ops,
        cli_schedulers,
        cli_signal,
        cli_top,
        cli_worker,
    )

    for command in [
        *cli_worker.COMMANDS,
        *cli_inspect.COMMANDS,
        *cli_manage.COMMANDS,
        *cli_schedulers.COMMANDS,
        *cli_top.COMMANDS,
        *cli_dlq.COMMANDS,
        *cli_dashboard.COMMANDS,
        *cli_signal.COMMANDS,
        *cli_completion.COMMANDS,
    ]:
        main.add_command(command)
    cli_ops.register(main)
    cli_completion.add_queue_completion(main)


_register_commands()

if __name__ == "__main__":
    main()
