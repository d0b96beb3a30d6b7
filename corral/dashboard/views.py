"""Turning jobs and figures into what the templates show: links, times, JSON, trees, charts.

Pure (no I/O): :mod:`corral.dashboard.pages` reads, this formats. Every string it returns is
plain text that the templates escape (Jinja2's autoescape is on for every template); the URLs
quote each path segment, so a queue or job id holding ``/``, ``?`` or ``"`` stays one segment.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any
from urllib.parse import quote, urlencode

from corral.job import JobRecord

#: Characters of JSON (data, options, return value) shown before "... (N more)".
MAX_JSON_CHARS = 64 * 1024
#: Jobs per page of a state's list.
PAGE_SIZE = 50


def _q(segment: str) -> str:
    return quote(segment, safe="")


class Links:
    """The dashboard's URLs under its mount path (``root_path``)."""

    def __init__(self, root: str) -> None:
        self.root = root.rstrip("/")

    def home(self) -> str:
        return self.root + "/"

    def path(self, *segments: str, **query: Any) -> str:
        url = self.root + "/" + "/".join(_q(s) for s in segments)
        given = {k: v for k, v in query.items() if v is not None and v is not False}
        return url + ("?" + urlencode(given) if given else "")

    def static(self, name: str) -> str:
        return f"{self.root}/static/{name}"

    def login(self) -> str:
        return self.root + "/login"

    def logout(self) -> str:
        return self.root + "/logout"

    def live(self) -> str:
        return self.root + "/live"

    def queue(self, name: str, *rest: str, **query: Any) -> str:
        return self.path("queues", name, *rest, **query)

    def state(self, name: str, state: str, page: int | None = None, **query: Any) -> str:
        return self.queue(name, state, page=page if page and page > 1 else None, **query)

    def job(self, name: str, job_id: str, *rest: str, **query: Any) -> str:
        return self.queue(name, "jobs", job_id, *rest, **query)

    def job_key(self, prefix: str, key: str) -> tuple[str, str, str | None]:
        """``(queue, id, link)`` of a full job key ``<prefix>:<queue>:<id>``; the link is
        ``None`` for a key of another prefix (the raw key is shown)."""
        start = prefix + ":"
        if key.startswith(start):
            queue, sep, job_id = key[len(start) :].partition(":")
            if sep and queue and job_id:
                return queue, job_id, self.job(queue, job_id)
        return "", key, None


# -- times ---------------------------------------------------------------------------------


def clock_time(ms: int | None) -> str:
    """``2026-05-01 09:30:00.125 UTC`` (empty for none)."""
    if not ms:
        return ""
    moment = datetime.fromtimestamp(ms / 1000, tz=timezone.utc)
    return moment.strftime("%Y-%m-%d %H:%M:%S.") + f"{moment.microsecond // 1000:03d} UTC"


def duration(seconds: float | None) -> str:
    """``4.2s``, ``3.0m``, ``1.5h``, ``2.0d``; ``-`` for none."""
    if seconds is None:
        return "-"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if abs(seconds) >= size:
            return f"{seconds / size:.1f}{unit}"
    return f"{seconds:.1f}s"


def relative(ms: int | None, now_ms: int) -> str:
    """``5.0s ago`` or ``in 3.0m`` (empty for none)."""
    if not ms:
        return ""
    delta = (now_ms - ms) / 1000
    return f"{duration(delta)} ago" if delta >= 0 else f"in {duration(-delta)}"


def rate(value: float) -> str:
    """A rate per minute: ``12``, ``0.4``."""
    return f"{value:.0f}" if value == int(value) else f"{value:.1f}"


# -- JSON ----------------------------------------------------------------------------------


def pretty(value: Any, limit: int = MAX_JSON_CHARS) -> str:
    """Indented JSON, cut at ``limit`` characters with a note of how much was left out."""
    text = json.dumps(value, indent=2, ensure_ascii=False, default=str, sort_keys=False)
    if len(text) > limit:
        return text[:limit] + f"\n... ({len(text) - limit} more characters)"
    return text


def one_line(value: Any, limit: int = 120) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"


# -- jobs ----------------------------------------------------------------------------------


def detail(state: str, job: JobRecord, now_ms: int) -> str:
    """The column that says the most of a job in its state's list."""
    if state == "failed":
        return job.failed_reason or ""
    if state == "completed":
        return one_line(job.returnvalue)
    if state == "prioritized":
        return f"priority {job.priority}"
    if state == "delayed":
        return f"due {relative(job.timestamp + job.delay, now_ms)}"
    if job.progress not in (None, 0):
        return f"progress {one_line(job.progress)}"
    return ""


def job_row(state: str, job: JobRecord, now_ms: int) -> dict[str, Any]:
    return {
        "id": job.id,
        "name": job.name,
        "state": state,
        "added": relative(job.timestamp, now_ms),
        "added_at": clock_time(job.timestamp),
        "attempts": f"{job.attempts_made}/{job.max_attempts}",
        "detail": detail(state, job, now_ms),
    }


@dataclass(frozen=True)
class Moment:
    """One line of a job's timeline."""

    label: str
    at: str
    ago: str


def timeline(job: JobRecord, now_ms: int) -> list[Moment]:
    """When the job was added, became due, last started and finished, in time order."""
    moments: list[tuple[int, str]] = [(job.timestamp, "added")]
    if job.delay:
        moments.append((job.timestamp + job.delay, "due (delay over)"))
    if job.processed_on:
        moments.append((job.processed_on, f"started (attempt {max(job.attempts_started, 1)})"))
    if job.finished_on:
        moments.append((job.finished_on, "finished"))
    return [
        Moment(label, clock_time(ms), relative(ms, now_ms))
        for ms, label in sorted(moments, key=lambda m: m[0])
        if ms
    ]


def attempts(job: JobRecord) -> list[dict[str, Any]]:
    """The stack trace of every failed attempt kept, newest first (``stacktrace`` is oldest
    first), numbered from the first."""
    traces = list(job.stacktrace or [])
    return [{"number": i + 1, "stack": trace} for i, trace in reversed(list(enumerate(traces)))]


def children(links: Links, prefix: str, deps: dict[str, Any]) -> list[dict[str, Any]]:
    """One entry per child: its queue, id, link, outcome and what the parent keeps of it."""
    rows: list[dict[str, Any]] = []
    for key, value in deps.get("processed", {}).items():
        rows.append(_child(links, prefix, key, "completed", one_line(value)))
    for key in deps.get("failed", []):
        rows.append(_child(links, prefix, key, "failed", "failed the parent"))
    for key, reason in deps.get("ignored", {}).items():
        rows.append(_child(links, prefix, key, "failed (ignored)", str(reason)))
    states: dict[str, str] = deps.get("states", {})
    for key in deps.get("unprocessed", []):
        rows.append(_child(links, prefix, key, states.get(key, "pending"), ""))
    return rows


def _child(links: Links, prefix: str, key: str, outcome: str, note: str) -> dict[str, Any]:
    queue, job_id, link = links.job_key(prefix, key)
    return {"queue": queue, "id": job_id, "link": link, "outcome": outcome, "note": note}


# -- charts --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Chart:
    """A per-minute series drawn as an inline SVG polyline (no script, so the CSP allows it)."""

    points: str
    width: int
    height: int
    peak: int
    total: int
    count: int


def chart(values: list[int], width: int = 240, height: int = 40) -> Chart:
    """The polyline of ``values`` (oldest first) scaled into ``width`` x ``height``."""
    peak = max(values, default=0)
    n = len(values)
    step = width / max(n - 1, 1)
    coords = []
    for i, v in enumerate(values):
        y = height - 1 - (v / peak * (height - 2) if peak else 0)
        coords.append(f"{i * step:.1f},{y:.1f}")
    return Chart(" ".join(coords), width, height, peak, sum(values), n)
