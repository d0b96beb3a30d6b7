# Generated from corral/_async/dead_letter_queue.py by scripts/unasync.py: do not edit.
"""Dead-letter queues: copying the dead letters a queue's scripts recorded into their DLQ
(:class:`DeadLetterCopier`, which every worker runs), and reading, replaying and purging a DLQ
(:class:`DeadLetterQueue`).

A job that fails for good with a dead-letter queue leaves a record in its queue's hash
``K:x-dlq``, written by the same script call that failed it (``_lua/include/dead_letter.lua``).
The copier adds each record to the DLQ under an id made from the record's number, with an
idempotency key, and only then deletes the record: a copier that dies in between leaves the
record, and the next copy of it (by any worker of the queue) finds the job there and adds
nothing. So a dead letter is neither lost nor copied twice. The DLQ is an ordinary queue in
BullMQ's layout; its jobs wait there, and Node BullMQ or bull-board read them as any other.
"""

from __future__ import annotations

import logging
from typing import Any

from corral import _codec, _scripts, clock
from corral._sync._queue_base import QueueBase
from corral._sync._redis import Connectable
from corral._sync.queue import Queue
from corral._keys import DEFAULT_PREFIX
from corral.dead_letter import (
    REPLAYED_FIELD,
    DeadLetter,
    Record,
    Replay,
    dead_letter_id,
    envelope,
    job_name,
    replay_data,
    replay_opts,
)
from corral.dedup import NO_DEDUP_ARGS
from corral.errors import InvalidOptionError, JobNotFoundError

logger = logging.getLogger("corral.dead_letter")

_NOTE_REPLAY = _scripts.load("note_replay")

#: How long a copy's idempotency record stays (seconds): a copy sent again within it adds
#: nothing even if the DLQ job was purged meanwhile (its record was left by a copier that died
#: between the add and the delete; any worker of the queue sends it again within seconds).
COPY_WINDOW_S = 3600
#: The same for a replay sent again before it could record its link (seconds).
REPLAY_WINDOW_MS = 24 * 3600 * 1000
#: Every state a DLQ job may be in (a worker may run a DLQ too), in get_jobs order.
STATES = ("waiting", "prioritized", "delayed", "active", "waiting-children", "completed", "failed")
#: DLQ jobs read per call.
PAGE = 500
#: Pending records read (and sorted) at a time by the copier.
COPY_BATCH = 1000


class DeadLetterCopier:
    """Copies the pending dead letters of one queue into their dead-letter queues."""

    def __init__(self, queue: QueueBase) -> None:
        self._queue = queue
        self._targets: dict[str, Queue] = {}

    def copy(self) -> int:
        """Copy every pending dead letter of the queue; return how many were copied.

        A record that cannot be read or added (not what the scripts write, a DLQ name that
        is not one) is logged and left where it is: nothing is deleted that was not copied.

        Raises:
            redis errors: the server could not be reached; what was not copied stays
                pending, for the next call.
        """
        queue = self._queue
        client = queue.client()
        key = queue.keys.dead_letters
        copied = 0
        while True:
            batch = self._batch(client, key)
            done = 0
            # In the order they failed (the records' numbers), so the DLQ lists them so.
            for number, raw in sorted(batch, key=lambda item: int(item[0])):
                done += self._copy_one(client, key, number, raw)
            copied += done
            if len(batch) < COPY_BATCH or not done:  # all there was, or only bad records
                return copied

    @staticmethod
    def _batch(client: Any, key: str) -> list[tuple[str, str]]:
        """Up to :data:`COPY_BATCH` pending records (HSCAN: no call holds the server)."""
        batch: list[tuple[str, str]] = []
        cursor = 0
        while True:
            cursor, page = client.hscan(key, cursor, count=100)
            batch += [
                (_codec.text(k), _codec.text(v))
                for k, v in page.items()
                if _codec.text(k).isdigit()  # not the numbering counter "#"
            ]
            if not cursor or len(batch) >= COPY_BATCH:
                return batch

    def _copy_one(self, client: Any, key: str, number: str, raw: str) -> int:
        queue = self._queue
        try:
            record = Record.parse(number, raw)
            target = self._target(record.target, client)
            dl_id = dead_letter_id(queue.name, number)
            target.add(
                job_name(record.fields.get("name", "")),
                envelope(queue.name, queue.prefix, record),
                job_id=dl_id,
                idempotency_key=f"dead-letter:{dl_id}",
                idempotency_window=COPY_WINDOW_S,
            )
        except (ValueError, TypeError, KeyError) as exc:  # InvalidOptionError included
            logger.error(
                "queue %s: dead letter %s not copied (%s); it stays in %s",
                queue.name,
                number,
                exc,
                key,
            )
            return 0
        # Only now: a copier that dies before this leaves the record, to be copied again.
        client.hdel(key, number)
        logger.info(
            "queue %s: job %s dead-lettered to %s as %s",
            queue.name,
            record.job_id,
            record.target,
            dl_id,
        )
        return 1

    def close(self) -> None:
        """Close the DLQ queues it opened (on the queue's client, which stays open)."""
        targets, self._targets = list(self._targets.values()), {}
        for target in targets:
            target.close()

    def _target(self, name: str, client: Any) -> Queue:
        target = self._targets.get(name)
        if target is None:
            # No resend machinery: the copy is idempotent by its id, and sent again at the
            # next sweep after an error.
            target = Queue(name, connection=client, prefix=self._queue.prefix, add_retries=0)
            self._targets[name] = target
        return target


def copy_dead_letters(queue: QueueBase) -> int:
    """Copy the pending dead letters of ``queue`` into their DLQs now (what a worker does at
    start, after a final failure and every ``stalled_interval``); return how many."""
    copier = DeadLetterCopier(queue)
    try:
        return copier.copy()
    finally:
        copier.close()


class DeadLetterQueue:
    """A dead-letter queue: list its dead letters, replay them into the queues they failed
    in, purge it.

    Args:
        name: the DLQ's name (what ``dead_letter_queue=`` named).
        connection: as for :class:`Queue`.
        prefix: the key prefix of the DLQ and of the queues its dead letters came from.

    Example::

        with DeadLetterQueue("orders-dead") as dlq:
            for letter in dlq.get_dead_letters():
                print(letter.queue, letter.job_id, letter.failed_reason)
            dlq.replay_all()
    """

    def __init__(
        self, name: str, *, connection: Connectable = None, prefix: str = DEFAULT_PREFIX
    ) -> None:
        self.queue = Queue(name, connection=connection, prefix=prefix)
        self.name = self.queue.name
        self.prefix = self.queue.prefix
        self._origins: dict[str, Queue] = {}

    def _read(self, ids: list[str]) -> list[DeadLetter]:
        client = self.queue.client()
        with client.pipeline(transaction=False) as pipe:
            for job_id in ids:
                pipe.hmget(self.queue.keys.job(job_id), "data", REPLAYED_FIELD)
            rows = pipe.execute()
        letters = []
        for job_id, (data, replayed) in zip(ids, rows, strict=True):
            if data is None:
                continue  # removed meanwhile
            try:
                letters.append(DeadLetter.from_job(job_id, _codec.loads(data), replayed))
            except (ValueError, TypeError):
                continue  # a job someone added to the DLQ by hand: not a dead letter
        return letters

    def get_dead_letter(self, job_id: str) -> DeadLetter | None:
        """The dead letter with this DLQ job id, or ``None`` when there is none.

        Raises:
            InvalidOptionError: the job is not a dead letter (added to the DLQ some other way).
        """
        job = self.queue.get_job(job_id)
        if job is None:
            return None
        client = self.queue.client()
        replayed = client.hget(self.queue.keys.job(job_id), REPLAYED_FIELD)
        return DeadLetter.from_job(
            job_id, job.data, None if replayed is None else _codec.text(replayed)
        )

    def get_dead_letters(self, start: int = 0, end: int = -1) -> list[DeadLetter]:
        """The DLQ's dead letters, oldest first, ``[start, end]`` as for ``get_jobs``."""
        jobs = self.queue.get_jobs(STATES, start, end, asc=True)
        return self._read([job.id for job in jobs])

    def _all_ids(self) -> list[str]:
        ids: list[str] = []
        while True:
            page = self.queue.get_jobs(STATES, len(ids), len(ids) + PAGE - 1, asc=True)
            ids += [job.id for job in page]
            if len(page) < PAGE:
                return ids

    def count(self) -> int:
        """How many jobs the DLQ holds, in every state."""
        counts = self.queue.get_job_counts(*STATES)
        return sum(counts.values())

    def _origin(self, name: str) -> Queue:
        origin = self._origins.get(name)
        if origin is None:
            # On the DLQ's client: one connection for the DLQ and every queue it replays to.
            client = self.queue.client()
            origin = Queue(name, connection=client, prefix=self.prefix)
            self._origins[name] = origin
        return origin

    def replay(self, job_id: str) -> Replay:
        """Add the dead letter ``job_id`` back to the queue it failed in, as a new job, and
        record the link both ways: the new job's opts ``x-replay-of`` names the DLQ job, and
        the DLQ job's ``x-replayed`` field (and a log line) names the new job.

        A dead letter is replayed once: replaying it again returns the first replay
        (``already=True``). The new job has the first run's data, name and options (attempts,
        backoff, retention, timeouts, its dead-letter queue), but a new id and none of its
        id, delay, flow parent, scheduler or deduplication id (see docs/observability.md,
        "Dead-letter queues").

        Raises:
            JobNotFoundError: no job ``job_id`` in the DLQ.
            InvalidOptionError: the job is not a dead letter.
        """
        letter = self.get_dead_letter(job_id)
        if letter is None:
            raise JobNotFoundError(
                f"no job {job_id} in dead-letter queue {self.name}", queue=self.name, job_id=job_id
            )
        if letter.replayed_as is not None:
            return Replay(job_id, letter.queue, letter.replayed_as, already=True)
        origin = self._origin(letter.queue)
        opts = replay_opts(letter, self.name)
        priority = opts.get("priority")
        args: list[Any] = [
            origin._job_prefix,
            "",
            job_name(letter.name),
            replay_data(letter),
            _codec.dumps(opts),
            clock.now_ms(),
            0,
            priority if isinstance(priority, int) and priority > 0 else 0,
            "1" if opts.get("lifo") is True else "0",
            "",
            "",
            "0",
            *NO_DEDUP_ARGS,
            # Sent again after a crash before the link below: the same job, not a second.
            f"replay:{self.name}:{job_id}"[:512],
            REPLAY_WINDOW_MS,
        ]
        reply, _ = origin._send_add(_scripts.ADD_JOB, lambda call: [*args, *call])
        new_id = _codec.text(reply[0])
        line = f"replayed as job {new_id} of queue {letter.queue}"
        self.queue._run(_NOTE_REPLAY, [self.queue._job_prefix, job_id, new_id, line])
        logger.info("dead-letter queue %s: %s %s", self.name, job_id, line)
        return Replay(job_id, letter.queue, new_id, already=False)

    def replay_all(self) -> list[Replay]:
        """:meth:`replay` every dead letter of the DLQ (those replayed before come back with
        ``already=True``); jobs that are not dead letters are left alone."""
        done = []
        for job_id in self._all_ids():
            try:
                done.append(self.replay(job_id))
            except (JobNotFoundError, InvalidOptionError):
                continue  # removed meanwhile, or not a dead letter
        return done

    def purge(self, *, replayed_only: bool = False) -> int:
        """Delete the DLQ's jobs (only those replayed, with ``replayed_only``); return how
        many went.

        Raises:
            QueueBusyError: a worker runs jobs of the DLQ (all of them: nothing was deleted).
        """
        if not replayed_only:
            count = self.count()
            self.queue.obliterate()
            return count
        removed = 0
        for letter in self._read(self._all_ids()):
            if letter.replayed_as is not None and self.queue.remove(letter.id):
                removed += 1
        return removed

    def close(self) -> None:
        for origin in self._origins.values():
            origin.close()
        self.queue.close()

    def __enter__(self) -> DeadLetterQueue:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
