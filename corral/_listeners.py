"""Local event callbacks (``worker.on("completed", fn)``), plain or ``async def``."""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Mapping
from typing import Any

from corral.errors import InvalidOptionError

logger = logging.getLogger("corral.worker")

#: An event callback, plain or ``async def``.
Callback = Callable[..., Any]


class Listeners:
    """Callbacks by event name, for the events in ``known`` (name -> signature text)."""

    def __init__(self, owner: str, known: Mapping[str, str]) -> None:
        self._owner = owner
        self._known = known
        self._callbacks: dict[str, list[Callback]] = {}

    def on(self, event: str, callback: Callback | None = None) -> Any:
        """Call ``callback`` on ``event``; without ``callback``, a decorator that registers.

        An exception in a callback is logged, never raised into the caller.
        """
        if event not in self._known:
            raise InvalidOptionError(
                f"unknown {self._owner} event {event!r}; known: {sorted(self._known)}"
            )

        def register(fn: Callback) -> Callback:
            self._callbacks.setdefault(event, []).append(fn)
            return fn

        return register if callback is None else register(callback)

    def __contains__(self, event: str) -> bool:
        """Whether any callback listens to ``event``."""
        return event in self._callbacks

    async def emit(self, event: str, *args: Any) -> None:
        for fn in self._callbacks.get(event, ()):
            try:
                result = fn(*args)
                if inspect.isawaitable(result):
                    await result
            except Exception:
                logger.exception("%s: %r callback failed", self._owner, event)

    def emit_sync(self, event: str, *args: Any) -> None:
        """:meth:`emit` for blocking code: callbacks must be plain functions there."""
        for fn in self._callbacks.get(event, ()):
            try:
                result = fn(*args)
                if inspect.isawaitable(result):
                    raise TypeError(f"{event!r} callback {fn!r} is async: use the asyncio API")
            except Exception:
                logger.exception("%s: %r callback failed", self._owner, event)
