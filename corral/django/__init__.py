"""corral in a Django project (docs/frameworks.md): queues from ``settings.CORRAL``, jobs added
only once the database transaction that asked for them commits, and ``python manage.py
corral_worker``.

Add ``"corral.django"`` to ``INSTALLED_APPS`` (for the management command) and configure::

    CORRAL = {
        "url": "redis://localhost:6379/0",  # None or absent: CORRAL_REDIS_URL, then embedded
        "prefix": "bull",                     # optional
        "queues": {"orders": "orders.jobs:confirm_order"},  # queue -> its processor
    }
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from corral._sync.queue import Queue
from corral.errors import InvalidOptionError
from corral.options import JobOptions

__all__ = ["corral_settings", "enqueue_on_commit", "get_queue", "processor_of"]

_queues: dict[tuple[str | None, str, str], Queue] = {}
_lock = threading.Lock()


def corral_settings() -> dict[str, Any]:
    """``settings.CORRAL``, checked: ``url`` (a URL or ``None``), ``prefix``, ``queues``."""
    from django.conf import settings

    raw = getattr(settings, "CORRAL", {})
    if not isinstance(raw, Mapping):
        raise InvalidOptionError(f"settings.CORRAL must be a dict, got {type(raw).__name__}")
    unknown = set(raw) - {"url", "prefix", "queues"}
    if unknown:
        raise InvalidOptionError(
            f"settings.CORRAL has unknown keys {sorted(unknown)}: it takes url, prefix, queues"
        )
    url = raw.get("url")
    if url is not None and not isinstance(url, str):
        raise InvalidOptionError(f"settings.CORRAL['url'] must be a URL or None, got {url!r}")
    queues = raw.get("queues", {})
    if not isinstance(queues, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in queues.items()
    ):
        raise InvalidOptionError(
            "settings.CORRAL['queues'] must map queue names to processors "
            "('package.module:function'), got " + repr(queues)
        )
    return {"url": url, "prefix": raw.get("prefix", "bull"), "queues": dict(queues)}


def get_queue(name: str) -> Queue:
    """The sync :class:`~corral.Queue` ``name`` on ``settings.CORRAL``'s server and prefix.

    One per queue and process, shared by every request (its connection pool is thread-safe).
    """
    config = corral_settings()
    key = (config["url"], config["prefix"], name)
    with _lock:
        queue = _queues.get(key)
        if queue is None:
            queue = _queues[key] = Queue(name, connection=config["url"], prefix=config["prefix"])
        return queue


def processor_of(queue_name: str) -> str:
    """The processor ``settings.CORRAL['queues']`` names for ``queue_name``."""
    queues: dict[str, str] = corral_settings()["queues"]
    if queue_name not in queues:
        configured = ", ".join(sorted(queues)) or "none"
        raise InvalidOptionError(
            f"queue {queue_name!r} is not in settings.CORRAL['queues'] (configured: {configured})"
        )
    return queues[queue_name]


def enqueue_on_commit(
    queue: Queue | str,
    name: str,
    data: Any = None,
    *,
    using: str | None = None,
    **options: Any,
) -> None:
    """Add the job once the current transaction of database ``using`` commits.

    A job added inside a transaction that later rolls back would run on data that never
    existed (or was never saved): this adds nothing when the transaction rolls back, and adds
    the job right after the commit, when the worker can read what the view wrote. Outside a
    transaction (autocommit) it adds at once.

    Args:
        queue: a :class:`~corral.Queue`, or a queue name (see :func:`get_queue`).
        name, data, options: as :meth:`Queue.add` (``job_id=``, ``delay=``, ``attempts=``...);
            the options are checked now: a bad one raises here, not after the commit.
        using: the database alias (Django's default database by default).
    """
    from django.db import transaction

    target = get_queue(queue) if isinstance(queue, str) else queue
    # Checked now, while the caller can still see the error, rather than after the commit.
    JobOptions.build(
        options, defaults=target.default_job_options, backoff_types=target.backoff_types
    )
    transaction.on_commit(lambda: target.add(name, data, **options), using=using)
