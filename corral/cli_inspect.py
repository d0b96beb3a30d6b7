"""``corral stats``, ``corral jobs`` and ``corral job``: read a queue from a shell.

:mod:`corral.cli` adds :data:`COMMANDS` to its ``main`` group. They only read (no script runs, no
key is written), print rich tables, or one JSON document with ``--json`` (schemas in
docs/cli.md). Errors are one line on stderr (:mod:`corral._cli_errors`): exit status 1 for a
runtime failure (unreachable server, auth, no such queue or job), 2 for a usage error.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import click
from redis import Redis
from redis.cluster import ClusterNode, RedisCluster
from rich.console import Console
from rich.table import Table
from rich.text import Text

from corral import _rates, clock
from corral._cli_errors import CommandFailure, OneLineCommand, cli_errors, no_such_queue
from corral._cli_options import json_option, prefix_option, url_option
from corral._provenance import Provenance, ProvenanceHop
from corral._rates import RATE_KINDS
from corral._sync._redis import LazyClient
from corral._sync.job import Job
from corral._sync.queue import Queue
from corral._sync.queue_getters import workers_in
from corral.connection import (
    ClusterSettings,
    cluster_client_kwargs,
    is_cluster_url,
    parse_cluster_url,
    resolve_url,
)
from corral.job import NEWEST_FIRST, SHOWN_STATES

#: The states ``corral stats`` counts and ``corral jobs`` lists, in the order shown.
STATES = SHOWN_STATES
#: Jobs read per round trip while ``--search`` looks through a state.
_SEARCH_PAGE = 200
#: Table headers of the states whose names are long (the table fits in 120 columns).
_HEADERS = {"prioritized": "prio", "waiting-children": "children", "completed": "done"}


@contextmanager
def connect(url: str | None) -> Iterator[Redis]:
    """One checked client for the whole command (the queues are given it).

    For a ``redis+cluster://`` URL it is a redis-py ``RedisCluster``, which routes each
    command by its key and scans every master; a queue given it opens its own client of its
    slot's master (its prefix or name needs a hash tag, as everywhere on a cluster).
    """
    resolved = resolve_url(url)
    if is_cluster_url(resolved):
        cluster = _cluster_client(parse_cluster_url(resolved))
        try:
            yield cluster  # type: ignore[misc]  # the same commands, routed by key
        finally:
            cluster.close()
        return
    clients = LazyClient(resolved)
    try:
        yield clients.get()
    finally:
        clients.close()


def _cluster_client(settings: ClusterSettings) -> RedisCluster:
    """A ``RedisCluster`` of ``settings``' nodes (it reads the map, so it fails here when no
    node can be reached or the password is wrong)."""
    nodes = [ClusterNode(host, port) for host, port in settings.nodes]  # type: ignore[no-untyped-call]
    return RedisCluster(startup_nodes=nodes, **cluster_client_kwargs(settings))


def _escape_glob(text: str) -> str:
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


def discover_queues(client: Redis, prefix: str) -> list[str]:
    """The queues of ``prefix``: the names of every ``<prefix>:<name>:meta`` or
    ``<prefix>:<name>:id`` key (SCAN, so it does not hold the server), sorted."""
    start = f"{prefix}:"
    names: set[str] = set()
    for suffix in (":meta", ":id"):
        for key in client.scan_iter(match=f"{_escape_glob(prefix)}:*{suffix}", count=1000):
            name = key[len(start) : -len(suffix)]
            if name and ":" not in name:  # not a job's own key (bull:q:<id>:...)
                names.add(name)
    return sorted(names)


def queue_exists(client: Redis, prefix: str, name: str) -> bool:
    """Whether the queue has any key: its meta or id key, else any ``<prefix>:<name>:*``."""
    base = f"{prefix}:{name}"
    if client.exists(f"{base}:meta", f"{base}:id"):
        return True
    return (
        next(iter(client.scan_iter(match=f"{_escape_glob(base)}:*", count=1000)), None) is not None
    )


def open_queue(client: Redis, prefix: str, name: str) -> Queue:
    queue = Queue(name, connection=client, prefix=prefix)  # a bad name: InvalidOptionError
    if not queue_exists(client, prefix, name):
        raise no_such_queue(name, prefix)
    return queue


def _oldest_waiting_age(client: Redis, queue: Queue, now_ms: int) -> float | None:
    """Seconds since the job at the head of the wait list became due (added, or its delay
    over), ``None`` when the list is empty. Prioritized jobs are not looked at."""
    job_id = client.lindex(queue.keys.wait, -1)
    if job_id is None:
        return None
    timestamp, delay = client.hmget(queue.keys.job(str(job_id)), "timestamp", "delay")
    if not timestamp:
        return None
    due = int(timestamp) + int(delay or 0)
    return max(now_ms - due, 0) / 1000


def queue_rates(client: Redis, queue: Queue, now_ms: int) -> dict[str, Any]:
    """Completed and failed jobs per minute (``rates_per_min``) and where each rate came from
    (``rate_source``: ``"metrics"`` or ``"finished"``), in one round trip (see
    :mod:`corral._rates`)."""
    pipe = client.pipeline(transaction=False)
    _rates.queue_rate_reads(pipe, queue.keys, now_ms)
    rates, sources = _rates.rates_from(pipe.execute(), now_ms)
    return {"rates_per_min": rates, "rate_source": sources}


def worker_counts(client: Redis, queues: list[Queue]) -> dict[str, int]:
    """The workers connected to each of ``queues``: one ``CLIENT LIST`` for them all on one
    server; on a cluster, one on the master of each queue's slot."""
    if isinstance(client, RedisCluster):
        return {queue.name: len(queue.get_workers()) for queue in queues}
    entries = client.client_list()
    return {queue.name: len(workers_in(entries, queue.prefix, queue.name)) for queue in queues}


def queue_stats(client: Redis, queue: Queue, workers: int) -> dict[str, Any]:
    """One entry of ``corral stats --json`` (``workers``: from :func:`worker_counts`)."""
    counts = queue.get_job_counts(*STATES)
    now_ms = clock.now_ms()
    return {
        "name": queue.name,
        "paused": queue.is_paused(),
        "counts": counts,
        "workers": workers,
        "oldest_waiting_age_s": _oldest_waiting_age(client, queue, now_ms),
        **queue_rates(client, queue, now_ms),
    }


def rate_text(rate: float) -> str:
    """A rate per minute for a table: ``12``, ``0.4``."""
    return f"{rate:.0f}" if rate == int(rate) else f"{rate:.1f}"


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f}{unit}"
    return f"{seconds:.1f}s"


def _since(ms: int | None) -> str:
    return "-" if not ms else _age(max(clock.now_ms() - ms, 0) / 1000) + " ago"


def _console() -> Console:
    """Rich's console; 120 columns when the output is not a terminal (a pipe, a file) and
    ``COLUMNS`` does not say otherwise, so the tables are not squeezed into 80."""
    console = Console()
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console.width = 120
    return console


def _emit_json(document: Any) -> None:
    click.echo(json.dumps(document, indent=2, ensure_ascii=False, default=str))


@click.command("stats", cls=OneLineCommand)
@click.argument("queues", nargs=-1, metavar="[QUEUE]...")
@prefix_option
@url_option
@json_option
@cli_errors
def stats_command(queues: tuple[str, ...], prefix: str, url: str | None, as_json: bool) -> None:
    """Counts per state, workers, the oldest waiting job and completed and failed jobs per
    minute of each QUEUE (every queue of the prefix when none is named).

    Exit status 0; 1 when a QUEUE named does not exist, or the server cannot be used.
    """
    with connect(url) as client:
        names = list(queues) or discover_queues(client, prefix)
        opened = [open_queue(client, prefix, name) for name in names]
        workers = worker_counts(client, opened)
        rows = [queue_stats(client, queue, workers[queue.name]) for queue in opened]
    if as_json:
        _emit_json({"prefix": prefix, "queues": rows})
        return
    if not rows:
        click.echo(f"no queues under prefix {prefix!r}")
        return
    table = Table(title=f"queues ({prefix})", title_justify="left")
    table.add_column("queue", no_wrap=True, vertical="bottom")
    # Two-line headers (bottom-aligned), so that the table fits in 120 columns.
    for header in (
        *(_HEADERS.get(state, state) for state in STATES),
        "workers",
        "oldest\nwaiting",
        "done\n/min",
        "failed\n/min",
    ):
        table.add_column(header, justify="right", vertical="bottom")
    for row in rows:
        name = Text(row["name"]) + (Text(" (paused)", style="yellow") if row["paused"] else "")
        counts = row["counts"]
        table.add_row(
            name,
            *(str(counts[s]) for s in STATES),
            str(row["workers"]),
            _age(row["oldest_waiting_age_s"]),
            *(rate_text(row["rates_per_min"][kind]) for kind in RATE_KINDS),
        )
    _console().print(table)


def job_document(job: Job, state: str) -> dict[str, Any]:
    """Everything the job hash holds, for ``--json`` (times are ms since the epoch)."""
    provenance = job.provenance
    return {
        "id": job.id,
        "name": job.name,
        "queue": job.queue_name,
        "state": state,
        "data": job.data,
        "opts": job.opts,
        "timestamp": job.timestamp,
        "delay": job.delay,
        "priority": job.priority,
        "processed_on": job.processed_on,
        "finished_on": job.finished_on,
        "progress": job.progress,
        "returnvalue": job.returnvalue,
        "attempts_made": job.attempts_made,
        "attempts_started": job.attempts_started,
        "max_attempts": job.max_attempts,
        "stalled_counter": job.stalled_counter,
        "failed_reason": job.failed_reason,
        "stacktrace": job.stacktrace,
        "processed_by": job.processed_by,
        "parent_key": job.parent_key,
        "repeat_job_key": job.repeat_job_key,
        "provenance": None if provenance is None else dataclasses.asdict(provenance),
    }


def _matches(job: Job, needle: str) -> bool:
    haystack = (job.id, job.name, json.dumps(job.data, default=str), job.failed_reason or "")
    return any(needle in text.lower() for text in haystack)


def find_jobs(
    queue: Queue, states: list[str], limit: int, search: str | None
) -> list[tuple[str, Job]]:
    """Up to ``limit`` jobs of ``states`` (in that order), with ``search`` a case-insensitive
    substring of the id, name, data (as JSON) or failure reason; pages are read until enough
    match, so a search may read the whole of the states."""
    found: list[tuple[str, Job]] = []
    needle = search.lower() if search is not None else None
    for state in states:
        asc = state not in NEWEST_FIRST
        start = 0
        while len(found) < limit:
            size = _SEARCH_PAGE if needle is not None else limit - len(found)
            page = queue.get_jobs(state, start, start + size - 1, asc=asc)
            found.extend((state, job) for job in page if needle is None or _matches(job, needle))
            if len(page) < size:  # the state's end (or jobs removed meanwhile)
                break
            start += size
    return found[:limit]


def _detail(state: str, job: Job) -> str:
    if state == "failed":
        return job.failed_reason or ""
    if state == "completed":
        return json.dumps(job.returnvalue, default=str)
    if state == "prioritized":
        return f"priority {job.priority}"
    if state == "delayed":
        return f"due in {_age(max(job.timestamp + job.delay - clock.now_ms(), 0) / 1000)}"
    if job.progress not in (None, 0):
        return f"progress {json.dumps(job.progress, default=str)}"
    return ""


@click.command("jobs", cls=OneLineCommand)
@click.argument("queue_name", metavar="QUEUE")
@click.option(
    "--state",
    "-s",
    "states",
    type=click.Choice(STATES),
    multiple=True,
    help="State to list (repeat for several) [default: all].",
)
@click.option("--limit", "-n", type=click.IntRange(1, 100_000), default=20, show_default=True)
@click.option("--search", default=None, help="Only jobs whose id, name, data or failure has it.")
@prefix_option
@url_option
@json_option
@cli_errors
def jobs_command(
    queue_name: str,
    states: tuple[str, ...],
    limit: int,
    search: str | None,
    prefix: str,
    url: str | None,
    as_json: bool,
) -> None:
    """List the jobs of QUEUE: finished ones the last finished first, the others the next to
    run first.

    Exit status 0 (also when none match); 1 when QUEUE does not exist or the server cannot
    be used.
    """
    wanted = list(states) or list(STATES)
    with connect(url) as client:
        queue = open_queue(client, prefix, queue_name)
        found = find_jobs(queue, wanted, limit, search)
    if as_json:
        jobs = [job_document(job, state) for state, job in found]
        _emit_json({"queue": queue_name, "prefix": prefix, "states": wanted, "jobs": jobs})
        return
    if not found:
        click.echo(f"no {'/'.join(wanted)} jobs in {queue_name}" + (" match" if search else ""))
        return
    noun = "job" if len(found) == 1 else "jobs"
    table = Table(title=f"{queue_name}: {len(found)} {noun}", title_justify="left")
    for column in ("id", "state", "name", "added", "attempts"):
        table.add_column(column, no_wrap=column in ("id", "state"))
    table.add_column("detail", overflow="fold")
    for state, job in found:
        table.add_row(
            job.id,
            state,
            job.name,
            _since(job.timestamp),
            f"{job.attempts_made}/{job.max_attempts}",
            _detail(state, job),
        )
    _console().print(table)


@click.command("job", cls=OneLineCommand)
@click.argument("queue_name", metavar="QUEUE")
@click.argument("job_id", metavar="ID")
@prefix_option
@url_option
@json_option
@cli_errors
def job_command(queue_name: str, job_id: str, prefix: str, url: str | None, as_json: bool) -> None:
    """Everything about one job: data, options, state, progress, return value, attempts,
    failure reason, the stack trace of every failed attempt kept, and its logs.

    Exit status 0; 1 when QUEUE or the job does not exist, or the server cannot be used.
    """
    with connect(url) as client:
        queue = open_queue(client, prefix, queue_name)
        job = queue.get_job(job_id)
        if job is None:
            raise CommandFailure(f"no such job {job_id!r} in queue {queue_name!r}")
        state = str(queue.get_job_state(job_id))
        lines, total = queue.get_job_logs(job_id)
    document = job_document(job, state)
    document["logs"] = {"count": total, "lines": lines}
    if as_json:
        _emit_json(document)
        return
    _print_job(document)


def _times(doc: dict[str, Any]) -> str:
    parts = [f"added {_since(doc['timestamp'])}"]
    if doc["delay"]:
        parts.append(f"delay {doc['delay'] / 1000:g}s")
    if doc["processed_on"]:
        parts.append(f"started {_since(doc['processed_on'])}")
    if doc["finished_on"]:
        parts.append(f"finished {_since(doc['finished_on'])}")
    return ", ".join(parts)


def _provenance_text(doc: dict[str, Any]) -> str:
    fields = dict(doc["provenance"])
    fields["chain"] = tuple(ProvenanceHop(**hop) for hop in fields["chain"])
    return Provenance(**fields).summary()


def _print_job(doc: dict[str, Any]) -> None:
    console = _console()
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column(overflow="fold")
    rows: list[tuple[str, Any]] = [
        ("job", f"{doc['queue']}/{doc['id']} ({doc['name']})"),
        ("state", doc["state"]),
        ("times", _times(doc)),
        ("attempts", f"{doc['attempts_made']} made of {doc['max_attempts']}"),
        ("priority", doc["priority"] or None),
        ("progress", doc["progress"]),
        ("processed by", doc["processed_by"]),
        ("parent", doc["parent_key"]),
        ("scheduler", doc["repeat_job_key"]),
        ("provenance", None if doc["provenance"] is None else _provenance_text(doc)),
        ("data", json.dumps(doc["data"], default=str)),
        ("options", json.dumps(doc["opts"], default=str)),
    ]
    if doc["state"] == "completed":
        rows.append(("return value", json.dumps(doc["returnvalue"], default=str)))
    rows.append(("failure", doc["failed_reason"]))
    for key, value in rows:
        if value is not None and value != "":
            grid.add_row(key, Text(str(value)))
    console.print(grid)
    traces = doc["stacktrace"]
    for i, trace in enumerate(traces, 1):
        console.rule(f"stack trace {i} of {len(traces)} (oldest first)", align="left")
        console.print(Text(trace))
    logs = doc["logs"]
    if logs["count"]:
        console.rule(f"logs ({logs['count']} lines)", align="left")
        for line in logs["lines"]:
            console.print(Text(line))


#: What :mod:`corral.cli` registers on ``main``.
COMMANDS = (stats_command, jobs_command, job_command)
