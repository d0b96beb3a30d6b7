# Generated from corral/_async/queue_getters.py by scripts/unasync.py: do not edit.
"""Reading a queue: job listings across states, logs, counts and the workers connected to it.

A layer of :class:`Queue` (BullMQ's ``QueueGetters``) that only reads; it uses only what
:class:`QueueBase` provides.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from corral import bounds
from corral._sync._queue_base import QueueBase
from corral._sync.job import Job
from corral._sync.state_getters import StateGetters
from corral.bounds import MAX_COUNT, names_a_job
from corral.errors import InvalidOptionError
from corral.job import JobState

#: Where each state keeps its ids: ``(key suffix, is a list)``. Lists are LPUSHed, so index 0
#: is the newest; zsets are ordered by score (run time, priority or finishedOn).
STATE_STORAGE: dict[str, tuple[str, bool]] = {
    "active": ("active", True),
    "completed": ("completed", False),
    "delayed": ("delayed", False),
    "failed": ("failed", False),
    "paused": ("paused", True),
    "prioritized": ("prioritized", False),
    "waiting": ("wait", True),
    "waiting-children": ("waiting-children", False),
}

#: Other names a state is known by (BullMQ's ``wait`` job type, the enum's spelling).
STATE_ALIASES = {"wait": "waiting", "waiting_children": "waiting-children"}

#: What :meth:`QueueGetters.get_jobs` lists when no state is named: all of them.
#: ``paused`` is the list BullMQ 6.x no longer fills; it is empty unless older data is there.
ALL_STATES = tuple(STATE_STORAGE)


#: Ids read per command by :meth:`QueueGetters.get_jobs` (about 3 ms of server time).
READ_PAGE = 10_000


def check_int(name: str, value: Any, minimum: int | None = 0, maximum: int = MAX_COUNT) -> int:
    """``value`` when it is an ``int`` (not a ``bool``) from ``minimum`` to ``maximum``
    (``minimum=None``: an index, from ``-MAX_INDEX`` to ``MAX_INDEX``).

    Raises:
        InvalidOptionError: naming ``name`` and the value.
    """
    if minimum is None:
        return bounds.check_int(name, value, None, None)
    return bounds.check_int(name, value, minimum, maximum)


def check_states(states: str | Iterable[str] | None) -> list[str]:
    """BullMQ state names, in the order given, without repeats (``None``: all of them).

    Raises:
        InvalidOptionError: naming the first unknown state.
    """
    if states is None:
        return list(ALL_STATES)
    if isinstance(states, str):
        given: list[Any] = [states]
    elif isinstance(states, Iterable):
        given = list(states)
    else:
        raise InvalidOptionError(
            f"states must be a state name or several, got {type(states).__name__} {states!r}"
        )
    wanted: list[str] = []
    for state in given:
        # str() turns a JobState member into its value.
        name = STATE_ALIASES.get(str(state), str(state)) if isinstance(state, str) else ""
        if name not in STATE_STORAGE:
            raise InvalidOptionError(
                f"states must be among {', '.join(STATE_STORAGE)}, got {state!r}"
            )
        if name not in wanted:
            wanted.append(name)
    return wanted


def _slice(first: int, last: int, total: int) -> tuple[int, int]:
    """Redis-style inclusive bounds (negative counts from the end) as absolute indexes."""
    start = first if first >= 0 else max(total + first, 0)
    end = min(last if last >= 0 else total + last, total - 1)
    return start, end


@dataclass(frozen=True, slots=True)
class Metrics:
    """BullMQ's metrics of one kind: a running ``count``, and jobs per minute in ``data``
    (newest first); ``prev_ts``/``prev_count`` mark where the last data point was taken."""

    count: int
    prev_ts: int
    prev_count: int
    data: list[int]
    #: How many data points are stored in all.
    points: int


#: The states ``get_job_counts()`` reports when none are named, in BullMQ's order.
COUNTED_STATES = (
    "active",
    "completed",
    "delayed",
    "failed",
    "prioritized",
    "waiting",
    "waiting-children",
)

#: State names ``get_job_counts`` takes -> the key suffix that holds them.
COUNTABLE = {
    **{state: state for state in COUNTED_STATES},
    "waiting": "wait",
    "wait": "wait",
    "paused": "paused",
    "repeat": "repeat",
}
#: States kept in lists (LLEN); the others are sorted sets (ZCARD).
LIST_STATES = frozenset({"waiting", "wait", "paused", "active"})


class QueueGetters(QueueBase, StateGetters):
    """Methods that read jobs, counts and workers of the queue."""

    def get_job_state(self, job_id: str) -> JobState:
        """The state of a job (``JobState.UNKNOWN`` when there is no such job)."""
        if not names_a_job(job_id):
            return JobState.UNKNOWN
        job = Job(queue_name=self.name, id=job_id, name="", data=None)
        job.queue = self
        return job.get_state()

    def get_job_counts(self, *states: str) -> dict[str, int]:
        """How many jobs are in each state (all of BullMQ's states when none are named).

        Counts are keyed by the names asked for, as in BullMQ: ``"wait"`` and ``"waiting"``
        both count the wait list; ``"paused"`` counts the legacy paused list (0 in 6.x);
        ``"repeat"`` counts the job schedulers.

        Raises:
            InvalidOptionError: an unknown state name.
        """
        wanted = list(states) or list(COUNTED_STATES)
        for state in wanted:
            if not isinstance(state, str) or state not in COUNTABLE:
                raise InvalidOptionError(
                    f"unknown job state {state!r}; known: {', '.join(sorted(COUNTABLE))}"
                )
        client = self.client()
        with client.pipeline(transaction=False) as pipe:
            for state in wanted:
                key = self.keys.key(COUNTABLE[state])
                if state in LIST_STATES:
                    pipe.llen(key)
                else:
                    pipe.zcard(key)
            counts = pipe.execute()
        return {state: int(n) for state, n in zip(wanted, counts, strict=True)}

    def get_job_count_by_types(self, *types: str) -> int:
        """How many jobs are in the states named, together (BullMQ's ``getJobCountByTypes``;
        every state of :meth:`get_job_counts` when none are named).

        A name given twice counts once, but ``"wait"`` and ``"waiting"`` are two names of the
        wait list and count it twice, as BullMQ 6.7.0 does.

        Raises:
            InvalidOptionError: an unknown state name (BullMQ counts it as 0).
        """
        for state in types:
            if not isinstance(state, str):
                raise InvalidOptionError(f"a state name must be a str, got {state!r}")
        return sum((self.get_job_counts(*dict.fromkeys(types))).values())

    def get_jobs(
        self,
        states: str | Iterable[str] | None = None,
        start: int = 0,
        end: int = -1,
        *,
        asc: bool = False,
    ) -> list[Job]:
        """The jobs in ``states``, paginated over all of them together (BullMQ's ``getJobs``).

        The states, in the order given, are read as one list and ``[start, end]`` (inclusive;
        negative counts from the end, ``-1`` is the last) is cut from it, so pages of several
        states follow each other with no gap and no overlap. Within a state the newest job comes
        first, or the oldest with ``asc=True``: for ``waiting``/``active``/``paused`` that is
        the order they entered the list; for the zsets it is the score (run time for
        ``delayed``, priority then arrival for ``prioritized``, finishedOn for ``completed``
        and ``failed``). Jobs removed while this reads are skipped.

        Args:
            states: ``waiting`` (or ``wait``), ``active``, ``delayed``, ``prioritized``,
                ``completed``, ``failed``, ``waiting-children``, ``paused``; one name or several;
                ``None`` for all of them.
            start: first position, 0-based.
            end: last position, inclusive.
            asc: oldest (lowest score) first.

        Raises:
            InvalidOptionError: an unknown state or a bound that is not an integer.
        """
        wanted = check_states(states)
        check_int("start", start, None)
        check_int("end", end, None)
        ids = self._ranged_ids(wanted, start, end, asc)
        return self._jobs(ids)

    def _ranged_ids(self, states: list[str], start: int, end: int, asc: bool) -> list[str]:
        client = self.client()
        storage = [(self.keys.key(STATE_STORAGE[s][0]), STATE_STORAGE[s][1]) for s in states]
        with client.pipeline(transaction=False) as pipe:
            for key, is_list in storage:
                if is_list:
                    pipe.llen(key)
                else:
                    pipe.zcard(key)
            lengths = [int(n) for n in pipe.execute()]
        first, last = _slice(start, end, sum(lengths))
        if first > last:
            return []
        backwards: list[bool] = []
        with client.pipeline(transaction=False) as pipe:
            offset = 0
            for (key, is_list), n in zip(storage, lengths, strict=True):
                a, b = max(first - offset, 0), min(last - offset, n - 1)
                offset += n
                # Pages of READ_PAGE ids, one command each: a read of a million ids in one
                # command would hold the server for tens of ms (one round trip all the same).
                for page in range(a, b + 1, READ_PAGE):
                    c, d = page, min(page + READ_PAGE - 1, b)
                    if is_list and asc:
                        # Oldest first is the right end of an LPUSHed list: read it, reverse it.
                        pipe.lrange(key, n - 1 - d, n - 1 - c)
                    elif is_list:
                        pipe.lrange(key, c, d)
                    else:
                        pipe.zrange(key, c, d, desc=not asc)
                    backwards.append(is_list and asc)
            replies = pipe.execute()
        ids: list[str] = []
        for reply, reverse in zip(replies, backwards, strict=True):
            ids.extend(reversed(reply) if reverse else reply)
        return ids

    def _jobs(self, ids: list[str]) -> list[Job]:
        """The jobs of ``ids`` read in one round trip; ids whose hash is gone are skipped."""
        if not ids:
            return []
        client = self.client()
        with client.pipeline(transaction=False) as pipe:
            for job_id in ids:
                pipe.hgetall(self.keys.job(job_id))
            hashes: list[dict[str, str]] = pipe.execute()
        return [self._bind(i, fields) for i, fields in zip(ids, hashes, strict=True) if fields]

    def get_job_logs(
        self, job_id: str, start: int = 0, end: int = -1, asc: bool = True
    ) -> tuple[list[str], int]:
        """A job's log lines ``[start, end]`` (inclusive) and how many it has in all.

        Args:
            job_id: the job.
            start: first line, 0-based, counted in the order asked for.
            end: last line, inclusive; negative counts from the end.
            asc: oldest line first (``False``: newest first).

        Raises:
            InvalidOptionError: a bound that is not an integer.
        """
        check_int("start", start, None)
        check_int("end", end, None)
        if not names_a_job(job_id):
            return [], 0
        return self._bind(job_id, {}).get_logs(start, end, asc=asc)

    def get_metrics(self, kind: str, start: int = 0, end: int = -1) -> Metrics:
        """BullMQ's per-minute metrics of finished jobs (kept when workers run with
        ``metrics_max_data_points``).

        Args:
            kind: ``"completed"`` or ``"failed"``.
            start: the first data point wanted, newest first.
            end: the last one wanted, inclusive.

        Raises:
            InvalidOptionError: an unknown kind or a bound that is not an integer.
        """
        if kind not in ("completed", "failed"):
            raise InvalidOptionError(f"kind must be 'completed' or 'failed', got {kind!r}")
        check_int("start", start, None)
        check_int("end", end, None)
        key = self.keys.key(f"metrics:{kind}")
        client = self.client()
        with client.pipeline(transaction=True) as pipe:
            pipe.hmget(key, "count", "prevTS", "prevCount")
            pipe.lrange(f"{key}:data", start, end)
            pipe.llen(f"{key}:data")
            (count, prev_ts, prev_count), data, points = pipe.execute()
        return Metrics(
            count=int(count or 0),
            prev_ts=int(prev_ts or 0),
            prev_count=int(prev_count or 0),
            data=[int(x) for x in data],
            points=int(points),
        )

    def count(self) -> int:
        """Jobs yet to run: waiting, paused, delayed, prioritized and waiting-children."""
        client = self.client()
        with client.pipeline(transaction=False) as pipe:
            pipe.llen(self.keys.wait)
            pipe.llen(self.keys.paused)
            pipe.zcard(self.keys.delayed)
            pipe.zcard(self.keys.prioritized)
            pipe.zcard(self.keys.waiting_children)
            counts = pipe.execute()
        return sum(int(n) for n in counts)

    def get_counts_per_priority(self, priorities: Iterable[int]) -> dict[int, int]:
        """How many jobs are ready at each priority (0: the wait list, no priority).

        Raises:
            InvalidOptionError: a priority that is not an integer >= 0.
        """
        if not isinstance(priorities, Iterable):
            raise InvalidOptionError(
                f"priorities must be several priorities, got {type(priorities).__name__}"
            )
        wanted: list[int] = []
        for priority in priorities:
            if check_int("priority", priority) not in wanted:
                wanted.append(priority)
        client = self.client()
        with client.pipeline(transaction=False) as pipe:
            for priority in wanted:
                if priority == 0:
                    pipe.llen(self.keys.wait)
                else:
                    # Scores are priority * 2^32 + counter (include/scores.lua push_ready).
                    low = priority * 2**32
                    pipe.zcount(self.keys.prioritized, low, low + 2**32 - 1)
            counts = pipe.execute()
        return {p: int(n) for p, n in zip(wanted, counts, strict=True)}

    def get_workers(self) -> list[dict[str, str]]:
        """The connections of the workers of this queue, from ``CLIENT LIST``.

        A worker names its blocking connection ``<prefix>:<base64(queue name)>``, with
        ``:w:<worker name>`` appended when the worker has a name, as BullMQ's do; Node and
        Python workers are both listed. Each entry is the ``CLIENT LIST`` line as a dict
        (``name``, ``addr``, ``age``, ``idle``...) plus ``worker_name`` when there is one.
        """
        client = self.client()
        return workers_in(client.client_list(), self.prefix, self.name)

    def get_workers_count(self) -> int:
        """How many workers of this queue are connected (BullMQ's ``getWorkersCount``): the
        length of :meth:`get_workers`, Node and Python workers alike."""
        return len(self.get_workers())


def workers_in(entries: list[dict[str, str]], prefix: str, name: str) -> list[dict[str, str]]:
    """The entries of ``CLIENT LIST`` that are workers of queue ``name`` (see
    ``get_workers``): one listing serves every queue of the server."""
    base = f"{prefix}:{base64.b64encode(name.encode()).decode()}"
    named = base + ":w:"
    workers = []
    for entry in entries:
        client_name = entry.get("name", "")
        if client_name == base:
            workers.append(dict(entry))
        elif client_name.startswith(named):
            workers.append({**entry, "worker_name": client_name[len(named) :]})
    return workers
