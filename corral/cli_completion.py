"""Shell completion: ``corral completion bash|zsh|fish`` prints click's completion script, and
QUEUE arguments complete to the queues of the server.

The script calls ``corral`` again with ``_CORRAL_COMPLETE=<shell>_complete`` (click's protocol)
for every completion. Queue names are read with a short timeout, from the server of ``--url``
when it was typed before the QUEUE, else of ``$CORRAL_REDIS_URL`` / ``$REDIS_URL``, else of
the embedded server when it runs (completing never starts one); any failure completes nothing.
"""

from __future__ import annotations

import time

import click
import redis
from click.shell_completion import CompletionItem, get_completion_class

from corral._cli_errors import OneLineCommand

#: The shells click writes a script for.
SHELLS = ("bash", "zsh", "fish")
#: Seconds a completion may spend reading queue names (a shell waits for it).
COMPLETION_TIMEOUT = 1.0
#: Parameters that name one queue or several (``QUEUE`` arguments, ``--queue`` options).
QUEUE_PARAMS = frozenset({"queue_name", "queues", "queue_names"})


def _server_url(ctx: click.Context) -> str | None:
    from corral import server
    from corral.connection import configured_url

    found = configured_url(ctx.params.get("url"))
    if found is not None:
        return found
    status = server.status(ctx.params.get("data_dir"))
    return status.url if status.running else None


def _queue_names(client: redis.Redis, prefix: str, deadline: float) -> set[str]:
    """What :func:`corral.cli_inspect.discover_queues` finds, until ``deadline``."""
    start = f"{prefix}:"
    escaped = "".join("\\" + c if c in "*?[]\\" else c for c in prefix)
    names: set[str] = set()
    for suffix in (":meta", ":id"):
        for key in client.scan_iter(match=f"{escaped}:*{suffix}", count=1000):
            name = str(key)[len(start) : -len(suffix)]
            if name and ":" not in name:
                names.add(name)
            if time.monotonic() > deadline:
                return names
    return names


def complete_queue(
    ctx: click.Context, param: click.Parameter, incomplete: str
) -> list[CompletionItem]:
    """The queues whose names start with ``incomplete`` (a click ``shell_complete``)."""
    deadline = time.monotonic() + COMPLETION_TIMEOUT
    try:
        url = _server_url(ctx)
        if url is None:
            return []
        client = redis.Redis.from_url(
            url,
            socket_connect_timeout=COMPLETION_TIMEOUT / 2,
            socket_timeout=COMPLETION_TIMEOUT / 2,
            decode_responses=True,
        )
        try:
            names = _queue_names(client, ctx.params.get("prefix") or "bull", deadline)
        finally:
            client.close()
    except Exception:  # a completion says nothing rather than break the user's shell line
        return []
    return [CompletionItem(name) for name in sorted(names) if name.startswith(incomplete)]


def add_queue_completion(command: click.Command) -> None:
    """Give every queue parameter of ``command`` and its subcommands :func:`complete_queue`,
    unless it completes otherwise already."""
    for param in command.params:
        if param.name in QUEUE_PARAMS and param._custom_shell_complete is None:
            param._custom_shell_complete = complete_queue
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            add_queue_completion(sub)


@click.command("completion", cls=OneLineCommand)
@click.argument("shell", type=click.Choice(SHELLS))
def completion_command(shell: str) -> None:
    """Print the completion script of corral for SHELL.

    \b
    bash:  eval "$(corral completion bash)"    (in ~/.bashrc)
    zsh:   eval "$(corral completion zsh)"     (in ~/.zshrc)
    fish:  corral completion fish > ~/.config/fish/completions/corral.fish
    """
    root = click.get_current_context().find_root().command
    script_class = get_completion_class(shell)
    assert script_class is not None  # every name of SHELLS has one
    # The script runs `corral` by that name, whatever this process was started as.
    click.echo(script_class(root, {}, "corral", "_CORRAL_COMPLETE").source())


#: What :mod:`corral.cli` registers on ``main``.
COMMANDS = (completion_command,)
