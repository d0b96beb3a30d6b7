"""The lanes' slot policy without a server: reservations, borrowing, giving back, checks."""

from __future__ import annotations

import asyncio
from collections.abc import Sized

import pytest

from corral._lane_policy import Lane, LanePolicy, check_lanes
from corral.errors import InvalidOptionError


class Slots:
    """What the policy sees of one lane: its leases and the event that wakes its fetch loop."""

    def __init__(self) -> None:
        self.leases: Sized = []
        self.freed = asyncio.Event()

    def hold(self, n: int) -> None:
        self.leases = list(range(n))


def lanes(borrow: bool, **counts: int) -> tuple[LanePolicy, dict[str, tuple[Lane, Slots]]]:
    policy = LanePolicy(counts, borrow=borrow)
    joined = {}
    for name in counts:
        slots = Slots()
        joined[name] = (policy.join(name, slots), slots)
    return policy, joined


def idle(lane: Lane) -> None:
    """The lane's fetch came back empty: it wants nothing now."""
    lane.reserve(1)
    lane.unreserve(1, 0)


def test_without_borrow_each_lane_has_its_count_and_no_more() -> None:
    policy, joined = lanes(False, fast=3, slow=1)
    (fast, fast_slots), (slow, slow_slots) = joined["fast"], joined["slow"]
    assert policy.concurrency == 4
    idle(fast)
    assert slow.room(slow_slots) == 1  # the idle lane's three free slots are not lent
    slow_slots.hold(1)
    assert slow.room(slow_slots) == 0 and slow.wanting
    assert slow.may_keep(slow_slots)  # its own slot: fetch-next goes on
    slow_slots.hold(2)  # (cannot happen: a second job would be on a slot not its own)
    assert not slow.may_keep(slow_slots)
    assert fast.room(fast_slots) == 3
    slow_slots.hold(1)
    assert not slow.may_start()  # a job a finish took while the lane is full does not start


def test_a_lane_is_not_idle_before_its_first_fetch() -> None:
    _, joined = lanes(True, fast=3, slow=1)
    (fast, fast_slots), (slow, slow_slots) = joined["fast"], joined["slow"]
    assert fast.wanting and slow.wanting
    assert slow.room(slow_slots) == 1  # fast has not looked yet: its slots are its own
    slow.reserve(1)
    assert fast.room(fast_slots) == 3
    fast.reserve(3)
    fast.unreserve(3, 0)  # fast found nothing: its slots may be lent, and slow looks again
    assert fast.wanting is False
    slow.unreserve(1, 1)
    slow_slots.hold(1)
    assert slow.wanting and slow_slots.freed.is_set()
    assert slow.room(slow_slots) == 3


def test_borrowed_slots_return_to_a_lane_that_has_work_again() -> None:
    policy, joined = lanes(True, fast=3, slow=1)
    (fast, fast_slots), (slow, slow_slots) = joined["fast"], joined["slow"]
    idle(fast)
    slow_slots.hold(4)  # slow borrowed every free slot of fast
    assert slow.may_keep(slow_slots)  # nobody claims them: fetch-next goes on
    assert fast.room(fast_slots) == 0 and fast.wanting  # fast's work arrives: nothing free
    assert not slow.may_keep(slow_slots)  # a borrowed job that ends gives its slot back
    slow_slots.hold(3)
    assert not slow.may_start()  # a job its finish took anyway does not start
    slow_slots.freed.clear()
    fast_slots.freed.clear()
    slow.wake()
    assert fast_slots.freed.is_set() and not slow_slots.freed.is_set()
    assert slow.room(slow_slots) == 0  # the free slot is fast's
    assert fast.room(fast_slots) == 1
    fast.reserve(1)  # while its fetch is out, fast still claims the rest of its slots
    assert not slow.may_keep(slow_slots)
    fast.unreserve(1, 1)
    fast_slots.hold(1)
    assert fast.wanting  # it got all it asked for: more may be waiting
    assert not slow.may_keep(slow_slots)
    assert policy.held() == 4


def test_a_lane_over_its_count_keeps_slots_that_free_slots_cover() -> None:
    _, joined = lanes(True, a=2, b=2, c=2)
    (a, a_slots), (b, b_slots), (c, c_slots) = joined["a"], joined["b"], joined["c"]
    idle(c)  # b has not looked yet: it claims its two slots
    a_slots.hold(4)  # a borrowed c's two
    assert a.may_keep(a_slots)  # b's claim is covered by the two slots still free
    a_slots.hold(5)
    assert not a.may_keep(a_slots)  # it would not be
    assert b.room(b_slots) == 1 and c.room(c_slots) == 0
    a_slots.hold(4)
    b_slots.hold(2)
    assert c.room(c_slots) == 0 and c.wanting  # c's work arrives: a holds its slots
    assert b.may_keep(b_slots)  # b is within its count
    assert not a.may_keep(a_slots)  # a's borrowed jobs give c's slots back as they end


def test_a_lane_that_stops_fetching_lends_its_slots() -> None:
    _, joined = lanes(True, fast=2, slow=2)
    (fast, fast_slots), (slow, slow_slots) = joined["fast"], joined["slow"]
    slow_slots.hold(2)
    assert slow.room(slow_slots) == 0  # fast has not looked yet
    fast.leave(fast_slots)  # its run is over (burst drained, closing)
    assert slow_slots.freed.is_set() and slow.room(slow_slots) == 2


def test_an_idle_lane_keeps_its_spare_slots() -> None:
    policy = LanePolicy({"fast": 3, "slow": 1}, borrow=True, spare=1)
    fast_slots, slow_slots = Slots(), Slots()
    fast, slow = policy.join("fast", fast_slots), policy.join("slow", slow_slots)
    idle(fast)
    slow_slots.hold(1)
    assert slow.room(slow_slots) == 2  # fast keeps one of its three free slots
    slow_slots.hold(3)
    assert slow.room(slow_slots) == 0 and slow.may_keep(slow_slots)
    assert fast.room(fast_slots) == 1  # fast's next job starts at once
    fast.reserve(1)
    fast.unreserve(1, 1)
    fast_slots.hold(1)
    assert not slow.may_keep(slow_slots)  # fast has work: its other slots come back
    with pytest.raises(InvalidOptionError, match="spare needs borrow=True"):
        LanePolicy({"a": 1}, borrow=False, spare=1)
    with pytest.raises(InvalidOptionError, match="spare"):
        LanePolicy({"a": 1}, borrow=True, spare=-1)


@pytest.mark.parametrize(
    ("value", "error"),
    [
        ({}, "at least one queue"),
        ([("a", 1)], "must be a mapping"),
        ({"a": 0}, "slots of lane 'a'"),
        ({"a": "2"}, "slots of lane 'a'"),
        ({"a": False}, "slots of lane 'a'"),
        ({"a:b": 1}, "lane"),
        ({3: 1}, "a lane's name must be a queue name"),
    ],
)
def test_bad_lanes(value: object, error: str) -> None:
    with pytest.raises(InvalidOptionError, match=error):
        check_lanes(value)


def test_good_lanes_and_borrow() -> None:
    assert check_lanes({"interactive": 8, "background": 4}) == {"interactive": 8, "background": 4}
    with pytest.raises(InvalidOptionError, match="borrow must be True or False"):
        LanePolicy({"a": 1}, borrow=1)  # type: ignore[arg-type]
