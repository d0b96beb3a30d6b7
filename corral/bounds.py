"""The ranges and names every public argument is checked against, before anything is written.

Pure. Each bound is what Lua's numbers and Redis' commands can carry, or what keeps one call's
server work small; docs/limits.md lists them with their reasons. A value out of range is
refused with :class:`InvalidOptionError` naming the argument: a refused call writes nothing.
"""

from __future__ import annotations

from typing import Any

from corral._keys import SCRIPT_KEY_SUFFIXES
from corral.errors import InvalidOptionError

#: Largest count (retention counts, keep_logs, attempts, events cap, limiter max...). Lua 5.1
#: numbers are doubles that scripts turn into text with ``%.14g``: past 10**14 a count reaches
#: Redis as "1e+14", which LTRIM, XADD MAXLEN or INCRBY refuse after the script wrote
#: something. 2**31 - 1 is far beyond any real count and exact everywhere.
MAX_COUNT = 2**31 - 1

#: Largest duration: ten years, in ms. Durations are added to the clock (run times, expiries,
#: windows): the sums must stay exact in a double and inside :data:`MAX_TIMESTAMP_MS`.
MAX_DURATION_MS = 10 * 365 * 24 * 3600 * 1000 + 2 * 24 * 3600 * 1000

#: Latest moment (epoch ms, 2039-09-07) a job may carry or be delayed to: a delayed job's
#: score is ``run_at * 4096 + seq`` (BullMQ's layout), exact in a double only below 2**53.
MAX_TIMESTAMP_MS = 2**41 - 1

#: Largest index of a range read (``get_jobs``, ``get_logs``...), either sign: what a double
#: carries exactly, and far past any list Redis can hold.
MAX_INDEX = 2**53 - 1

#: Longest job id (BullMQ's keys stay short), and longest queue, job, scheduler or dedup name.
MAX_JOB_ID_LENGTH = 255
MAX_NAME_LENGTH = 1024

#: Names of a queue's own keys (``<prefix>:<queue>:<name>``) and of its key namespaces
#: (``de:<id>``, ``repeat:<id>``...). A job whose id is one of them would have its hash (or its
#: ``:lock``, ``:logs``... keys) where the queue keeps its own data, so they are refused as job
#: ids. BullMQ's keys first, then corral's (``dn``, ``x-add``, ``x-flow``, ``x-idem``, ``x-dlq``,
#: ``x-parked``).
RESERVED_JOB_IDS = frozenset(
    {
        *SCRIPT_KEY_SUFFIXES,  # wait, active, meta, events, limiter, id...
        "repeat",
        "metrics",
        "de",
        "dn",
        "x-add",
        "x-flow",
        "x-idem",
        "x-dlq",
        "x-parked",
        # The keys hanging off a job's hash (K:<id>:lock...): a job with one of these ids
        # would be indistinguishable from another job's key when prefixes nest
        # (queue "q" of prefix "bull:app" vs job "q" of queue "app").
        "lock",
        "logs",
        "dependencies",
        "processed",
        "unsuccessful",
        "x-stream",
        "x-signals",
        "x-steps",
    }
)

#: The ids whose key, ``K:<id>``, is one of the queue's own keys: no job can live there, so a
#: read of one finds no job. The other reserved ids are refused when written but still read:
#: Node BullMQ may have added a job named "logs" or "de", which works where prefixes do not
#: nest.
QUEUE_KEY_NAMES = frozenset({*SCRIPT_KEY_SUFFIXES, "repeat"})

#: Suffixes of the keys that hang off a job's hash.
JOB_KEY_SUFFIXES = frozenset(
    {
        *("lock", "logs", "dependencies", "processed", "failed", "unsuccessful"),
        *("x-stream", "x-signals", "x-steps"),
    }
)
#: First parts of the queue's keys that hold a namespace of their own (K:de:<dedup id>...).
KEY_NAMESPACES = frozenset({"de", "dn", "repeat", "metrics", "x-add", "x-flow", "x-idem"})


def check_int(name: str, value: Any, low: int | None = 0, high: int | None = MAX_COUNT) -> int:
    """``value`` when it is an ``int`` (not a ``bool``) from ``low`` to ``high`` (``None``:
    ``-MAX_INDEX`` / ``MAX_INDEX``)."""
    lowest = -MAX_INDEX if low is None else low
    highest = MAX_INDEX if high is None else high
    if isinstance(value, bool) or not isinstance(value, int) or not lowest <= value <= highest:
        raise InvalidOptionError(
            f"{name} must be an integer from {lowest} to {highest}, got {value!r}"
        )
    return value


def check_text(
    kind: str,
    value: Any,
    *,
    max_length: int = MAX_NAME_LENGTH,
    colon: bool = True,
    word: bool = False,
) -> str:
    """A non-empty ``str`` of at most ``max_length`` characters that UTF-8 can encode (no lone
    surrogates); ``colon=False`` refuses ``:``; ``word=True`` allows only printable ASCII
    without spaces, what Redis takes in a client name (``CLIENT SETNAME``)."""
    if not isinstance(value, str) or not value:
        raise InvalidOptionError(f"{kind} must be a non-empty string, got {value!r}")
    if len(value) > max_length:
        raise InvalidOptionError(
            f"{kind} must be at most {max_length} characters, got {len(value)}"
        )
    try:
        if not value.isascii():  # ASCII always encodes; most names are ASCII
            value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidOptionError(
            f"{kind} must be valid text: {value[exc.start : exc.end]!r} at {exc.start} cannot be "
            "encoded as UTF-8 (a lone surrogate)"
        ) from None
    if not colon and ":" in value:
        raise InvalidOptionError(f"{kind} must not contain ':', got {value!r}")
    if word and not all("!" <= c <= "~" for c in value):
        raise InvalidOptionError(
            f"{kind} must be printable ASCII without spaces (it is part of the workers' client "
            f"names, which Redis limits to those), got {value!r}"
        )
    return value


def check_job_id(value: Any, kind: str = "job_id") -> str:
    """Refuse ids BullMQ cannot tell from its own: with ``:``, all digits, too long, or one of
    the queue's own key names (:data:`RESERVED_JOB_IDS`)."""
    job_id = check_text(kind, value, max_length=MAX_JOB_ID_LENGTH, colon=False)
    if job_id.isdigit():
        # Numeric ids are the ones K:id hands out; a custom one could collide with them.
        raise InvalidOptionError(f"{kind} must not be all digits, got {job_id!r}")
    if job_id in RESERVED_JOB_IDS:
        raise InvalidOptionError(
            f"{kind} {job_id!r} is the name of one of the queue's own keys: choose another id "
            "(reserved: see docs/limits.md)"
        )
    return job_id


def names_a_job(value: Any, kind: str = "job_id") -> bool:
    """Whether ``value``, an id given to a read or a removal, can be a job's id: custom and
    numeric ids (also those corral refuses to write but Node may have: ``"logs"``), and the
    ``repeat:<scheduler>:<run ms>`` ids of scheduler iterations. Other ids name no job (a
    queue key's name, :data:`QUEUE_KEY_NAMES`, or a key under one: ``metrics:failed``) and
    are not looked up, since their keys hold the queue's own data.

    Raises:
        InvalidOptionError: ``value`` is not text (not a string, empty, a lone surrogate).
    """
    job_id = check_text(kind, value)
    if ":" not in job_id:
        return job_id not in QUEUE_KEY_NAMES
    head, _, run_ms = job_id.rpartition(":")
    return head.startswith("repeat:") and len(head) > len("repeat:") and run_ms.isdigit()


def check_timeout(value: Any, name: str = "timeout") -> float | None:
    """A wait in seconds: ``None`` (no limit), or a finite number from 0 to ten years."""
    if value is None:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not 0 <= value <= MAX_DURATION_MS / 1000  # also refuses NaN
    ):
        raise InvalidOptionError(
            f"{name} must be None or seconds from 0 to {MAX_DURATION_MS // 1000}, got {value!r}"
        )
    return float(value)
