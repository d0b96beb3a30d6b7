"""Who may fill a free slot of a ``Worker({"interactive": 8, "background": 4}, ...)``. Pure.

A lanes worker runs one inner worker per lane (a queue) on one event loop; their slots draw on
one :class:`LanePolicy`, each through its :class:`Lane` (what :class:`~corral._slots.Slots`
asks, as it asks a :class:`~corral._rotation.Rotation` of a sharded worker). Each lane owns
its reserved slots: without borrowing a lane holds at most its count, whatever the others do.
With borrowing, a lane may also fill the free slots of lanes that want none (idle: their fetch
came back short, or they stopped fetching), never those that a lane with work still claims
(its free reserved slots), nor the ``spare`` ones an idle lane keeps for its next jobs.
Nothing is preempted: a borrowed slot returns to its owner when its job ends, because the
finish then takes no next job for the borrower (fetch-next) while a lane that wants slots is
short of its count and no free slot covers it.

A lane *wants* slots from the start, and again from the moment its fetch loop finds no room,
until a fetch of its comes back with fewer jobs than it asked for (its queue has no more ready
work for now) or it stops fetching. While its fetch is out, the slots it asked for count as
held, so nobody else fills them meanwhile.
"""

from __future__ import annotations

from collections.abc import Mapping, Sized
from typing import Protocol

from corral import options
from corral.errors import InvalidOptionError


class Member(Protocol):
    """What the policy sees of one lane's slots (a :class:`~corral._slots.Slots`)."""

    #: The jobs the lane holds (a lease each).
    @property
    def leases(self) -> Sized: ...

    #: Set to wake the lane's fetch loop.
    @property
    def freed(self) -> _Settable: ...


class _Settable(Protocol):
    def set(self) -> None: ...


def check_lanes(lanes: object) -> dict[str, int]:
    """The lanes of a worker, checked: ``{queue name: reserved slots}``, at least one."""
    if not isinstance(lanes, Mapping):
        raise InvalidOptionError(f"lanes must be a mapping of queue name -> slots, got {lanes!r}")
    if not lanes:
        raise InvalidOptionError("lanes must name at least one queue, got {}")
    checked: dict[str, int] = {}
    for name, count in lanes.items():
        if not isinstance(name, str):
            raise InvalidOptionError(f"a lane's name must be a queue name (str), got {name!r}")
        options.check_name("lane (queue name)", name, colon=False)
        checked[name] = options.int_option(f"slots of lane {name!r}", count, 1)
    return checked


class Lane:
    """One lane's view of the policy: what its slots ask (see :class:`LanePolicy`)."""

    def __init__(self, policy: LanePolicy, name: str, reserved: int) -> None:
        self.policy = policy
        self.name = name
        #: The slots this lane owns.
        self.reserved = reserved
        #: Set by :meth:`LanePolicy.join`, before anything asks.
        self.member: Member | None = None
        #: Slots of fetches on their way (their jobs are not leases yet).
        self.fetching = 0
        #: Its fetch loop found no room, or its queue may hold more work. True until its
        #: first fetch comes back short: a lane is not idle before it has looked.
        self.wanting = True

    def held(self) -> int:
        """Slots in use by this lane: its leases and its fetches on their way."""
        assert self.member is not None
        return len(self.member.leases) + self.fetching

    def claim(self) -> int:
        """The free slots of its own that this lane keeps from borrowers: all of them while
        it wants slots, else up to the policy's ``spare``."""
        free = max(0, self.reserved - self.held())
        return free if self.wanting else min(free, self.policy.spare)

    # -- what Slots asks (corral._rotation.Pool) ----------------------------------------

    def room(self, member: object) -> int:
        """How many slots the lane may fill now; 0 puts it among the lanes that want some."""
        room = self.policy.room_of(self)
        if room <= 0:
            self.wanting = True
        return room

    def reserve(self, count: int) -> None:
        """A fetch of ``count`` jobs goes out: its slots are the lane's until it answers."""
        self.fetching += count

    def unreserve(self, count: int, got: int = 0) -> None:
        """The fetch answered with ``got`` jobs (leases now); a short answer means the lane's
        queue has no more ready work: it wants no more slots for now."""
        self.fetching -= count
        self.wanting = got >= count
        self.policy.wake()

    def may_keep(self, member: object) -> bool:
        """Whether a job of this lane that finishes may take the lane's next one (the job
        still holds its slot)."""
        return self.policy.may_keep(self)

    def may_start(self) -> bool:
        """Whether a job a finish took may start."""
        return self.policy.room_of(self) > 0

    def wake(self) -> None:
        self.policy.wake()

    def leave(self, member: object) -> None:
        """The lane stops fetching: it wants nothing more, its free slots may be lent."""
        self.wanting = False
        self.policy.wake()


class LanePolicy:
    """The slots of every lane of one worker.

    Args:
        lanes: queue name -> the slots reserved for it (checked by :func:`check_lanes`).
        borrow: whether a lane may fill the free slots of lanes that want none.
        spare: with ``borrow``, how many of its free slots a lane that wants none still keeps
            for its next jobs (they start at once rather than when a borrowed job ends).
    """

    def __init__(self, lanes: Mapping[str, int], *, borrow: bool, spare: int = 0) -> None:
        if not isinstance(borrow, bool):
            raise InvalidOptionError(f"borrow must be True or False, got {borrow!r}")
        self.borrow = borrow
        self.spare = options.int_option("spare", spare, 0)
        if spare and not borrow:
            raise InvalidOptionError("spare needs borrow=True (without it nothing is lent)")
        self.lanes = {name: Lane(self, name, count) for name, count in check_lanes(lanes).items()}
        #: How many jobs run at once over every lane.
        self.concurrency = sum(lane.reserved for lane in self.lanes.values())

    def join(self, name: str, member: Member) -> Lane:
        """``member`` is the slots of lane ``name`` from now on; its view of the policy."""
        lane = self.lanes[name]
        lane.member = member
        return lane

    def held(self) -> int:
        """Slots in use over every lane."""
        return sum(lane.held() for lane in self.lanes.values())

    def room_of(self, lane: Lane) -> int:
        """How many slots ``lane`` may fill now: its own free ones, and with borrowing the
        free ones that no other lane claims (slots lent out still count as held: a lane whose
        slots are lent gets them back as the borrowed jobs end)."""
        if not self.borrow:
            return max(0, lane.reserved - lane.held())
        claims = sum(other.claim() for other in self.lanes.values() if other is not lane)
        return max(0, self.concurrency - self.held() - claims)

    def may_keep(self, lane: Lane) -> bool:
        held = lane.held()
        if held <= lane.reserved:
            return True  # its own slot
        if not self.borrow:
            return False
        # A borrowed slot: kept unless a lane claims more of its own slots than are free.
        claims = sum(other.claim() for other in self.lanes.values() if other is not lane)
        return self.concurrency - self.held() >= claims

    def wake(self) -> None:
        """A slot may be free: every lane that wants slots and may fill one looks."""
        for lane in self.lanes.values():
            if lane.wanting and lane.member is not None and self.room_of(lane) > 0:
                lane.member.freed.set()
