"""Remote cancel, the worker's side: hear the cancel requests of the jobs it holds.

``cancel_job.lua`` marks an active job (hash field ``x-cancel`` = the reason) and publishes
``{"jobId", "reason"}`` on the queue's cancel channel, which every worker of the queue
subscribes to; the worker holding the job stops its processor. Pub/Sub delivers only to
who listens at that moment, so after each (re)subscription the listener also reads
``x-cancel`` of every job it holds: a request sent while the connection was down is not
missed. A job fetched with ``x-cancel`` set fails without running (the lease sees it).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.client import PubSub

from corral import _codec
from corral._async.queue import AsyncQueue
from corral._lease import Lease

logger = logging.getLogger("corral.worker")

#: Longest wait for a message before the step returns (it is called again at once).
LISTEN_S = 1.0


class CancelListener:
    """A supervisor step: subscribe, then pass each request to the lease of its job."""

    def __init__(self, queue: AsyncQueue, client: Redis, leases: Callable[[], Iterable[Lease]]):
        self._queue = queue
        self._client = client
        self._leases = leases
        self._pubsub: PubSub | None = None
        self.channel = queue.keys.cancel_channel()

    async def step(self) -> float:
        try:
            if self._pubsub is None:
                pubsub = self._client.pubsub(ignore_subscribe_messages=True)
                self._pubsub = pubsub
                await pubsub.subscribe(self.channel)
                await self._sweep()
            message = await self._pubsub.get_message(timeout=LISTEN_S)
        except BaseException:
            await self.close()  # subscribe again on a fresh connection next time
            raise
        if message is not None:
            self._heard(message.get("data"))
        return 0

    def _heard(self, data: Any) -> None:
        try:
            request = _codec.loads(_codec.text(data))
            job_id, reason = str(request["jobId"]), str(request.get("reason") or "")
        except (ValueError, TypeError, KeyError) as exc:
            logger.warning(
                "worker %s: unreadable cancel request %r: %s", self._queue.name, data, exc
            )
            return
        for lease in self._leases():
            if lease.job_id == job_id:
                lease.cancel(reason)

    async def _sweep(self) -> None:
        """Requests sent while nobody listened: read them from the jobs' hashes."""
        leases = list(self._leases())
        if not leases:
            return
        client = await self._queue.client()
        async with client.pipeline(transaction=False) as pipe:
            for lease in leases:
                pipe.hget(self._queue.keys.job(lease.job_id), "x-cancel")
            reasons = await pipe.execute()
        for lease, reason in zip(leases, reasons, strict=True):
            if reason is not None:
                lease.cancel(_codec.text(reason))

    async def close(self) -> None:
        pubsub, self._pubsub = self._pubsub, None
        if pubsub is not None:
            try:
                await pubsub.aclose()  # type: ignore[no-untyped-call]
            except Exception as exc:  # a dead connection: nothing left to close
                logger.debug("worker %s: closing the cancel channel: %s", self._queue.name, exc)
