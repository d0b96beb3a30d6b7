"""Running a worker from a plain, blocking call: its event loop, and SIGINT/SIGTERM meanwhile;
and the warning a blocking client gets when it is used where an event loop runs."""

from __future__ import annotations

import asyncio
import signal
import threading
import warnings
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def run_event_loop(main: Coroutine[Any, Any, T]) -> T:
    """Run ``main`` on a new event loop: uvloop's when it is installed (``corral[fast]``),
    else asyncio's. uvloop's loop and transports take about 15% off a busy worker's CPU.

    Raises:
        RuntimeError: called where an event loop runs (``Worker.run()`` in async code),
            saying to await ``run_async()`` instead.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        main.close()
        raise RuntimeError(
            "Worker.run() blocks, and an event loop is running here: "
            "use `await worker.run_async()` in async code"
        )
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


def warn_if_loop_runs(what: str) -> None:
    """Warn when the blocking API opens its client inside a running event loop: each call
    would stop the loop (and every task on it) until the server answers."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return
    warnings.warn(
        f"a blocking {what} is used inside a running event loop: each call blocks the loop "
        "until Redis answers; use the asyncio API in async code (AsyncQueue and "
        "`await queue.add(...)`, AsyncFlowProducer, AsyncQueueEvents, `async with breaker`)",
        RuntimeWarning,
        stacklevel=4,
    )
