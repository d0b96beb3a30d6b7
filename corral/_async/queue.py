"""``AsyncQueue``: add jobs and read a queue's state (BullMQ's ``Queue``)."""

from __future__ import annotations

import logging
from asyncio import sleep
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any

from typing_extensions import Unpack

from corral import _bulk, _codec, _scripts, _telemetry, options
from corral._adds import MAX_ADD_RETRIES, AddCalls, add_retry_delay, may_resend
from corral._async._redis import Connectable, check_same_slot
from corral._async.job import AsyncJob
from corral._async.job_data import DEFAULT_MAX_LOG_LINE_BYTES, DEFAULT_MAX_PROGRESS_BYTES
from corral._async.queue_schedulers import AsyncQueueSchedulers
from corral._durable import Durability, check_acknowledged
from corral._keys import DEFAULT_PREFIX
from corral._supervisor import Outage
from corral.bounds import MAX_TIMESTAMP_MS, check_text
from corral.clock import now_ms
from corral.errors import (
    InvalidOptionError,
    JobNotFoundError,
    ParentNotFoundError,
)
from corral.options import Duration, JobOptions, JobOptionsDict

#: ``add_bulk`` items: ``(name, data)`` or ``(name, data, options)``.
BulkItem = tuple[str, Any] | tuple[str, Any, Mapping[str, Any]]

logger = logging.getLogger("corral.queue")


class AsyncQueue(AsyncQueueSchedulers):
    """A queue in BullMQ 6.x's layout, for asyncio code.

    Args:
        name: the queue's name (no ``:``).
        connection: a URL, a redis-py asyncio client made with ``decode_responses=True``, or
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

    def _prepare(
        self,
        name: str,
        data: Any,
        given: Mapping[str, Any],
        *,
        job_id: str | None = None,
        wait_children: bool = False,
        tm: str | None = None,
    ) -> list[Any]:
        """Validate one job and give the ARGV of add_job.lua; raises before any I/O.

        ``job_id`` is an id chosen by the caller that is not stored in opts (a flow's UUIDs);
        ``wait_children`` parks the job in waiting-children (a flow parent); ``tm`` is the
        trace context it carries (``opts.tm``, where Node's bullmq-otel has it).
        """
        options.check_name("job name", name)
        if given:
            opts = JobOptions.build(
                given, defaults=self.default_job_options, backoff_types=self.backoff_types
            )
        else:
            opts = self._plain
        if opts.dead_letter_queue is not None:
            options.check_dead_letter_queue(opts.dead_letter_queue, self.name)
        if opts.parent is not None:
            options.check_parent(opts.parent, self.prefix)
            if opts.job_id == opts.parent["id"] and opts.parent["queue"] == self.keys.base:
                raise InvalidOptionError(
                    f"job id {opts.job_id!r} is the id of its parent; a job cannot be its own child"
                )
        encoded = _codec.encode_data(data)
        opts.check_size(encoded)
        ts = opts.timestamp if opts.timestamp is not None else now_ms()
        if ts + opts.delay_ms > MAX_TIMESTAMP_MS:
            raise InvalidOptionError(
                f"delay must end before {MAX_TIMESTAMP_MS} (epoch ms, 2039-09-07: a delayed job's "
                f"score must be exact), got a run time of {ts + opts.delay_ms}"
            )
        parent = opts.parent_field()
        opts_json = self._plain_opts_json if opts is self._plain and tm is None else None
        if opts_json is None:
            stored = opts.to_opts(0 if opts is self._plain else ts)
            if tm is not None:
                stored["tm"] = tm
            opts_json = _codec.dumps(stored)
        return [
            self._job_prefix,
            opts.job_id or job_id or "",
            name,
            encoded,
            opts_json,
            ts,
            opts.delay_ms,
            opts.priority,
            "1" if opts.lifo else "0",
            opts.parent_key,
            "" if parent is None else _codec.dumps(parent),
            "1" if wait_children else "0",
            *opts.dedup_args(),
        ]

    def _added(self, args: list[Any], reply: list[Any]) -> AsyncJob:
        job = AsyncJob(
            queue_name=self.name,
            id=_codec.text(reply[0]),
            name=args[2],
            data=_codec.loads(args[3]),
            opts=_codec.loads(args[4]),
            timestamp=args[5],
            delay=args[6],
            priority=args[7],
            parent_key=args[9] or None,
            parent=_codec.loads(args[10]),
        )
        job.queue = self
        return job

    async def add(
        self,
        name: str,
        data: Any = None,
        *,
        durable: bool | None = None,
        **options: Unpack[JobOptionsDict],
    ) -> AsyncJob:
        """Add a job and return it.

        Options (all keyword): ``job_id``, ``delay`` (seconds or ``timedelta``), ``priority``
        (1..2,097,151, lower first; jobs without one run first), ``lifo``, ``attempts``,
        ``backoff`` (seconds, :class:`~corral.options.Backoff` or a dict), ``remove_on_complete``
        / ``remove_on_fail`` (``True``, a count, or ``{"age": s, "count": n}``), ``keep_logs``,
        ``stacktrace_limit``, ``size_limit`` (bytes of JSON data), ``timestamp`` (epoch ms).

        Flows: ``parent={"id": ..., "queue": "<prefix>:<queue>"}`` makes the job a child of an
        existing job (in any queue of the prefix; ``job.queue_qualified_name`` gives the
        queue part), which then waits for it; ``fail_parent_on_failure``,
        ``continue_parent_on_failure``, ``ignore_dependency_on_failure`` or
        ``remove_dependency_on_failure`` (at most one) says what the child's final failure
        does to the parent (see ``docs/flows.md``).

        Adding a ``job_id`` that exists already writes nothing (a ``duplicated`` event) and
        returns the existing job, as BullMQ does. A call that fails on the way is sent again
        (see ``add_retries``); a resend never creates a second job.

        ``durable=True`` (the queue's ``durable`` by default) returns only once
        ``durable_replicas`` replicas have the job (``WAIT``), so that a failover cannot lose
        it (see docs/deployment.md, "Durability").

        Raises:
            InvalidOptionError: an option or the data was refused; nothing was written.
            ParentNotFoundError: the parent does not exist; nothing was written.
            NotDurableError: durable, and too few replicas acknowledged the job in
                ``durable_timeout``; it was written to the master (``.jobs``).
            redis.exceptions.ConnectionError, OutOfMemoryError, ...: the server could not be
                reached (or refused) after ``add_retries`` resends; the job may have been
                created if the last error was a lost connection.
        """
        if self._telemetry is None:
            return await self._add(name, data, durable, options)
        with self._telemetry.adding(self.name, name) as span:
            job = await self._add(name, data, durable, options, span.carrier)
            span.added([job.id])
            return job

    async def _add(
        self,
        name: str,
        data: Any,
        durable: bool | None,
        options: Mapping[str, Any],
        tm: str | None = None,
    ) -> AsyncJob:
        wait = self.durability.wait(durable)
        args = self._prepare(name, data, options, tm=tm)
        if args[9]:
            check_same_slot(await self.client(), [args[9]], "parent")
        reply, acked = await self._send_add(_scripts.ADD_JOB, lambda call: [*args, *call], wait)
        if isinstance(reply, int):
            raise missing_parent(args[9])
        job = await self._result(args, reply)
        if wait is not None:
            check_acknowledged([job], acked, wait)
        return job

    async def _send_add(
        self,
        script: _scripts.Script,
        build: Callable[[list[Any]], Any],
        wait: tuple[int, int] | None = None,
    ) -> tuple[Any, int]:
        """Run an add script (``build`` makes its ARGV from the call's four numbering values),
        sending it again after a transient error, at most ``add_retries`` times. The answer
        is the script's reply and, with ``wait``, how many replicas acknowledged it (else 0).

        The first send may have landed although its reply was lost: the call's number makes
        the server answer a resend with what the first send created (include/resend.lua).
        """
        calls = self._adds
        number = calls.number() if calls.producer else ""
        retries = 0
        while True:
            done = calls.to_forget()
            try:
                answer = await self._run(script, build([calls.producer, number, *done]), wait)
                reply, acked = answer if wait is not None else (answer, 0)
            except Exception as exc:
                calls.not_forgotten(done)
                if not may_resend(exc, retries, self.add_retries):
                    if retries:
                        logger.warning(
                            "queue %s: add not sent after %d retries: %s", self.name, retries, exc
                        )
                    raise
                retries += 1
                self._add_outage.failed("add", exc)
                await sleep(add_retry_delay(retries))
                continue
            if retries:
                self._add_outage.succeeded()
            if isinstance(number, int):
                if _refused(reply):  # a refused call writes nothing: it forgot nothing
                    calls.not_forgotten(done)
                elif _created_any(reply):
                    calls.heard(number, resent=retries > 0)
            return reply, acked

    async def _result(self, args: list[Any], reply: list[Any]) -> AsyncJob:
        """The job an add answered with: the new one, or the one that made it a no-op."""
        code = int(reply[1])
        if code == 1:
            return self._added(args, reply)
        job_id = _codec.text(reply[0])
        existing = await self.get_job(job_id)
        if existing is not None:
            return existing
        if code == 2:
            # An idempotency key within its window whose first job is gone: its record tells
            # what became of it.
            state, value, name = (_codec.text(v) for v in reply[2:5])
            job = AsyncJob(queue_name=self.name, id=job_id, name=name, data=None)
            if state == "completed":
                job.returnvalue = _codec.loads(value)
            elif state == "failed":
                job.failed_reason = value
            job.queue = self
            return job
        return self._added(args, reply)

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


def _refused(reply: Any) -> bool:
    """Whether an add_job / add_jobs reply is a refusal (-7: a parent is missing)."""
    return isinstance(reply, int) or bool(reply and reply[0] == -7)


def _created_any(reply: Any) -> bool:
    """Whether an add_job / add_jobs reply says jobs were created (the server kept it)."""
    if not reply:
        return False
    if isinstance(reply[0], list):
        return any(item[1] == 1 for item in reply)
    return bool(reply[1] == 1)


def missing_parent(parent_key: str) -> ParentNotFoundError:
    """The error for a parent key that does not exist ("bull:pq:<id>")."""
    queue_key, _, parent_id = parent_key.rpartition(":")
    return ParentNotFoundError(
        f"parent job {parent_key} does not exist (missing key for parent job)",
        queue=queue_key.rpartition(":")[2],
        job_id=parent_id,
    )
