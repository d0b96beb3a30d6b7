"""Which server corral connects to, and the checks it makes at first use."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from redis.asyncio.connection import SSLConnection

from corral import AsyncQueue, ConfigurationError, Queue
from corral import server as embedded
from corral._async._redis import open_client
from corral.connection import check_server_info, configured_url


@pytest.fixture
def no_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CORRAL_REDIS_URL", raising=False)
    monkeypatch.delenv("REDIS_URL", raising=False)


def test_resolution_order(no_env: None, monkeypatch: pytest.MonkeyPatch) -> None:
    assert configured_url() is None
    monkeypatch.setenv("REDIS_URL", "redis://b:2/0")
    assert configured_url() == "redis://b:2/0"
    monkeypatch.setenv("CORRAL_REDIS_URL", "redis://a:1/0")
    assert configured_url() == "redis://a:1/0"
    assert configured_url("redis://explicit:3/0") == "redis://explicit:3/0"


def test_env_url_is_used(no_env: None, monkeypatch: pytest.MonkeyPatch, redis_url: str) -> None:
    monkeypatch.setenv("CORRAL_REDIS_URL", redis_url)
    with Queue("envq") as q:
        q.add("x")
    with redis.Redis.from_url(redis_url) as check:
        assert check.llen("bull:envq:wait") == 1


@pytest.fixture
def data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    d = tmp_path / "d"
    monkeypatch.setenv("CORRAL_DATA_DIR", str(d))
    yield d
    embedded.stop(d)


def test_no_url_starts_the_embedded_server(no_env: None, data_dir: Path) -> None:
    with Queue("emb") as q:
        job = q.add("x", {"a": 1})
        assert q.get_job(job.id) is not None
    st = embedded.status(data_dir)
    assert st.running and st.url is not None and st.url.startswith("unix://")
    # A second queue in the same process (or another one) shares the same server.
    with Queue("emb") as q2:
        assert q2.get_job_counts("waiting") == {"waiting": 1}
    assert embedded.status(data_dir).pid == st.pid


def test_acl_user_password_and_db(redis_url: str, r: redis.Redis) -> None:
    r.execute_command("ACL", "SETUSER", "corral-t", "on", ">s3cret", "~*", "&*", "+@all")
    try:
        port = redis_url.split(":")[2].split("/")[0]
        with Queue("acl", connection=f"redis://corral-t:s3cret@127.0.0.1:{port}/3") as q:
            q.add("x")
        with redis.Redis.from_url(redis_url.rsplit("/", 1)[0] + "/3") as db3:
            assert db3.llen("bull:acl:wait") == 1
        assert r.llen("bull:acl:wait") == 0
        with (
            pytest.raises(redis.AuthenticationError),
            Queue("acl", connection=f"redis://corral-t:wrong@127.0.0.1:{port}/3") as q,
        ):
            q.add("x")
    finally:
        r.execute_command("ACL", "DELUSER", "corral-t")


async def test_rediss_url_uses_tls() -> None:
    client = open_client("rediss://example.invalid:6380/0")
    assert client.connection_pool.connection_class is SSLConnection
    await client.aclose()


async def test_client_must_decode_responses(redis_url: str) -> None:
    client = redis.asyncio.Redis.from_url(redis_url)
    with pytest.raises(ConfigurationError, match="decode_responses=True"):
        open_client(client)
    await client.aclose()


async def test_evicting_server_warns_or_fails_when_strict(r: redis.Redis, redis_url: str) -> None:
    r.config_set("maxmemory-policy", "allkeys-lru")
    try:
        with pytest.warns(RuntimeWarning, match="maxmemory-policy is 'allkeys-lru'"):
            q = AsyncQueue("ev", connection=redis_url)
            await q.add("x")
        await q.close()
        strict = AsyncQueue("ev", connection=redis_url, strict=True)
        with pytest.raises(ConfigurationError, match="allkeys-lru"):
            await strict.add("x")
        assert r.llen("bull:ev:wait") == 1  # the strict add wrote nothing
    finally:
        r.config_set("maxmemory-policy", "noeviction")


@pytest.mark.parametrize(
    ("info", "message"),
    [
        ({"redis_version": "6.0.16"}, r"Redis 6\.0\.16 is too old: corral needs Redis >= 6\.2\.0"),
        (
            {"redis_version": "7.2.4", "valkey_version": "7.0.1"},
            r"Valkey 7\.0\.1 is too old: corral needs Valkey >= 7\.2\.0",
        ),
    ],
)
def test_old_servers_are_refused(info: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        check_server_info(info)


def test_recent_servers_pass() -> None:
    check_server_info({"redis_version": "6.2.0", "maxmemory_policy": "noeviction"})
    check_server_info({"redis_version": "7.2.4", "valkey_version": "8.1.8"})
