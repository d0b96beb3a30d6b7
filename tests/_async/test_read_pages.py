"""``get_jobs`` reads big ranges in pages of ids (one command each): the pages join up."""

from __future__ import annotations

import pytest

from corral import AsyncQueue
from corral._async import queue_getters


@pytest.mark.parametrize("asc", [False, True])
@pytest.mark.parametrize(("start", "end"), [(0, -1), (1, 8), (2, 2), (3, -3), (5, 100)])
async def test_pages_give_what_one_read_gives(
    queue: AsyncQueue, monkeypatch: pytest.MonkeyPatch, asc: bool, start: int, end: int
) -> None:
    for i in range(5):
        await queue.add("w", {"i": i})
    for i in range(5):
        await queue.add("d", {"i": i}, delay=60 + i)
    states = ["waiting", "delayed"]
    whole = [job.id for job in await queue.get_jobs(states, start, end, asc=asc)]
    monkeypatch.setattr(queue_getters, "READ_PAGE", 2)
    paged = [job.id for job in await queue.get_jobs(states, start, end, asc=asc)]
    assert paged == whole
    assert len(set(paged)) == len(paged)
