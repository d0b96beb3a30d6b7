"""Running a worker from a plain, blocking call: its event loop, and SIGINT/SIGTERM meanwhile."""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def run_event_loop(main: Coroutine[Any, Any, T]) -> T:
    """Run ``main`` on a new event loop: uvloop's when it is installed (``corral[fast]``),
    else asyncio's. uvloop's loop and transports take about 15% off a busy worker's CPU."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(main)
    return uvloop.run(main)


async def with_signals(main: Callable[[], Awaitable[T]], on_signal: Callable[[int], None]) -> T:
    """Await ``main()`` while SIGINT and SIGTERM call ``on_signal(n)``, ``n`` counting the
    signals so far (the first one closes gracefully, a second one exits at once)."""
    loop = asyncio.get_running_loop()
    signals = 0

    def handler() -> None:
        nonlocal signals
        signals += 1
        on_signal(signals)

    # Signals reach only the main thread: a serverless runtime may call its handler (and so
    # run()) in another one, where the run ends by its bounds or close() instead.
    signals_here = threading.current_thread() is threading.main_thread()
    handled = (signal.SIGINT, signal.SIGTERM) if signals_here else ()
    for sig in handled:
        loop.add_signal_handler(sig, handler)
    try:
        return await main()
    finally:
        for sig in handled:
            loop.remove_signal_handler(sig)
