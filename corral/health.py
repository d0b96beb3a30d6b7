"""Health checks for orchestrators: is a queue being worked, and is anything waiting too long.

A check reads a few figures of a queue (jobs ready to run, how long the job at the front of
the line has waited, the workers connected, whether it is paused) and compares them with the
limits given; the decision (:meth:`Limits.evaluate`) is pure and does no I/O. A server that
cannot be read gives an unhealthy report naming why, never an exception. The same check runs
as :func:`check_health` (a :class:`~corral.Queue`), :func:`check_health_async` (an
:class:`~corral.AsyncQueue`), ``corral health`` and the ASGI app of :func:`asgi_app`.

"Waiting" counts the jobs ready to run: the wait list, the prioritized set and the delayed
jobs already due (only a worker moves those to wait; parents waiting for children are not
ready). A job's wait starts when it was added, or when its requested delay ended, or when its
last attempt started (a retried job): the age is read from the job next to run in the wait
list, the first prioritized job and the first due delayed job, so a LIFO job or a low
priority starved behind others is not seen.

Example::

    from corral import Queue
    from corral.health import check_health

    report = check_health(Queue("emails"), max_waiting_age=60, min_workers=1)
    if not report.ok:
        print("\\n".join(report.reasons))
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Iterable, MutableMapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import redis

from corral import bounds, clock
from corral._async.queue import AsyncQueue
from corral._sync.queue import Queue
from corral.errors import CorralError
from corral.job import JobRecord
from corral.options import Duration, duration_ms

#: The errors that mean "the queue cannot be read": an unhealthy report, not an exception.
READ_ERRORS = (redis.RedisError, OSError, CorralError)


@dataclass(frozen=True)
class QueueFigures:
    """What a check reads of a queue.

    Attributes:
        waiting: jobs ready to run (wait list, prioritized, delayed and due).
        oldest_ready_ms: when the longest-waiting job at the front of the line became ready
            (epoch ms), ``None`` when nothing is ready.
        workers: worker connections of the queue (Node and Python workers alike).
        paused: whether the queue is paused.
    """

    waiting: int
    oldest_ready_ms: int | None
    workers: int
    paused: bool

    def oldest_waiting_age(self, now_ms: int) -> float | None:
        """Seconds the front job has waited at ``now_ms`` (``None``: nothing waits)."""
        if self.oldest_ready_ms is None:
            return None
        return max(0, now_ms - self.oldest_ready_ms) / 1000


@dataclass(frozen=True)
class HealthReport:
    """The result of a check of one queue.

    Attributes:
        queue: the queue's name.
        ok: no limit was crossed and the queue could be read.
        reasons: one line per problem found (empty when ``ok``).
        waiting: jobs ready to run, ``None`` when the queue could not be read.
        oldest_waiting_age: seconds the front job has waited, ``None`` when nothing waits.
        workers: worker connections, ``None`` when the queue could not be read.
        paused: whether the queue is paused, ``None`` when it could not be read.
    """

    queue: str
    ok: bool
    reasons: list[str] = field(default_factory=list)
    waiting: int | None = None
    oldest_waiting_age: float | None = None
    workers: int | None = None
    paused: bool | None = None

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON-ready values (the ``--json`` and HTTP schema of one queue)."""
        return {
            "queue": self.queue,
            "ok": self.ok,
            "reasons": list(self.reasons),
            "waiting": self.waiting,
            "oldest_waiting_age": self.oldest_waiting_age,
            "workers": self.workers,
            "paused": self.paused,
        }


@dataclass(frozen=True)
class Limits:
    """The limits of a check, validated (``None``: that limit is not checked).

    Args:
        max_waiting_age_ms: how long the front job may wait (``Limits.of`` takes seconds or a
            ``timedelta``).
        min_workers: workers that must be connected to the queue.

    Raises:
        InvalidOptionError: a limit that is not a duration / an integer >= 0.
    """

    max_waiting_age_ms: int | None = None
    min_workers: int | None = None

    @classmethod
    def of(cls, max_waiting_age: Duration | None, min_workers: int | None) -> Limits:
        age = None if max_waiting_age is None else duration_ms("max_waiting_age", max_waiting_age)
        workers = None if min_workers is None else bounds.check_int("min_workers", min_workers)
        return cls(age, workers)

    def evaluate(self, queue: str, figures: QueueFigures, now_ms: int) -> HealthReport:
        """The report of ``figures`` read at ``now_ms`` (pure)."""
        reasons = []
        age = figures.oldest_waiting_age(now_ms)
        limit = self.max_waiting_age_ms
        ready = figures.oldest_ready_ms
        if limit is not None and ready is not None and now_ms - ready > limit:
            paused = " (the queue is paused)" if figures.paused else ""
            reasons.append(
                f"{queue}: the oldest waiting job has waited {age:.1f} s, "
                f"more than {limit / 1000:g} s{paused}"
            )
        if self.min_workers is not None and figures.workers < self.min_workers:
            reasons.append(
                f"{queue}: {figures.workers} worker(s) connected, fewer than {self.min_workers}"
            )
        return HealthReport(
            queue=queue,
            ok=not reasons,
            reasons=reasons,
            waiting=figures.waiting,
            oldest_waiting_age=age,
            workers=figures.workers,
            paused=figures.paused,
        )


def unreadable(queue: str, exc: BaseException) -> HealthReport:
    """The report of a queue whose figures could not be read because of ``exc`` (pure)."""
    if isinstance(exc, redis.AuthenticationError):
        what = "the server refused the credentials"
    elif isinstance(exc, (redis.ConnectionError, redis.TimeoutError, OSError)):
        what = "cannot reach the server"
    else:
        what = "cannot read the queue"
    detail = " ".join(str(exc).split()) or type(exc).__name__
    return HealthReport(queue=queue, ok=False, reasons=[f"{queue}: {what}: {detail}"])


def first_ready_ms(job: JobRecord) -> int:
    """When a job was first ready to run (epoch ms): added, plus the delay it asked for."""
    delay = job.opts.get("delay")
    asked = int(delay) if isinstance(delay, (int, float)) and not isinstance(delay, bool) else 0
    return job.timestamp + asked


def ready_at_ms(job: JobRecord) -> int:
    """When a job now waiting became ready, as well as its hash tells (epoch ms): when first
    ready, or the start of its last attempt when it was retried."""
    return max(first_ready_ms(job), job.processed_on or 0)


#: A delayed job's score is ``run_at * 4096 + seq`` (see :mod:`corral.bounds`).
_SCORE_SCALE = 4096


def _due_before(now_ms: int) -> int:
    """The highest delayed score of a job due at ``now_ms``."""
    return (now_ms + 1) * _SCORE_SCALE - 1


def _figures(
    counts: dict[str, int],
    front: Sequence[JobRecord],
    due: Sequence[Any],
    due_count: int,
    workers: int,
    paused: bool,
) -> QueueFigures:
    ready = [ready_at_ms(job) for job in front]
    ready.extend(int(entry[1]) // _SCORE_SCALE for entry in due)  # (id, score) pairs
    return QueueFigures(
        waiting=counts["waiting"] + counts["prioritized"] + int(due_count),
        oldest_ready_ms=min(ready) if ready else None,
        workers=workers,
        paused=paused,
    )


def read_figures(queue: Queue) -> QueueFigures:
    """Read the figures of ``queue`` (redis-py and corral errors pass through)."""
    counts = queue.get_job_counts("waiting", "prioritized")
    front = [*queue.get_waiting(0, 0), *queue.get_prioritized(0, 0)]
    # Delayed jobs past due are ready too: only a worker moves them to wait, so with no
    # worker they would sit there unseen.
    client, top = queue.client(), _due_before(clock.now_ms())
    due = client.zrangebyscore(queue.keys.delayed, 0, top, start=0, num=1, withscores=True)
    due_count = client.zcount(queue.keys.delayed, 0, top)
    return _figures(counts, front, due, due_count, len(queue.get_workers()), queue.is_paused())


async def read_figures_async(queue: AsyncQueue) -> QueueFigures:
    """:func:`read_figures` of an :class:`~corral.AsyncQueue`."""
    counts = await queue.get_job_counts("waiting", "prioritized")
    front = [*await queue.get_waiting(0, 0), *await queue.get_prioritized(0, 0)]
    client, top = await queue.client(), _due_before(clock.now_ms())
    due = await client.zrangebyscore(queue.keys.delayed, 0, top, start=0, num=1, withscores=True)
    due_count = await client.zcount(queue.keys.delayed, 0, top)
    workers = len(await queue.get_workers())
    return _figures(counts, front, due, due_count, workers, await queue.is_paused())


def check_health(
    queue: Queue, *, max_waiting_age: Duration | None = None, min_workers: int | None = None
) -> HealthReport:
    """Check one queue against the limits given.

    Args:
        queue: the queue.
        max_waiting_age: seconds (or a ``timedelta``) the job at the front may have waited.
        min_workers: workers that must be connected.

    Returns:
        The report; a server that cannot be read makes it unhealthy, with the reason.

    Raises:
        InvalidOptionError: a limit that is not a duration / an integer >= 0.
    """
    limits = Limits.of(max_waiting_age, min_workers)
    try:
        figures = read_figures(queue)
    except READ_ERRORS as exc:
        return unreadable(queue.name, exc)
    return limits.evaluate(queue.name, figures, clock.now_ms())


async def check_health_async(
    queue: AsyncQueue,
    *,
    max_waiting_age: Duration | None = None,
    min_workers: int | None = None,
    timeout: float | None = 10.0,
) -> HealthReport:
    """:func:`check_health` of an :class:`~corral.AsyncQueue`; a read that takes more than
    ``timeout`` seconds makes the report unhealthy."""
    limits = Limits.of(max_waiting_age, min_workers)
    try:
        figures = await asyncio.wait_for(read_figures_async(queue), timeout)
    except asyncio.TimeoutError:
        reason = f"{queue.name}: the server did not answer within {timeout:g} s"
        return HealthReport(queue=queue.name, ok=False, reasons=[reason])
    except READ_ERRORS as exc:
        return unreadable(queue.name, exc)
    return limits.evaluate(queue.name, figures, clock.now_ms())


def summary(reports: Iterable[HealthReport]) -> dict[str, Any]:
    """The JSON document of several reports: ``{"ok": all ok, "queues": [report...]}``."""
    listed = list(reports)
    return {"ok": all(r.ok for r in listed), "queues": [r.to_dict() for r in listed]}


#: The parts of an ASGI call: the scope, the ``receive`` and ``send`` of messages (dicts).
Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Any]]
Send = Callable[[Any], Awaitable[None]]
#: An ASGI application.
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


async def lifespan(
    receive: Receive,
    send: Send,
) -> None:
    """Answer an ASGI ``lifespan`` scope: nothing to start or stop."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


async def respond(
    send: Send,
    status: int,
    body: bytes,
    content_type: bytes,
    *,
    head: bool = False,
) -> None:
    """Send a whole HTTP response on an ASGI ``send``."""
    headers = [(b"content-type", content_type), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": b"" if head else body})


def asgi_app(
    queues: Iterable[AsyncQueue],
    *,
    max_waiting_age: Duration | None = None,
    min_workers: int | None = None,
    timeout: float | None = 10.0,
) -> ASGIApp:
    """An ASGI app that answers every ``GET`` (or ``HEAD``) with the JSON :func:`summary` of
    the queues' checks: status 200 when all are healthy, 503 otherwise (405 for another
    method). Mount it where the orchestrator probes (``/healthz``); it needs no framework.

    Raises:
        InvalidOptionError: a limit that is not a duration / an integer >= 0.
    """
    watched = list(queues)
    Limits.of(max_waiting_age, min_workers)  # refuse bad limits now, not at the first probe

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            return await lifespan(receive, send)
        if scope["type"] != "http":
            return None
        if scope["method"] not in ("GET", "HEAD"):
            return await respond(send, 405, b"method not allowed\n", b"text/plain")
        reports = await asyncio.gather(
            *(
                check_health_async(
                    q, max_waiting_age=max_waiting_age, min_workers=min_workers, timeout=timeout
                )
                for q in watched
            )
        )
        doc = summary(reports)
        body = json.dumps(doc).encode()
        status = 200 if doc["ok"] else 503
        await respond(send, status, body, b"application/json", head=scope["method"] == "HEAD")

    return app
