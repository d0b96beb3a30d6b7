# Generated from corral/_async/queue_admin.py by scripts/unasync.py: do not edit.
"""Queue administration: pause, drain, clean, obliterate, listings, limits (BullMQ's ``Queue``).

A layer of :class:`Queue`; it uses only what :class:`QueueBase` provides.
"""

from __future__ import annotations

from corral._sync._queue_base import QueueBase


class QueueAdmin(QueueBase):
    """Methods that inspect or manage a whole queue."""
