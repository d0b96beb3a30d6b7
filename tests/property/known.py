"""Inputs the property suite found bugs with, skipped until they are fixed.

Empty: the 27 bugs the suite found when it was written are fixed, and each has a regression
test (tests/_async/test_bad_input.py and others). When a new run finds one
(``CORRAL_PROPERTY_SCALE=8`` draws more examples, at random), park its input here with a
one-line reason until the fix lands, so the rest of the suite keeps running.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hypothesis import assume


@dataclass(frozen=True)
class Known:
    #: The call, or several calls that share the bug.
    call: str | tuple[str, ...]
    reason: str
    matches: Callable[[dict[str, Any]], bool]


KNOWN: list[Known] = []


def known(call: str, **args: Any) -> str | None:
    """The reason of the first entry that matches this call, or ``None``."""
    for entry in KNOWN:
        calls = (entry.call,) if isinstance(entry.call, str) else entry.call
        if call in calls and entry.matches(args):
            return entry.reason
    return None


#: ``CORRAL_PROPERTY_KNOWN=run``: skip nothing, to see which known bugs are still there.
RUN_KNOWN = os.environ.get("CORRAL_PROPERTY_KNOWN") == "run"


def skip_known(call: str, **args: Any) -> None:
    """Discard the example when it is a known bad input (hypothesis draws another)."""
    if not RUN_KNOWN:
        assume(known(call, **args) is None)
