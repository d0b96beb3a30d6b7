"""Opening a client, checking the server once, and running scripts with EVALSHA."""

from __future__ import annotations

from typing import Any

from redis.asyncio import Redis
from redis.exceptions import NoScriptError

from corral import connection
from corral._scripts import Script
from corral.errors import ConfigurationError


def open_client(conn: str | Redis | None) -> Redis:
    """A client for ``conn``: a given client is used as is; a URL or ``None`` is resolved."""
    if isinstance(conn, Redis):
        if not conn.connection_pool.connection_kwargs.get("decode_responses"):
            raise ConfigurationError("pass a client created with decode_responses=True")
        return conn
    return Redis.from_url(connection.resolve_url(conn), decode_responses=True)


async def check_server(client: Redis, *, strict: bool = False, owned: bool = True) -> None:
    """Check version and eviction policy (see ``connection.check_server_info``).

    A client corral opened itself (``owned``) is closed when the check fails.
    """
    try:
        info: dict[str, Any] = dict(await client.info("server"))
        info.update(await client.info("memory"))
        connection.check_server_info(info, strict=strict)
    except BaseException:
        if owned:
            await client.aclose()
        raise


async def run_script(client: Redis, script: Script, keys: list[str], args: list[Any]) -> Any:
    """EVALSHA ``script``; on NOSCRIPT (a new or flushed server) load it once and retry."""
    try:
        return await client.evalsha(script.sha, len(keys), *keys, *args)
    except NoScriptError:
        await client.script_load(script.source)
        return await client.evalsha(script.sha, len(keys), *keys, *args)
