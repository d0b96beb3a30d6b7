"""``corral.deadline(seconds)``: a time limit on one block of code, such as one tool call
inside a job (the job's own ``timeout`` limits the whole attempt).

``async with deadline(5):`` cancels the block's task after 5 s and raises
:class:`~corral.errors.DeadlineExceeded` (a ``TimeoutError``) where the block ends.
``with deadline(5):`` in a plain function (a thread processor) raises it in the thread, as
the worker stops a timed-out thread: an exception that ``except Exception`` in the block does
not catch, sent again every half second until the block has ended. A thread blocked in a C
call (``time.sleep``, a socket read without a timeout) sees it only when that call returns:
give such calls their own timeout too.
"""

from __future__ import annotations

import asyncio
import sys
import threading
from types import TracebackType
from typing import Any

from corral._runners import _raise_in_thread
from corral.errors import DeadlineExceeded
from corral.options import Duration, positive_ms

__all__ = ["Deadline", "deadline"]

#: How often the interrupt of a sync block is sent again while the block has not ended.
RESEND_S = 0.5


class _Expired(BaseException):
    """Raised in the thread of a sync block past its deadline; ``__exit__`` turns it into
    :class:`DeadlineExceeded`. A ``BaseException``, so that job code does not swallow it."""


def deadline(seconds: Duration) -> Deadline:
    """A time limit for one block: ``async with deadline(5):`` or ``with deadline(5):``.

    Args:
        seconds: the limit, in seconds or a ``timedelta`` (more than 0).

    Raises:
        InvalidOptionError: ``seconds`` is not a duration more than 0.

    Example::

        async with corral.deadline(5):
            reply = await model.complete(prompt)  # DeadlineExceeded after 5 s
    """
    return Deadline(seconds)


class Deadline:
    """See :func:`deadline`. One object serves one block at a time."""

    def __init__(self, seconds: Duration) -> None:
        self.seconds = positive_ms("seconds", seconds) / 1000
        #: Whether the limit passed while the block ran.
        self.expired = False
        self._task: asyncio.Task[Any] | None = None
        self._handle: asyncio.TimerHandle | None = None
        self._cancelling = 0
        self._ident = 0
        self._lock = threading.Lock()
        self._done = False
        self._timer: threading.Timer | None = None

    def _message(self) -> str:
        return f"deadline of {self.seconds:g} s exceeded"

    # -- async ---------------------------------------------------------------------------------

    async def __aenter__(self) -> Deadline:
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("deadline() must be used inside an asyncio task")
        self._task, self.expired = task, False
        if sys.version_info >= (3, 11):
            self._cancelling = task.cancelling()
        self._handle = asyncio.get_running_loop().call_later(self.seconds, self._expire)
        return self

    def _expire(self) -> None:
        assert self._task is not None
        self.expired = True
        self._task.cancel()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._handle is not None and self._task is not None
        self._handle.cancel()
        if not self.expired:
            return
        if sys.version_info >= (3, 11):
            # Ours was the last cancel: a cancel from outside (the worker's timeout, close)
            # stays a cancel.
            if self._task.uncancel() <= self._cancelling and exc_type is asyncio.CancelledError:
                raise DeadlineExceeded(self._message()) from exc
        elif exc_type is asyncio.CancelledError:
            raise DeadlineExceeded(self._message()) from exc

    # -- sync ----------------------------------------------------------------------------------

    def __enter__(self) -> Deadline:
        self._ident, self.expired, self._done = threading.get_ident(), False, False
        self._arm(self.seconds)
        return self

    def _arm(self, after: float) -> None:
        timer = threading.Timer(after, self._interrupt)
        timer.daemon = True
        self._timer = timer
        timer.start()

    def _interrupt(self) -> None:
        with self._lock:
            if self._done:
                return
            self.expired = True
            _raise_in_thread(self._ident, _Expired)
            self._arm(RESEND_S)  # code that swallowed it, or a C call, gets it again

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        hit = exc_type is not None and issubclass(exc_type, _Expired)
        try:
            with self._lock:
                self._done = True
                if self._timer is not None:
                    self._timer.cancel()
                if self.expired:
                    _raise_in_thread(self._ident, None)  # one sent but not yet raised
        except _Expired:  # it arrived here, just as the block ended
            hit = True
        if hit:
            raise DeadlineExceeded(self._message()) from None
