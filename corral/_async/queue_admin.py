"""Queue administration: pause, drain, clean, obliterate, listings, limits (BullMQ's ``Queue``).

A layer of :class:`AsyncQueue`; it uses only what :class:`AsyncQueueBase` provides.
"""

from __future__ import annotations

from corral._async._queue_base import AsyncQueueBase


class AsyncQueueAdmin(AsyncQueueBase):
    """Methods that inspect or manage a whole queue."""
