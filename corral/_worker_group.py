"""What a worker made of inner workers run together on one event loop shares: one run.

A ``Worker(name, processor, shards=N)`` (:mod:`corral._sharded_worker`) and a
``Worker({"interactive": 8, "background": 4}, processor)`` (:mod:`corral._lanes`) are each a
:class:`WorkerGroup`: plain :class:`~corral.worker.Worker` objects in ``workers``, whose slots
draw on one shared pool (set up by the subclass). The run's bounds are shared (``max_jobs``
counts the jobs of every inner worker; a burst ends when every one is drained), and so is its
summary; events are those of every inner worker; closing closes them all, and the first
failure of one stops the others.
"""

from __future__ import annotations

import asyncio
from typing import Any

from corral._burst import RunLimits, RunSummary, StopReason
from corral._listeners import Callback
from corral.errors import InvalidOptionError
from corral.worker import Worker


class WorkerGroup(Worker):
    """Inner workers run as one (see the module's docstring); ``workers`` is set by the
    subclass's ``__init__``, which does not call ``Worker.__init__``."""

    workers: list[Worker]

    def on(self, event: str, callback: Callback | None = None) -> Any:
        """Call ``callback`` on ``event`` in any inner worker (see ``Worker.on``)."""

        def register(fn: Callback) -> Callback:
            for worker in self.workers:
                worker.on(event, fn)
            return fn

        return register if callback is None else register(callback)

    @property
    def keys_marker(self) -> str:
        raise InvalidOptionError(f"a {type(self).__name__} has a marker per queue: see .workers")

    def _before_run(self) -> None:
        """Called as each run begins."""

    async def _run(self, limits: RunLimits) -> RunSummary:
        """Run every inner worker on the shared bounds until all have stopped; the first
        failure stops the others (gracefully) and is raised."""
        self._before_run()
        tasks = {asyncio.ensure_future(w._run(limits)): w for w in self.workers}
        pending = set(tasks)
        reasons: list[StopReason] = []
        failure: BaseException | None = None
        try:
            while pending:
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    if task.cancelled() or task.exception() is not None:
                        if failure is None:
                            failure = task.exception() or asyncio.CancelledError()
                            for worker in self.workers:
                                worker._close_soon()
                        continue
                    reason = task.result().stopped
                    reasons.append(reason)
                    if reason == "max_jobs":  # the budget is shared: every worker is done
                        for worker in self.workers:
                            worker._slots.end_run("max_jobs")
        finally:
            if pending:  # cancelled from outside: let every inner worker settle
                for worker in self.workers:
                    worker._exit_now()
                await asyncio.gather(*pending, return_exceptions=True)
        if failure is not None:
            raise failure
        return limits.summary(stop_reason(reasons))

    def _signalled(self, count: int) -> None:
        for worker in self.workers:
            worker._signalled(count)

    async def close(self, *, grace: float | None = None) -> None:
        """Close every inner worker (see ``Worker.close``)."""
        await asyncio.gather(*(worker.close(grace=grace) for worker in self.workers))

    def _exit_now(self) -> None:
        for worker in self.workers:
            worker._exit_now()


def stop_reason(reasons: list[StopReason]) -> StopReason:
    """Why a group's run ended: a bound that one inner worker reached, ``drained`` when every
    one was, else ``closed``."""
    bounds: tuple[StopReason, ...] = ("max_jobs", "max_time")
    for bound in bounds:
        if bound in reasons:
            return bound
    return "drained" if reasons and all(r == "drained" for r in reasons) else "closed"
