# Generated from corral/_async/state_getters.py by scripts/unasync.py: do not edit.
"""The one-state getters (``get_waiting``, ``get_failed``...), written once over ``get_jobs``:
a queue's own and a sharded queue's, merged over its shards, are the same calls."""

from __future__ import annotations

from collections.abc import Iterable

from corral._sync.job import Job


class StateGetters:
    """``get_<state>(start, end)`` for every state, in the order BullMQ gives each."""

    def get_jobs(
        self,
        states: str | Iterable[str] | None = None,
        start: int = 0,
        end: int = -1,
        *,
        asc: bool = False,
    ) -> list[Job]:
        raise NotImplementedError

    def get_waiting(self, start: int = 0, end: int = -1) -> list[Job]:
        """Waiting jobs, the next to run first (``get_jobs("waiting", start, end, asc=True)``)."""
        return self.get_jobs("waiting", start, end, asc=True)

    def get_active(self, start: int = 0, end: int = -1) -> list[Job]:
        """Active jobs, the longest running first."""
        return self.get_jobs("active", start, end, asc=True)

    def get_delayed(self, start: int = 0, end: int = -1) -> list[Job]:
        """Delayed jobs, the first due first."""
        return self.get_jobs("delayed", start, end, asc=True)

    def get_prioritized(self, start: int = 0, end: int = -1) -> list[Job]:
        """Prioritized jobs, the next to run first."""
        return self.get_jobs("prioritized", start, end, asc=True)

    def get_waiting_children(self, start: int = 0, end: int = -1) -> list[Job]:
        """Parents waiting for their children, the oldest first."""
        return self.get_jobs("waiting-children", start, end, asc=True)

    def get_completed(self, start: int = 0, end: int = -1) -> list[Job]:
        """Completed jobs, the last finished first."""
        return self.get_jobs("completed", start, end, asc=False)

    def get_failed(self, start: int = 0, end: int = -1) -> list[Job]:
        """Failed jobs, the last finished first."""
        return self.get_jobs("failed", start, end, asc=False)
