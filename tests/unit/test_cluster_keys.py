"""Which keys share a Redis Cluster hash slot, and cluster URLs."""

from __future__ import annotations

import pytest
from redis.crc import key_slot

from corral._keys import QueueKeys, hash_tag, slot_of
from corral.connection import ClusterSettings, parse_cluster_url
from corral.errors import InvalidOptionError


@pytest.mark.parametrize(
    ("base", "tag"),
    [
        ("{bull}:q", "bull"),
        ("bull:{q}", "q"),
        ("{a}:{b}", "a"),  # the first tag wins, as the server hashes
        ("bull:q", None),
        ("{}:q", None),  # an empty tag hashes the whole key
        ("bull:{q", None),
        ("bull}:{q}", "q"),
    ],
)
def test_the_hash_tag_of_a_queue(base: str, tag: str | None) -> None:
    assert hash_tag(base) == tag


def test_every_key_of_a_tagged_queue_is_in_its_slot() -> None:
    keys = QueueKeys("emails", "{bull}")
    slot = slot_of(keys.base)
    assert slot is not None
    names = [*keys.script_keys(), keys.job("17"), keys.lock("17"), keys.key("de:x")]
    assert {key_slot(name.encode()) for name in names} == {slot}
    assert slot_of(QueueKeys("emails").base) is None


def test_a_cluster_url() -> None:
    assert parse_cluster_url("redis+cluster://a,b:7001/0?socket_timeout=2") == ClusterSettings(
        (("a", 6379), ("b", 7001)), socket_timeout=2.0
    )
    parsed = parse_cluster_url("redis+cluster://u:p%40ss@[::1]:7000")
    assert (parsed.nodes, parsed.username, parsed.password) == ((("::1", 7000),), "u", "p@ss")
    with pytest.raises(InvalidOptionError, match="CORRAL_REDIS_URL is not a usable Redis Cluster"):
        parse_cluster_url("redis+cluster://:pw@h/3", name="CORRAL_REDIS_URL")


def test_a_tls_cluster_url() -> None:
    parsed = parse_cluster_url("rediss+cluster://a:7000?ssl_cert_reqs=none&ssl_check_hostname=0")
    assert parsed.tls == (("ssl_cert_reqs", "none"), ("ssl_check_hostname", False))
    assert parse_cluster_url("rediss+cluster://a:7000").tls == ()  # TLS with the defaults
    assert parse_cluster_url("redis+cluster://a:7000").tls is None
    with pytest.raises(InvalidOptionError, match="ssl_cert_reqs must be one of"):
        parse_cluster_url("rediss+cluster://a:7000?ssl_cert_reqs=maybe")
