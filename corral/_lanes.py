"""``Worker({"interactive": 8, "background": 4}, processor, borrow=True)``: one worker serving
several queues (lanes), each with slots reserved for it.

It is made of one inner worker per lane (each a plain :class:`~corral.worker.Worker` of the
lane's queue, with its own connections and its own wait on its queue's marker), run together
on one event loop, as a sharded worker runs its shards (:mod:`corral._worker_group`). Their
slots draw on one :class:`~corral._lane_policy.LanePolicy`: a lane never waits for a slot
that another lane's backlog holds, since its reserved slots are its own, and with ``borrow``
a lane with nothing to do lends its free slots to the lanes that have work, which give each
back as its job ends once the owner wants it (running jobs are never cut short). So a backlog
of slow jobs in one lane leaves the others' pickup latency that of an idle worker.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from corral import options
from corral._async.job import AsyncJob
from corral._keys import DEFAULT_PREFIX
from corral._lane_policy import LanePolicy, check_lanes
from corral._shards import check_shards
from corral._worker_group import WorkerGroup
from corral.errors import InvalidOptionError
from corral.worker import Processor, Worker

logger = logging.getLogger("corral.worker")


class LanesWorker(WorkerGroup):
    """What ``Worker({queue name: slots, ...}, processor)`` makes (see ``Worker``).

    Args:
        lanes: queue name -> the slots reserved for it (a positive int), at least one; the
            worker runs at most their sum at once.
        processor: as for ``Worker``; it serves every lane (``job.queue_name`` tells which).
        borrow: let a lane with nothing to do lend its free slots to the others' jobs; a
            borrowed slot returns to its lane as soon as the borrowed job ends, if the lane
            has work then. Without it (the default) each lane holds at most its own count.
        spare: with ``borrow``, how many free slots a lane with nothing to do keeps unlent, so
            that its next jobs start at once rather than when a borrowed job ends (0: lend
            every free slot).
        prefix: the queues' key prefix.
        **settings: the other options of ``Worker``, applied to every lane. ``concurrency``
            (the lanes' counts are it), ``limiter`` and ``processes`` (each lane would count its
            own limit, start its own children) and ``shards`` are refused.

    Events are those of every lane (``drained`` comes once per lane). ``max_jobs`` counts the
    jobs of every lane; a burst ends when every lane is drained.

    Example::

        Worker({"interactive": 8, "background": 4}, handle, borrow=True).run()
    """

    def __init__(
        self,
        lanes: Mapping[str, int],
        processor: Processor | str | None,
        *,
        borrow: bool = False,
        spare: int = 0,
        prefix: str = DEFAULT_PREFIX,
        concurrency: int | None = None,
        limiter: Mapping[str, Any] | None = None,
        processes: int | None = None,
        shards: int = 1,
        **settings: Any,
    ) -> None:
        counts = check_lanes(lanes)
        described = ", ".join(f"{name}:{count}" for name, count in counts.items())
        if concurrency is not None:
            raise InvalidOptionError(
                f"concurrency with lanes ({described}): the lanes' counts say how many jobs "
                "run at once (their sum); leave it out"
            )
        if limiter is not None:
            raise InvalidOptionError(
                f"limiter with lanes ({described}): a rate limit counts per queue, so each lane "
                "would have its own; set one on the queue that needs it "
                "(queue.set_global_rate_limit)"
            )
        if processes is not None:
            raise InvalidOptionError(
                f"processes with lanes ({described}): not supported (each lane would start its "
                "own children); run one worker process per queue, or use threads or async jobs"
            )
        if check_shards(shards) != 1:
            raise InvalidOptionError(
                f"shards with lanes ({described}): not supported; a lane is a plain queue"
            )
        self._policy = LanePolicy(counts, borrow=borrow, spare=spare)
        total = self._policy.concurrency
        #: One plain worker per lane, in the order given.
        self.workers = [
            # With borrowing a lane may run every slot: its thread pool is sized for that.
            Worker(
                name, processor, prefix=prefix, concurrency=total if borrow else count, **settings
            )
            for name, count in counts.items()
        ]
        for worker in self.workers:
            worker._slots.rotation = self._policy.join(worker.queue_name, worker._slots)
        first = self.workers[0]
        #: The lanes' queues, joined by commas (for log lines; see ``lanes``).
        self.queue_name = ",".join(counts)
        self.borrow = borrow
        self.spare = self._policy.spare
        self.processor = first.processor
        self.name = first.name
        self.prefix = first.prefix
        self.close_grace = first.close_grace

    @property
    def lanes(self) -> dict[str, int]:
        """Queue name -> the slots reserved for it."""
        return {name: lane.reserved for name, lane in self._policy.lanes.items()}

    @property
    def concurrency(self) -> int:
        """How many jobs run at once over every lane: the sum of their counts."""
        return self._policy.concurrency

    @concurrency.setter
    def concurrency(self, value: int) -> None:
        options.int_option("concurrency", value, 1)
        raise InvalidOptionError(
            "the concurrency of a lanes worker is the sum of its lanes' counts; "
            "it cannot be changed while it runs"
        )

    async def get_next_job(self) -> AsyncJob | None:
        """Take one job from the lanes, asked in the order given; ``None`` when none has one
        ready (manual fetching: the lanes' counts do not apply)."""
        for worker in self.workers:
            job = await worker.get_next_job()
            if job is not None:
                return job
        return None
