"""The ``corral`` command: thin wrappers that parse arguments and call the public API."""

from __future__ import annotations

import click

from corral._version import __version__


@click.group()
@click.version_option(__version__, prog_name="corral")
def main() -> None:
    """corral: BullMQ-compatible job queues for Python."""


@main.group()
def server() -> None:
    """Manage the embedded Valkey server of a data directory."""


_data_dir_option = click.option(
    "--data-dir",
    type=click.Path(file_okay=False),
    default=None,
    help="Data directory (default: $CORRAL_DATA_DIR or ./.corral).",
)


@server.command("start")
@_data_dir_option
def server_start(data_dir: str | None) -> None:
    """Start the embedded server (or report the one already running)."""
    from corral import server as srv
    from corral.errors import ServerNotAvailable

    try:
        st = srv.start(data_dir)
    except ServerNotAvailable as exc:
        # The message already says how to fix it (install the extra, or set CORRAL_REDIS_URL).
        raise click.ClickException(str(exc)) from exc
    click.echo(f"running pid={st.pid} url={st.url} data_dir={st.data_dir}")


@server.command("stop")
@_data_dir_option
def server_stop(data_dir: str | None) -> None:
    """Stop the embedded server of the data directory."""
    from corral import server as srv

    was_running = srv.stop(data_dir)
    click.echo("stopped" if was_running else "not running")


@server.command("status")
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
