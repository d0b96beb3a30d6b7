"""A serverless function (AWS Lambda's handler signature; the same shape works on Google
Cloud Functions or Azure Functions): each invocation drains the queue for the time it has,
then returns before the platform's deadline."""

from typing import Any

from corral import Worker

#: Seconds kept back at the end: running jobs get this long to finish when the budget is over
#: (then they go back to wait for the next invocation), plus time to close the connections.
RESERVE_S = 10


def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    budget = context.get_remaining_time_in_millis() / 1000 - RESERVE_S
    worker = Worker("emails", "tasks:send_email", concurrency=8, close_grace=RESERVE_S / 2)
    summary = worker.run(burst=True, burst_wait=1, max_time=max(1.0, budget))
    return {
        "completed": summary.completed,
        "failed": summary.failed,
        "retried": summary.retried,
        "stopped": summary.stopped,  # "drained": nothing left; "max_time": call me again
    }
