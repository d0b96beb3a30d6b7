"""Which server to talk to, and whether it can be used. No I/O of its own.

Resolution order: an explicit URL or client, then ``CORRAL_REDIS_URL``, then ``REDIS_URL``,
then the embedded server of the data directory (``corral.server``). URLs are redis-py's:
``redis://``, ``rediss://`` (TLS), ``unix://``, with user, password and db number; and
``redis+sentinel://`` (:func:`parse_sentinel_url`), whose master is found through Sentinel.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, unquote

from corral.errors import ConfigurationError, InvalidOptionError

#: The oldest servers whose commands and Lua the scripts need (LPOS, float BZPOPMIN timeout).
MIN_REDIS = (6, 2, 0)
MIN_VALKEY = (7, 2, 0)


def configured_url(url: str | None = None) -> str | None:
    """The URL given, else ``CORRAL_REDIS_URL``, else ``REDIS_URL``, else ``None``."""
    return url or os.environ.get("CORRAL_REDIS_URL") or os.environ.get("REDIS_URL") or None


def url_source(url: str | None = None) -> str:
    """Where :func:`configured_url` found its URL: the argument's name or the variable's."""
    if url:
        return "connection"
    return "CORRAL_REDIS_URL" if os.environ.get("CORRAL_REDIS_URL") else "REDIS_URL"


def resolve_url(url: str | None = None) -> str:
    """A URL to connect to, starting the embedded server when none is configured."""
    found = configured_url(url)
    if found:
        return found
    from corral import server

    return server.ensure_server()


def _version(text: str) -> tuple[int, ...]:
    parts = []
    for piece in text.split(".")[:3]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits or 0))
    return tuple(parts)


def check_server_info(info: Mapping[str, Any], *, strict: bool = False) -> None:
    """Refuse a server that is too old; warn (or, with ``strict``, refuse) an evicting one.

    ``info`` is the merged ``INFO server`` and ``INFO memory`` reply. Valkey reports a
    ``redis_version`` of 7.2.4 for compatibility, so its own ``valkey_version`` is checked.
    """
    if "valkey_version" in info:
        name, have, need = "Valkey", _version(str(info["valkey_version"])), MIN_VALKEY
    else:
        name, have, need = "Redis", _version(str(info.get("redis_version", "0"))), MIN_REDIS
    if have < need:
        raise ConfigurationError(
            f"{name} {'.'.join(map(str, have))} is too old: corral needs "
            f"{name} >= {'.'.join(map(str, need))}"
        )
    policy = str(info.get("maxmemory_policy", "noeviction"))
    if policy != "noeviction":
        message = (
            f"the server's maxmemory-policy is {policy!r}: it may evict queue keys and lose "
            "jobs; set maxmemory-policy noeviction"
        )
        if strict:
            raise ConfigurationError(message)
        warnings.warn(message, RuntimeWarning, stacklevel=4)


#: The scheme of a URL whose master is found through Sentinel.
SENTINEL_SCHEME = "redis+sentinel"
#: Sentinel's own port, for a host given without one.
SENTINEL_PORT = 26379
#: Query options of a Sentinel URL, and how each is read.
_SENTINEL_OPTIONS = {
    "sentinel_username": str,
    "sentinel_password": str,
    "socket_timeout": float,
    "socket_connect_timeout": float,
    "health_check_interval": float,
    "min_other_sentinels": int,
}


@dataclass(frozen=True, slots=True)
class SentinelSettings:
    """A ``redis+sentinel://`` URL, parsed.

    ``username``/``password`` are the master's (the URL's user info); the sentinels' own come
    from the ``sentinel_username``/``sentinel_password`` options. Timeouts apply to the
    master's connections and to the sentinels' alike.
    """

    sentinels: tuple[tuple[str, int], ...]
    service_name: str
    db: int = 0
    username: str | None = None
    password: str | None = None
    sentinel_username: str | None = None
    sentinel_password: str | None = None
    socket_timeout: float | None = None
    socket_connect_timeout: float | None = None
    health_check_interval: float = 0.0
    min_other_sentinels: int = 0


def is_sentinel_url(url: object) -> bool:
    return isinstance(url, str) and url.lower().startswith(SENTINEL_SCHEME + "://")


def parse_sentinel_url(url: str, *, name: str = "connection") -> SentinelSettings:
    """Parse ``redis+sentinel://[user:password@]host[:port][,host[:port]...]/service[/db]``.

    Query options: ``sentinel_username``, ``sentinel_password``, ``socket_timeout``,
    ``socket_connect_timeout``, ``health_check_interval`` (seconds) and
    ``min_other_sentinels``. A host without a port is on 26379.

    Raises:
        InvalidOptionError: naming ``name`` (the argument or variable the URL came from),
            without the password: no host, no service name, a bad port, db or option.
    """

    def refuse(why: str) -> InvalidOptionError:
        return InvalidOptionError(f"{name} is not a usable Sentinel URL ({why}): {_masked(url)}")

    if not is_sentinel_url(url):
        raise refuse(f"the scheme must be {SENTINEL_SCHEME}://")
    rest = url[len(SENTINEL_SCHEME) + 3 :]
    rest, _, query = rest.partition("?")
    rest = rest.partition("#")[0]
    netloc, _, path = rest.partition("/")
    userinfo, at, hosts = netloc.rpartition("@")
    username = password = None
    if at:
        user, colon, secret = userinfo.partition(":")
        username = unquote(user) or None
        password = unquote(secret) if colon else None
    sentinels = tuple(_host_port(part, refuse) for part in hosts.split(",") if part)
    if not sentinels:
        raise refuse("no sentinel host")
    parts = [unquote(p) for p in path.split("/") if p]
    if not parts:
        raise refuse("no service name: add /<master name> after the hosts")
    if len(parts) > 2:
        raise refuse("the path is /<service name>[/<db>]")
    db = 0
    if len(parts) == 2:
        if not parts[1].isdigit():
            raise refuse(f"db {parts[1]!r} is not a number")
        db = int(parts[1])
    options: dict[str, Any] = {}
    for key, values in parse_qs(query, keep_blank_values=True).items():
        reader = _SENTINEL_OPTIONS.get(key)
        if reader is None:
            raise refuse(f"unknown option {key!r}; known: {', '.join(_SENTINEL_OPTIONS)}")
        try:
            value = reader(values[-1])
        except ValueError:
            raise refuse(f"{key}={values[-1]!r} is not a {reader.__name__}") from None
        if reader is not str and value < 0:
            raise refuse(f"{key} must be >= 0")
        options[key] = value
    return SentinelSettings(sentinels, parts[0], db, username, password, **options)


def _host_port(part: str, refuse: Any) -> tuple[str, int]:
    host, port = part, ""
    if part.startswith("["):  # [IPv6]:port
        host, _, after = part[1:].partition("]")
        port = after.removeprefix(":")
    elif ":" in part:
        host, _, port = part.rpartition(":")
    if not host:
        raise refuse(f"no host in {part!r}")
    if not port:
        return host, SENTINEL_PORT
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise refuse(f"bad port {port!r}")
    return host, int(port)


def _masked(url: str) -> str:
    """``url`` without its passwords (error messages end up in logs)."""
    base, q, query = url.partition("?")
    scheme, sep, rest = base.partition("://")
    userinfo, at, after = rest.rpartition("@")
    if at and ":" in userinfo:
        rest = f"{userinfo.partition(':')[0]}:***@{after}"
    url = scheme + sep + rest
    if q:
        pairs = (pair.partition("=") for pair in query.split("&"))
        url += "?" + "&".join(f"{k}=***" if "password" in k else f"{k}={v}" for k, _, v in pairs)
    return url
