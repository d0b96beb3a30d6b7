"""The parent's half of a child process's job methods: a processor running in a child
(``Worker(processes=N)``) calls ``job.log``, ``job.stream``, ``job.wait_for_signal``... on its
:class:`~corral._child_job.ChildJob`, which sends the call here to be done on the real job
(one frame each way, ``corral._processes``)."""

from __future__ import annotations

from typing import Any

from corral._async.job import AsyncJob
from corral.errors import DelayedError, InvalidOptionError, SignalTimeout


class ChildCalls:
    """Answers the calls of the child running one attempt of ``job``."""

    def __init__(self, job: AsyncJob) -> None:
        self.job = job
        #: The attempt parked the job (its wait_for_signal): the DelayedError the child then
        #: raises is the park's, not a failure.
        self.parked = False

    async def __call__(self, method: str, args: list[Any]) -> Any:
        job = self.job
        if method == "update_progress":
            return await job.update_progress(args[0])
        if method == "log":
            return await job.log(args[0])
        if method == "update_data":
            return await job.update_data(args[0])
        if method == "stream":
            return await job.stream(args[0], max_len=args[1], ttl=args[2])
        if method == "wait_for_signal":
            return await self._wait_for_signal(args[0], args[1])
        if method == "step_recorded":
            steps = await job.get_steps()
            return [args[0] in steps, steps.get(args[0])]
        if method == "step":
            result = args[1]
            return await job.step(args[0], lambda: result)
        if method == "get_steps":
            return await job.get_steps()
        raise InvalidOptionError(f"a child process asked for an unknown job method {method!r}")

    async def _wait_for_signal(self, name: str, timeout: float | None) -> list[Any]:
        # The outcome as data: the child raises the same exception, with its fields.
        try:
            return ["payload", await self.job.wait_for_signal(name, timeout=timeout)]
        except SignalTimeout as exc:
            return ["timeout", exc.due_ms]
        except DelayedError:
            self.parked = True
            return ["parked", self.job.delay]
