"""Which server to talk to, and whether it can be used. No I/O of its own.

Resolution order: an explicit URL or client, then ``CORRAL_REDIS_URL``, then ``REDIS_URL``,
then the embedded server of the data directory (``corral.server``). URLs are redis-py's:
``redis://``, ``rediss://`` (TLS), ``unix://``, with user, password and db number.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping
from typing import Any

from corral.errors import ConfigurationError

#: The oldest servers whose commands and Lua the scripts need (LPOS, float BZPOPMIN timeout).
MIN_REDIS = (6, 2, 0)
MIN_VALKEY = (7, 2, 0)


def configured_url(url: str | None = None) -> str | None:
    """The URL given, else ``CORRAL_REDIS_URL``, else ``REDIS_URL``, else ``None``."""
    return url or os.environ.get("CORRAL_REDIS_URL") or os.environ.get("REDIS_URL") or None


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
