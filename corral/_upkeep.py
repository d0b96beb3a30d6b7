"""What runs beside a worker's loop: lock renewal and the stalled-job check.

Both tolerate a lost connection (they log and try again at their next tick): the fetch
loop is the one that reports and waits out an outage.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from corral import _codec, _scripts
from corral._async.queue import AsyncQueue
from corral.clock import now_ms

logger = logging.getLogger("corral.worker")

NETWORK_ERRORS = (RedisConnectionError, RedisTimeoutError, OSError)

#: How the upkeep tasks report: ``emit(event, *args)``.
Emit = Callable[..., Awaitable[None]]


async def renew_locks(queue: AsyncQueue, held: dict[str, str], lock_ms: int, emit: Emit) -> None:
    """Every ``lock_ms / 2``, renew every lock in ``held`` (job id -> token) in one call.

    A lock found lost is dropped from ``held`` (the job's result will be refused by the token
    check anyway) and reported as ``lock_lost``.
    """
    while True:
        await asyncio.sleep(lock_ms / 2000)
        pairs = list(held.items())
        if not pairs:
            continue
        args: list[Any] = [queue._job_prefix, lock_ms]
        for job_id, token in pairs:
            args += [job_id, token]
        try:
            lost = await queue._run(_scripts.EXTEND_LOCKS, args)
        except NETWORK_ERRORS as exc:
            logger.warning("worker %s: lock renewal failed: %s", queue.name, exc)
            continue
        for raw in lost:
            job_id = _codec.text(raw)
            held.pop(job_id, None)
            logger.warning("worker %s: lost the lock of job %s", queue.name, job_id)
            await emit("lock_lost", job_id)


async def check_stalled(queue: AsyncQueue, interval_ms: int, emit: Emit) -> None:
    """Run the queue's stalled check now and every ``interval_ms``; report ``stalled``."""
    while True:
        try:
            recovered = await queue._run(
                _scripts.CHECK_STALLED, [queue._job_prefix, now_ms(), interval_ms]
            )
        except NETWORK_ERRORS as exc:
            logger.warning("worker %s: stalled check failed: %s", queue.name, exc)
            recovered = []
        for raw in recovered:
            job_id = _codec.text(raw)
            logger.warning("worker %s: job %s stalled, back in wait", queue.name, job_id)
            await emit("stalled", job_id)
        await asyncio.sleep(interval_ms / 1000)
