"""The dashboard's job search: bounded work per request, resumable with a cursor.

A search looks for a text, case-insensitively (ASCII letters), in the id, name, data (the JSON
text as stored) and failure reason of every job of one state, or of every state in turn. Each
request reads the state's set by index, one chunk of ``chunk`` entries per server call, and
stops once it holds ``limit`` matches or has used ``budget_ms`` of wall time; the cursor it
returns carries the state and the offset where the next request goes on. So one server call
costs at most one chunk, whatever the size of the queue, and other clients are served between
chunks: a search never blocks the server.

Design: the chunk is scanned server-side by ``_lua/search_jobs.lua``, which returns the matching
ids only; the page's jobs (at most ``limit``) are then read with one HGETALL pipeline. The other
design, LRANGE then a pipeline of ``HMGET name data failedReason`` per chunk matched in Python,
was measured against it by ``python -m bench.dashboard`` (100,000 waiting jobs of ~200-byte
data, a needle found in none, chunk 1000, budget 50 ms): the script took 0.75 s for the whole
search (15 requests, 100 chunks; server time per chunk from SLOWLOG: median 6 ms, p99 14 ms);
the client-side scan took 3.4 s and carried 19.7 MB to the client. A chunk of the script holds
the server a few ms (other clients are served between chunks), and the search as a whole
costs the server, the network and the dashboard process far less. Matching is on bytes:
ASCII letters match either case, other letters only as written.

Consistency: sets change between chunks (jobs move between states, new ones arrive, old ones are
removed), so a search may miss a job that moved behind its cursor or list one twice when it moved
ahead of it; a job whose hash vanished is skipped. On a set that does not change, the pages of a
search list every match exactly once, in set order.
"""

from __future__ import annotations

import base64
import hashlib
import time
from dataclasses import dataclass

from corral import _scripts
from corral._async.job import AsyncJob
from corral._async.queue import AsyncQueue
from corral.bounds import MAX_INDEX, check_int
from corral.errors import InvalidOptionError

#: The states a search without ``state`` walks, in this order; ``paused`` is the legacy list
#: BullMQ 6.x no longer fills (empty unless older data is there).
SEARCH_STATES = (
    "waiting",
    "paused",
    "prioritized",
    "delayed",
    "active",
    "waiting-children",
    "completed",
    "failed",
)

#: States kept in lists (LLEN); the others are sorted sets (ZCARD).
_LISTS = {"waiting": "wait", "paused": "paused", "active": "active"}

#: Longest needle, in characters: a needle is matched against every job scanned.
MAX_NEEDLE = 200
#: Largest chunk: what search_jobs.lua accepts (a chunk of 1000 jobs: about 6 ms of server time).
MAX_CHUNK = 10_000
#: Most matches one request may return.
MAX_LIMIT = 1000
#: Longest budget of one request, in ms.
MAX_BUDGET_MS = 60_000.0

_SEARCH_JOBS = _scripts.load("search_jobs")
_SCRIPT_ERRORS = {
    -1: "unknown state",
    -2: "offset is not an integer >= 0",
    -3: f"chunk is not an integer from 1 to {MAX_CHUNK}",
    -4: "needle is empty or too long",
    -5: "match count is not an integer >= 1",
}
_CURSOR_VERSION = "1"
_MAX_CURSOR = 200
#: Lowers ASCII letters only, as Lua's string.lower does in the script.
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


@dataclass
class SearchPage:
    """One request's answer."""

    #: ``(state, job)`` of the matches of this request, in set order.
    jobs: list[tuple[str, AsyncJob]]
    #: Opaque; pass it back to go on. ``None`` when every state searched is done.
    cursor: str | None
    #: Jobs looked at so far (all requests of this search).
    scanned: int
    #: Jobs in the states searched (counted at the first request).
    total: int
    #: Server time this request spent (the sum of its chunks), in ms.
    server_ms: float


def _fingerprint(queue: AsyncQueue, needle: str, state: str | None) -> str:
    # Ties a cursor to its search: one of another queue, needle or state is refused.
    text = "\0".join((queue.prefix, queue.name, state or "*", needle))
    return hashlib.blake2b(text.encode(), digest_size=6).hexdigest()


def _encode(state_index: int, offset: int, scanned: int, total: int, fingerprint: str) -> str:
    raw = f"{_CURSOR_VERSION}.{state_index}.{offset}.{scanned}.{total}.{fingerprint}"
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def _decode(cursor: object, states: int, fingerprint: str) -> tuple[int, int, int, int]:
    """``(state index, offset, scanned, total)`` of a cursor this search gave.

    Raises:
        InvalidOptionError: naming the cursor, when it is not one this search gave.
    """
    bad = InvalidOptionError(f"cursor is not one this search gave: {cursor!r:.80}")
    if not isinstance(cursor, str) or not 0 < len(cursor) <= _MAX_CURSOR:
        raise bad
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode("ascii")
    except ValueError:
        raise bad from None
    parts = raw.split(".")
    if len(parts) != 6 or parts[0] != _CURSOR_VERSION or parts[5] != fingerprint:
        raise bad
    if not all(p.isdigit() and len(p) <= 16 for p in parts[1:5]):
        raise bad
    state_index, offset, scanned, total = (int(p) for p in parts[1:5])
    if state_index >= states or offset > MAX_INDEX:
        raise bad
    return state_index, offset, scanned, total


def _check_needle(needle: object) -> str:
    if not isinstance(needle, str):
        raise InvalidOptionError(f"needle must be a string, got {type(needle).__name__}")
    if not needle:
        raise InvalidOptionError("needle is empty: give a text to search for")
    if len(needle) > MAX_NEEDLE:
        raise InvalidOptionError(
            f"needle is too long: {len(needle)} characters, at most {MAX_NEEDLE}"
        )
    if "\0" in needle:
        raise InvalidOptionError("needle holds a NUL character")
    return needle.translate(_ASCII_LOWER)


def _check_state(state: object) -> tuple[str, ...]:
    if state is None:
        return SEARCH_STATES
    if state == "wait":
        return ("waiting",)
    if isinstance(state, str) and state in SEARCH_STATES:
        return (state,)
    raise InvalidOptionError(f"state must be one of {', '.join(SEARCH_STATES)}, got {state!r}")


def _check_budget(budget_ms: object) -> float:
    if (
        isinstance(budget_ms, bool)
        or not isinstance(budget_ms, (int, float))
        or not 0 <= budget_ms <= MAX_BUDGET_MS
    ):
        raise InvalidOptionError(
            f"budget_ms must be a number of ms from 0 to {MAX_BUDGET_MS:.0f}, got {budget_ms!r}"
        )
    return float(budget_ms)


async def search_jobs(
    queue: AsyncQueue,
    needle: str,
    *,
    state: str | None = None,
    cursor: str | None = None,
    chunk: int = 1000,
    budget_ms: float = 50.0,
    limit: int = 50,
) -> SearchPage:
    """One request of a search: the next matches of ``needle`` in ``queue``.

    Every request reads at least one chunk (so a cursor always moves on), then more while it
    holds fewer than ``limit`` matches and has used less than ``budget_ms``.

    Args:
        queue: the queue searched.
        needle: the text looked for (1 to 200 characters; ASCII letters match either case) in
            each job's id, name, data JSON and failure reason.
        state: search only this state; ``None`` for all of :data:`SEARCH_STATES`, in order.
        cursor: ``None`` for the first request, then the previous page's ``cursor``.
        chunk: entries of a state read per server call (1 to 10000).
        budget_ms: wall time after which the request stops (after the current chunk).
        limit: most matches per request (1 to 1000).

    Returns:
        The page: matches, the cursor to go on (``None`` when done) and the progress.

    Raises:
        InvalidOptionError: an empty or too long needle, an unknown state, a cursor that this
            search did not give, or a chunk, budget or limit out of range.
    """
    lowered = _check_needle(needle)
    states = _check_state(state)
    check_int("chunk", chunk, 1, MAX_CHUNK)
    check_int("limit", limit, 1, MAX_LIMIT)
    budget = _check_budget(budget_ms)
    started = time.perf_counter()
    fingerprint = _fingerprint(queue, lowered, state)
    client = await queue.client()
    if cursor is None:
        state_index = offset = scanned = 0
        async with client.pipeline(transaction=False) as pipe:
            for name in states:
                if name in _LISTS:
                    pipe.llen(queue.keys.key(_LISTS[name]))
                else:
                    pipe.zcard(queue.keys.key(name))
            total = sum(int(n) for n in await pipe.execute())
    else:
        state_index, offset, scanned, total = _decode(cursor, len(states), fingerprint)

    hits: list[tuple[str, str]] = []
    server_us = 0
    prefix = queue.keys.base + ":"
    while state_index < len(states) and len(hits) < limit:
        name = states[state_index]
        args = [prefix, name, offset, chunk, lowered, limit - len(hits)]
        reply = await queue._run(_SEARCH_JOBS, args)
        if not isinstance(reply, list):  # the arguments are checked above: a bug if seen
            detail = _SCRIPT_ERRORS.get(int(reply), f"code {reply}")
            raise InvalidOptionError(f"search_jobs.lua refused its arguments: {detail}")
        next_offset, size, spent = (int(v) for v in reply[:3])
        server_us += spent
        scanned += next_offset - offset
        hits.extend((name, str(job_id)) for job_id in reply[3:])
        if next_offset >= size:
            state_index, offset = state_index + 1, 0
        else:
            offset = next_offset
        if (time.perf_counter() - started) * 1000 >= budget:
            break

    jobs: list[tuple[str, AsyncJob]] = []
    if hits:
        async with client.pipeline(transaction=False) as pipe:
            for _, job_id in hits:
                pipe.hgetall(queue.keys.job(job_id))
            hashes: list[dict[str, str]] = await pipe.execute()
        for (name, job_id), fields in zip(hits, hashes, strict=True):
            if fields:  # removed since it matched: skipped
                jobs.append((name, queue._bind(job_id, fields)))
    done = state_index >= len(states)
    return SearchPage(
        jobs=jobs,
        cursor=None if done else _encode(state_index, offset, scanned, total, fingerprint),
        scanned=scanned,
        total=total,
        server_ms=server_us / 1000,
    )
