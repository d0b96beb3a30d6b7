"""Batched finishing: the jobs a worker's slots finish at about the same time go to the
server in one ``finish_jobs`` call, which also takes the next jobs for those slots.

A lone finish costs one round trip, as before (the batch is whatever finished while the
previous call was in flight, so with one job in flight it is one job). Under load, many
slots finish in one call: fewer round trips, and far less per-job work in redis-py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from corral import _scripts
from corral._async.queue import AsyncQueue
from corral.clock import now_ms

#: Jobs per call at most: bounds the script's run time (and so the server's pause).
MAX_BATCH = 64
#: Calls in flight at once: while the server runs one batch, the worker prepares the next,
#: so neither waits for the other (one call at a time leaves each idle half the time).
MAX_IN_FLIGHT = 2


@dataclass(slots=True)
class _Finish:
    values: list[Any]
    wants_next: bool
    done: asyncio.Future[tuple[int, _scripts.Fetched | None]] = field(repr=False)


class Finisher:
    """Finishes jobs for one worker.

    Args:
        queue: the worker's queue (its client runs the scripts).
        fetch: makes the fetch part of a call for ``n`` next jobs (lock tokens included).
        fetch_lost: ``(first_seq, count)`` of lock tokens the server may have handed out
            with jobs nobody will run: a call that asked for next jobs got no reply, or a
            next job's caller stopped waiting (the worker gives those jobs back).
    """

    def __init__(
        self,
        queue: AsyncQueue,
        fetch: Callable[[int], _scripts.FetchNext],
        fetch_lost: Callable[[int, int], None],
    ) -> None:
        self._queue = queue
        self._fetch = fetch
        self._fetch_lost = fetch_lost
        self._pending: list[_Finish] = []
        self._in_flight: set[asyncio.Task[None]] = set()
        self._kick_scheduled = False

    async def finish(
        self, values: list[Any], *, wants_next: bool
    ) -> tuple[int, _scripts.Fetched | None]:
        """Finish one job (``values`` from ``job.completion()`` / ``job.failure()``).

        Returns the job's attempts made (or a negative error code of move_to_finished) and,
        when ``wants_next``, the next job taken for the caller's slot, if there was one.

        Raises:
            redis errors: the call failed, and may or may not have landed; the caller may send
                it again (the lock token makes a repeat harmless).
        """
        done: asyncio.Future[tuple[int, _scripts.Fetched | None]] = (
            asyncio.get_running_loop().create_future()
        )
        self._pending.append(_Finish(values, wants_next, done))
        self._schedule_kick()
        return await done

    def _schedule_kick(self) -> None:
        # On the next loop turn, so that the slots finishing in this one share the call.
        if not self._kick_scheduled and self._pending and len(self._in_flight) < MAX_IN_FLIGHT:
            self._kick_scheduled = True
            asyncio.get_running_loop().call_soon(self._kick)

    def _kick(self) -> None:
        self._kick_scheduled = False
        while self._pending and len(self._in_flight) < MAX_IN_FLIGHT:
            batch, self._pending = self._pending[:MAX_BATCH], self._pending[MAX_BATCH:]
            task = asyncio.create_task(self._run(batch))
            self._in_flight.add(task)
            task.add_done_callback(self._call_done)

    def _call_done(self, task: asyncio.Task[None]) -> None:
        self._in_flight.discard(task)
        self._schedule_kick()

    async def _run(self, batch: list[_Finish]) -> None:
        # The call runs in a task of its own, so a caller that stops waiting (cancelled) does
        # not stop it, and its reply reaches every other job of the batch.
        wanted = sum(item.wants_next for item in batch)
        fetch = self._fetch(wanted)
        try:
            reply = await self._call(batch, fetch)
        except BaseException as exc:
            if wanted:
                self._fetch_lost(fetch.first_seq, fetch.count)
            for item in batch:
                if item.done.done():
                    continue
                if isinstance(exc, asyncio.CancelledError):
                    item.done.cancel()
                else:
                    item.done.set_exception(exc)
            if isinstance(exc, asyncio.CancelledError):
                raise
            return
        n = len(batch)
        fetched = iter(_scripts.parse_fetched(reply, 2 + n))
        for i, item in enumerate(batch):
            # A slot gets its next job even when its own finish was refused (a lost lock):
            # the slot is free either way, and every job taken is handed to someone.
            nxt = next(fetched, None) if item.wants_next else None
            if item.done.done():  # its caller stopped waiting: nobody will run that next job
                if nxt is not None:
                    self._fetch_lost(int(nxt.token.rpartition(":")[2]), 1)
                continue
            item.done.set_result((int(reply[2 + i]), nxt))

    async def _call(self, batch: list[_Finish], fetch: _scripts.FetchNext) -> Any:
        spec = fetch.args()
        args: list[Any] = [self._queue._job_prefix, now_ms(), *spec[:8], spec[8], len(batch)]
        for item in batch:
            args += item.values
        args.append(spec[9])  # the worker's dead-letter queue, after the jobs (ARGV[13 + 8n])
        return await self._queue._run(_scripts.FINISH_JOBS, args)
