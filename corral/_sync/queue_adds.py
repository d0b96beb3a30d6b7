# Generated from corral/_async/queue_adds.py by scripts/unasync.py: do not edit.
"""Adding one job: validating it into add_job.lua's ARGV, sending the call (resent after a
transient error, never creating a second job) and reading what it answered.

:class:`~corral._sync.queue.Queue` sets the attributes declared here in its
``__init__`` and builds ``add_bulk`` (and flows build their calls) on these methods.
"""

from __future__ import annotations

import logging
from time import sleep
from collections.abc import Callable, Mapping
from typing import Any

from typing_extensions import Unpack

from corral import _codec, _scripts, _telemetry, options
from corral._adds import AddCalls, add_retry_delay, may_resend
from corral._sync._redis import check_same_slot
from corral._sync.job import Job
from corral._sync.queue_repeatable import add_repeatable
from corral._sync.queue_schedulers import QueueSchedulers
from corral._durable import Durability, check_acknowledged
from corral._provenance import PROVENANCE_KEY, active_trace_carrier, stamp
from corral._supervisor import Outage
from corral.bounds import MAX_TIMESTAMP_MS
from corral.clock import now_ms
from corral.errors import InvalidOptionError, ParentNotFoundError
from corral.options import JobOptions, JobOptionsDict

logger = logging.getLogger("corral.queue")


class QueueAdds(QueueSchedulers):
    """``add`` and the machinery every add shares (see the module's docstring)."""

    add_retries: int
    backoff_types: frozenset[str]
    default_job_options: JobOptionsDict
    durability: Durability
    _adds: AddCalls
    _add_outage: Outage
    _telemetry: _telemetry.Hooks | None
    #: The options of an add that gives none (the queue's defaults), and their opts JSON.
    _plain: JobOptions
    _plain_opts_json: str

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
        prov = stamp(self.name)  # None outside any corral.provenance() scope
        if prov is not None and tm is None:
            tm = active_trace_carrier()
        plain = opts is self._plain and tm is None and prov is None
        opts_json = self._plain_opts_json if plain else None
        if opts_json is None:
            stored = opts.to_opts(0 if opts is self._plain else ts)
            if tm is not None:
                stored["tm"] = tm
            if prov is not None:
                stored[PROVENANCE_KEY] = prov
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

    def _added(self, args: list[Any], reply: list[Any]) -> Job:
        job = Job(
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

    def add(
        self,
        name: str,
        data: Any = None,
        *,
        durable: bool | None = None,
        **options: Unpack[JobOptionsDict],
    ) -> Job:
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

        ``repeat={"pattern": "0 * * * *"}`` (or ``{"every": seconds}``, with ``tz``, ``limit``,
        ``start_date``, ``end_date``, ``immediately``, ``key``) makes a job scheduler of this
        job instead and returns its first run: see ``corral.repeat.parse_repeat`` and
        docs/schedulers.md, "Repeatable jobs from older BullMQ".

        Raises:
            InvalidOptionError: an option or the data was refused; nothing was written.
            ParentNotFoundError: the parent does not exist; nothing was written.
            NotDurableError: durable, and too few replicas acknowledged the job in
                ``durable_timeout``; it was written to the master (``.jobs``).
            redis.exceptions.ConnectionError, OutOfMemoryError, ...: the server could not be
                reached (or refused) after ``add_retries`` resends; the job may have been
                created if the last error was a lost connection.
        """
        if "repeat" in options:
            return add_repeatable(self, name, data, options)
        if self._telemetry is None:
            return self._add(name, data, durable, options)
        with self._telemetry.adding(self.name, name) as span:
            job = self._add(name, data, durable, options, span.carrier)
            span.added([job.id])
            return job

    def _add(
        self,
        name: str,
        data: Any,
        durable: bool | None,
        options: Mapping[str, Any],
        tm: str | None = None,
    ) -> Job:
        wait = self.durability.wait(durable)
        args = self._prepare(name, data, options, tm=tm)
        if args[9]:
            check_same_slot(self.client(), [args[9]], "parent")
        reply, acked = self._send_add(_scripts.ADD_JOB, lambda call: [*args, *call], wait)
        if isinstance(reply, int):
            raise missing_parent(args[9])
        job = self._result(args, reply)
        if wait is not None:
            check_acknowledged([job], acked, wait)
        return job

    def _send_add(
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
                answer = self._run(script, build([calls.producer, number, *done]), wait)
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
                sleep(add_retry_delay(retries))
                continue
            if retries:
                self._add_outage.succeeded()
            if isinstance(number, int):
                if _refused(reply):  # a refused call writes nothing: it forgot nothing
                    calls.not_forgotten(done)
                elif _created_any(reply):
                    calls.heard(number, resent=retries > 0)
            if not _refused(reply):
                self._stamp_meta()
            return reply, acked

    def _result(self, args: list[Any], reply: list[Any]) -> Job:
        """The job an add answered with: the new one, or the one that made it a no-op."""
        code = int(reply[1])
        if code == 1:
            return self._added(args, reply)
        job_id = _codec.text(reply[0])
        existing = self.get_job(job_id)
        if existing is not None:
            return existing
        if code == 2:
            # An idempotency key within its window whose first job is gone: its record tells
            # what became of it.
            state, value, name = (_codec.text(v) for v in reply[2:5])
            job = Job(queue_name=self.name, id=job_id, name=name, data=None)
            if state == "completed":
                job.returnvalue = _codec.loads(value)
            elif state == "failed":
                job.failed_reason = value
            job.queue = self
            return job
        return self._added(args, reply)


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
