"""CPU-bound and crash-prone jobs: the kind to run with ``processes=N``."""

import os
from typing import Any

from corral import ChildJob


def count_primes(below: int) -> int:
    sieve = bytearray([1]) * below
    sieve[:2] = b"\x00\x00"
    for n in range(2, int(below**0.5) + 1):
        if sieve[n]:
            sieve[n * n :: n] = bytes(len(range(n * n, below, n)))
    return sum(sieve)


def run(job: ChildJob) -> Any:
    if job.name == "primes":
        job.update_progress(0)
        found = count_primes(job.data["below"])
        job.log(f"counted in child {os.getpid()}")
        return found
    if job.name == "crash":
        os.abort()  # a C extension gone wrong: the child dies, the worker goes on
    if job.name == "forever":
        while True:  # stopped at its timeout by killing the child
            pass
    raise ValueError(f"unknown job {job.name!r}")
