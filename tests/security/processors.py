"""A processor the TLS tests run by name (``corral worker``, child processes)."""

from __future__ import annotations

from typing import Any

from corral import Job


def double(job: Job) -> Any:
    """A plain function: the worker runs it in a child process with ``--processes``."""
    return job.data["n"] * 2
