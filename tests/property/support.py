"""What every property test checks: a call either succeeds, or is refused with a corral
error and leaves the keyspace byte for byte as it was; no other exception reaches a caller.

A snapshot is every key (found with SCAN) with its TYPE, its DUMP (the server's own encoding
of the value, so any change to it shows) and whether it has a TTL; a TTL may only have run
down between the two snapshots. The DUMP of a hash or set kept as a hash table lists its
members in table order, which a mere read can change (lookups move an incremental rehash on):
for those the sorted members are compared instead.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

import redis
from hypothesis import event

from corral.errors import CorralError, InvalidOptionError, ServerReplyError

#: ``CORRAL_PROPERTY_SCALE=10``: ten times the examples of every test, drawn at random rather
#: than derived from the test's name, to look for new bugs (the default run is reproducible).
SCALE = int(os.environ.get("CORRAL_PROPERTY_SCALE", "1"))


def examples(n: int) -> int:
    """The examples a test runs: ``n``, times :data:`SCALE`."""
    return n * SCALE


#: How much a key's TTL may run down between two snapshots of one refused call (ms).
TTL_SLACK_MS = 10_000


@dataclass(frozen=True)
class Key:
    type: bytes
    dump: bytes | None
    pttl: int
    #: The sorted members of a hash or set kept as a hash table (its DUMP is not stable).
    members: tuple[Any, ...] | None = None

    @property
    def value(self) -> Any:
        return self.dump if self.members is None else self.members


Snapshot = dict[bytes, Key]


def snapshot(raw: redis.Redis) -> Snapshot:
    """Every key of the server, read with SCAN (never KEYS: it blocks a big server)."""
    names = sorted(set(raw.scan_iter(count=1000)))
    pipe = raw.pipeline(transaction=False)
    for name in names:
        pipe.type(name)
        pipe.dump(name)
        pipe.pttl(name)
        pipe.object("encoding", name)
    values = pipe.execute()
    keys = {}
    unordered = []
    for i, name in enumerate(names):
        kind, dump, pttl, encoding = values[4 * i : 4 * i + 4]
        keys[name] = Key(kind, dump, int(pttl))
        if encoding == b"hashtable" and kind in (b"hash", b"set"):
            unordered.append(name)
    if unordered:
        for name in unordered:
            if keys[name].type == b"hash":
                pipe.hgetall(name)
            else:
                pipe.smembers(name)
        for name, content in zip(unordered, pipe.execute(), strict=True):
            members = tuple(sorted(content.items() if isinstance(content, dict) else content))
            keys[name] = Key(keys[name].type, keys[name].dump, keys[name].pttl, members)
    return keys


def diff(before: Snapshot, after: Snapshot) -> list[str]:
    """What changed between two snapshots, one line per key (empty: nothing did)."""
    lines = []
    for name in sorted(set(before) | set(after)):
        old, new = before.get(name), after.get(name)
        if old is None:
            lines.append(f"created {name!r} ({new.type.decode() if new else '?'})")
        elif new is None:
            if 0 <= old.pttl <= TTL_SLACK_MS:
                continue  # its TTL ran out between the snapshots
            lines.append(f"deleted {name!r}")
        elif (old.type, old.value) != (new.type, new.value):
            lines.append(f"changed {name!r} ({old.type.decode()})")
        elif (old.pttl < 0 or new.pttl < 0) and old.pttl != new.pttl:
            lines.append(f"ttl of {name!r}: {old.pttl} -> {new.pttl}")
        elif not 0 <= old.pttl - new.pttl <= TTL_SLACK_MS:
            lines.append(f"ttl of {name!r} reset: {old.pttl} -> {new.pttl}")
    return lines


def fresh(raw: redis.Redis) -> None:
    """Start an example on an empty server (fixtures are shared by a test's examples)."""
    raw.flushall()


@dataclass
class Outcome:
    """What a call did: its value, or the corral error that refused it."""

    value: Any = None
    error: CorralError | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


class RawError(AssertionError):
    """A call let an exception that is not a corral error reach its caller."""


async def attempt(
    raw: redis.Redis,
    call: Callable[[], Awaitable[Any]],
    *,
    names: Iterable[str] = (),
    what: str = "call",
) -> Outcome:
    """Run ``call``; a refusal must be a corral error that wrote nothing.

    ``names``: words one of which an ``InvalidOptionError`` must contain (the argument or
    option it refused); empty to skip that check.
    """
    label = what.partition("(")[0]
    before = snapshot(raw)
    try:
        value = await call()
    except ServerReplyError as exc:
        # A script that failed, or a key of another type: never a refusal by design (the
        # suite writes no foreign data), so a bug the wrapper only dresses as a corral error.
        raise RawError(f"{what} failed in the server: {exc}") from exc
    except CorralError as exc:
        changes = diff(before, snapshot(raw))
        assert not changes, f"{what} refused ({type(exc).__name__}: {exc}) but wrote: {changes}"
        wanted = [n for n in names if n]
        if isinstance(exc, InvalidOptionError) and wanted:
            message = str(exc)
            assert any(n in message for n in wanted), (
                f"{what}: InvalidOptionError names none of {wanted}: {message}"
            )
        event(f"{label}: refused ({type(exc).__name__})")
        return Outcome(error=exc)
    except Exception as exc:
        raise RawError(f"{what} raised {type(exc).__name__}: {exc}") from exc
    event(f"{label}: done")
    return Outcome(value=value)


async def unchanged(raw: redis.Redis, call: Callable[[], Awaitable[Any]], what: str) -> Outcome:
    """A read: it must not raise anything but a corral error, and must write nothing at all."""
    before = snapshot(raw)
    outcome = await attempt(raw, call, what=what)
    changes = diff(before, snapshot(raw))
    assert not changes, f"{what} is a read but wrote: {changes}"
    return outcome


# -- queue consistency ----------------------------------------------------------------------

#: Where each state keeps its ids, and whether it is a list (else a zset).
STATE_KEYS = {
    "wait": True,
    "paused": True,
    "active": True,
    "prioritized": False,
    "delayed": False,
    "waiting-children": False,
    "completed": False,
    "failed": False,
}


def consistency(r: redis.Redis, base: str = "bull:q") -> list[str]:
    """Problems of one queue's data: an id in no state or in two, a listed id without a hash.

    ``r`` decodes responses. A job hash is a hash ``<base>:<id>`` with a ``timestamp`` field
    (the queue's other hashes, ``meta`` and schedulers, have none).
    """
    where: dict[str, list[str]] = {}
    for state, is_list in STATE_KEYS.items():
        key = f"{base}:{state}"
        ids = r.lrange(key, 0, -1) if is_list else r.zrange(key, 0, -1)
        for job_id in ids:
            where.setdefault(str(job_id), []).append(state)
    problems = []
    for job_id, states in where.items():
        if len(states) > 1:
            problems.append(f"job {job_id!r} is in {states}")
        if not r.exists(f"{base}:{job_id}"):
            problems.append(f"job {job_id!r} in {states[0]} has no hash")
    prefix = f"{base}:"
    for key in r.scan_iter(match=_glob_literal(prefix) + "*", count=1000):
        job_id = key[len(prefix) :]
        if job_id in where or job_id == "meta" or r.type(key) != "hash":
            continue
        if r.hexists(key, "timestamp"):
            problems.append(f"job hash {key!r} is in no state")
    return problems


def _glob_literal(text: str) -> str:
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


def assert_consistent(r: redis.Redis, base: str = "bull:q", after: str = "") -> None:
    problems = consistency(r, base)
    assert not problems, (
        f"queue {base} inconsistent{' after ' + after if after else ''}: {problems}"
    )
