"""The supervisor of a worker's background loops: fetching, lock renewal, stall checks.

Each loop is a *step* run again and again: a step does one round of work and returns how long
to wait before the next one. The supervisor runs every step under one rule for errors, so no
error reply can end a loop silently:

- transient (``errors.server_error_kind``: dropped connection, timeout, BUSY, LOADING,
  READONLY, OOM, UNBLOCKED, NOSCRIPT...): wait with capped backoff and run the step again;
  one warning when the server goes away and one line when it is back, per episode, shared by
  all the loops of the worker (an outage is one event, not one per loop per retry);
- configuration (wrong password, missing permission, unknown command): stop the worker with a
  one-line :class:`~corral.errors.ConfigurationError`;
- anything else (a bug, bad data): report it with its traceback, once per episode, and run
  the step again after a backoff: a loop that hit a bug is restarted, never left dead.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from corral import _tls, backoff
from corral.clock import monotonic
from corral.errors import ConfigurationError, server_error_kind

logger = logging.getLogger("corral.worker")

#: One round of a loop; returns the seconds to wait before the next round (0: at once; < 0:
#: the loop is done).
Step = Callable[[], Awaitable[float]]
#: How the supervisor reports: ``emit(event, *args)`` (the worker's ``error`` event).
Emit = Callable[..., Awaitable[None]]


class Outage:
    """The state of one worker's link to its server, shared by its loops (and its leases).

    The first transient error of an episode is logged as a warning; the ones after it at
    debug level; the first success after it logs how long the server was away.
    """

    def __init__(self, owner: str, log: logging.Logger = logger) -> None:
        self.owner = owner
        self._log = log
        self.failures = 0
        self._since: float | None = None

    @property
    def down(self) -> bool:
        return self._since is not None

    def failed(self, what: str, exc: BaseException) -> float:
        """Note a transient error of ``what``; return the seconds to wait before retrying."""
        self.failures += 1
        if self._since is None:
            self._since = monotonic()
            self._log.warning(
                "%s: %s: %s; retrying until the server is back", self.owner, what, _brief(exc)
            )
        else:
            self._log.debug("%s: %s: %s (retry %d)", self.owner, what, _brief(exc), self.failures)
        return backoff.reconnect_delay(self.failures)

    def succeeded(self) -> None:
        """Note a call that got through; ends the episode if one was going on."""
        if self._since is not None:
            self._log.warning(
                "%s: server back after %.1fs (%d retries)",
                self.owner,
                monotonic() - self._since,
                self.failures,
            )
            self._since = None
        self.failures = 0


def _brief(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class Supervisor:
    """Runs the steps of one worker's loops until :meth:`stop`.

    Args:
        outage: the worker's shared :class:`Outage`.
        emit: reports an error episode as the worker's ``error`` event.
    """

    def __init__(self, outage: Outage, emit: Emit) -> None:
        self.outage = outage
        self._emit = emit
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._wake: dict[str, asyncio.Event] = {}
        self._stopping = False
        #: Set when a configuration error stopped the supervisor; raised by the worker.
        self.fatal: ConfigurationError | None = None
        self._on_fatal: Callable[[], Any] | None = None

    def start(self, name: str, step: Step) -> None:
        """Run ``step`` in a loop of its own, named ``name`` in logs."""
        self._wake[name] = asyncio.Event()
        self._tasks[name] = asyncio.create_task(self._loop(name, step), name=f"corral-{name}")

    def on_fatal(self, callback: Callable[[], Any]) -> None:
        """Call ``callback`` once when a configuration error stops the supervisor."""
        self._on_fatal = callback

    def fail(self, error: ConfigurationError) -> None:
        """Stop the worker for good: no retry helps (wrong settings, a processor that its
        child processes cannot import any more). The first such error is the one raised."""
        if self.fatal is None:
            self.fatal = error
            logger.error("%s: stopped: %s", self.outage.owner, error)
            if self._on_fatal is not None:
                self._on_fatal()

    def wake(self, name: str) -> None:
        """Cut short the wait before the next round of ``name``."""
        event = self._wake.get(name)
        if event is not None:
            event.set()

    async def _loop(self, name: str, step: Step) -> None:
        others = 0  # consecutive failures that were neither transient nor configuration
        while not self._stopping:
            try:
                wait = await step()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                retry_in = await self._failed(name, exc, others)
                if retry_in is None:
                    return
                wait = retry_in
                others = others + 1 if server_error_kind(exc) == "other" else 0
            else:
                others = 0
                if wait < 0:
                    return
            if wait > 0 and not self._stopping:
                event = self._wake[name]
                event.clear()
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(event.wait(), wait)

    async def _failed(self, name: str, exc: Exception, others: int) -> float | None:
        kind = server_error_kind(exc)
        if kind == "transient":
            first = not self.outage.down
            wait = self.outage.failed(name, exc)
            if first:
                await self._emit("error", exc)
            return wait
        if kind == "configuration":
            # A certificate refused on a reconnect reads as at the first contact.
            why = _tls.explain(exc) or _brief(exc)
            self.fail(ConfigurationError(f"{self.outage.owner}: {why}"))
            return None
        # A bug or data the step cannot handle: say so in full once, then keep the loop alive.
        if others == 0:
            logger.error("%s: %s failed; restarting it", self.outage.owner, name, exc_info=exc)
            await self._emit("error", exc)
        else:
            logger.debug("%s: %s failed again: %s", self.outage.owner, name, _brief(exc))
        return backoff.reconnect_delay(others + 1, base=0.1, cap=5.0)

    def stop(self, name: str | None = None) -> None:
        """Stop one loop (or all): each ends at its next wait, or is cancelled when waiting."""
        if name is None:
            self._stopping = True
            names = list(self._tasks)
        else:
            names = [name]
        for n in names:
            task = self._tasks.get(n)
            if task is not None and not task.done():
                task.cancel()

    async def join_one(self, name: str) -> None:
        """Wait until the loop ``name`` has ended."""
        await asyncio.gather(self._tasks[name], return_exceptions=True)

    async def join(self) -> None:
        """Wait until every loop has ended."""
        await asyncio.gather(*self._tasks.values(), return_exceptions=True)
