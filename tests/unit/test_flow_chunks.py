"""How a flow is cut into chunks (pure): bounds, and which parents are marked and released."""

from __future__ import annotations

from corral._flow_chunks import Chunk, cut


def test_a_flow_that_fits_is_one_chunk_releasing_every_parent() -> None:
    # 0 <- [1 <- [3, 4], 2]
    parents = [-1, 0, 0, 1, 1]
    assert cut(parents, [10] * 5, max_jobs=5) == [Chunk(0, 5, mark=[], done=[0, 1])]


def test_a_parent_is_marked_until_the_chunk_of_its_last_child() -> None:
    parents = [-1, 0, 0, 1, 1]
    assert cut(parents, [10] * 5, max_jobs=2) == [
        Chunk(0, 2, mark=[0, 1], done=[]),
        Chunk(2, 4, mark=[], done=[0]),
        Chunk(4, 5, mark=[], done=[1]),
    ]


def test_a_parent_with_all_its_children_in_its_chunk_is_not_marked() -> None:
    # 0 <- [1, 2], 3 <- [4]: two trees (add_bulk)
    parents = [-1, 0, 0, -1, 3]
    assert cut(parents, [1] * 5, max_jobs=3) == [
        Chunk(0, 3, mark=[], done=[0]),
        Chunk(3, 5, mark=[], done=[3]),
    ]


def test_bytes_bound_a_chunk_and_a_big_job_is_a_chunk_of_its_own() -> None:
    parents = [-1, 0, 0, 0]
    chunks = cut(parents, [10, 100, 10, 10], max_jobs=10, max_bytes=50)
    assert [(c.start, c.end) for c in chunks] == [(0, 1), (1, 2), (2, 4)]
    assert (chunks[0].mark, chunks[2].done) == ([0], [0])


def test_a_leaf_alone_has_nothing_to_release() -> None:
    assert cut([-1], [5]) == [Chunk(0, 1)]
