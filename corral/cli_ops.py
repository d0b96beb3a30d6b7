"""Operations commands of ``corral``: ``health`` (for orchestrators' probes) and ``metrics``
(a Prometheus endpoint). :func:`register` adds them to the ``corral`` group; they are thin
wrappers around :mod:`corral.health` and :mod:`corral.prometheus`.

Exit codes: 0 healthy (or the server stopped by Ctrl-C / SIGTERM), 1 unhealthy or a runtime
failure, 2 a usage error (a bad option, a bad URL).
"""

from __future__ import annotations

import json
import signal
import threading
from types import FrameType
from typing import Any

import click

from corral._cli_options import prefix_option, url_option

_queues_option = click.option(
    "--queue",
    "-q",
    "queue_names",
    multiple=True,
    required=True,
    help="Queue to check (repeat for several).",
)


def _open_queues(names: tuple[str, ...], url: str | None, prefix: str) -> list[Any]:
    """Sync queues of ``names``; a bad name, prefix or URL is a usage error (exit 2)."""
    from corral._sync.queue import Queue
    from corral.errors import CorralError

    queues = []
    try:
        for name in dict.fromkeys(names):  # a queue named twice is checked once
            queues.append(Queue(name, connection=url, prefix=prefix))
    except CorralError as exc:
        for queue in queues:
            queue.close()
        raise click.UsageError(str(exc)) from None
    return queues


@click.command("health")
@_queues_option
@click.option(
    "--max-waiting-age",
    type=click.FloatRange(min=0),
    default=None,
    help="Unhealthy when the job at the front of a queue has waited more seconds than this.",
)
@click.option(
    "--min-workers",
    type=click.IntRange(min=0),
    default=None,
    help="Unhealthy when fewer workers are connected to a queue.",
)
@url_option
@prefix_option
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def health_command(
    queue_names: tuple[str, ...],
    max_waiting_age: float | None,
    min_workers: int | None,
    url: str | None,
    prefix: str,
    as_json: bool,
) -> None:
    """Check queues for an orchestrator's probe: exit 0 when healthy, 1 when not (one line
    per reason, or per queue when healthy), 2 on a usage error.

    A server that cannot be reached is unhealthy (exit 1), with the reason.
    """
    from corral.health import check_health, summary

    queues = _open_queues(queue_names, url, prefix)
    try:
        reports = [
            check_health(q, max_waiting_age=max_waiting_age, min_workers=min_workers)
            for q in queues
        ]
    finally:
        for queue in queues:
            queue.close()
    doc = summary(reports)
    if as_json:
        click.echo(json.dumps(doc, indent=2))
    else:
        for report in reports:
            for reason in report.reasons:
                click.echo(f"unhealthy: {reason}")
            if report.ok:
                age = report.oldest_waiting_age
                click.echo(
                    f"ok: {report.queue}: waiting={report.waiting} "
                    f"oldest={'-' if age is None else f'{age:.1f}s'} "
                    f"workers={report.workers} paused={'yes' if report.paused else 'no'}"
                )
    if not doc["ok"]:
        raise SystemExit(1)


@click.command("metrics")
@_queues_option
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=9100,
    show_default=True,
    help="Port to listen on (0: any free port, printed).",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@url_option
@prefix_option
def metrics_command(
    queue_names: tuple[str, ...], port: int, host: str, url: str | None, prefix: str
) -> None:
    """Serve the queues' Prometheus metrics at http://HOST:PORT/metrics until Ctrl-C or
    SIGTERM (the figures are read from the server at each scrape)."""
    try:
        from prometheus_client import start_http_server

        from corral.prometheus import queue_registry
    except ImportError as exc:
        raise click.ClickException(str(exc)) from None

    queues = _open_queues(queue_names, url, prefix)
    try:
        server, thread = start_http_server(port, addr=host, registry=queue_registry(queues))
    except OSError as exc:
        for queue in queues:
            queue.close()
        raise click.ClickException(f"cannot listen on {host}:{port}: {exc}") from None
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = signal.signal(signal.SIGTERM, on_signal)
    click.echo(
        f"corral metrics: serving {', '.join(q.name for q in queues)} on "
        f"http://{host}:{server.server_port}/metrics",
    )
    try:
        stop.wait()
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
        server.shutdown()
        server.server_close()
        thread.join()
        for queue in queues:
            queue.close()
    click.echo("corral metrics: stopped")


def register(main: click.Group) -> None:
    """Add ``health`` and ``metrics`` to the ``corral`` command group."""
    main.add_command(health_command)
    main.add_command(metrics_command)
