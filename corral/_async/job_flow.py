"""Flow methods of :class:`AsyncJob`: a parent's view of its children, and a child's link.

A mixin of ``AsyncJob`` (kept apart so that ``job.py`` stays one noun). Children are named
by their full job keys (``"bull:queue:<id>"``), since they may live in other queues. The
getters read a parent's ``:processed``, ``:dependencies``, ``:unsuccessful`` and ``:failed``
keys in one MULTI so that the parts agree with each other.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from corral import _codec, _scripts, clock
from corral._async import job_removal
from corral.bounds import MAX_COUNT, check_int
from corral.errors import InvalidOptionError, script_error
from corral.flow_job import Dependencies, DependencyPage

if TYPE_CHECKING:
    from corral._async._queue_base import AsyncQueueBase

# One script per state transition (see each file's header).
_MOVE_TO_WAITING_CHILDREN = _scripts.load("move_to_waiting_children")
_REMOVE_CHILD_DEPENDENCY = _scripts.load("remove_child_dependency")


class AsyncJobFlowMixin:
    """Parent and child methods of :class:`AsyncJob` (BullMQ's flow API of ``Job``)."""

    if TYPE_CHECKING:
        queue: AsyncQueueBase
        id: str
        token: str | None
        parent_key: str | None
        parent: dict[str, Any] | None

    @property
    def queue_qualified_name(self) -> str:
        """``"<prefix>:<queue name>"``: the ``queue`` of a ``parent={...}`` option naming this
        job (BullMQ's ``queueQualifiedName``)."""
        return self.queue.keys.base

    @property
    def _key(self) -> str:
        return self.queue.keys.job(self.id)

    async def _flow_script(self, script: _scripts.Script, *args: Any) -> int:
        reply = int(await self.queue._run(script, [self.queue._job_prefix, self.id, *args]))
        if reply < 0:
            raise script_error(reply, queue=self.queue.name, job_id=self.id)
        return reply

    # -- a parent's children -------------------------------------------------------------------

    async def get_children_values(self) -> dict[str, Any]:
        """The return values of the completed children: full child key -> value."""
        client = await self.queue.client()
        raw: dict[str, str] = await client.hgetall(self._key + ":processed")  # type: ignore[assignment]
        return {key: _codec.loads(value) for key, value in raw.items()}

    async def get_ignored_children_failures(self) -> dict[str, str]:
        """Failed reasons of the children whose failure was ignored
        (``ignore_dependency_on_failure``, or ``continue_parent_on_failure``): key -> reason."""
        client = await self.queue.client()
        raw: dict[str, str] = await client.hgetall(self._key + ":failed")  # type: ignore[assignment]
        return dict(raw)

    async def get_failed_children_values(self) -> dict[str, str]:
        """The same as :meth:`get_ignored_children_failures` (BullMQ's older name)."""
        return await self.get_ignored_children_failures()

    async def get_dependencies(
        self,
        *,
        processed: DependencyPage | None = None,
        unprocessed: DependencyPage | None = None,
        failed: DependencyPage | None = None,
        ignored: DependencyPage | None = None,
    ) -> Dependencies:
        """This job's children by outcome, read atomically (BullMQ's ``getDependencies``).

        With no page asked for, the whole of each kind in one call (parents of up to some
        thousands of children; count with :meth:`get_dependencies_count` first). With pages
        (``processed={"cursor": 0, "count": 100}``...), only the kinds asked for, a page of
        each, and ``next_<kind>_cursor`` to read the next (0 after the last): the sets and
        hashes are read with SSCAN/HSCAN (a page may hold more or fewer than ``count``, a
        child appears once across the pages of a read that the flow does not change),
        ``failed`` by index.

        Returns:
            ``{"processed": {key: return value}, "unprocessed": [key, ...] (sorted),
            "failed": [key, ...] (fail_parent_on_failure children, in failure order),
            "ignored": {key: failed reason}}``, plus the next cursors of a read by pages.

        Raises:
            InvalidOptionError: a page that is not ``{"cursor": n >= 0, "count": n >= 1}``.
        """
        pages = {
            kind: _page(kind, page)
            for kind, page in (
                ("processed", processed),
                ("unprocessed", unprocessed),
                ("failed", failed),
                ("ignored", ignored),
            )
            if page is not None
        }
        if pages:
            return await self._dependency_pages(pages)
        client = await self.queue.client()
        key = self._key
        async with client.pipeline(transaction=True) as pipe:
            pipe.hgetall(key + ":processed")
            pipe.smembers(key + ":dependencies")
            pipe.zrange(key + ":unsuccessful", 0, -1)
            pipe.hgetall(key + ":failed")
            done, pending, unsuccessful, failures = await pipe.execute()
        return Dependencies(
            processed={k: _codec.loads(v) for k, v in done.items()},
            # A flow written in chunks marks a parent with a member that is no job (its key
            # ends with ':'; release_parents.lua) until its last child is written.
            unprocessed=sorted(key for key in pending if not key.endswith(":")),
            failed=list(unsuccessful),
            ignored=dict(failures),
        )

    async def _dependency_pages(self, pages: dict[str, tuple[int, int]]) -> Dependencies:
        client = await self.queue.client()
        key = self._key
        async with client.pipeline(transaction=True) as pipe:
            for kind, (cursor, count) in pages.items():
                if kind == "processed":
                    pipe.hscan(key + ":processed", cursor, count=count)
                elif kind == "unprocessed":
                    pipe.sscan(key + ":dependencies", cursor, count=count)
                elif kind == "ignored":
                    pipe.hscan(key + ":failed", cursor, count=count)
                else:
                    pipe.zrange(key + ":unsuccessful", cursor, cursor + count - 1)
                    pipe.zcard(key + ":unsuccessful")
            replies = iter(await pipe.execute())
        out = Dependencies()
        for kind, (cursor, count) in pages.items():
            if kind == "failed":
                keys, total = list(next(replies)), int(next(replies))
                out["failed"] = keys
                out["next_failed_cursor"] = cursor + count if cursor + count < total else 0
                continue
            after, found = next(replies)
            if kind == "processed":
                out["processed"] = {k: _codec.loads(v) for k, v in found.items()}
                out["next_processed_cursor"] = int(after)
            elif kind == "ignored":
                out["ignored"] = dict(found)
                out["next_ignored_cursor"] = int(after)
            else:
                out["unprocessed"] = sorted(k for k in found if not k.endswith(":"))
                out["next_unprocessed_cursor"] = int(after)
        return out

    async def get_dependencies_count(self) -> dict[str, int]:
        """How many children are processed, unprocessed, failed and ignored (read atomically)."""
        client = await self.queue.client()
        key = self._key
        async with client.pipeline(transaction=True) as pipe:
            pipe.hlen(key + ":processed")
            pipe.scard(key + ":dependencies")
            pipe.zcard(key + ":unsuccessful")
            pipe.hlen(key + ":failed")
            counts = await pipe.execute()
        names = ("processed", "unprocessed", "failed", "ignored")
        return {name: int(n) for name, n in zip(names, counts, strict=True)}

    async def remove_unprocessed_children(self) -> int:
        """Remove the children that have not finished, each with the flow below it.

        A child with an active job in its subtree stays. When the last pending child goes,
        this job is released to run (if it waits in waiting-children).

        Returns:
            How many jobs were removed.

        Raises:
            JobNotFoundError: this job does not exist.
        """
        # A big fan-out is removed in bounded calls (job_removal); a small one in one call.
        return await job_removal.remove_unprocessed(self)

    # -- a child's link to its parent ------------------------------------------------------------

    async def remove_child_dependency(self) -> bool:
        """Detach this unfinished child from its parent; it stays as an ordinary job.

        The parent stops waiting for it, and runs now if it was its last pending child.

        Returns:
            ``True`` when the link was removed, ``False`` when the job has no parent or has
            already finished for its parent (nothing changed). BullMQ raises for a job
            without a parent; corral answers ``False``.

        Raises:
            JobNotFoundError: this job does not exist.
        """
        removed = await self._flow_script(_REMOVE_CHILD_DEPENDENCY, clock.now_ms())
        if removed:
            self.parent_key = None
            self.parent = None
        return bool(removed)

    # -- dynamic children (worker side: needs the lock token) ------------------------------------

    async def move_to_waiting_children(self, token: str | None = None) -> bool:
        """Wait for the children this active job added; then raise ``WaitingChildrenError``.

        The job leaves active for waiting-children (its lock is released, the attempt is not
        counted) and is released to wait when its last pending child finishes; the processor
        then runs again from the start, so keep the step in ``job.data`` (``update_data``).

        Args:
            token: the lock token; ``job.token`` by default.

        Returns:
            ``True`` when the job now waits; ``False`` when no child is pending (nothing
            changed: go on processing).

        Raises:
            JobNotFoundError, LockMissingError, LockMismatchError, NotActiveError: the job
                is gone, or not held with this token; nothing was written.
        """
        held = token if token is not None else (self.token or "0")
        moved = await self._flow_script(_MOVE_TO_WAITING_CHILDREN, held, clock.now_ms())
        if moved:
            self.token = None
        return bool(moved)


def _page(kind: str, page: Any) -> tuple[int, int]:
    """``(cursor, count)`` of a page option, or raise naming it."""
    if not isinstance(page, Mapping) or not set(page) <= {"cursor", "count"}:
        raise InvalidOptionError(f"{kind} must be a page {{'cursor': n, 'count': n}}, got {page!r}")
    cursor = check_int(f"{kind}['cursor']", page.get("cursor", 0), 0, None)
    return cursor, check_int(f"{kind}['count']", page.get("count", 20), 1, MAX_COUNT)
