"""Hostile inputs: names and ids that look like the queue's own keys or break key patterns,
numbers at the edges of Lua's doubles and Redis's 64-bit integers, and data JSON cannot carry.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from hypothesis import strategies as st

#: Suffixes of a queue's own keys, and of a job's.
RESERVED = (
    "wait",
    "active",
    "meta",
    "id",
    "events",
    "marker",
    "limiter",
    "paused",
    "prioritized",
    "pc",
    "delayed",
    "waiting-children",
    "completed",
    "failed",
    "stalled",
    "stalled-check",
    "metrics",
    "de",
    "repeat",
    "x-add",
    "x-idem",
    "lock",
    "logs",
    "dependencies",
    "processed",
    "unsuccessful",
)

#: Characters that mean something to Redis patterns, hash tags, key separators, the wire or
#: the UTF-8 encoder (lone surrogates cannot be encoded at all).
SPECIAL = (":", "{", "}", "*", "?", "[", "]", "\\", "\n", "\r\n", "\x00", " ", "\ud800", "\udfff")

#: A megabyte: big enough to show an unbounded copy, small enough to send often.
MEGABYTE = "x" * (1 << 20)

_atoms = st.one_of(
    st.sampled_from(RESERVED),
    st.sampled_from(SPECIAL),
    st.text(min_size=1, max_size=4),
)


def names(*, huge: bool = True) -> st.SearchStrategy[str]:
    """Strings for names and ids: reserved words, pattern characters, surrogates, compounds
    such as ``"a:lock"`` or ``"{x}*"``, digits, the empty string and (rarely) a megabyte."""
    options = [
        st.sampled_from(["a", "", "1", "0", "-1", "007", "1e3", "a:lock", "repeat:a:1", "a b"]),
        st.sampled_from(RESERVED),
        st.lists(_atoms, min_size=1, max_size=5).map("".join),
        st.text(max_size=30),
    ]
    if huge:
        options.append(st.just(MEGABYTE))
    return st.one_of(options)


#: Integers Lua cannot hold exactly (past 2**53), Redis cannot hold at all (past 2**63),
#: and the negatives.
EDGE_INTS = (
    0,
    1,
    -1,
    2**31,
    2**32,
    2**53 - 1,
    2**53,
    2**53 + 1,
    2**63 - 1,
    2**63,
    2**64,
    -(2**53),
    -(2**63),
    -(2**63) - 1,
    10**30,
)

ints = st.one_of(st.sampled_from(EDGE_INTS), st.integers(-1000, 10**7), st.integers())
floats = st.one_of(
    st.sampled_from([0.0, -0.0, 0.5, 1e-9, 1e17, 1e308, float("nan"), float("inf"), -float("inf")]),
    st.floats(allow_nan=True, allow_infinity=True),
)


class Opaque:
    """An object JSON cannot carry."""

    def __repr__(self) -> str:
        return "Opaque()"


#: What a caller might pass where a number is expected.
numbers = st.one_of(
    ints,
    floats,
    st.booleans(),
    st.none(),
    st.sampled_from(["1", "", "1.5", "nan"]),
    st.just(timedelta(days=999_999_999)),
    st.builds(timedelta, seconds=st.integers(-(10**6), 10**6)),
)

#: What a caller might pass where a duration (seconds or a timedelta) is expected.
durations = numbers

#: Anything at all where a flag or a string is expected.
anything = st.one_of(
    numbers,
    names(huge=False),
    st.binary(max_size=4),
    st.just(Opaque()),
    st.just({"a": 1}),
    st.just(["waiting"]),
    st.just({1, 2}),
)

json_leaf = st.one_of(
    st.none(),
    st.booleans(),
    ints,
    floats,
    names(huge=False),
)


def _nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


#: Job data: JSON of any shape (some of it not JSON at all: NaN, 2**64, non-str keys,
#: surrogates), deep nesting past what encoders accept, a megabyte, sets, bytes, objects.
data = st.one_of(
    st.recursive(
        json_leaf,
        lambda children: st.one_of(
            st.lists(children, max_size=4),
            st.dictionaries(names(huge=False), children, max_size=4),
        ),
        max_leaves=12,
    ),
    st.sampled_from([_nested(100), _nested(300), {"big": MEGABYTE}, {1: "a"}, {(1, 2): 3}]),
    st.sampled_from([{1, 2}, b"bytes", bytearray(b"x"), Opaque(), (1, 2), object]),
)


#: Text that must be taken as a name or an id: anything UTF-8 encodes, but ':'.
plain_text = st.text(st.characters(codec="utf-8", exclude_characters=":"), min_size=1, max_size=20)

#: JSON corral must take as data: finite numbers within 64 bits, text that encodes.
json_values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**63), 2**63 - 1),
        st.floats(allow_nan=False, allow_infinity=False),
        st.text(st.characters(codec="utf-8"), max_size=20),
    ),
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(st.text(st.characters(codec="utf-8"), max_size=8), children, max_size=4),
    ),
    max_leaves=12,
)
