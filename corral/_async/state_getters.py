"""The one-state getters (``get_waiting``, ``get_failed``...), written once over ``get_jobs``:
a queue's own and a sharded queue's, merged over its shards, are the same calls."""

from __future__ import annotations

from collections.abc import Iterable

from corral._async.job import AsyncJob


class AsyncStateGetters:
    """``get_<state>(start, end)`` for every state, in the order BullMQ gives each."""

    async def get_jobs(
        self,
        states: str | Iterable[str] | None = None,
        start: int = 0,
        end: int = -1,
        *,
        asc: bool = False,
    ) -> list[AsyncJob]:
        raise NotImplementedError

    async def get_waiting(self, start: int = 0, end: int = -1) -> list[AsyncJob]:
        """Waiting jobs, the next to run first (``get_jobs("waiting", start, end, asc=True)``)."""
        return await self.get_jobs("waiting", start, end, asc=True)

    async def get_active(self, start: int = 0, end: int = -1) -> list[AsyncJob]:
        """Active jobs, the longest running first."""
        return await self.get_jobs("active", start, end, asc=True)

    async def get_delayed(self, start: int = 0, end: int = -1) -> list[AsyncJob]:
        """Delayed jobs, the first due first."""
        return await self.get_jobs("delayed", start, end, asc=True)

    async def get_prioritized(self, start: int = 0, end: int = -1) -> list[AsyncJob]:
        """Prioritized jobs, the next to run first."""
        return await self.get_jobs("prioritized", start, end, asc=True)

    async def get_waiting_children(self, start: int = 0, end: int = -1) -> list[AsyncJob]:
        """Parents waiting for their children, the oldest first."""
        return await self.get_jobs("waiting-children", start, end, asc=True)

    async def get_completed(self, start: int = 0, end: int = -1) -> list[AsyncJob]:
        """Completed jobs, the last finished first."""
        return await self.get_jobs("completed", start, end, asc=False)

    async def get_failed(self, start: int = 0, end: int = -1) -> list[AsyncJob]:
        """Failed jobs, the last finished first."""
        return await self.get_jobs("failed", start, end, asc=False)
