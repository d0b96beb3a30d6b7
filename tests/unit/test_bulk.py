"""How add_bulk splits a bulk into calls, and which job each item gets back (corral._bulk)."""

from __future__ import annotations

from typing import Any

import pytest

from corral import _bulk
from corral.errors import InvalidOptionError


def args(job_id: str = "", data: str = "{}", name: str = "j") -> list[Any]:
    """An add_job.lua ARGV list as AsyncQueue._prepare makes it (19 values)."""
    return ["bull:q:", job_id, name, data, "{}", 1, 0, 0, "0", "", "", "0"] + [""] * 7


def split(sizes: list[int], *, max_jobs: int, max_bytes: int) -> list[tuple[int, int]]:
    chunker = _bulk.Chunker()
    chunker.max_jobs, chunker.max_bytes = max_jobs, max_bytes
    for size in sizes:
        chunker.add(args(data="x" * size), short=True)
    return [(chunk.start, chunk.count) for chunk in chunker.chunks]


def test_chunks_are_bounded_by_count() -> None:
    assert split([1] * 7, max_jobs=3, max_bytes=10**6) == [(0, 3), (3, 3), (6, 1)]
    assert split([1] * 6, max_jobs=3, max_bytes=10**6) == [(0, 3), (3, 3)]


def test_chunks_are_bounded_by_bytes_and_a_big_item_goes_alone() -> None:
    # Each record is its data plus 17 bytes (its size, name "j", a timestamp).
    assert split([40, 40, 40, 500, 40], max_jobs=100, max_bytes=120) == [
        (0, 2),
        (2, 1),
        (3, 1),
        (4, 1),
    ]


def test_records_carry_what_add_jobs_reads() -> None:
    chunker = _bulk.Chunker()
    chunker.add(args("a", '{"k":1}'), short=True)
    full = args("b")
    chunker.add(full, short=False)
    (chunk,) = chunker.chunks
    assert chunk.records == [4, "a", "j", '{"k":1}', 1, 18, *full[1:]]
    assert (chunk.start, chunk.end) == (0, 2)


def test_a_debounced_item_turns_replacement_tracking_on() -> None:
    chunker = _bulk.Chunker()
    chunker.add(args(), short=True)
    assert not chunker.replaces
    debounced = args()
    debounced[15] = "1"  # add_job's ARGV[16]: replace a delayed holder
    chunker.add(debounced, short=False)
    assert chunker.replaces


def test_without_tracking_each_item_keeps_its_job() -> None:
    replaced = _bulk.Replacements(enabled=False)
    for reply in [["1", 1], ["2", 1, "1"]]:
        replaced.note(reply)
    assert [replaced.final(i) for i in range(2)] == [0, 1]


def test_record_bytes_counts_utf8() -> None:
    assert _bulk.record_bytes(["abc", "é", 5]) == 3 + 2 + 8


def test_the_constants_bound_a_call() -> None:
    assert 0 < _bulk.CHUNK_JOBS <= 1000
    assert 0 < _bulk.CHUNK_BYTES <= 4 << 20


def final(replies: list[list[Any]]) -> list[int]:
    replaced = _bulk.Replacements()
    for reply in replies:
        replaced.note(reply)
    return [replaced.final(i) for i in range(len(replies))]


def test_an_item_without_replacement_keeps_its_own_job() -> None:
    assert final([["1", 1], ["x", 0], ["1", 3], ["9", 2, "", "", "n"]]) == [0, 1, 2, 3]


def test_a_replaced_item_gets_the_job_that_replaced_it_at_the_end_of_a_chain() -> None:
    # 0 created; 1 deduplicated to it; 2 replaces it; 3 replaces 2; 4 names 3's job.
    replies = [["1", 1], ["1", 3], ["2", 1, "1"], ["3", 1, "2"], ["3", 3]]
    assert final(replies) == [3, 3, 3, 3, 4]


def test_a_replaced_job_from_before_the_bulk_changes_nothing() -> None:
    assert final([["7", 1, "3"], ["8", 1]]) == [0, 1]


def test_an_id_created_again_after_its_job_was_replaced_is_a_new_job() -> None:
    # 0 creates "p"; 1 replaces it (debounce); 2 creates "p" anew, 3 names that one.
    assert final([["p", 1], ["2", 1, "p"], ["p", 1], ["p", 0]]) == [1, 1, 2, 3]


def test_bad_items_are_refused() -> None:
    assert _bulk.unpack_item(("n", 1)) == ("n", 1, {})
    for bad in ("name", ("n",), ("n", 1, 2), ("n", 1, {}, 4)):
        with pytest.raises(InvalidOptionError):
            _bulk.unpack_item(bad)
