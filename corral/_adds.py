"""The numbering of a producer's add calls, which makes an add safe to send again.

A producer whose add got no reply (the connection dropped, the reply was lost) cannot tell
whether the server ran it. It sends the same call again; the server keeps the answer of each
numbered call that created jobs (``_lua/include/resend.lua``), so the resend gets that answer
back instead of creating a second job. This module holds the producer's side of it, with no
I/O: a producer id, the call numbers, and which answers the server may forget (those the
producer has heard), told to the server two at a time on later calls.
"""

from __future__ import annotations

import base64
import itertools
import uuid
from collections import deque

from corral import backoff
from corral.clock import monotonic
from corral.errors import server_error_kind

#: A resent call's answer is forgotten this much later (seconds), not at once: a first send
#: still on its way (held up in a proxy's buffer) must find the answer when it lands.
RESENT_FORGET_DELAY_S = 30.0
#: The most ``add_retries`` can be: the server keeps answers for 10 minutes after a
#: producer's last add, and this many retries take far less.
MAX_ADD_RETRIES = 100


def may_resend(exc: BaseException, retries: int, limit: int) -> bool:
    """Whether an add call that failed with ``exc`` after ``retries`` resends goes again: the
    error is one to wait out, and fewer than ``limit`` resends were made."""
    return retries < limit and server_error_kind(exc) == "transient"


def add_retry_delay(retry: int) -> float:
    """Seconds before resend number ``retry`` (1, 2, ...): 50 ms doubling to 1 s, jittered, so
    20 retries ride out about 10 to 20 seconds of a server that is away."""
    return backoff.reconnect_delay(retry, base=0.05, cap=1.0)


class AddCalls:
    """The add calls of one producer (a queue object).

    Args:
        enabled: ``False`` sends no numbers (the server keeps nothing; a resend could then
            create a second job, so a producer without numbers does not resend).
    """

    __slots__ = ("_heard", "_numbers", "_resent", "producer", "used")

    def __init__(self, enabled: bool) -> None:
        #: The producer's id ("" when disabled): 22 characters, unique per queue object.
        self.producer = (
            base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=") if enabled else ""
        )
        self._numbers = itertools.count()
        #: Numbers of calls whose answers the server kept and the producer has heard.
        self._heard: deque[int] = deque()
        #: The same for calls that were resent, each with the time it may be forgotten.
        self._resent: deque[tuple[float, int]] = deque()
        #: Whether any numbered call was made (so the server may hold answers of ours).
        self.used = False

    def number(self) -> int:
        """The number of a new call."""
        self.used = True
        return next(self._numbers)

    def to_forget(self) -> list[str]:
        """Two numbers (``""`` for none) whose answers the server may forget now."""
        out = ["", ""]
        for i in range(2):
            if self._heard:
                out[i] = str(self._heard.popleft())
            elif self._resent and self._resent[0][0] <= monotonic():
                out[i] = str(self._resent.popleft()[1])
            else:
                break
        return out

    def not_forgotten(self, done: list[str]) -> None:
        """A call carrying ``done`` failed: tell them again on a later call."""
        self._heard.extendleft(int(number) for number in reversed(done) if number)

    def heard(self, number: int, *, resent: bool) -> None:
        """The answer of call ``number`` arrived, and the server kept it (jobs were created)."""
        if not self.producer:
            return
        if resent:
            self._resent.append((monotonic() + RESENT_FORGET_DELAY_S, number))
        else:
            self._heard.append(number)
