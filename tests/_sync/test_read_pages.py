# Generated from tests/_async/test_read_pages.py by scripts/unasync.py: do not edit.
"""``get_jobs`` reads big ranges in pages of ids (one command each): the pages join up."""

from __future__ import annotations

import pytest

from corral import Queue
from corral._sync import queue_getters


@pytest.mark.parametrize("asc", [False, True])
@pytest.mark.parametrize(("start", "end"), [(0, -1), (1, 8), (2, 2), (3, -3), (5, 100)])
def test_pages_give_what_one_read_gives(
    queue: Queue, monkeypatch: pytest.MonkeyPatch, asc: bool, start: int, end: int
) -> None:
    for i in range(5):
        queue.add("w", {"i": i})
    for i in range(5):
        queue.add("d", {"i": i}, delay=60 + i)
    states = ["waiting", "delayed"]
    whole = [job.id for job in queue.get_jobs(states, start, end, asc=asc)]
    monkeypatch.setattr(queue_getters, "READ_PAGE", 2)
    paged = [job.id for job in queue.get_jobs(states, start, end, asc=asc)]
    assert paged == whole
    assert len(set(paged)) == len(paged)
