"""Remote cancel and job timeouts as Node BullMQ 6.7.0 sees them.

A job cancelled by corral is, for Node, a job that failed: QueueEvents hands its listeners
``failed`` with the "cancelled: <reason>" failedReason. The timeouts live in opts keys BullMQ
never reads (``x-timeout``, ``x-soft-timeout``): a Node worker runs such jobs as any other,
and the keys come back unchanged.
"""

from __future__ import annotations

import pytest

from corral import Queue
from tests.interop.conftest import Node

pytestmark = pytest.mark.interop


def test_node_queue_events_sees_a_cancelled_job_as_failed(node: Node, redis_url: str) -> None:
    with Queue("cx", connection=redis_url) as queue:
        waiting = queue.add("w", {"n": 1}, attempts=3)
        delayed = queue.add("d", {"n": 2}, delay=3600)
        prioritized = queue.add("p", {"n": 3}, priority=5)
        listener = node.start("listen_all.mjs", "cx", 3)
        try:
            queue.cancel(waiting.id, "the user closed the tab")
            queue.cancel(delayed.id, "")
            queue.cancel(prioritized.id, "日本語の理由")
            seen = Node.result(listener)
        finally:
            if listener.poll() is None:
                listener.kill()
        # Node reads the jobs as failed too.
        jobs = node.run("read_jobs.mjs", "cx", waiting.id, delayed.id, prioritized.id)

    assert [(e["event"], e["args"]) for e in seen["events"]] == [
        (
            "failed",
            {
                "jobId": waiting.id,
                "failedReason": "cancelled: the user closed the tab",
                "prev": "waiting",
            },
        ),
        ("failed", {"jobId": delayed.id, "failedReason": "cancelled", "prev": "delayed"}),
        (
            "failed",
            {
                "jobId": prioritized.id,
                "failedReason": "cancelled: 日本語の理由",
                "prev": "prioritized",
            },
        ),
    ]
    for job_id, reason in [
        (waiting.id, "cancelled: the user closed the tab"),
        (delayed.id, "cancelled"),
        (prioritized.id, "cancelled: 日本語の理由"),
    ]:
        assert jobs["jobs"][job_id]["state"] == "failed"
        assert jobs["jobs"][job_id]["failedReason"] == reason
    assert jobs["counts"]["failed"] == 3
    assert jobs["counts"]["waiting"] == jobs["counts"]["delayed"] == 0


def test_node_worker_runs_jobs_with_timeouts_unaffected(node: Node, redis_url: str) -> None:
    with Queue("tx", connection=redis_url) as queue:
        added = [queue.add("t", {"i": i}, timeout=5, soft_timeout=1) for i in range(5)]
        assert added[0].opts["x-timeout"] == 5000 and added[0].opts["x-soft-timeout"] == 1000

        result = node.run("work_jobs.mjs", "tx", 5)

        assert result["failed"] == []
        assert sorted(j["id"] for j in result["processed"]) == sorted(j.id for j in added)
        for seen in result["processed"]:
            # Node saw the keys and left them be.
            assert seen["opts"]["x-timeout"] == 5000
            assert seen["opts"]["x-soft-timeout"] == 1000
            assert seen["attemptsMade"] == 1
        for job in added:
            back = queue.get_job(job.id)
            assert back is not None
            assert back.returnvalue == {"seen": {"i": job.data["i"]}, "name": "t", "by": "node"}
            assert back.timeout == 5.0 and back.soft_timeout == 1.0
            assert back.opts["x-timeout"] == 5000 and back.opts["x-soft-timeout"] == 1000
        assert queue.get_job_counts("completed", "failed") == {"completed": 5, "failed": 0}
