"""The pure side of sharded queues: shard names and slots, where a job goes, the shared slots."""

from __future__ import annotations

import asyncio
from collections.abc import Sized

import pytest
from redis.crc import key_slot

from corral import _shards
from corral._keys import QueueKeys, slot_of
from corral._rotation import Rotation
from corral.errors import InvalidOptionError


def masters_ranges(masters: int) -> list[range]:
    """The slots of each master of a cluster made by ``valkey-cli --cluster create``: equal
    ranges with the boundaries rounded to the nearest slot."""
    per = 16384 / masters
    bounds = [round(i * per) for i in range(masters)] + [16384]
    return [range(bounds[i], bounds[i + 1]) for i in range(masters)]


@pytest.mark.parametrize("shards", [2, 3, 4, 5, 6, 7, 8, 16, 100, 256])
def test_each_shard_is_in_one_slot_of_its_own_range(shards: int) -> None:
    names = _shards.shard_names("orders", shards)
    assert len(names) == shards
    slots = [_shards.shard_slot(name) for name in names]
    assert len(set(slots)) == shards
    for index, (name, slot) in enumerate(zip(names, slots, strict=True)):
        assert ":" not in name  # BullMQ refuses ':' in a queue name
        keys = QueueKeys(name, "bull")
        assert slot_of(keys.base) == slot  # every key of the shard: one slot
        assert {key_slot(k.encode()) for k in [*keys.script_keys(), keys.job("x")]} == {slot}
        # In the index-th of N equal ranges, whichever way a tool rounds the boundaries.
        assert index * 16384 // shards <= slot < (index + 1) * 16384 // shards
        assert slot in masters_ranges(shards)[index]


def test_names_are_the_same_in_every_process_and_shard_0_for_every_count() -> None:
    assert _shards.shard_names("orders", 3) == _shards.shard_names("orders", 3)
    firsts = {_shards.shard_names("orders", n)[0] for n in (2, 3, 7, 64, 255, 256)}
    assert len(firsts) == 1  # where processes that disagree on N meet
    assert _shards.shard_names("orders", 3) != _shards.shard_names("invoices", 3)
    assert _shards.shard_names("orders", 1) == ("orders",)


@pytest.mark.parametrize("shards", [0, 257, True, "3", None])
def test_a_bad_count_is_refused(shards: object) -> None:
    with pytest.raises(InvalidOptionError, match="shards must be an integer from 1 to 256"):
        _shards.check_shards(shards)


def test_a_hash_tag_in_the_prefix_or_a_brace_in_the_name_is_refused() -> None:
    with pytest.raises(InvalidOptionError, match=r"prefix '\{bull\}' has a hash tag"):
        _shards.check_sharding("orders", "{bull}", 3)
    with pytest.raises(InvalidOptionError, match="has a hash tag"):
        _shards.check_sharding("orders", "bu{ll", 2)
    with pytest.raises(InvalidOptionError, match="has a brace"):
        _shards.check_sharding("{orders}", "bull", 2)
    with pytest.raises(InvalidOptionError, match="at most 992 characters"):
        _shards.check_sharding("o" * 1000, "bull", 2)
    _shards.check_sharding("{orders}", "{bull}", 1)  # one shard is the plain queue


def test_a_job_goes_to_the_shard_of_what_names_it() -> None:
    n = 5
    assert _shards.shard_of("invoice-7", n) == _shards.key_of("invoice-7", n)
    # A scheduler's iterations are in the scheduler's shard.
    assert _shards.shard_of("repeat:nightly:1700000000000", n) == _shards.key_of("nightly", n)
    assert _shards.shard_of("anything", 1) == 0
    ids = [f"id-{i}" for i in range(200)]
    by_dedup = next(i for i in ids if _shards.key_of(i, n) == _shards.key_of("d", n))
    assert _shards.route(
        n, job_id=by_dedup, dedup_id="d", idempotency_key=None, parent_shard=None
    ) == _shards.key_of("d", n)
    unnamed = _shards.route(n, job_id=None, dedup_id=None, idempotency_key=None, parent_shard=None)
    assert unnamed is None
    other = next(i for i in ids if _shards.key_of(i, n) != _shards.key_of("d", n))
    with pytest.raises(InvalidOptionError, match="deduplication id 'd' is in shard"):
        _shards.route(n, job_id=other, dedup_id="d", idempotency_key=None, parent_shard=None)
    with pytest.raises(InvalidOptionError, match="its parent is in shard"):
        _shards.route(
            n,
            job_id=None,
            dedup_id=None,
            idempotency_key="k",
            parent_shard=(_shards.key_of("k", n) + 1) % n,
        )


def test_a_parent_must_be_in_a_shard_of_the_queue() -> None:
    names = _shards.shard_names("orders", 3)
    assert _shards.parent_shard({"id": "p", "queue": f"bull:{names[2]}"}, "bull", names) == 2
    with pytest.raises(InvalidOptionError, match="not in a shard of this queue"):
        _shards.parent_shard({"id": "p", "queue": "bull:reports"}, "bull", names)


def test_made_ids_fall_in_their_shard_and_never_repeat() -> None:
    maker, other = _shards.IdMaker(4), _shards.IdMaker(4)
    made = [maker.make(i % 4) for i in range(400)] + [other.make(0) for _ in range(100)]
    assert len(set(made)) == 500
    assert [_shards.shard_of(i, 4) for i in made[:400]] == [i % 4 for i in range(400)]
    assert all(not i.isdigit() and ":" not in i for i in made)


def test_cut_takes_redis_style_bounds() -> None:
    items = list(range(10))
    assert _shards.cut(items, 0, -1) == items
    assert _shards.cut(items, 2, 4) == [2, 3, 4]
    assert _shards.cut(items, -3, -1) == [7, 8, 9]
    assert _shards.cut(items, 8, 20) == [8, 9]
    assert _shards.cut(items, 5, 2) == []


# -- the slots shards share ---------------------------------------------------------------


class Shard:
    """What a rotation sees of one shard: its leases and the event that wakes its fetch loop."""

    def __init__(self) -> None:
        self.leases: Sized = []
        self.freed = asyncio.Event()

    def hold(self, n: int) -> None:
        self.leases = list(range(n))


async def test_a_shard_first_in_line_gets_the_slot_that_frees() -> None:
    busy, trickle, third = Shard(), Shard(), Shard()
    rotation = Rotation(2)
    for shard in (busy, trickle, third):
        rotation.join(shard)
    busy.hold(2)
    assert rotation.room(trickle) == 0  # nothing free: in line
    assert rotation.room(third) == 0
    # The busy shard holds more than its share (2 slots / 3 shards wanting): a job that
    # finishes gives its slot back rather than taking the shard's next job.
    assert not rotation.may_keep(busy)
    busy.hold(1)
    rotation.wake()
    assert trickle.freed.is_set() and not third.freed.is_set()
    assert rotation.room(third) == 0  # not its turn
    assert rotation.room(trickle) == 1
    trickle.hold(1)
    assert rotation.room(busy) == 0  # the busy shard waits behind the third
    assert rotation.may_keep(trickle)  # within its share
    rotation.leave(third)
    trickle.hold(0)
    rotation.wake()
    assert busy.freed.is_set() and rotation.room(busy) == 1


async def test_a_shard_alone_uses_every_slot() -> None:
    a, b = Shard(), Shard()
    rotation = Rotation(4)
    rotation.join(a)
    rotation.join(b)
    assert rotation.room(a) == 4  # nobody else wants any
    a.hold(4)
    assert rotation.may_keep(a)  # nobody waits: fetch-next goes on
    rotation.concurrency = 8
    assert a.freed.is_set() and b.freed.is_set()
    assert rotation.room(b) == 4
    rotation.reserve(4)  # b's fetch is out: its slots are taken meanwhile
    assert rotation.room(a) == 0
    a.freed.clear()
    rotation.unreserve(4)  # b found nothing: a, first in line, looks again
    assert a.freed.is_set() and rotation.room(a) == 4
    assert rotation.held() == 4 and rotation.may_start()


async def test_free_slots_are_split_among_the_shards_in_line() -> None:
    a, b, c = Shard(), Shard(), Shard()
    rotation = Rotation(6)
    for shard in (a, b, c):
        rotation.join(shard)
    a.hold(6)
    assert rotation.room(b) == rotation.room(c) == 0
    a.hold(0)
    assert rotation.room(b) == 3  # half of the 6: c waits behind it
    assert c.freed.is_set()
    rotation.reserve(3)
    assert rotation.room(c) == 3
