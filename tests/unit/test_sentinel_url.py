"""``redis+sentinel://`` URLs: parsed in the pure layer, refused early with a clear message."""

from __future__ import annotations

import pytest

from corral import AsyncQueue, ConfigurationError, InvalidOptionError, Queue
from corral.connection import SentinelSettings, parse_sentinel_url


def test_a_full_url() -> None:
    url = (
        "redis+sentinel://user:p%40ss@s1:26380,s2,[::1]:26381/mymaster/3"
        "?sentinel_password=sp&socket_timeout=0.5&min_other_sentinels=1"
    )
    assert parse_sentinel_url(url) == SentinelSettings(
        sentinels=(("s1", 26380), ("s2", 26379), ("::1", 26381)),
        service_name="mymaster",
        db=3,
        username="user",
        password="p@ss",
        sentinel_password="sp",
        socket_timeout=0.5,
        min_other_sentinels=1,
    )


def test_a_password_without_a_user() -> None:
    settings = parse_sentinel_url("redis+sentinel://:secret@h/m")
    assert (settings.username, settings.password) == (None, "secret")


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("redis+sentinel:///mymaster", "no sentinel host"),
        ("redis+sentinel://h1,h2", "no service name"),
        ("redis+sentinel://h1/", "no service name"),
        ("redis+sentinel://h1:port/m", "bad port 'port'"),
        ("redis+sentinel://h1:0/m", "bad port '0'"),
        ("redis+sentinel://h1:65536/m", "bad port '65536'"),
        ("redis+sentinel://:1/m", "no host"),
        ("redis+sentinel://h/m/zero", "db 'zero' is not a number"),
        ("redis+sentinel://h/m/0/extra", "the path is"),
        ("redis+sentinel://h/m?sockettimeout=1", "unknown option 'sockettimeout'"),
        ("redis+sentinel://h/m?socket_timeout=soon", "socket_timeout='soon' is not a float"),
        ("redis+sentinel://h/m?socket_timeout=-1", "socket_timeout must be >= 0"),
    ],
)
def test_bad_urls_are_refused_naming_the_problem(url: str, why: str) -> None:
    with pytest.raises(InvalidOptionError, match="connection is not a usable Sentinel URL") as e:
        parse_sentinel_url(url)
    assert why in str(e.value)


def test_passwords_stay_out_of_the_message() -> None:
    with pytest.raises(InvalidOptionError) as e:
        parse_sentinel_url("redis+sentinel://u:hunter2@h:1/m?sentinel_password=hunter3&x=1")
    assert "hunter" not in str(e.value)
    assert "u:***@h:1" in str(e.value)


def test_a_queue_refuses_a_bad_url_when_given() -> None:
    with pytest.raises(InvalidOptionError, match="no service name"):
        AsyncQueue("q", connection="redis+sentinel://127.0.0.1:26379")
    with pytest.raises(InvalidOptionError, match="no service name"):
        Queue("q", connection="redis+sentinel://127.0.0.1:26379")


def test_a_bad_url_in_the_environment_is_a_configuration_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("CORRAL_REDIS_URL", raising=False)
    monkeypatch.setenv("REDIS_URL", "redis+sentinel://h:bad/m")
    with Queue("q") as queue, pytest.raises(ConfigurationError, match=r"REDIS_URL .*bad port"):
        queue.add("x")
