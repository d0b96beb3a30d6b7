# Generated from tests/_async/support.py by scripts/unasync.py: do not edit.
"""Helpers shared by the queue-level tests (the blocking twin is generated)."""

from __future__ import annotations

from typing import Any

import redis


def events(r: redis.Redis, queue: str = "q") -> list[dict[str, str]]:
    """The fields of every entry of a queue's events stream, oldest first."""
    return [fields for _, fields in r.xrange(f"bull:{queue}:events", "-", "+")]


def snapshot(r: redis.Redis) -> dict[str, Any]:
    """Every key with its content, to show that a refused call wrote nothing."""
    out: dict[Any, Any] = {}
    for key in sorted(r.keys("*")):
        kind = r.type(key)
        if kind == "hash":
            out[key] = r.hgetall(key)
        elif kind == "list":
            out[key] = r.lrange(key, 0, -1)
        elif kind == "set":
            out[key] = sorted(r.smembers(key))
        elif kind == "zset":
            out[key] = r.zrange(key, 0, -1, withscores=True)
        elif kind == "stream":
            out[key] = r.xrange(key, "-", "+")
        else:
            out[key] = r.get(key)
    return out
