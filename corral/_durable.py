"""Durable adds: the ``WAIT`` an add is followed by, and what its answer means. No I/O.

Replication is asynchronous: an add is acknowledged by the master before any replica has it.
A durable add sends ``WAIT replicas timeout`` on the connection that ran it, and is
acknowledged to its caller only when enough replicas have it (see docs/deployment.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from corral import options
from corral.errors import InvalidOptionError, NotDurableError
from corral.options import Duration

#: The most replicas an add may wait for.
MAX_REPLICAS = 100


def check_flag(value: object) -> bool:
    if not isinstance(value, bool):
        raise InvalidOptionError(f"durable must be True or False, got {value!r}")
    return value


@dataclass(frozen=True, slots=True)
class Durability:
    """A queue's durable-add settings: by default or not, how many replicas, how long."""

    default: bool
    replicas: int
    timeout_ms: int

    @classmethod
    def build(cls, durable: object, replicas: object, timeout: Duration) -> Durability:
        return cls(
            check_flag(durable),
            options.int_option("durable_replicas", replicas, 1, MAX_REPLICAS),
            options.positive_ms("durable_timeout", timeout),
        )

    def wait(self, durable: bool | None) -> tuple[int, int] | None:
        """``(replicas, timeout ms)`` of the ``WAIT`` after an add (``durable`` given for the
        call, else the queue's default), or ``None`` for none."""
        if durable is None:
            durable = self.default
        return (self.replicas, self.timeout_ms) if check_flag(durable) else None


def check_acknowledged(jobs: list[Any], acked: int, wait: tuple[int, int]) -> None:
    """Raise ``NotDurableError`` when fewer than the replicas asked for acknowledged ``jobs``."""
    needed, timeout_ms = wait
    if acked < needed:
        which = f"job {jobs[0].id}" if len(jobs) == 1 else f"{len(jobs)} jobs"
        raise NotDurableError(
            f"{which} written to the master, but {acked} of {needed} replicas acknowledged "
            f"within {timeout_ms / 1000:g} s: a failover now could lose it (adding the same "
            "job_id again is safe)",
            jobs=jobs,
            acknowledged=acked,
            needed=needed,
        )
