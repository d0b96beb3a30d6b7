"""Circuit breakers: a failing payment provider stops costing every job its retries; a job that
names a breaker waits, unrun, while it is open; and a deadline on one tool call."""

import asyncio
import logging
import sys

from corral import (
    AsyncJob,
    AsyncQueue,
    AsyncQueueEvents,
    Breaker,
    DeadlineExceeded,
    Worker,
    deadline,
)
from corral.events import CustomEvent

provider = {"up": False, "calls": 0}


async def charge_card(order: dict) -> dict:
    """The pretend payment provider: down until the demo brings it back."""
    provider["calls"] += 1
    if not provider["up"]:
        raise ConnectionError("payment provider: 503")
    return {"charged": order["amount"]}


payments = Breaker("payments", failures=3, window=60, cooldown=1)


async def charge(job: AsyncJob) -> dict:
    async with (
        payments,  # while open: BreakerOpen, and the job waits unburned
        deadline(5),  # this one call may take 5 s at most (else: a failure)
    ):
        return await charge_card(job.data)


async def wait_for(check) -> None:
    while not await check():
        await asyncio.sleep(0.02)


async def main() -> None:
    # One line per transition, from whichever process caused it.
    logging.basicConfig(stream=sys.stdout, format="%(name)s: %(message)s", level=logging.INFO)
    logging.getLogger("corral.worker").setLevel(logging.WARNING)

    async with AsyncQueue("payments-demo") as queue:
        # Start afresh: the embedded server keeps the last run's jobs and breaker states.
        await queue.obliterate(force=True)
        await payments.reset()
        jobs = [await queue.add("charge", {"amount": 10 * n}, attempts=5) for n in range(1, 6)]
        worker = Worker("payments-demo", charge, concurrency=1)
        running = asyncio.create_task(worker.run_async())

        async def open_and_all_delayed() -> bool:
            delayed = (await queue.get_job_counts("delayed"))["delayed"]
            return (await payments.state()).state == "open" and delayed == 5

        await wait_for(open_and_all_delayed)
        burned = sum([(await queue.get_job(j.id)).attempts_made for j in jobs])
        print(f"open after {provider['calls']} failed calls; attempts burned: {burned}")

        provider["up"] = True  # the provider is back; after the cooldown, one probe goes
        await wait_for(lambda: _completed(queue, 5))
        made = sum([(await queue.get_job(j.id)).attempts_made for j in jobs])
        state = (await payments.state()).state
        print(f"{state}: completed 5, provider calls: {provider['calls']}, attempts made: {made}")

        # A job that names the breakers it needs is checked before it runs.
        llm = Breaker("llm", failures=1, cooldown=0.5)
        await llm.reset()  # closed, whatever the last run left
        try:
            async with llm:
                raise TimeoutError("model API: no answer")
        except TimeoutError:
            pass
        runs = []

        async def summarise(job: AsyncJob) -> str:
            runs.append(job.id)
            return "summary"

        summary = await queue.add("summarise", {}, breakers=["llm"])
        await worker.close()
        await running
        worker = Worker("payments-demo", summarise)
        running = asyncio.create_task(worker.run_async())
        await wait_for(lambda: _state_is(queue, summary.id, "delayed"))
        waiting = await queue.get_job(summary.id)
        print(f"summarise: delayed, attempts={waiting.attempts_made} runs={len(runs)}")
        await wait_for(lambda: _state_is(queue, summary.id, "completed"))
        done = await queue.get_job(summary.id)
        print(f"summarise: {done.returnvalue}, attempts={done.attempts_made}, "
              f"llm {(await llm.state()).state}")  # fmt: skip
        await worker.close()
        await running

        await llm.close()
    await payments.close()

    # Each transition is a "breaker" event on the queue of the job that caused it.
    async with AsyncQueueEvents("payments-demo", last_event_id="0") as events:
        while (event := await events.next_event(timeout=0.5)) is not None:
            if isinstance(event, CustomEvent) and event.name == "breaker":
                f = event.fields
                print(f"event: {f['name']} {f['from']} -> {f['state']}")

    try:
        async with deadline(0.1):
            await asyncio.sleep(5)  # a tool call that hangs
    except DeadlineExceeded as exc:
        print(f"deadline: {exc}; a TimeoutError: {isinstance(exc, TimeoutError)}")


async def _completed(queue: AsyncQueue, n: int) -> bool:
    return (await queue.get_job_counts("completed"))["completed"] == n


async def _state_is(queue: AsyncQueue, job_id: str, state: str) -> bool:
    return await queue.get_job_state(job_id) == state


if __name__ == "__main__":
    asyncio.run(main())
