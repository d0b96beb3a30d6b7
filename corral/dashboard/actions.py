"""The actions: pause, resume, drain, clean, retry all failed; retry, promote, remove, cancel.

Each action URL answers ``GET`` with a confirmation page (what will happen, a POST form with the
CSRF token and the action's fields) and ``POST`` by doing it, then redirecting (303) to the
page it came from with a flash message. So it works without JavaScript; the button on the
queue or job page is a link to the confirmation. A POST is refused with 403, changing
nothing, in read-only mode or when its CSRF token is missing or wrong (bearer-token requests
need none: see :mod:`corral.dashboard.auth`). Job ids are the only job-derived text in the
URLs; the cancel reason travels in the POST body.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from corral._async.queue_admin import CLEAN_STATES
from corral.dashboard.auth import CSRF_FIELD, csrf_ok, read_form
from corral.dashboard.pages import the_job, the_queue
from corral.dashboard.queues import STATES
from corral.dashboard.rendering import dashboard, fail, flash, links, render
from corral.errors import CorralError

#: States ``clean`` offers (``paused`` is BullMQ's legacy list, ``wait`` an alias).
CLEAN_CHOICES = tuple(s for s in CLEAN_STATES if s not in ("paused", "wait"))
#: The most jobs one clean may delete.
MAX_CLEAN = 1_000_000
#: The longest grace of a clean: ten years, in seconds.
MAX_GRACE = 10 * 365 * 86400


@dataclass(frozen=True)
class Action:
    """An action's confirmation text and button."""

    title: str
    text: str
    button: str
    danger: bool = False


QUEUE_ACTIONS = {
    "pause": Action("Pause", "Workers take no new job until the queue is resumed; active "
                    "jobs run on and new jobs are still added.", "Pause the queue"),
    "resume": Action("Resume", "Workers take jobs again.", "Resume the queue"),
    "drain": Action("Drain", "Delete every waiting and prioritized job (and the delayed "
                    "ones if ticked). Active, finished and waiting-children jobs stay.",
                    "Delete the waiting jobs", danger=True),
    "clean": Action("Clean", "Delete up to LIMIT jobs of STATE older than the grace period "
                    "(finished jobs count from when they finished).", "Delete these jobs",
                    danger=True),
    "retry-failed": Action("Retry all failed", "Send every failed job back to wait (attempt "
                           "counters are kept).", "Retry every failed job"),
}  # fmt: skip
JOB_ACTIONS = {
    "retry": Action("Retry", "Send this finished job back to wait.", "Retry the job"),
    "promote": Action("Promote", "Run this delayed job now.", "Run it now"),
    "remove": Action("Remove", "Delete this job, its logs and its flow children (not if "
                     "one of them is active).", "Remove the job", danger=True),
    "cancel": Action("Cancel", "The job fails for good with the reason given (an active "
                     "job's worker is asked to stop it).", "Cancel the job", danger=True),
}  # fmt: skip


def _refuse_read_only(request: Request) -> None:
    if dashboard(request).read_only:
        raise fail(403, "this dashboard is read-only: actions are disabled")


async def _checked_form(request: Request) -> dict[str, Any]:
    """The POST's fields, after the read-only and CSRF checks (403 when refused)."""
    _refuse_read_only(request)
    fields: dict[str, Any] = await read_form(request)
    if not csrf_ok(request, fields.get(CSRF_FIELD)):
        raise fail(403, "the form's CSRF token is missing or wrong: reload the page and retry")
    return fields


def _text(fields: dict[str, Any], name: str, default: str = "") -> str:
    value = fields.get(name, default)
    return value if isinstance(value, str) else default


def _number(fields: dict[str, Any], name: str, default: str, high: float) -> float:
    text = _text(fields, name, default).strip() or default
    try:
        value = float(text)
    except ValueError:
        raise fail(400, f"{name} must be a number, got {text[:40]!r}") from None
    if not 0 <= value <= high:
        raise fail(400, f"{name} must be from 0 to {high:g}, got {text[:40]!r}")
    return value


def _confirm(request: Request, action: Action, context: dict[str, Any], back: str) -> Response:
    return render(
        request, "confirm.html", {"action": action, "back": back, "post": str(request.url.path),
                                  **context}
    )  # fmt: skip


async def _outcome(request: Request, to: str, do: Callable[[], Awaitable[str]]) -> Response:
    """Run ``do``; flash what it says, or the error corral raised; redirect to ``to``."""
    try:
        flash(request, "ok", await do())
    except CorralError as exc:
        flash(request, "error", str(exc))
    return RedirectResponse(to, status_code=303)


async def queue_action(request: Request) -> Response:
    _refuse_read_only(request)
    queue = await the_queue(request)
    name = request.url.path.rstrip("/").rsplit("/", 1)[1]
    action = QUEUE_ACTIONS[name]
    back = links(request).queue(queue.name)
    if request.method == "GET":
        context = {"queue": {"name": queue.name}, "kind": name, "clean_states": CLEAN_CHOICES,
                   "subject": f"queue {queue.name}"}  # fmt: skip
        return _confirm(request, action, context, back)
    fields = await _checked_form(request)
    if name == "pause":
        return await _outcome(request, back, lambda: _say(queue.pause(), "paused"))
    if name == "resume":
        return await _outcome(request, back, lambda: _say(queue.resume(), "resumed"))
    if name == "drain":
        delayed = _text(fields, "delayed") == "1"

        async def drain() -> str:
            await queue.drain(delayed=delayed)
            return f"drained {queue.name}" + (" (delayed jobs too)" if delayed else "")

        return await _outcome(request, back, drain)
    if name == "retry-failed":

        async def retry() -> str:
            return f"{await queue.retry_jobs('failed')} failed jobs sent back to wait"

        return await _outcome(request, links(request).queue(queue.name, "failed"), retry)
    state = _text(fields, "state", "completed")
    if state not in CLEAN_CHOICES:
        raise fail(400, f"state must be one of {', '.join(CLEAN_CHOICES)}, got {state[:40]!r}")
    grace = _number(fields, "grace", "0", MAX_GRACE)
    limit = int(_number(fields, "limit", "1000", MAX_CLEAN))

    async def clean() -> str:
        removed = await queue.clean(grace, limit, state)
        return f"cleaned {len(removed)} {state} jobs older than {grace:g}s"

    return await _outcome(request, links(request).queue(queue.name, state), clean)


async def _say(done: Awaitable[None], what: str) -> str:
    await done
    return what


async def job_action(request: Request) -> Response:
    _refuse_read_only(request)
    queue = await the_queue(request)
    job = await the_job(request, queue)
    name = request.url.path.rstrip("/").rsplit("/", 1)[1]
    action = JOB_ACTIONS[name]
    back = links(request).job(queue.name, job.id)
    if request.method == "GET":
        context = {"queue": {"name": queue.name}, "kind": name, "job_id": job.id,
                   "subject": f"job {job.id} ({job.name}) of {queue.name}"}  # fmt: skip
        return _confirm(request, action, context, back)
    fields = await _checked_form(request)
    if name == "retry":
        state = str(await queue.get_job_state(job.id))
        return await _outcome(
            request,
            back,
            lambda: _say(job.retry("completed" if state == "completed" else "failed"), "retried"),
        )
    if name == "promote":
        return await _outcome(request, back, lambda: _say(job.promote(), "promoted"))
    if name == "cancel":
        reason = _text(fields, "reason").strip()

        async def cancel() -> str:
            state = await queue.cancel(job.id, reason)
            return f"cancelling {job.id} (active: its worker stops it)" if str(state) == "active" \
                else f"cancelled {job.id}"  # fmt: skip

        return await _outcome(request, back, cancel)
    state = str(await queue.get_job_state(job.id))

    async def remove() -> str:
        await job.remove()
        return f"removed job {job.id}"

    try:
        message = await remove()
    except CorralError as exc:
        flash(request, "error", str(exc))
        return RedirectResponse(back, status_code=303)
    flash(request, "ok", message)
    to = links(request).queue(queue.name, *([state] if state in STATES else []))
    return RedirectResponse(to, status_code=303)
