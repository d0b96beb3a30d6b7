"""The concurrency that the shards of a sharded worker share, handed out in turn.

A ``Worker(shards=N)`` runs one inner worker per shard on one event loop; their slots
(:class:`~corral._slots.Slots`) draw on one :class:`Rotation` instead of a concurrency of
their own. A shard whose fetch loop wants a slot and finds none free joins the line, and a
slot that frees goes to the first in line. A shard keeps a slot it holds (fetch-next: the
finish of a job takes the shard's next one in the same call) only while it holds no more than
its fair share, ``concurrency / shards that want slots`` (holding some, or in line), or when
nobody waits: so a busy shard gives slots back, one per finished job, until a trickling shard
has its share, and a busy shard alone uses them all. An empty shard waits on its marker like
any worker and is in no line: it costs its blocking connection, nothing else.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Sized
from typing import Protocol


class Member(Protocol):
    """What the rotation sees of one shard's slots."""

    #: The jobs the shard holds (a lease each).
    @property
    def leases(self) -> Sized: ...

    #: Set to wake the shard's fetch loop.
    @property
    def freed(self) -> asyncio.Event: ...


class Pool(Protocol):
    """What a worker's slots ask of the slots they share with the other inner workers of one
    worker: a :class:`Rotation` (shards), or a lane's view of a
    :class:`~corral._lane_policy.LanePolicy` (lanes)."""

    def room(self, member: Member) -> int: ...
    def reserve(self, count: int) -> None: ...
    def unreserve(self, count: int, got: int = 0) -> None: ...
    def may_keep(self, member: Member) -> bool: ...
    def may_start(self) -> bool: ...
    def wake(self) -> None: ...
    def leave(self, member: Member) -> None: ...


class Rotation:
    """Slots shared by the shards of one worker.

    Args:
        concurrency: how many jobs run at once over all the shards.
    """

    def __init__(self, concurrency: int) -> None:
        self._concurrency = concurrency
        self._members: list[Member] = []
        #: Shards whose fetch loop waits for a slot, first come first.
        self._line: deque[Member] = deque()
        #: Slots given to fetches on their way (their jobs are not leases yet).
        self._reserved = 0

    @property
    def concurrency(self) -> int:
        return self._concurrency

    @concurrency.setter
    def concurrency(self, value: int) -> None:
        self._concurrency = value
        for member in self._members:
            member.freed.set()

    def join(self, member: Member) -> None:
        """A shard's slots draw on this rotation from now on."""
        self._members.append(member)

    def held(self) -> int:
        """Slots in use: the leases of every shard and the fetches on their way."""
        return sum(len(m.leases) for m in self._members) + self._reserved

    def room(self, member: Member) -> int:
        """How many slots ``member`` may fill now: 0 when none is free or another shard is
        first in line (``member`` then joins the line, keeping its place if it is in it)."""
        free = self._concurrency - self.held()
        if free <= 0 or (self._line and self._line[0] is not member):
            if member not in self._line:
                self._line.append(member)
            return 0
        if self._line:
            self._line.popleft()
        # The free slots are split among the shards in line (this one and those behind it);
        # the next one looks at what is left once this one has reserved its part.
        share = min(free, -(-free // (len(self._line) + 1)))
        if share < free and self._line:
            self._line[0].freed.set()
        return share

    def reserve(self, count: int) -> None:
        """A fetch of ``count`` jobs goes out: their slots are taken until it answers."""
        self._reserved += count

    def unreserve(self, count: int, got: int = 0) -> None:
        """The fetch answered with ``got`` jobs (leases now); slots it did not fill are passed
        on (a shard's share does not depend on how many it got)."""
        self._reserved -= count
        self.wake()

    def may_keep(self, member: Member) -> bool:
        """Whether a job of ``member`` that finishes may take the shard's next one (it still
        holds its slot, so ``held`` counts it)."""
        if self.held() > self._concurrency:
            return False
        if not any(m is not member for m in self._line):
            return True
        return len(member.leases) <= self._share()

    def may_start(self) -> bool:
        """Whether a job a finish took may start (the concurrency was not lowered meanwhile)."""
        return self.held() < self._concurrency

    def wake(self) -> None:
        """A slot may be free: the first shard in line looks."""
        if self._line and self._concurrency > self.held():
            self._line[0].freed.set()

    def leave(self, member: Member) -> None:
        """``member`` stops fetching: out of the line, and the next one looks."""
        if member in self._line:
            self._line.remove(member)
        self.wake()

    def _share(self) -> int:
        wanting = sum(1 for m in self._members if len(m.leases) or m in self._line)
        return -(-self._concurrency // max(1, wanting))
