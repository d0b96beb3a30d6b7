"""kill -9 of worker processes in a loop: each killed worker's jobs come back to wait once
their locks expire and run again elsewhere (at least once), yet every job is completed exactly
once, and the workers alive at the end all consume."""

from __future__ import annotations

import asyncio
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
import redis

from corral import AsyncQueue
from tests.faults.harness import ROOT, add_jobs, audit, eventually


class Process:
    """One worker process, with the jobs it said it started."""

    def __init__(self, proc: asyncio.subprocess.Process, tag: str, log: Path) -> None:
        self.proc = proc
        self.tag = tag
        self.log = log
        self.started: list[str] = []
        self.reader = asyncio.create_task(self._read())

    @classmethod
    async def start(cls, url: str, tag: str, logs: Path) -> Process:
        log = logs / f"{tag}.log"
        with log.open("wb") as err:
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "tests.faults.subworker",
                url,
                "q",
                tag,
                cwd=ROOT,
                stdout=asyncio.subprocess.PIPE,
                stderr=err,
            )
        return cls(proc, tag, log)

    def starts_another(self) -> Callable[[], bool]:
        """A check for ``eventually``: the process said it started one more job."""
        seen = len(self.started)
        return lambda: len(self.started) > seen

    async def _read(self) -> None:
        assert self.proc.stdout is not None
        async for line in self.proc.stdout:
            text = line.decode().strip()
            if text.startswith("started:"):
                self.started.append(text.split(":", 1)[1])

    async def kill(self) -> None:
        if self.proc.returncode is None:
            self.proc.kill()
        await self.proc.wait()
        await self.reader

    async def stop(self) -> None:
        if self.proc.returncode is None:
            self.proc.terminate()
        await asyncio.wait_for(self.proc.wait(), 30)
        await self.reader


async def test_workers_killed_in_a_loop_lose_nothing_and_complete_each_job_once(
    queue: AsyncQueue, r: redis.Redis, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    ids = await add_jobs(queue, 60, ms=100)
    url = queue._connection
    assert isinstance(url, str)
    slots: list[Process] = []
    gone: list[Process] = []
    try:
        for n in range(3):
            slots.append(await Process.start(url, f"w{n}.0", tmp_path))
        for round_ in range(1, 5):
            victim = slots[round_ % 3]
            # Taken before the jobs are added: the other workers may run all of them before
            # the victim starts one more, if it is asked only later.
            running = victim.starts_another()
            ids += await add_jobs(queue, 40, ms=100)  # work for every round
            # Killed while it runs a job (it just said it started one).
            await eventually(running, f"{victim.tag} running a job")
            await victim.kill()
            gone.append(victim)
            slots[round_ % 3] = await Process.start(url, f"w{round_ % 3}.{round_}", tmp_path)
        # At least once, completed once: runs are not checked, completed events are.
        await audit(queue, r, completed=ids, tags=[p.tag for p in slots], caplog=caplog)
        runs = Counter({k: int(v) for k, v in r.hgetall("faults:runs").items()})
        assert all(runs[job_id] >= 1 for job_id in ids)
        assert sum(runs[job_id] for job_id in ids) > len(ids)  # some ran twice: killed mid-run
    finally:
        for p in slots:
            await p.stop()
        for p in gone:
            await p.kill()
    for p in slots + gone:
        assert "Traceback" not in p.log.read_text(), p.log.read_text()
