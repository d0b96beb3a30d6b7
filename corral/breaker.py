"""Circuit breakers shared by every worker through Redis: :class:`Breaker`, and the worker's
side of the ``breakers=`` job option.

One small hash per breaker (``<prefix>:x-breaker:<name>``) holds its state; every transition
is one atomic script (``_lua/breaker_claim.lua``: may a caller go, and who probes;
``_lua/breaker_record.lua``: an outcome), so any number of processes share one breaker:

- *closed*: calls go; ``failures`` failures within ``window`` seconds open it;
- *open*: calls are refused (:class:`~corral.errors.BreakerOpen`) for ``cooldown`` seconds;
- *half-open*: exactly one caller at a time, the probe, goes (it holds the probe for
  ``probe_timeout`` seconds at most, so a probe that crashed does not wedge the breaker); its
  success closes the breaker, its failure opens it for another cooldown.

A job that names breakers (``queue.add(..., breakers=["payments"])``) is checked by the worker
before it runs: while one is open the job is delayed until its half-open time, without
running and without counting an attempt; half-open, only the job holding the probe runs.
Such a job's outcome is its breakers' outcome. A processor can instead wrap the call itself,
``async with breaker:`` (``with breaker:`` in a plain function), and a
:class:`~corral.errors.BreakerOpen` that escapes a processor delays its job the same way.

Every transition is one log line (logger ``corral.breaker``) and, when a job caused it, a
``breaker`` event on that job's queue (fields ``name``, ``state``, ``from``, ``jobId``,
``until``); :meth:`Breaker.state` reads a breaker, :class:`corral.prometheus.BreakerCollector`
exports it.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime, timezone
from types import TracebackType
from typing import TYPE_CHECKING, Any

import redis
import redis.asyncio

from corral import _scripts, _twins
from corral._async import _calls as async_calls
from corral._async import _redis as async_redis
from corral._breaker_state import (
    BREAKERS_KEY,
    MAX_FAILURES,
    BreakerState,
    check_breaker_name,
    check_count,
    check_seconds,
    read_state,
    stored_breakers,
)
from corral._keys import BREAKER_SUFFIX, breaker_key
from corral._sync import _calls as sync_calls
from corral._sync import _redis as sync_redis
from corral.clock import now_ms
from corral.errors import BreakerOpen, JobCancelledError, server_error_kind
from corral.options import check_prefix, exception_types

if TYPE_CHECKING:
    from corral._async.job import AsyncJob

__all__ = ["BREAKERS_KEY", "Breaker", "BreakerState", "JobBreakers", "job_breakers"]

logger = logging.getLogger("corral.breaker")

CLAIM = _scripts.load("breaker_claim")
RECORD = _scripts.load("breaker_record")


@dataclass(frozen=True, slots=True)
class _JobContext:
    """The job a worker runs in this context (set by the worker before its processor runs):
    transitions its calls cause are events on its queue, and the breakers the job named are
    the worker's to report (a ``with breaker:`` of one of those in its processor is let
    through unchecked, so that one failure does not count twice)."""

    prefix: str
    events: str
    meta: str
    job_id: str
    covered: frozenset[str]


_JOB: ContextVar[_JobContext | None] = ContextVar("corral_breaker_job", default=None)


@dataclass(slots=True)
class _Call:
    """One ``with breaker:`` block: the token its claim used and what the claim said."""

    breaker: Breaker
    token: str
    role: str  # breaker_claim.lua's role, or "covered": the worker reports the job's outcome
    job: _JobContext | None


_CALLS: ContextVar[tuple[_Call, ...]] = ContextVar("corral_breaker_calls", default=())


def _event_keys(prefix: str, job: _JobContext | None) -> list[str]:
    # Only a queue of the breaker's prefix: on Redis Cluster the prefix's hash tag is what
    # puts the breaker and the queue's stream in one slot.
    return [job.events, job.meta] if job is not None and job.prefix == prefix else []


def _clock(at_ms: int) -> str:
    return datetime.fromtimestamp(at_ms / 1000, timezone.utc).strftime("%H:%M:%S.%fZ")[:-4] + "Z"


def _by(job_id: str) -> str:
    return f"job {job_id}" if job_id else "a call"


def log_claim(names: Iterable[str], roles: Iterable[str], job_id: str) -> None:
    """One line per transition a claim made (its roles, see breaker_claim.lua)."""
    for name, role in zip(names, roles, strict=True):
        if role == "probe":
            logger.info("breaker %s: open -> half_open: %s probes", name, _by(job_id))
        elif role == "probe_again":
            logger.warning(
                "breaker %s: the last probe's lease passed (it crashed or hangs): %s probes",
                name,
                _by(job_id),
            )


def log_record(
    names: Iterable[str], changes: Iterable[str], job_id: str, settings: Mapping[str, int]
) -> None:
    """One line per transition a record made (its changes, see breaker_record.lua)."""
    for name, change in zip(names, changes, strict=True):
        if not change:
            continue
        cooldown = settings.get("cooldown")
        again = f"; half-open in {cooldown / 1000:g} s" if cooldown else ""
        if change == "closed>open":
            window = settings.get("window")
            within = f" within {window / 1000:g} s" if window else ""
            count = settings.get("failures")
            what = f"{count} failure{'s' * (count != 1)}{within}" if count else "failures"
            logger.warning("breaker %s: closed -> open: %s (%s)%s", name, what, _by(job_id), again)
        elif change == "half_open>open":
            logger.warning(
                "breaker %s: half_open -> open: the probe failed (%s)%s", name, _by(job_id), again
            )
        elif change == "half_open>closed":
            logger.info(
                "breaker %s: half_open -> closed: the probe succeeded (%s)", name, _by(job_id)
            )


def _refusal(names: list[str], reply: list[Any]) -> BreakerOpen:
    states = [str(s) for s in reply[2:]]
    index = next(i for i, s in enumerate(states) if s in ("open", "busy"))
    return BreakerOpen(names[index], state=states[index], retry_at_ms=int(reply[1]))


class Breaker:
    """A circuit breaker shared through Redis by every process that names it.

    Args:
        name: the breaker's name (no ``:``); jobs name it in ``breakers=[...]``.
        failures: this many failures within ``window`` open the breaker (1 to 1000).
        window: seconds over which failures are counted.
        cooldown: seconds the breaker stays open before one probe may go (half-open).
        probe_timeout: seconds a probe holds the half-open breaker at most: past that (it
            crashed, or hangs), the next caller probes instead.
        exceptions: what counts as a failure when it escapes a ``with`` block (every
            ``Exception`` by default); anything else, and ``ignore``, counts as a success (the
            downstream answered). A cancellation (``BaseException``) counts as nothing.
        ignore: exception types that never count as a failure (``ValueError``: a bad request
            is no sign that the downstream is down).
        connection: a ``redis://`` URL or a client (see ``Queue``); ``None``: the environment,
            else the embedded server.
        prefix: the key prefix: the breaker serves the jobs of the queues of this prefix.

    The settings are stored in the breaker's key at each use, so a worker that only checks
    jobs' ``breakers=`` goes by the settings of the last ``Breaker`` that used it.

    Example::

        payments = corral.Breaker("payments", failures=5, window=60, cooldown=30)

        async def charge(job):
            async with payments:        # BreakerOpen while open: the job waits, unburned
                return await provider.charge(job.data)
    """

    def __init__(
        self,
        name: str,
        *,
        failures: int = 5,
        window: float = 60,
        cooldown: float = 30,
        probe_timeout: float = 60,
        exceptions: type[BaseException] | Iterable[type[BaseException]] = Exception,
        ignore: type[BaseException] | Iterable[type[BaseException]] = (),
        connection: Any = None,
        prefix: str = "bull",
    ) -> None:
        self.name = check_breaker_name(name)
        self.failures = check_count("failures", failures, 1, MAX_FAILURES)
        self.window_ms = check_seconds("window", window)
        self.cooldown_ms = check_seconds("cooldown", cooldown)
        self.probe_timeout_ms = check_seconds("probe_timeout", probe_timeout)
        self.exceptions = exception_types("exceptions", exceptions)
        self.ignore = exception_types("ignore", ignore)
        self.prefix = check_prefix(prefix)
        self.key = breaker_key(self.prefix, self.name)
        self._slot_key = f"{self.prefix}:{BREAKER_SUFFIX}"
        if not isinstance(connection, redis.Redis):  # a blocking client is checked at use
            # A bad URL (or, on a cluster, a prefix without a hash tag) is refused here.
            connection = async_redis.check_connection(connection, slot_key=self._slot_key)
        self._connection = connection
        self._async: async_redis.LazyClient | None = None
        self._sync: sync_redis.LazyClient | None = None

    def __repr__(self) -> str:
        return f"Breaker({self.name!r}, prefix={self.prefix!r})"

    @property
    def settings(self) -> dict[str, int]:
        """The settings, as the scripts and the logs take them (ms)."""
        return {
            "failures": self.failures,
            "window": self.window_ms,
            "cooldown": self.cooldown_ms,
            "lease": self.probe_timeout_ms,
        }

    def _settings_args(self) -> list[Any]:
        return [self.failures, self.window_ms, self.cooldown_ms, self.probe_timeout_ms]

    # -- clients ---------------------------------------------------------------------------

    async def _client(self) -> redis.asyncio.Redis:
        if self._async is None:
            if isinstance(self._connection, redis.Redis):
                raise TypeError(
                    f"{self!r} was given a blocking client: use it with `with`, or give it a "
                    "URL or an asyncio client for `async with`"
                )
            self._async = async_redis.LazyClient(
                self._connection, slot_key=self._slot_key, owner="Breaker"
            )
        return await self._async.get()

    def _client_sync(self) -> redis.Redis:
        if self._sync is None:
            connection = self._connection
            if isinstance(connection, redis.asyncio.Redis):
                connection = _twins.sync_twin(connection)  # a twin for threads, ours to close
                self._sync = sync_redis.LazyClient(None, slot_key=self._slot_key, owner="Breaker")
                self._sync.current = connection
            else:
                self._sync = sync_redis.LazyClient(
                    connection, slot_key=self._slot_key, owner="Breaker"
                )
        return self._sync.get()

    async def close(self) -> None:
        """Close the clients the breaker opened (a given client stays open)."""
        if self._async is not None:
            await self._async.close()
        self.close_sync()

    def close_sync(self) -> None:
        """:meth:`close` from blocking code (the blocking client only)."""
        if self._sync is not None:
            self._sync.close()

    # -- reading -----------------------------------------------------------------------------

    async def state(self, *, now_ms: int | None = None) -> BreakerState:
        """The breaker's state now (or at ``now_ms``, epoch ms), read from Redis."""
        client = await self._client()
        fields: dict[str, str] = await client.hgetall(self.key)  # type: ignore[assignment]
        return read_state(self.name, fields, _now(now_ms), self.window_ms)

    def state_sync(self, *, now_ms: int | None = None) -> BreakerState:
        """:meth:`state` from blocking code."""
        fields: dict[str, str] = self._client_sync().hgetall(self.key)  # type: ignore[assignment]
        return read_state(self.name, fields, _now(now_ms), self.window_ms)

    async def reset(self) -> None:
        """Close the breaker by hand (forget its failures and any probe)."""
        client = await self._client()
        await client.delete(self.key)

    # -- the call ------------------------------------------------------------------------------

    def _begin(self) -> tuple[_Call, list[str], list[Any]] | _Call:
        job = _JOB.get()
        if job is not None and job.prefix == self.prefix and self.name in job.covered:
            return _Call(self, "", "covered", job)
        call = _Call(self, uuid.uuid4().hex, "", job)
        keys = [self.key, *_event_keys(self.prefix, job)]
        job_id = job.job_id if job is not None else ""
        return call, keys, [1, now_ms(), call.token, job_id, *self._settings_args()]

    def _admitted(self, call: _Call, reply: list[Any]) -> None:
        if int(reply[0]) != 1:
            raise _refusal([self.name], reply)
        call.role = str(reply[2])
        log_claim([self.name], [call.role], call.job.job_id if call.job else "")
        _CALLS.set((*_CALLS.get(), call))

    def _end(self, error: BaseException | None) -> tuple[_Call, str | None]:
        calls = _CALLS.get()
        index = max(i for i, c in enumerate(calls) if c.breaker is self)
        call = calls[index]
        _CALLS.set(calls[:index] + calls[index + 1 :])
        if error is None or isinstance(error, BreakerOpen):
            outcome = "success" if error is None else "release"
        elif not isinstance(error, Exception):
            outcome = "release"  # cancelled, interrupted: no word on the downstream
        elif isinstance(error, self.exceptions) and not isinstance(error, self.ignore):
            outcome = "failure"
        else:
            outcome = "success"
        if outcome != "failure" and call.role == "closed":
            return call, None  # closed, and no failure: nothing changes
        return call, outcome

    def _record_args(self, call: _Call, outcome: str) -> tuple[list[str], list[Any]]:
        keys = [self.key, *_event_keys(self.prefix, call.job)]
        job_id = call.job.job_id if call.job else ""
        return keys, [1, now_ms(), call.token, job_id, *self._settings_args(), outcome]

    def _recorded(self, call: _Call, reply: list[Any]) -> None:
        job_id = call.job.job_id if call.job else ""
        log_record([self.name], [str(c) for c in reply], job_id, self.settings)

    def _unrecorded(self, outcome: str, exc: Exception) -> None:
        # The call's own result matters more than its report: a lost report is one failure
        # not counted (or a probe freed when its lease passes), so it is logged, not raised.
        logger.warning("breaker %s: the call's %s was not recorded: %s", self.name, outcome, exc)

    async def __aenter__(self) -> Breaker:
        begun = self._begin()
        if isinstance(begun, _Call):
            _CALLS.set((*_CALLS.get(), begun))
            return self
        call, keys, args = begun
        reply = await async_calls.run_script(await self._client(), CLAIM, keys, args)
        self._admitted(call, reply)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        call, outcome = self._end(exc)
        if outcome is None or call.role == "covered":
            return
        keys, args = self._record_args(call, outcome)
        try:
            reply = await async_calls.run_script(await self._client(), RECORD, keys, args)
        except Exception as err:
            self._unrecorded(outcome, err)
        else:
            self._recorded(call, reply)

    def __enter__(self) -> Breaker:
        begun = self._begin()
        if isinstance(begun, _Call):
            _CALLS.set((*_CALLS.get(), begun))
            return self
        call, keys, args = begun
        reply = sync_calls.run_script(self._client_sync(), CLAIM, keys, args)
        self._admitted(call, reply)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        call, outcome = self._end(exc)
        if outcome is None or call.role == "covered":
            return
        keys, args = self._record_args(call, outcome)
        try:
            reply = sync_calls.run_script(self._client_sync(), RECORD, keys, args)
        except Exception as err:
            self._unrecorded(outcome, err)
        else:
            self._recorded(call, reply)


def _now(at: int | None) -> int:
    return now_ms() if at is None else at


# -- the worker's side: jobs that name breakers ----------------------------------------------


class JobBreakers:
    """The breakers a running job named, and the probes it holds; the worker reports the job's
    outcome with :meth:`settle`."""

    __slots__ = ("_client", "_done", "_job_id", "_keys", "_names", "_probes", "_token")

    def __init__(
        self,
        client: redis.asyncio.Redis,
        names: list[str],
        keys: list[str],
        token: str,
        job_id: str,
        roles: list[str],
    ) -> None:
        self._client = client
        self._names = names
        self._keys = keys
        self._token = token
        self._job_id = job_id
        self._probes = any(role != "closed" for role in roles)
        self._done = False

    async def settle(self, completed: bool | None, error: BaseException | None = None) -> None:
        """Report the job's end: completed (``True``), failed (``False``, with what it failed
        with: a cancel counts as nothing) or neither (``None``: put back, delayed). Never
        raises: a lost report is logged (a probe it held is freed when its lease passes)."""
        if self._done:
            return
        self._done = True
        if completed:
            outcome = "success"
        elif completed is None or isinstance(error, JobCancelledError):
            outcome = "release"
        else:
            outcome = "failure"
        if outcome != "failure" and not self._probes:
            return  # closed breakers, and no failure: nothing changes
        n = len(self._names)
        args = [n, now_ms(), self._token, self._job_id, "", "", "", "", outcome]
        try:
            reply = await async_calls.run_script(self._client, RECORD, self._keys, args)
        except Exception as exc:
            logger.warning(
                "breakers %s: job %s's %s was not recorded: %s",
                ", ".join(self._names),
                self._job_id,
                outcome,
                exc,
            )
            return
        log_record(self._names, [str(c) for c in reply], self._job_id, {})


async def job_breakers(job: AsyncJob, token: str) -> JobBreakers | None:
    """Before ``job`` runs (with lock ``token``): check the breakers it names.

    Also makes the job the context of the processor's own ``with breaker:`` blocks.

    Returns:
        ``None`` when the job names no breaker, else what the worker reports its outcome to.

    Raises:
        BreakerOpen: a breaker refused the job: delay it until ``retry_at_ms``.
        redis errors: the check did not get through (transient ones: send it again; a
            repeat with the same token is harmless).
    """
    queue = job.queue
    names = list(stored_breakers(job.opts))
    _JOB.set(
        _JobContext(queue.prefix, queue.keys.events, queue.keys.meta, job.id, frozenset(names))
    )
    if not names:
        return None
    keys = [breaker_key(queue.prefix, name) for name in names]
    keys += [queue.keys.events, queue.keys.meta]
    client = await queue.client()
    args = [len(names), now_ms(), token, job.id, "", "", "", ""]
    try:
        reply = await async_calls.run_script(client, CLAIM, keys, args)
    except Exception as exc:
        if server_error_kind(exc) == "transient":
            raise
        # A key another client broke (not a hash) must not stop the queue: run it unchecked.
        logger.warning("job %s: its breakers could not be checked, it runs: %s", job.id, exc)
        return None
    if int(reply[0]) != 1:
        raise _refusal(names, reply)
    roles = [str(role) for role in reply[2:]]
    log_claim(names, roles, job.id)
    return JobBreakers(client, names, keys, token, job.id, roles)
