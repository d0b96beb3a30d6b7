"""``corral dashboard``: serve the web dashboard (:mod:`corral.dashboard`) with uvicorn.

It needs the ``dashboard`` extra. Authentication is on by default: the token comes from
``CORRAL_DASHBOARD_TOKEN``, else a random one is made and printed. ``--basic-auth USER:PASS``
asks for a user and password instead; ``--no-auth`` turns it off, and is refused unless the
host is a loopback address. Errors are one line (:mod:`corral._cli_errors`): exit status 2
for a usage error, 1 for a runtime failure (a missing extra, an unreachable server, a port
in use).
"""

from __future__ import annotations

import ipaddress
import os
import signal
import socket
import threading
from typing import Any

import click

from corral._cli_errors import CommandFailure, OneLineCommand, UsageFailure, cli_errors
from corral._cli_options import prefix_option, url_option
from corral.connection import configured_url, masked_url

#: Where the token is read from when set.
TOKEN_ENV = "CORRAL_DASHBOARD_TOKEN"
_EXTRA = "pip install 'corral[dashboard]'"


def is_loopback(host: str) -> bool:
    """Whether ``host`` only listens on this machine (``127.0.0.0/8``, ``::1``, localhost)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _queue_names(text: str | None) -> list[str] | None:
    if text is None:
        return None
    names = [name.strip() for name in text.split(",") if name.strip()]
    if not names:
        raise UsageFailure("--queues must name at least one queue: --queues emails,reports")
    return names


def _listen(host: str, port: int) -> socket.socket:
    """The listening socket, bound here so that a port in use is one line, not a log."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host.strip("[]"), port))
    except OSError as exc:
        sock.close()
        raise CommandFailure(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.set_inheritable(True)
    return sock


@click.command("dashboard", cls=OneLineCommand)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option(
    "--port", type=click.IntRange(1, 65535), default=8765, show_default=True, help="Port."
)
@click.option(
    "--queues", default=None, metavar="A,B", help="Only these queues [default: every queue]."
)
@prefix_option
@url_option
@click.option("--read-only", is_flag=True, help="Hide every action and refuse them (403).")
@click.option(
    "--basic-auth",
    default=None,
    metavar="USER:PASS",
    help="HTTP basic auth with this user and password instead of the token.",
)
@click.option("--no-auth", is_flag=True, help="No authentication (only on a loopback host).")
@cli_errors
def dashboard_command(
    host: str,
    port: int,
    queues: str | None,
    prefix: str,
    url: str | None,
    read_only: bool,
    basic_auth: str | None,
    no_auth: bool,
) -> None:
    """Serve the web dashboard: queues, jobs, search, live counts and actions.

    Prints its URL and, unless CORRAL_DASHBOARD_TOKEN is set, the token to log in with (or
    to send as "Authorization: Bearer TOKEN"). Runs until interrupted (SIGINT or SIGTERM:
    exit status 0). Exit status 2 for a usage error (--no-auth on a host that is not
    loopback...), 1 when the dashboard extra is missing, the server cannot be reached or
    the port cannot be listened on.
    """
    if no_auth and basic_auth is not None:
        raise UsageFailure("--no-auth and --basic-auth cannot be used together")
    if no_auth and not is_loopback(host):
        raise UsageFailure(
            f"--no-auth is refused on host {host!r}: without authentication the dashboard "
            "may only listen on a loopback address (127.0.0.1, ::1, localhost)"
        )
    names = _queue_names(queues)
    try:
        import uvicorn

        from corral.dashboard import BasicAuth, NoAuth, TokenAuth, create_app
    except ImportError as exc:
        raise CommandFailure(f"corral dashboard needs its extra ({exc.name}): {_EXTRA}") from None
    from corral.cli_inspect import connect

    printed_token = None
    auth: BasicAuth | NoAuth | TokenAuth
    if no_auth:
        auth = NoAuth()
    elif basic_auth is not None:
        try:
            auth = BasicAuth.parse(basic_auth)
        except ValueError as exc:
            raise UsageFailure(f"--basic-auth: {exc}") from None
    else:
        from corral.dashboard.auth import new_token

        token = os.environ.get(TOKEN_ENV)
        if token is None:
            token = printed_token = new_token()
        try:
            auth = TokenAuth(token)
        except ValueError as exc:
            raise UsageFailure(f"{TOKEN_ENV}: {exc}") from None
    with connect(url) as client:  # fails now, on one line, when the server cannot be used
        client.ping()
    app = create_app(connection=url, prefix=prefix, queues=names, auth=auth, read_only=read_only)
    sock = _listen(host, port)
    shown = f"[{host}]" if ":" in host else host
    found = configured_url(url)
    click.echo(f"corral dashboard on http://{shown}:{port}/")
    click.echo(f"redis: {masked_url(found) if found else 'the embedded server'}, prefix {prefix}")
    if printed_token is not None:
        click.echo(f"token: {printed_token}  (set {TOKEN_ENV} to choose it)")
    elif isinstance(auth, TokenAuth):
        click.echo(f"token: from ${TOKEN_ENV}")
    elif isinstance(auth, BasicAuth):
        click.echo(f"auth: basic, user {auth.username}")
    else:
        click.echo("auth: none (loopback only)")
    if read_only:
        click.echo("read-only: actions are disabled")
    config = uvicorn.Config(
        app, log_level="warning", lifespan="on", timeout_graceful_shutdown=3, access_log=False
    )
    _serve(uvicorn.Server(config), sock)


def _serve(server: Any, sock: socket.socket) -> None:
    """Run uvicorn until SIGINT or SIGTERM. uvicorn raises the signal that stopped it again
    once it has shut down (to end the process with that signal's status): a stop asked for
    is a clean exit here, status 0, so the handlers it finds do nothing."""
    signals = (signal.SIGINT, signal.SIGTERM)
    main = threading.current_thread() is threading.main_thread()
    before = {sig: signal.signal(sig, _ignore) for sig in signals} if main else {}
    try:
        server.run(sockets=[sock])
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
        sock.close()


def _ignore(signum: int, frame: Any) -> None:
    return None


#: What :mod:`corral.cli` registers on ``main``.
COMMANDS = (dashboard_command,)
