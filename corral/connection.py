"""Which server to talk to, and whether it can be used. No I/O of its own.

Resolution order: an explicit URL or client, then ``CORRAL_REDIS_URL``, then ``REDIS_URL``,
then the embedded server of the data directory (``corral.server``). URLs are redis-py's:
``redis://``, ``rediss://`` (TLS), ``unix://``, with user, password and db number; and
``redis+sentinel://`` (:func:`parse_sentinel_url`), whose master is found through Sentinel;
and ``redis+cluster://`` (:func:`parse_cluster_url`), a Redis Cluster known by some of its nodes.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, quote, unquote

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
    parsed = _MultiHostUrl.parse(url, SENTINEL_SCHEME, "Sentinel", name, SENTINEL_PORT, "sentinel")
    parts = parsed.path
    if not parts:
        raise parsed.refuse("no service name: add /<master name> after the hosts")
    if len(parts) > 2:
        raise parsed.refuse("the path is /<service name>[/<db>]")
    db = 0
    if len(parts) == 2:
        if not parts[1].isdigit():
            raise parsed.refuse(f"db {parts[1]!r} is not a number")
        db = int(parts[1])
    options = parsed.options(_SENTINEL_OPTIONS)
    return SentinelSettings(parsed.hosts, parts[0], db, parsed.username, parsed.password, **options)


#: The scheme of a URL naming some nodes of a Redis Cluster.
CLUSTER_SCHEME = "redis+cluster"
#: The same over TLS to every node.
CLUSTER_TLS_SCHEME = "rediss+cluster"
#: A cluster node's default port.
CLUSTER_PORT = 6379
#: Query options of a cluster URL, and how each is read.
_CLUSTER_OPTIONS = {
    "socket_timeout": float,
    "socket_connect_timeout": float,
    "health_check_interval": float,
}


@dataclass(frozen=True, slots=True)
class ClusterSettings:
    """A ``redis+cluster://`` URL, parsed: the nodes to ask for the cluster's map first (any
    of them will do; the others are learned from it), and the settings of every connection."""

    nodes: tuple[tuple[str, int], ...]
    username: str | None = None
    password: str | None = None
    socket_timeout: float | None = None
    socket_connect_timeout: float | None = None
    health_check_interval: float = 0.0
    #: Over TLS (``rediss+cluster://``): the ``ssl_*`` settings of redis-py's
    #: ``SSLConnection``; ``None`` for plain TCP.
    tls: tuple[tuple[str, Any], ...] | None = None


def cluster_client_kwargs(settings: ClusterSettings) -> dict[str, Any]:
    """The keyword arguments of a redis-py ``RedisCluster`` (either API) of ``settings``,
    ``startup_nodes`` apart (each API has its own ``ClusterNode``); replies decoded."""
    kwargs: dict[str, Any] = {
        "username": settings.username,
        "password": settings.password,
        "decode_responses": True,
    }
    if settings.socket_timeout is not None:
        kwargs["socket_timeout"] = settings.socket_timeout
    if settings.socket_connect_timeout is not None:
        kwargs["socket_connect_timeout"] = settings.socket_connect_timeout
    if settings.tls is not None:
        kwargs.update(ssl=True, **dict(settings.tls))
    return kwargs


def is_cluster_url(url: object) -> bool:
    return isinstance(url, str) and url.lower().startswith(
        (CLUSTER_SCHEME + "://", CLUSTER_TLS_SCHEME + "://")
    )


def parse_cluster_url(url: str, *, name: str = "connection") -> ClusterSettings:
    """Parse ``redis+cluster://[user:password@]host[:port][,host[:port]...][/0]``, or
    ``rediss+cluster://`` for TLS to every node.

    Query options: ``socket_timeout``, ``socket_connect_timeout`` and
    ``health_check_interval`` (seconds); with ``rediss+cluster://`` also the TLS options of a
    ``rediss://`` URL (``ssl_ca_certs``, ``ssl_certfile``...: see :mod:`corral._tls`). A host
    without a port is on 6379. A cluster has database 0 only.

    Raises:
        InvalidOptionError: naming ``name``, without the password: no host, a bad port, a
            database other than 0, an unknown or bad option.
    """
    tls = url.lower().startswith(CLUSTER_TLS_SCHEME + "://")
    scheme = CLUSTER_TLS_SCHEME if tls else CLUSTER_SCHEME
    parsed = _MultiHostUrl.parse(url, scheme, "Redis Cluster", name, CLUSTER_PORT, "node")
    if parsed.path not in ([], ["0"]):
        raise parsed.refuse("a cluster has database 0 only: no path, or /0")
    options = parsed.options(_CLUSTER_OPTIONS, but="ssl_")
    ssl_query = parsed.query_of("ssl_")
    settings = None
    if tls or ssl_query:  # a TLS option without TLS is refused there, naming it
        settings = tls_settings(f"{'rediss' if tls else 'redis'}://127.0.0.1/?{ssl_query}", name)
    return ClusterSettings(parsed.hosts, parsed.username, parsed.password, **options, tls=settings)


def tls_settings(url: str, name: str) -> tuple[tuple[str, Any], ...]:
    """The ``ssl_*`` settings of redis-py's ``SSLConnection`` that ``url`` (a ``rediss://``
    URL of TLS options only) gives, checked as :func:`corral._tls.check_url` checks them."""
    from redis.asyncio.connection import parse_url

    from corral import _tls

    try:
        _tls.check_url(url)
    except InvalidOptionError as exc:
        message = str(exc).replace("connection:", f"{name}:", 1)
        message = message.replace(
            "redis://: use rediss://", "redis+cluster://: use rediss+cluster://"
        )
        raise InvalidOptionError(message) from None
    kwargs = parse_url(url)  # type: ignore[no-untyped-call, unused-ignore]
    return tuple(sorted((k, v) for k, v in kwargs.items() if k.startswith("ssl_")))


@dataclass(frozen=True, slots=True)
class _MultiHostUrl:
    """The parts of a ``scheme://[user:password@]host[:port],host[:port]/path?query`` URL."""

    url: str
    what: str
    name: str
    hosts: tuple[tuple[str, int], ...]
    username: str | None
    password: str | None
    path: list[str]
    query: str

    def refuse(self, why: str) -> InvalidOptionError:
        return refuse_url(self.url, self.what, self.name, why)

    @classmethod
    def parse(
        cls, url: str, scheme: str, what: str, name: str, port: int, host: str
    ) -> _MultiHostUrl:
        if not url.lower().startswith(scheme + "://"):
            raise refuse_url(url, what, name, f"the scheme must be {scheme}://")
        rest = url[len(scheme) + 3 :]
        rest, _, query = rest.partition("?")
        rest = rest.partition("#")[0]
        netloc, _, path = rest.partition("/")
        userinfo, at, hosts = netloc.rpartition("@")
        username = password = None
        if at:
            user, colon, secret = userinfo.partition(":")
            username = unquote(user) or None
            password = unquote(secret) if colon else None

        def refuse(why: str) -> InvalidOptionError:
            return refuse_url(url, what, name, why)

        found = tuple(_host_port(part, refuse, port) for part in hosts.split(",") if part)
        if not found:
            raise refuse(f"no {host} host")
        parts = [unquote(p) for p in path.split("/") if p]
        return cls(url, what, name, found, username, password, parts, query)

    def query_of(self, prefix: str) -> str:
        """The query's options whose names start with ``prefix``, as a query."""
        pairs = parse_qs(self.query, keep_blank_values=True).items()
        return "&".join(f"{k}={quote(v[-1], safe='/')}" for k, v in pairs if k.startswith(prefix))

    def options(self, known: Mapping[str, type], *, but: str | None = None) -> dict[str, Any]:
        """The ``known`` options, read; any other is refused, but those named ``but...``."""
        options: dict[str, Any] = {}
        for key, values in parse_qs(self.query, keep_blank_values=True).items():
            if but is not None and key.startswith(but):
                continue
            reader = known.get(key)
            if reader is None:
                raise self.refuse(f"unknown option {key!r}; known: {', '.join(known)}")
            try:
                value = reader(values[-1])
            except ValueError:
                raise self.refuse(f"{key}={values[-1]!r} is not a {reader.__name__}") from None
            if reader is not str and value < 0:
                raise self.refuse(f"{key} must be >= 0")
            options[key] = value
        return options


def refuse_url(url: str, what: str, name: str, why: str) -> InvalidOptionError:
    return InvalidOptionError(f"{name} is not a usable {what} URL ({why}): {masked_url(url)}")


def _host_port(part: str, refuse: Any, default_port: int) -> tuple[str, int]:
    host, port = part, ""
    if part.startswith("["):  # [IPv6]:port
        host, _, after = part[1:].partition("]")
        port = after.removeprefix(":")
    elif ":" in part:
        host, _, port = part.rpartition(":")
    if not host:
        raise refuse(f"no host in {part!r}")
    if not port:
        return host, default_port
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise refuse(f"bad port {port!r}")
    return host, int(port)


def masked_url(url: str) -> str:
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
