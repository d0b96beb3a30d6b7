"""corral._wire: the pipelined connection that carries script calls of the asyncio API."""

from __future__ import annotations

import asyncio
import gc
import hashlib
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis
import redis.asyncio as aioredis
from redis.asyncio.connection import Connection
from redis.credentials import UsernamePasswordCredentialProvider
from redis.exceptions import NoScriptError, ResponseError

from corral import AsyncQueue, Worker
from corral._scripts import Script
from corral._wire import AsyncWire, Params, pack, pack_args, params_of
from corral.worker import run_event_loop


def _params(url: str, **changes: Any) -> Params:
    client = aioredis.Redis.from_url(url, decode_responses=True)
    params = params_of(client)
    assert params is not None
    return params._replace(**changes)


@pytest.fixture
async def wire(redis_url: str) -> AsyncIterator[AsyncWire]:
    w = AsyncWire(_params(redis_url, client_name="wire-test"))
    yield w
    w.close()


def _wire_clients(r: redis.Redis, name: str = "wire-test") -> list[dict[str, Any]]:
    return [c for c in r.client_list() if c["name"] == name]


async def _commands_once(r: redis.Redis, name: str, want: list[str]) -> list[str]:
    """The last commands of the connections named ``name``, once they are ``want`` (the
    server drops a closed connection from CLIENT LIST only after it has read its end), or
    what is listed after 10 s."""
    deadline = time.monotonic() + 10
    while True:
        seen = sorted(c["cmd"] for c in _wire_clients(r, name))
        if seen == want or time.monotonic() > deadline:
            return seen
        await asyncio.sleep(0.02)


def test_pack_matches_redis_py() -> None:
    args: list[Any] = ["EVALSHA", "", "é+ü", 12, -3, 1.5, "x" * 300, "a b\r\nc"]
    assert pack(args) == Connection(decode_responses=True).pack_command(*args)[0]
    with_bytes = [b"\x00\xff", "text", 7]
    assert pack(with_bytes) == b"".join(Connection().pack_command(*with_bytes))
    assert pack_args([]) == b""


def test_params_follow_the_client_settings() -> None:
    p = params_of(
        aioredis.Redis.from_url(
            "redis://ann:pw@example.org:7001/3?client_name=n", decode_responses=True
        )
    )
    assert p is not None
    assert (p.host, p.port, p.db, p.username, p.password, p.client_name) == (
        "example.org",
        7001,
        3,
        "ann",
        "pw",
        "n",
    )
    unix = params_of(aioredis.Redis.from_url("unix:///tmp/s.sock?db=2", decode_responses=True))
    assert unix is not None and (unix.path, unix.db) == ("/tmp/s.sock", 2)


@pytest.mark.parametrize(
    "client",
    [
        pytest.param(lambda: aioredis.Redis(host="h"), id="bytes-replies"),
        pytest.param(
            lambda: aioredis.Redis(
                host="h",
                decode_responses=True,
                credential_provider=UsernamePasswordCredentialProvider("u", "p"),
            ),
            id="credential-provider",
        ),
        pytest.param(lambda: object(), id="not-a-client"),
    ],
)
def test_settings_it_does_not_handle_keep_redis_py(client: Any) -> None:
    assert params_of(client()) is None


async def test_concurrent_calls_share_one_connection_in_order(
    wire: AsyncWire, r: redis.Redis
) -> None:
    replies = await asyncio.gather(*(wire.call(pack(["ECHO", f"m{i}"])) for i in range(300)))
    assert replies == [f"m{i}" for i in range(300)]
    assert len(_wire_clients(r)) == 1


async def test_errors_are_redis_py_errors_and_the_connection_stays(
    wire: AsyncWire, r: redis.Redis
) -> None:
    r.set("s", "text")
    with pytest.raises(ResponseError, match="WRONGTYPE"):
        await wire.call(pack(["LPUSH", "s", "x"]))
    with pytest.raises(NoScriptError):
        await wire.call(pack(["EVALSHA", "0" * 40, 0]))
    nested = await wire.call(pack(["EVAL", "return {1, 'two', false}", 0]))
    assert nested == [1, "two", None]
    assert await wire.call(pack(["GET", "s"])) == "text"
    assert len(_wire_clients(r)) == 1


async def test_a_cancelled_call_does_not_shift_the_replies(wire: AsyncWire) -> None:
    slow = asyncio.create_task(wire.call(pack(["BLPOP", "nothing", "0.3"])))
    await asyncio.sleep(0.05)
    slow.cancel()
    with pytest.raises(asyncio.CancelledError):
        await slow
    # The BLPOP's nil arrives first and belongs to nobody; this call gets its own reply.
    assert await wire.call(pack(["ECHO", "mine"])) == "mine"


async def test_a_lost_connection_fails_the_calls_in_flight_then_reconnects(
    wire: AsyncWire, r: redis.Redis
) -> None:
    assert await wire.call(pack(["PING"])) == "PONG"
    waiting = asyncio.create_task(wire.call(pack(["BLPOP", "nothing", "5"])))
    await asyncio.sleep(0.05)
    r.client_kill_filter(_type="normal", skipme=True, laddr=None, _id=_wire_clients(r)[0]["id"])
    with pytest.raises(redis.ConnectionError):
        await waiting
    assert await wire.call(pack(["ECHO", "again"])) == "again"
    assert len(_wire_clients(r)) == 1


async def test_a_silent_server_times_out_like_redis_py(redis_url: str) -> None:
    w = AsyncWire(_params(redis_url, timeout=0.3))
    try:
        with pytest.raises(redis.TimeoutError):
            await w.call(pack(["BLPOP", "nothing", "0"]))
        assert await w.call(pack(["ECHO", "back"])) == "back"
    finally:
        w.close()


async def test_close_fails_the_waiting_calls(wire: AsyncWire, r: redis.Redis) -> None:
    waiting = asyncio.create_task(wire.call(pack(["BLPOP", "nothing", "5"])))
    await asyncio.sleep(0.05)
    wire.close()
    with pytest.raises(redis.ConnectionError, match="closed by the client"):
        await waiting
    assert await _commands_once(r, "wire-test", []) == []


async def test_connect_errors_name_the_address() -> None:
    from tests.conftest import free_port

    port = free_port()
    w = AsyncWire(_params(f"redis://127.0.0.1:{port}"))
    with pytest.raises(redis.ConnectionError, match=f"127.0.0.1:{port}"):
        await w.call(pack(["PING"]))


async def test_user_password_database_and_name_are_set_up(redis_url: str, r: redis.Redis) -> None:
    r.acl_setuser("wire-user", enabled=True, passwords=["+s3cret"], keys="*", commands=["+@all"])
    base = redis_url.rsplit("/", 1)[0].replace("redis://", "redis://wire-user:s3cret@")
    w = AsyncWire(_params(f"{base}/2?client_name=wire-auth"))
    try:
        await w.call(pack(["SET", "k", "on-db-2"]))
        assert redis.Redis.from_url(f"{base}/2", decode_responses=True).get("k") == "on-db-2"
        assert r.get("k") is None
        (client,) = _wire_clients(r, "wire-auth")
        assert client["user"] == "wire-user"
    finally:
        w.close()
        r.acl_deluser("wire-user")
    bad = AsyncWire(_params(base.replace("s3cret", "wrong") + "/0"))
    with pytest.raises(redis.AuthenticationError):
        await bad.call(pack(["PING"]))
    bad.close()


_APPEND = Script(
    "append_test",
    "return redis.call('RPUSH', KEYS[1], ARGV[1])",
    hashlib.sha1(b"return redis.call('RPUSH', KEYS[1], ARGV[1])").hexdigest(),
)
_OTHER = Script(
    "other_test",
    "redis.call('RPUSH', KEYS[1], ARGV[1]) return 0",
    hashlib.sha1(b"redis.call('RPUSH', KEYS[1], ARGV[1]) return 0").hexdigest(),
)


def _evalsha(script: Script, value: str) -> bytes:
    return pack(["EVALSHA", script.sha, 1, "order", value])


def _noscript_errors(r: redis.Redis) -> int:
    return int(r.info("errorstats").get("errorstat_NOSCRIPT", {}).get("count", 0))


async def test_a_script_flush_is_answered_on_the_same_connection_in_call_order(
    wire: AsyncWire, r: redis.Redis
) -> None:
    await wire.call(_evalsha(_APPEND, "warm"), _APPEND)
    await wire.call(_evalsha(_OTHER, "warm"), _OTHER)
    r.delete("order")
    r.script_flush()
    # Calls of two scripts in flight together all meet NOSCRIPT; each is loaded and sent
    # again on the spot, so their effects keep the order in which they were called.
    calls = [(_APPEND, _OTHER)[i % 2] for i in range(40)]
    await asyncio.gather(*(wire.call(_evalsha(s, str(i)), s) for i, s in enumerate(calls)))
    assert r.lrange("order", 0, -1) == [str(i) for i in range(40)]
    assert len(_wire_clients(r)) == 1


async def test_a_new_connection_loads_the_scripts_before_any_call(
    wire: AsyncWire, r: redis.Redis
) -> None:
    await wire.call(_evalsha(_APPEND, "before"), _APPEND)
    r.script_flush()  # as a restarted server: no scripts...
    r.client_kill_filter(_type="normal", skipme=True, _id=_wire_clients(r)[0]["id"])
    errors = _noscript_errors(r)
    with pytest.raises(redis.ConnectionError):  # ...and the connection is gone
        await wire.call(_evalsha(_APPEND, "lost"), _APPEND)
    assert await wire.call(_evalsha(_APPEND, "after"), _APPEND) == 2
    assert _noscript_errors(r) == errors  # loaded at connect: not one NOSCRIPT


async def test_an_idle_connection_is_probed_when_health_checks_are_asked(
    redis_url: str, r: redis.Redis
) -> None:
    w = AsyncWire(_params(redis_url, timeout=0.4, health_check_interval=0.2, client_name="hc"))
    try:
        assert await w.call(pack(["ECHO", "x"])) == "x"
        deadline = time.monotonic() + 10
        while _wire_clients(r, "hc")[0]["cmd"] != "ping":
            assert time.monotonic() < deadline, "no health probe on the idle connection"
            await asyncio.sleep(0.05)
    finally:
        w.close()


async def test_a_black_holed_connection_is_dropped_and_the_call_retried_elsewhere(
    redis_url: str,
) -> None:
    from tests.faults.proxy import FaultProxy

    port = int(redis_url.rsplit(":", 1)[1].split("/")[0])
    with FaultProxy(port) as proxy:
        w = AsyncWire(_params(proxy.url, timeout=0.3))
        try:
            assert await w.call(pack(["ECHO", "a"])) == "a"
            proxy.blackhole()
            with pytest.raises(redis.TimeoutError):  # a peer that vanished: no hang
                await w.call(pack(["ECHO", "b"]))
            proxy.heal()
            assert await w.call(pack(["ECHO", "c"])) == "c"
        finally:
            w.close()


async def test_queue_scripts_use_the_wire_and_survive_a_script_flush(
    redis_url: str, r: redis.Redis
) -> None:
    async with AsyncQueue("w", connection=f"{redis_url}?client_name=wire-q") as queue:
        await queue.add("one")
        assert queue._caller is not None and queue._caller._wire is not None
        r.script_flush()
        job = await queue.add("two")  # NOSCRIPT: loaded again, then run
        assert job.id == "2"
        assert len(_wire_clients(r, "wire-q")) >= 1
    assert await _commands_once(r, "wire-q", []) == []


async def test_a_dropped_queue_does_not_leak_its_connection(redis_url: str, r: redis.Redis) -> None:
    client = aioredis.Redis.from_url(f"{redis_url}?client_name=wire-drop", decode_responses=True)
    queue = AsyncQueue("w", connection=client)
    await queue.add("one")
    # The wire's connection (the add), and the client's own pooled one: the server check,
    # then the queue's meta.version stamp (HSET) after its first add.
    assert sorted(c["cmd"] for c in _wire_clients(r, "wire-drop")) == ["evalsha", "hset"]
    del queue
    gc.collect()
    # The client's own pooled connection is all that is left.
    assert await _commands_once(r, "wire-drop", ["hset"]) == ["hset"]
    await client.aclose()


def test_queue_and_worker_run_on_uvloop(redis_url: str) -> None:
    """Worker.run() picks uvloop when it is installed; its transports are not asyncio's
    classes, and the wire must work on them all the same."""
    pytest.importorskip("uvloop")

    async def scenario() -> dict[str, int]:
        assert type(asyncio.get_running_loop()).__module__.startswith("uvloop")
        done: list[str] = []

        async def process(job: Any) -> int:
            done.append(job.id)
            return int(job.data["i"])

        async with AsyncQueue("uv", connection=redis_url) as queue:
            await queue.add_bulk([("j", {"i": i}) for i in range(50)])
            worker = Worker("uv", process, connection=redis_url, concurrency=5)
            task = asyncio.create_task(worker.run_async())
            deadline = time.monotonic() + 10
            while len(done) < 50 and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            await worker.close()
            await task
            return await queue.get_job_counts("completed", "failed")

    assert run_event_loop(scenario()) == {"completed": 50, "failed": 0}
