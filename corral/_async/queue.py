"""``AsyncQueue``: add jobs and read a queue's state (BullMQ's ``Queue``)."""

from __future__ import annotations

import logging
from asyncio import sleep
from collections.abc import Collection, Iterable, Mapping
from typing import Any

from corral import _bulk, _codec, _scripts, _telemetry, options
from corral._adds import MAX_ADD_RETRIES, AddCalls, add_retry_delay, may_resend
from corral._async._redis import Connectable, check_same_slot
from corral._async.job import AsyncJob
from corral._async.job_data import DEFAULT_MAX_LOG_LINE_BYTES, DEFAULT_MAX_PROGRESS_BYTES
from corral._async.queue_adds import AsyncQueueAdds, missing_parent
from corral._async.queue_repeatable import AsyncQueueRepeatable
from corral._async.queue_signal import AsyncQueueSignals
from corral._async.queue_stream import AsyncQueueStreamMixin
from corral._durable import Durability, check_acknowledged
from corral._keys import DEFAULT_PREFIX
from corral._supervisor import Outage
from corral.bounds import check_text
from corral.errors import (
    InvalidOptionError,
    JobNotFoundError,
)
from corral.options import Duration, JobOptions, JobOptionsDict

#: ``add_bulk`` items: ``(name, data)`` or ``(name, data, options)``.
BulkItem = tuple[str, Any] | tuple[str, Any, Mapping[str, Any]]

logger = logging.getLogger("corral.queue")


class AsyncQueue(AsyncQueueAdds, AsyncQueueRepeatable, AsyncQueueStreamMixin, AsyncQueueSignals):
    """A queue in BullMQ 6.x's layout.

    Args:
        name: the queue's name (no ``:``).
        connection: a URL, a redis-py client made with ``decode_responses=True``, or
            ``None`` for ``CORRAL_REDIS_URL`` / ``REDIS_URL`` / the embedded server.
        prefix: key prefix, ``bull`` by default (what Node BullMQ and bull-board read).
        default_job_options: options applied to every job unless ``add`` says otherwise.
        backoff_types: names of custom backoff strategies the workers register.
        strict: refuse, rather than warn about, a server whose maxmemory-policy evicts keys.
        add_retries: how often ``add`` and ``add_bulk`` send a call again after a transient
            error (a dropped connection, a server restarting or failing over, ``OOM``,
            ``BUSY``), waiting 50 ms doubling to 1 s between tries; 20 by default (about 10
            to 20 s of outage), at most 100, 0 to raise at once. Each call is numbered, so a
            call sent again after its first send did land returns that send's jobs and
            creates nothing.
        max_progress_bytes: the largest progress ``job.update_progress`` stores, in bytes of
            JSON (64 KiB by default, at most 512 MiB): each update is also copied into the
            events stream.
        max_log_line_bytes: the longest line ``job.log`` stores, in bytes of UTF-8 (64 KiB by
            default, at most 512 MiB).
        durable: every add waits until ``durable_replicas`` replicas of the server have the
            job (``WAIT``), up to ``durable_timeout`` seconds (1 by default), and raises
            ``NotDurableError`` when they do not: what an asynchronous failover can lose is
            then only adds that raised (see docs/deployment.md, "Durability"). ``add`` and
            ``add_bulk`` take ``durable=`` for one call.
        dead_letter_queue: the default ``dead_letter_queue`` of the jobs this queue adds (a
            job's own option wins): a job that fails for good is also copied, with its whole
            history, to that queue (same prefix); see docs/observability.md, "Dead-letter
            queues".
        telemetry: a :class:`corral.otel.Telemetry` (or ``True`` for one on the global
            providers): a PRODUCER span per add, whose context the job carries to the worker
            (see docs/observability.md, "OpenTelemetry"). Off by default.

    Example::

        async with AsyncQueue("emails", default_job_options={"attempts": 3}) as queue:
            job = await queue.add("welcome", {"to": "ada@example.com"})
    """

    def __init__(
        self,
        name: str,
        *,
        connection: Connectable = None,
        prefix: str = DEFAULT_PREFIX,
        default_job_options: JobOptionsDict | None = None,
        backoff_types: Collection[str] = (),
        strict: bool = False,
        add_retries: int = 20,
        max_progress_bytes: int = DEFAULT_MAX_PROGRESS_BYTES,
        max_log_line_bytes: int = DEFAULT_MAX_LOG_LINE_BYTES,
        durable: bool = False,
        durable_replicas: int = 1,
        durable_timeout: Duration = 1.0,
        dead_letter_queue: str | None = None,
        telemetry: _telemetry.Hooks | bool | None = None,
    ) -> None:
        super().__init__(name, connection=connection, prefix=prefix, strict=strict)
        self._telemetry = _telemetry.resolve(telemetry)
        self.durability = Durability.build(durable, durable_replicas, durable_timeout)
        self.max_progress_bytes = max_progress_bytes
        self.max_log_line_bytes = max_log_line_bytes
        self.add_retries = options.int_option("add_retries", add_retries, 0, MAX_ADD_RETRIES)
        self._adds = AddCalls(enabled=self.add_retries > 0)
        self._add_outage = Outage(f"queue {name}", logger)
        if isinstance(backoff_types, (str, bytes)) or not isinstance(backoff_types, Collection):
            raise InvalidOptionError(
                f"backoff_types must be names of strategies, got {type(backoff_types).__name__}"
            )
        self.backoff_types = frozenset(
            check_text("backoff_types item", name) for name in backoff_types
        )
        self.default_job_options: JobOptionsDict = dict(default_job_options or {})  # type: ignore[assignment]
        if dead_letter_queue is not None:
            self.default_job_options["dead_letter_queue"] = options.check_dead_letter_queue(
                dead_letter_queue, name
            )
        # Checked now, so a bad default fails at construction rather than at the first add;
        # kept, with its opts JSON, for the common add that gives no options of its own.
        self._plain = JobOptions.build(
            {}, defaults=self.default_job_options, backoff_types=self.backoff_types
        )
        self._plain_opts_json = _codec.dumps(self._plain.to_opts(0))

    async def add_bulk(
        self, jobs: Iterable[BulkItem], *, durable: bool | None = None
    ) -> list[AsyncJob]:
        """Add many jobs, in order. Every item is validated first; then they are written in
        script calls of at most 300 jobs and 1 MiB of values (a bigger job goes alone), so
        that no call holds the server for long (3 to 20 ms each; a worker, or any client, is
        served between two calls).

        What stays atomic: each call, which is all or nothing and resent like :meth:`add`
        (a resend never writes a call twice), so a bulk that fits in one call is all or
        nothing. A bigger one is not: other clients see its first jobs (a worker may run
        them) before the last are added, and a call that fails for good after earlier ones
        were written raises :class:`~corral.errors.BulkAddError`, which says how far it got
        (a bulk cancelled part-way, as its task can be, leaves its earlier calls written
        too). The refusals below are found before anything is written.

        An item may name as ``parent`` a job added by an earlier item (in the same call or an
        earlier one). Parents that no item adds are checked before the first call; one
        removed after that check, before its child's call runs, stops the bulk there (that
        call writes nothing): ``BulkAddError`` with a ``ParentNotFoundError`` as cause, or
        the plain ``ParentNotFoundError`` when it was the first call.

        Args:
            jobs: ``(name, data)`` pairs or ``(name, data, options)`` triples, where options is a
                dict of :meth:`add`'s keyword options.

        Returns:
            One job per item, in order. As with :meth:`add`, a duplicate ``job_id`` or a
            deduplicated add gives the existing job. An item whose job a later item of the
            bulk replaced (debounce: ``deduplication`` with ``replace=True`` and a ``delay``)
            gives the job that replaced it, which holds the deduplication id in the end: no
            job in the list was deleted by the bulk itself.

        Raises:
            InvalidOptionError: naming the index of the first bad item; nothing was written.
            ParentNotFoundError: an item's parent does not exist (and is not added by an
                earlier item); nothing was written.
            BulkAddError: a call failed for good (a non-transient error, or ``add_retries``
                resends that failed) after earlier ones were written: ``.jobs`` are the jobs
                of the items before ``.index``, and ``add_bulk(items[exc.index:])`` adds the
                rest (when the cause is a lost connection, the call at ``.index`` may have
                been written: see :class:`~corral.errors.BulkAddError`).
            redis.exceptions.ConnectionError, OutOfMemoryError, ...: the first call failed for
                good, as for :meth:`add`: nothing was written, unless the connection was lost.
        """
        if self._telemetry is None:
            return await self._add_bulk(jobs, durable)
        items = list(jobs)
        names = [item[0] if isinstance(item, (tuple, list)) and item else "" for item in items]
        with self._telemetry.adding_bulk(self.name, [str(n) for n in names]) as span:
            added = await self._add_bulk(items, durable, span.carrier)
            span.added([job.id for job in added])
            return added

    async def _add_bulk(
        self, jobs: Iterable[BulkItem], durable: bool | None, tm: str | None = None
    ) -> list[AsyncJob]:
        wait = self.durability.wait(durable)
        chunker = _bulk.Chunker()
        prepared: list[list[Any]] = []
        for index, item in enumerate(jobs):
            try:
                name, data, given = _bulk.unpack_item(item)
                args = self._prepare(name, data, given, tm=tm)
            except InvalidOptionError as exc:
                raise InvalidOptionError(f"add_bulk item {index}: {exc}") from None
            prepared.append(args)
            # An item without options takes the queue's defaults: only what differs from the
            # call's shared group is sent.
            chunker.add(args, short=not given)
        if not prepared:
            return []
        if len(chunker.chunks) > 1:  # a single call checks its parents itself, atomically
            await self._check_parents(prepared)
        else:
            check_same_slot(await self.client(), external_parents(prepared), "parent")
        shared = self._prepare("shared", None, {}, tm=tm)[1:]
        added: list[AsyncJob] = []  # the items' jobs, as each call answers
        replaced = _bulk.Replacements(enabled=chunker.replaces)
        acked = self.durability.replicas  # the fewest replicas that acknowledged a call
        for chunk in chunker.chunks:
            try:
                replies, chunk_acked = await self._send_chunk(chunk, shared, wait)
                acked = min(acked, chunk_acked)
                if replies and replies[0] == -7:  # the call was refused: it wrote nothing
                    raise missing_parent(_codec.text(replies[1]))
            except Exception as exc:
                if not added:
                    raise
                raise _bulk.stopped(added, replaced, len(prepared), exc) from exc
            read_error: Exception | None = None
            for args, reply in zip(prepared[chunk.start : chunk.end], replies, strict=False):
                if reply[1] == -7:  # a parent to be added by an item before was not
                    error = missing_parent(_codec.text(reply[0]))
                    if not added:
                        raise error
                    raise _bulk.stopped(added, replaced, len(prepared), error) from error
                replaced.note(reply)
                if reply[1] == 1 or read_error is not None:
                    # A created job needs no read (nor does any once the server is away).
                    added.append(self._added(args, reply))
                    continue
                try:
                    added.append(await self._result(args, reply))
                except Exception as exc:
                    # The call was written: the rest of it still goes into .jobs below.
                    read_error = exc
                    added.append(self._added(args, reply))
            if read_error is not None:
                if chunk.end == len(prepared):
                    raise read_error  # all was written: as for a single call
                raise _bulk.stopped(added, replaced, len(prepared), read_error) from read_error
        result = (
            [added[replaced.final(i)] for i in range(len(added))] if replaced.enabled else added
        )
        if wait is not None:
            check_acknowledged(result, acked, wait)
        return result

    async def _send_chunk(
        self, chunk: _bulk.Chunk, shared: list[Any], wait: tuple[int, int] | None = None
    ) -> tuple[Any, int]:
        """One call of add_jobs.lua for the items of ``chunk``, numbered and resent as an add."""
        head = [self._job_prefix, chunk.count]
        return await self._send_add(
            _scripts.ADD_JOBS, lambda call: [*head, *call, *shared, *chunk.records], wait
        )

    async def _check_parents(self, prepared: list[list[Any]]) -> None:
        """Raise ``ParentNotFoundError`` for a parent that exists neither now nor as an earlier
        item of the bulk: before a bulk's first call, since a later call finds it too late
        to write nothing. Read again after a transient error, as an add is sent again."""
        parents = list(dict.fromkeys(external_parents(prepared)))
        check_same_slot(await self.client(), parents, "parent")
        retries = 0
        while parents:
            batch = parents[:1000]  # a pipeline of bounded size, however many parents
            try:
                client = await self.client()
                async with client.pipeline(transaction=False) as pipe:
                    for key in batch:
                        pipe.exists(key)
                    found = await pipe.execute()
            except Exception as exc:
                if not may_resend(exc, retries, self.add_retries):
                    raise
                retries += 1
                await sleep(add_retry_delay(retries))
                continue
            for key, exists in zip(batch, found, strict=True):
                if not exists:
                    raise missing_parent(key)
            parents = parents[1000:]

    async def get_deduplication_job_id(self, deduplication_id: str) -> str | None:
        """The id of the job that holds a deduplication id, or ``None`` when it is free."""
        check_text("deduplication id", deduplication_id)
        client = await self.client()
        job_id: str | None = await client.get(self.keys.key(f"de:{deduplication_id}"))  # type: ignore[assignment]
        return job_id

    async def remove_deduplication_key(self, deduplication_id: str) -> bool:
        """Free a deduplication id now (its ttl or job notwithstanding); ``False`` if free."""
        check_text("deduplication id", deduplication_id)
        client = await self.client()
        return bool(await client.delete(self.keys.key(f"de:{deduplication_id}")))

    async def remove(self, job_id: str, *, remove_children: bool = True) -> bool:
        """Remove a job (and, by default, its children); ``False`` when there is no such job.

        A big tree goes in chunks of bounded server time (see :meth:`AsyncJob.remove`).

        Raises:
            JobLockedError: the job (or one of its children) is active; nothing was removed
                (unless a job became active while a big tree was removed: the message says).
        """
        job = await self.get_job(job_id)
        if job is None:
            return False
        try:
            await job.remove(remove_children=remove_children)
        except JobNotFoundError:
            return False  # removed by someone else in the meantime
        return True

    async def close(self) -> None:
        """Close the client, unless it was given by the caller. The answers the server kept
        for this queue's adds (to answer a resend) are deleted: no resend can come now."""
        if self._adds.used and self._client is not None:
            try:
                client = await self.client()
                await client.delete(self.keys.key(f"x-add:{self._adds.producer}"))
            except Exception as exc:  # the server is away: they expire on their own
                logger.debug("queue %s: answers of adds not deleted: %s", self.name, exc)
        await super().close()

    async def __aenter__(self) -> AsyncQueue:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def external_parents(prepared: Iterable[list[Any]]) -> list[str]:
    """Parent keys named by add_job.lua ARGV lists that no earlier item creates itself."""
    created: set[str] = set()
    parents: list[str] = []
    for args in prepared:
        if args[9] and args[9] not in created:
            parents.append(args[9])
        if args[1]:
            created.add(args[0] + args[1])
    return parents
