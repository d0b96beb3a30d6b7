"""Lua scripts: headers, includes, EVALSHA with reload on NOSCRIPT, one hash slot per queue."""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path

import pytest
import redis
from redis.crc import key_slot

from corral import Queue, _scripts
from corral._keys import QueueKeys

SCRIPTS = sorted(
    p.name.removesuffix(".lua")
    for p in resources.files("corral").joinpath("_lua").iterdir()
    if p.name.endswith(".lua")
)


def test_every_script_is_loaded_somewhere() -> None:
    sources = "".join(p.read_text() for p in Path(_scripts.__file__).parent.rglob("*.py"))
    loaded = set(re.findall(r'load\("(\w+)"\)', sources))
    assert loaded == set(SCRIPTS)


@pytest.mark.parametrize("name", SCRIPTS)
def test_every_script_has_a_header(name: str) -> None:
    script = _scripts.load(name)
    header = script.source.split("\n\n", 1)[0]
    assert header.startswith(f"-- {name}: ")
    for part in ("KEYS", "ARGV", "Returns", "Error codes"):
        assert part in header, f"{name}.lua header lacks {part}"
    assert "@include" not in script.source  # includes are expanded


def test_noscript_reloads(redis_url: str, r: redis.Redis) -> None:
    with Queue("q", connection=redis_url) as queue:
        queue.add("a")
        assert r.script_exists(_scripts.ADD_JOB.sha) == [True]
        r.script_flush()
        queue.add("b")  # EVALSHA fails with NOSCRIPT, the script is loaded again
        assert r.script_exists(_scripts.ADD_JOB.sha) == [True]
        assert queue.get_job_counts("waiting") == {"waiting": 2}


def test_hash_tag_keeps_every_key_of_a_queue_in_one_slot() -> None:
    keys = QueueKeys("emails", "{bull}")
    names = [*keys.script_keys(), keys.job("1"), keys.lock("1"), keys.logs("abc")]
    assert len({key_slot(k.encode()) for k in names}) == 1
