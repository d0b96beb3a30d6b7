"""The no-op processors of the ``drain_children`` workload, importable by name: child
processes load ``"bench.processors:noop"``, and the in-process workers use the same
functions, so in-process and child-process runs execute the same code.
"""

from __future__ import annotations

from typing import Any


def noop(job: Any) -> None:
    """A plain function: in-process it runs in the worker's threads, else in a child."""
    return None


async def noop_async(job: Any) -> None:
    """The ``async def`` twin: in-process it runs on the worker's event loop."""
    return None
