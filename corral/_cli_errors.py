"""How the CLI reports a failure: one line on stderr, the exit status, no traceback.

Every command that talks to a server wraps its body with :func:`cli_errors`, which adds a
``--debug`` flag (or ``CORRAL_DEBUG=1``) and maps what was raised to one line:

============================================  ======  =====================================
raised                                        status  line
============================================  ======  =====================================
``InvalidOptionError`` (bad URL scheme...)    2       the message (a usage error)
``redis.AuthenticationError``                 1       ``authentication required`` (no
                                                      password in the URL) or
                                                      ``authentication failed`` (wrong one)
``redis.NoPermissionError``                   1       ``permission denied (ACL)``
``DB index is out of range``                  1       ``db index out of range``
TLS settings refused                          1       ``TLS handshake refused``
``redis.ConnectionError`` / timeout / OSError 1       ``cannot reach the server at URL``
other ``CorralError``                         1       its message
anything else                                 1       ``Type: message`` (``--debug`` shows
                                                      the traceback)
============================================  ======  =====================================

Click's own usage errors (an unknown option, a bad value) exit with status 2, on one line too
with :class:`OneLineCommand` (and :class:`OneLineGroup` for a group of subcommands).
:func:`rename_options` turns the Python parameter names that an ``InvalidOptionError`` names
into the command's option names (``priority`` -> ``--priority``).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, TypeVar
from urllib.parse import urlsplit

import click
import redis

from corral import errors
from corral.connection import configured_url, masked_url, url_source

T = TypeVar("T")


class CommandFailure(click.ClickException):
    """A runtime failure shown as ``Error: <message>`` on one line, exit status 1."""

    exit_code = 1

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(message.split()))  # one line, whatever the message held


class UsageFailure(CommandFailure):
    """A usage error found past click's parsing (a bad URL...): one line, exit status 2."""

    exit_code = 2


def _one_line_usage(exc: click.UsageError, info_name: str | None) -> UsageFailure:
    path = exc.ctx.command_path if exc.ctx is not None else info_name
    return UsageFailure(f"{exc.format_message()} (see '{path} --help')")


class OneLineCommand(click.Command):
    """A command whose usage errors (an unknown option, a bad value, a missing argument) are
    one line too, exit status 2, naming ``--help`` instead of printing the usage."""

    def make_context(
        self,
        info_name: str | None,
        args: list[str],
        parent: click.Context | None = None,
        **extra: Any,
    ) -> click.Context:
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except click.UsageError as exc:
            raise _one_line_usage(exc, info_name) from None


class OneLineGroup(click.Group):
    """:class:`OneLineCommand` for a group: its own usage errors, a missing or unknown
    subcommand included, are one line (give its subcommands ``cls=OneLineCommand``). With no
    argument at all it prints its help, as click's groups do."""

    def make_context(
        self,
        info_name: str | None,
        args: list[str],
        parent: click.Context | None = None,
        **extra: Any,
    ) -> click.Context:
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except click.exceptions.NoArgsIsHelpError:
            raise
        except click.UsageError as exc:
            raise _one_line_usage(exc, info_name) from None

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)  # "Missing command.", "No such command" come from here
        except click.UsageError as exc:
            raise _one_line_usage(exc, ctx.info_name) from None


def no_such_queue(name: str, prefix: str) -> CommandFailure:
    """The error of a queue that has no keys under ``prefix``."""
    return CommandFailure(f"no such queue {name!r} (no {prefix}:{name}:* keys)")


def _has_password(url: str | None) -> bool:
    if not url:
        return False
    try:
        parts = urlsplit(url)
    except ValueError:
        return False
    return bool(parts.password) or "password=" in parts.query


def describe(exc: BaseException, url: str | None) -> tuple[str, int]:
    """The one line and the exit status for ``exc``, raised while using ``url`` (the
    ``--url`` given, else the environment's)."""
    found = configured_url(url)
    where = masked_url(found) if found else "the embedded server"
    if isinstance(exc, errors.InvalidOptionError):
        message = str(exc)
        # The Python parameter's name ("connection ...", "connection: ..."): say where the
        # CLI's URL came from instead.
        if message.startswith(("connection ", "connection:")):
            source = "--url" if url else url_source()
            message = source + message[len("connection") :]
        return message, 2
    if isinstance(exc, errors.CorralError):
        return str(exc), 1
    if isinstance(exc, redis.AuthenticationError):
        if _has_password(found):
            return f"authentication failed at {where}: wrong username or password ({exc})", 1
        return (
            f"authentication required at {where}: the server wants a password and the URL "
            "has none (redis://[user]:PASSWORD@host:port/db)"
        ), 1
    if isinstance(exc, redis.exceptions.NoPermissionError):
        return f"permission denied (ACL) at {where}: {exc}", 1
    if isinstance(exc, redis.ResponseError) and "DB index is out of range" in str(exc):
        return f"db index out of range at {where}: the server has fewer databases", 1
    tls = errors.tls_failure(exc)
    if tls is not None:
        return f"TLS handshake refused by {where}: {tls}", 1
    if isinstance(exc, (redis.ConnectionError, redis.TimeoutError, OSError)):
        return f"cannot reach the server at {where}: {exc}", 1
    if isinstance(exc, redis.ResponseError):
        return f"the server refused a command: {exc}", 1
    return f"{type(exc).__name__}: {exc} (--debug shows the traceback)", 1


def cli_errors(func: Callable[..., T]) -> Callable[..., T]:
    """Add ``--debug`` to a command and turn what its body raises into one line.

    Apply it below the command's options; the command's ``url`` parameter, when it has one,
    names the server in the messages.
    """

    @click.option(
        "--debug",
        is_flag=True,
        envvar="CORRAL_DEBUG",
        help="On an error, show the traceback ($CORRAL_DEBUG=1 too).",
    )
    @functools.wraps(func)
    def wrapper(*args: Any, debug: bool, **kwargs: Any) -> T:
        try:
            return func(*args, **kwargs)
        except (click.ClickException, click.exceptions.Exit, click.Abort):
            raise
        except Exception as exc:
            if debug:
                raise
            message, code = describe(exc, kwargs.get("url"))
            raise (UsageFailure if code == 2 else CommandFailure)(message) from None

    return wrapper


def rename_options(message: str, names: Mapping[str, str]) -> str:
    """``message`` with each Python name of ``names`` (a parameter, or a phrase such as
    ``"backoff delay"``) replaced by the command's name for it (``"--backoff delay"``).

    Only the part before ``", got "`` is rewritten: what follows is the value refused, quoted
    as the user gave it.
    """
    head, got, value = message.partition(", got ")
    if not names:
        return message
    words = sorted(names, key=len, reverse=True)  # "soft_timeout" before "timeout"
    pattern = re.compile(r"(?<![\w'-])(" + "|".join(map(re.escape, words)) + r")(?![\w'-])")
    return pattern.sub(lambda m: names[m.group(1)], head) + got + value


@contextmanager
def cli_option_names(names: Mapping[str, str]) -> Iterator[None]:
    """Re-raise an ``InvalidOptionError`` of the body with the command's option names (see
    :func:`rename_options`); :func:`cli_errors` then shows it as a usage error."""
    try:
        yield
    except errors.InvalidOptionError as exc:
        message = str(exc)
        if message.startswith(("connection ", "connection:")):  # describe() names its source
            raise
        raise errors.InvalidOptionError(rename_options(message, names)) from None
