"""The read-side pages: overview, queue, a state's jobs, job detail, schedulers, metrics,
search, and the live streams.

Each handler reads a bounded amount: a state's list is one ``LRANGE``/``ZRANGE`` of one page by
index (page 20,000 of a million-job set costs what page 1 does), a job's children are read whole
only up to :data:`MAX_CHILDREN` (a bigger fan-out shows the first ones and the counts), its
logs up to :data:`MAX_LOG_LINES`, and a search one bounded request of
:func:`corral.dashboard.search.search_jobs`.
"""

from __future__ import annotations

import asyncio
from typing import Any
from urllib.parse import unquote

from starlette.requests import Request
from starlette.responses import Response

from corral import _codec, clock
from corral._async.job import AsyncJob
from corral._async.queue import AsyncQueue
from corral.bounds import names_a_job
from corral.dashboard import search as _search
from corral.dashboard import views
from corral.dashboard.queues import (
    STATES,
    metrics_series,
    queue_figures,
    worker_counts,
)
from corral.dashboard.rendering import dashboard, fail, links, render
from corral.dashboard.streams import sse_response
from corral.errors import InvalidOptionError
from corral.job import NEWEST_FIRST

#: Children of a parent read and shown at most.
MAX_CHILDREN = 200
#: Children whose state is looked up (one script call each).
MAX_CHILD_STATES = 50
#: Log lines shown (the last ones).
MAX_LOG_LINES = 200
#: Schedulers shown (soonest first).
MAX_SCHEDULERS = 500
#: The highest page number asked for (50 jobs a page: 500 million jobs).
MAX_PAGE = 10_000_000
#: Per-minute points in the overview's charts, and in a queue's metrics page.
OVERVIEW_POINTS = 60
METRICS_POINTS = 24 * 60


def segment(request: Request, name: str) -> str:
    """A path parameter, percent-decoded (the app routes on the raw path so that a ``/`` in
    a queue name or a job id stays in its segment)."""
    return unquote(request.path_params[name])


def int_param(request: Request, name: str, default: int, low: int, high: int) -> int:
    text = request.query_params.get(name)
    if text is None or text == "":
        return default
    if not text.isdigit() or not low <= int(text) <= high:
        raise fail(400, f"{name} must be a whole number from {low} to {high}, got {text[:40]!r}")
    return int(text)


def wants_fragment(request: Request) -> bool:
    return request.query_params.get("fragment") == "1"


async def the_queue(request: Request) -> AsyncQueue:
    """The queue of the URL, or a 404."""
    name = segment(request, "name")
    queue = await dashboard(request).directory.get(name)
    if queue is None:
        raise fail(404, f"no queue {name!r} under prefix {dashboard(request).directory.prefix!r}")
    return queue


async def the_job(request: Request, queue: AsyncQueue) -> AsyncJob:
    job_id = segment(request, "job_id")
    try:
        found = await queue.get_job(job_id) if names_a_job(job_id) else None
    except InvalidOptionError:
        found = None
    if found is None:
        raise fail(404, f"no job {job_id!r} in queue {queue.name!r}")
    return found


# -- overview and queue --------------------------------------------------------------------


async def _figures(request: Request, queues: list[AsyncQueue]) -> list[dict[str, Any]]:
    workers = await worker_counts(dashboard(request).directory, queues)
    rows = await asyncio.gather(*(queue_figures(q, workers[q.name]) for q in queues))
    series = await asyncio.gather(*(metrics_series(q, OVERVIEW_POINTS) for q in queues))
    for row, points in zip(rows, series, strict=True):
        row["charts"] = {kind: views.chart(values) for kind, values in points.items()}
    return list(rows)


async def overview(request: Request) -> Response:
    directory = dashboard(request).directory
    queues = [q for q in [await directory.get(n) for n in await directory.names()] if q]
    rows = await _figures(request, queues)
    return render(
        request,
        "overview.html",
        {"queues": rows},
        live=links(request).live(),
        fragment=wants_fragment(request),
    )


async def queue_page(request: Request) -> Response:
    queue = await the_queue(request)
    (figures,) = await _figures(request, [queue])
    now_ms = clock.now_ms()
    failed = await queue.get_jobs("failed", 0, 9)
    context = {
        "queue": figures,
        "schedulers": await queue.count_job_schedulers(),
        "failed": [views.job_row("failed", job, now_ms) for job in failed],
    }
    return render(request, "queue.html", context, live=links(request).queue(queue.name, "live"))


async def state_page(request: Request) -> Response:
    queue = await the_queue(request)
    state = segment(request, "state")
    if state not in STATES:
        raise fail(404, f"no page {state!r} for queue {queue.name!r} (states: {', '.join(STATES)})")
    page = int_param(request, "page", 1, 1, MAX_PAGE)
    start = (page - 1) * views.PAGE_SIZE
    jobs = await queue.get_jobs(
        state, start, start + views.PAGE_SIZE - 1, asc=state not in NEWEST_FIRST
    )
    counts = await queue.get_job_counts(*STATES)
    total = counts[state]
    now_ms = clock.now_ms()
    context = {
        "queue": {"name": queue.name, "counts": counts, "paused": await queue.is_paused()},
        "state": state,
        "page": page,
        "pages": max((total + views.PAGE_SIZE - 1) // views.PAGE_SIZE, 1),
        "total": total,
        "first": start + 1,
        "jobs": [views.job_row(state, job, now_ms) for job in jobs],
    }
    template = "_job_table.html" if wants_fragment(request) else "state.html"
    return render(
        request,
        template,
        context,
        live=links(request).queue(queue.name, "live"),
        fragment=wants_fragment(request),
    )


# -- a job ---------------------------------------------------------------------------------


async def _children(request: Request, job: AsyncJob) -> dict[str, Any]:
    """The job's children by outcome, at most :data:`MAX_CHILDREN` of each, with the state
    of the first unfinished ones; ``counts`` says how many there are in all."""
    counts = await job.get_dependencies_count()
    if sum(counts.values()) <= MAX_CHILDREN:
        found: dict[str, Any] = dict(await job.get_dependencies())
    else:
        client = await job.queue.client()
        key = job.queue.keys.job(job.id)
        processed: dict[str, str] = (await client.hscan(key + ":processed", 0, count=MAX_CHILDREN))[
            1
        ]  # type: ignore[assignment]
        pending: list[str] = (await client.sscan(key + ":dependencies", 0, count=MAX_CHILDREN))[1]  # type: ignore[assignment]
        failed: list[str] = await client.zrange(key + ":unsuccessful", 0, MAX_CHILDREN - 1)  # type: ignore[assignment]
        ignored: dict[str, str] = (await client.hscan(key + ":failed", 0, count=MAX_CHILDREN))[1]  # type: ignore[assignment]
        found = {
            "processed": {k: _codec.loads(v) for k, v in list(processed.items())[:MAX_CHILDREN]},
            "unprocessed": sorted(k for k in pending if not k.endswith(":"))[:MAX_CHILDREN],
            "failed": list(failed),
            "ignored": dict(list(ignored.items())[:MAX_CHILDREN]),
        }
    directory = dashboard(request).directory
    states: dict[str, str] = {}
    for key in found["unprocessed"][:MAX_CHILD_STATES]:
        queue_name, job_id, link = links(request).job_key(directory.prefix, key)
        if link is not None:
            child_queue = await directory.any_queue(queue_name)
            if child_queue is not None:
                states[key] = str(await child_queue.get_job_state(job_id))
    found["states"] = states
    return {"rows": views.children(links(request), directory.prefix, found), "counts": counts}


async def job_page(request: Request) -> Response:
    queue = await the_queue(request)
    job = await the_job(request, queue)
    state = str(await queue.get_job_state(job.id))
    lines, log_total = await queue.get_job_logs(job.id, -MAX_LOG_LINES, -1)
    now_ms = clock.now_ms()
    prefix = dashboard(request).directory.prefix
    parent = None
    if job.parent_key:
        parent_queue, parent_id, link = links(request).job_key(prefix, job.parent_key)
        parent = {"queue": parent_queue, "id": parent_id, "link": link}
    context = {
        "queue": {"name": queue.name},
        "job": job,
        "state": state,
        "data": views.pretty(job.data),
        "opts": views.pretty(job.opts),
        "returnvalue": views.pretty(job.returnvalue) if state == "completed" else None,
        "progress": views.one_line(job.progress) if job.progress not in (None, 0) else None,
        "timeline": views.timeline(job, now_ms),
        "attempts": views.attempts(job),
        "logs": lines,
        "log_total": log_total,
        "parent": parent,
        "children": await _children(request, job),
        "scheduler": job.repeat_job_key,
        "can": _job_actions(state),
    }
    template = "_job_detail.html" if wants_fragment(request) else "job.html"
    return render(
        request,
        template,
        context,
        live=links(request).queue(queue.name, "live"),
        fragment=wants_fragment(request),
    )


def _job_actions(state: str) -> list[str]:
    """The actions that make sense for a job in ``state``."""
    can = []
    if state in ("failed", "completed"):
        can.append("retry")
    if state == "delayed":
        can.append("promote")
    if state in ("waiting", "delayed", "prioritized", "waiting-children", "active"):
        can.append("cancel")
    if state != "active":
        can.append("remove")
    return can


# -- schedulers, metrics, search -----------------------------------------------------------


async def schedulers_page(request: Request) -> Response:
    queue = await the_queue(request)
    schedulers = await queue.get_job_schedulers(0, MAX_SCHEDULERS - 1, asc=True)
    now_ms = clock.now_ms()
    rows = [
        {
            "id": s.id,
            "name": s.name,
            "timing": s.pattern if s.pattern else f"every {views.duration((s.every or 0) / 1000)}",
            "tz": s.tz or "",
            "next_at": views.clock_time(s.next_run),
            "next_in": views.relative(s.next_run, now_ms),
            "iterations": s.iteration_count,
            "limit": s.limit,
            "data": views.pretty(s.template.data, 4000),
            "opts": views.pretty(s.template.opts, 4000),
        }
        for s in schedulers
    ]
    total = await queue.count_job_schedulers()
    return render(
        request,
        "schedulers.html",
        {"queue": {"name": queue.name}, "schedulers": rows, "total": total},
    )


async def metrics_page(request: Request) -> Response:
    queue = await the_queue(request)
    series = await metrics_series(queue, METRICS_POINTS)
    charts = {
        kind: {
            "hour": views.chart(values[-60:], 600, 120),
            "day": views.chart(values, 600, 120),
        }
        for kind, values in series.items()
    }
    return render(request, "metrics.html", {"queue": {"name": queue.name}, "charts": charts})


async def search_page(request: Request) -> Response:
    queue = await the_queue(request)
    needle = request.query_params.get("q", "")
    state = request.query_params.get("state", "")
    cursor = request.query_params.get("cursor", "")
    if state and state not in STATES:
        raise fail(400, f"state must be one of {', '.join(STATES)}, got {state[:40]!r}")
    context: dict[str, Any] = {
        "queue": {"name": queue.name},
        "q": needle,
        "state": state,
        "results": None,
    }
    if needle:
        try:
            found = await _search.search_jobs(
                queue, needle, state=state or None, cursor=cursor or None
            )
        except InvalidOptionError as exc:
            raise fail(400, str(exc)) from None
        now_ms = clock.now_ms()
        context["results"] = {
            "jobs": [views.job_row(s, job, now_ms) for s, job in found.jobs],
            "scanned": found.scanned,
            "total": found.total,
            "server_ms": round(found.server_ms, 1),
            "next": None
            if found.cursor is None
            else links(request).queue(
                queue.name, "search", q=needle, state=state or None, cursor=found.cursor
            ),
        }
    template = "_search_results.html" if wants_fragment(request) and needle else "search.html"
    return render(request, template, context, fragment=wants_fragment(request))


# -- live ----------------------------------------------------------------------------------


async def _stream(request: Request, names: list[str]) -> Response:
    hub = await dashboard(request).live_hub()
    if hub is None:
        # 204 tells EventSource not to reconnect: the page just does not update itself.
        return Response(status_code=204)
    return sse_response(hub, names, request)


async def overview_live(request: Request) -> Response:
    names = await dashboard(request).directory.names()
    if not names:  # nothing to watch (a new queue shows at the next load of the page)
        return Response(status_code=204)
    return await _stream(request, names)


async def queue_live(request: Request) -> Response:
    queue = await the_queue(request)
    return await _stream(request, [queue.name])
