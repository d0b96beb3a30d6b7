"""Running scripts: one EVALSHA, a transaction of several, and a queue's script caller.

Every call here is sent once more at once when the hash slot of a cluster client moved under
it (``SlotMovedError``: a redirected call did not run); other errors are the callers'.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import NoScriptError, ResponseError

from corral import _wire
from corral._async._cluster import SlotMovedError
from corral._scripts import Script
from corral._wire import AsyncWire
from corral.errors import ServerReplyError, server_error_kind


async def run_script(client: Redis, script: Script, keys: list[str], args: list[Any]) -> Any:
    """EVALSHA ``script``; on NOSCRIPT (a new or flushed server) load it once and retry."""
    try:
        return await client.evalsha(script.sha, len(keys), *keys, *args)
    except NoScriptError:
        await client.script_load(script.source)
        return await client.evalsha(script.sha, len(keys), *keys, *args)


#: How many times a call is sent again at once when its hash slot moved under it (a
#: redirected call did not run); past that, the callers' retries take over.
MOVED_RESENDS = 3


async def run_atomically(
    client: Redis,
    calls: Sequence[tuple[Script, list[str], list[Any]]],
    *,
    must_exist: Collection[str] = (),
) -> tuple[list[Any], str | None]:
    """:func:`_run_atomically_once`, sent again when the slot of a cluster client moved."""
    for resend in range(MOVED_RESENDS, -1, -1):
        try:
            return await _run_atomically_once(client, calls, must_exist=must_exist)
        except SlotMovedError:
            if not resend:
                raise
    raise AssertionError("unreachable")


async def _run_atomically_once(
    client: Redis,
    calls: Sequence[tuple[Script, list[str], list[Any]]],
    *,
    must_exist: Collection[str] = (),
) -> tuple[list[Any], str | None]:
    """EVALSHA each ``(script, keys, args)`` of ``calls``, in order, in one MULTI/EXEC.

    Every key of ``must_exist`` is WATCHed and checked first: when one is missing nothing runs
    and it is returned as the second element. MULTI/EXEC does not roll back a script that
    refuses its work, so a precondition that the scripts check (a parent must exist) is made
    true for the whole transaction this way; when a watched key changes before EXEC, the
    transaction is tried again.

    The transaction is packed here (:mod:`corral._wire`) and sent on one connection of the
    client's pool: a flow's hundreds of calls of twenty-odd arguments each cost several times
    more to pack through redis-py's pipeline than the server takes to run them.

    Returns:
        ``(replies, None)``, or ``([], missing key)`` when nothing was written.

    Raises:
        ServerReplyError: the first error among the replies that waiting will not fix (the
            other calls of the transaction ran).
        redis.exceptions.ResponseError: a transient one (the same), or the transaction was
            refused as a whole (EXECABORT: nothing ran).
    """
    # Loaded before MULTI: a NOSCRIPT inside the transaction would fail it all.
    for script in {script.sha: script for script, _, _ in calls}.values():
        await client.script_load(script.source)
    watched = sorted(set(must_exist))
    body = [_wire.pack(["MULTI"])]
    for script, keys, args in calls:
        body.append(_wire.pack(["EVALSHA", script.sha, len(keys), *keys, *args]))
    body.append(_wire.pack(["EXEC"]))
    packed = b"".join(body)
    # redis-py leaves these connection calls partly untyped (and differently per API).
    pool: Any = client.connection_pool
    conn: Any = await pool.get_connection()
    try:
        while True:
            if watched:
                await conn.send_packed_command([_wire.pack(["WATCH", *watched])])
                await conn.read_response()
                for key in watched:
                    await conn.send_packed_command([_wire.pack(["EXISTS", key])])
                    if not await conn.read_response():
                        await conn.send_packed_command([_wire.pack(["UNWATCH"])])
                        await conn.read_response()
                        return [], key
            await conn.send_packed_command([packed], check_health=False)
            failure: ResponseError | None = None
            for _ in range(len(calls) + 1):  # +OK for MULTI, +QUEUED for each call
                try:
                    await conn.read_response()
                except ResponseError as exc:  # not queued: EXEC answers EXECABORT
                    failure = failure or exc
            try:
                replies = await conn.read_response()
            except ResponseError as exc:
                raise failure or exc from None
            if replies is None:  # a watched key changed: nothing ran
                continue
            for reply in replies:
                if isinstance(reply, ResponseError):
                    if server_error_kind(reply) != "other" or isinstance(reply, ServerReplyError):
                        raise reply  # transient or a setting: the callers' retries handle them
                    raise ServerReplyError(f"a call of the transaction failed: {reply}") from reply
            return list(replies), None
    except ResponseError:
        raise  # every reply was read: the connection is fine
    except BaseException:
        # A reply may still be on its way (a cancelled or broken call): never reuse it.
        await conn.disconnect()
        raise
    finally:
        await pool.release(conn)


def _refined(exc: ResponseError, script: Script) -> ResponseError:
    """A script's error reply as callers want it: as is when transient or a setting (their
    retries and outages handle those), else a ``ServerReplyError`` naming the script."""
    if server_error_kind(exc) != "other" or isinstance(exc, ServerReplyError):
        return exc
    return ServerReplyError(f"script {script.name} failed: {exc}")


async def _read_replies(conn: Any, count: int) -> list[Any]:
    """``count`` replies of ``conn``, an error reply as its ``ResponseError`` (so that every
    reply is read, and the connection stays in step, whatever the first one says)."""
    replies: list[Any] = []
    for _ in range(count):
        try:
            replies.append(await conn.read_response())
        except ResponseError as exc:
            replies.append(exc)
    return replies


class ScriptCaller:
    """Runs a queue's scripts with their keys packed once.

    Every call of a queue's scripts sends the same EVALSHA, SHA, key count, keys and job key
    prefix; packing them once per script (instead of redis-py encoding each argument at each
    call) is a large part of a job's client-side cost. The command goes out on the caller's
    own pipelined connection (:mod:`corral._wire`) when the client's settings allow it, else
    on a connection of the client's pool. Either way a script is loaded on the connection
    that runs it, and a NOSCRIPT is answered on that same connection (load, then the call
    again), so a retry never travels on another connection than its call.

    Args:
        client: the queue's client.
        keys: the queue's script keys.
        reply_timeout: used when the client sets no socket timeout (a worker's calls are
            short, and a dead connection must not hang them).
    """

    def __init__(self, client: Redis, keys: list[str], reply_timeout: float | None = None) -> None:
        self._client = client
        self._keys = keys
        self._packed_keys = _wire.pack_args(keys)
        self._prefixes: dict[str, bytes] = {}
        self._wire = AsyncWire.open(client, default_timeout=reply_timeout)

    def _prefix(self, script: Script) -> bytes:
        prefix = self._prefixes.get(script.sha)
        if prefix is None:
            head = _wire.pack_args(["EVALSHA", script.sha, len(self._keys)])
            prefix = self._prefixes[script.sha] = head + self._packed_keys
        return prefix

    async def __call__(self, script: Script, args: list[Any]) -> Any:
        count = 3 + len(self._keys) + len(args)
        packed = b"*%d\r\n" % count + self._prefix(script) + _wire.pack_args(args)
        try:
            if self._wire is not None:
                return await self._wire.call(packed, script)
            return await self._pooled(packed, script)
        except ResponseError as exc:
            refined = _refined(exc, script)
            if refined is exc:
                raise
            raise refined from exc

    async def call_then_wait(
        self, script: Script, args: list[Any], replicas: int, timeout_ms: int
    ) -> tuple[Any, int]:
        """Run ``script`` and then ``WAIT replicas timeout_ms`` on the same connection: the
        reply, and how many replicas acknowledged every write of that connection so far.

        ``WAIT`` covers the writes of its own connection only, so this goes over a connection
        of the pool (the pipelined one is shared, and a NOSCRIPT resend there could land after
        the ``WAIT``).
        """
        count = 3 + len(self._keys) + len(args)
        packed = b"*%d\r\n" % count + self._prefix(script) + _wire.pack_args(args)
        wait = _wire.pack(["WAIT", replicas, timeout_ms])
        for resend in range(MOVED_RESENDS, -1, -1):
            try:
                reply, acked = await self._pooled_once(packed, script, wait)
                return reply, int(acked)
            except SlotMovedError:
                if not resend:
                    raise
            except ResponseError as exc:
                refined = _refined(exc, script)
                if refined is exc:
                    raise
                raise refined from exc
        raise AssertionError("unreachable")

    async def _pooled(self, packed: bytes, script: Script) -> Any:
        for resend in range(MOVED_RESENDS, -1, -1):
            try:
                return await self._pooled_once(packed, script)
            except SlotMovedError:  # the call did not run: send it to the slot's new master
                if not resend:
                    raise
        raise AssertionError("unreachable")

    async def _pooled_once(self, packed: bytes, script: Script, then: bytes | None = None) -> Any:
        """Send ``packed`` (and the command ``then``, when given: the answer is then both
        replies) on a connection of the pool, every reply read before it is given back."""
        # redis-py leaves these connection calls partly untyped (and differently per API).
        pool: Any = self._client.connection_pool
        conn: Any = await pool.get_connection()
        tail = [] if then is None else [then]
        try:
            await conn.send_packed_command([packed, *tail], check_health=False)
            replies = await _read_replies(conn, 1 + len(tail))
            if isinstance(replies[0], NoScriptError):
                # On this same connection: load the script, then the call once more.
                await conn.send_packed_command([_wire.load_command(script), packed, *tail])
                replies = (await _read_replies(conn, 2 + len(tail)))[1:]
            for reply in replies:
                if isinstance(reply, ResponseError):
                    raise reply
            return replies[0] if then is None else (replies[0], replies[1])
        except ResponseError:
            raise  # the reply was read whole: the connection is fine
        except BaseException:
            # A reply may still be on its way (a cancelled or broken call): never reuse it.
            await conn.disconnect()
            raise
        finally:
            await pool.release(conn)

    def close(self) -> None:
        """Close the caller's own connection (the client's pool is the client's)."""
        if self._wire is not None:
            try:
                self._wire.close()
            except RuntimeError:  # its event loop has ended: nothing to close it with
                self.abandon()

    def abandon(self) -> None:
        """Drop the caller's connection without closing it: its event loop has ended (closing
        needs the loop; the socket is closed when it is collected)."""
        self._wire = None
