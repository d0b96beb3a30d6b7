"""Dead-letter queues as Node BullMQ 6.7.0 sees them.

A DLQ is an ordinary queue in BullMQ's layout: Node's ``Queue.getJobs`` lists its jobs (waiting),
``job.data`` is the dead letter's envelope (origin queue and id, data, options, every stack),
and ``getJobLogs`` shows the replay's log line. The option lives in an opts key BullMQ never
reads (``x-dlq``): a Node worker runs such a job as any other and leaves the key as it was.
"""

from __future__ import annotations

import json

import pytest
import redis

from corral import Queue, Worker
from corral._sync.dead_letter_queue import DeadLetterQueue
from tests.interop.conftest import Node

pytestmark = pytest.mark.interop


def fails(job: object) -> None:
    raise ValueError("cannot handle it")


def test_node_reads_the_dead_letters_of_jobs_node_added(node: Node, redis_url: str) -> None:
    # Node adds the jobs; corral's worker fails them for good and dead-letters them.
    added = node.run(
        "add_jobs.mjs", "nq", 2, env={"JOB_OPTS": json.dumps({"attempts": 2, "backoff": 0})}
    )
    Worker("nq", fails, connection=redis_url, dead_letter_queue="nq-dead").run(burst=True)
    with DeadLetterQueue("nq-dead", connection=redis_url) as dlq:
        replay = dlq.replay("nq-1")

    seen = node.run("read_dlq.mjs", "nq-dead")
    assert seen["counts"]["waiting"] == 2
    assert [job["id"] for job in seen["jobs"]] == ["nq-1", "nq-2"]
    for job, origin in zip(seen["jobs"], added["jobs"], strict=True):
        letter = job["data"]
        assert job["state"] == "waiting" and job["name"] == origin["name"]
        assert (letter["queue"], letter["jobId"], letter["name"]) == (
            "nq",
            origin["id"],
            origin["name"],
        )
        assert letter["data"] == origin["data"]
        assert letter["opts"]["attempts"] == 2
        assert letter["failedReason"] == "cannot handle it"
        assert letter["attemptsMade"] == 2 and len(letter["stacktrace"]) == 2
        assert letter["finishedOn"] >= letter["processedOn"] >= letter["timestamp"]
    assert seen["jobs"][0]["logs"] == [f"replayed as job {replay.job_id} of queue nq"]
    assert seen["jobs"][1]["logs"] == []


def test_node_worker_runs_jobs_with_a_dead_letter_queue_unaffected(
    node: Node, redis_url: str, r: redis.Redis
) -> None:
    with Queue("dx", connection=redis_url, dead_letter_queue="dx-dead") as queue:
        added = [queue.add("t", {"i": i}) for i in range(3)]
        assert added[0].opts["x-dlq"] == "dx-dead"

        result = node.run("work_jobs.mjs", "dx", 3)

        assert result["failed"] == []
        for seen in result["processed"]:
            assert seen["opts"]["x-dlq"] == "dx-dead"  # Node saw the key and left it be
        assert queue.get_job_counts("completed", "failed") == {"completed": 3, "failed": 0}
    assert not r.exists("bull:dx:x-dlq")  # nothing failed, nothing dead-lettered


def test_node_worker_processes_a_replayed_job(node: Node, redis_url: str) -> None:
    with Queue("rx", connection=redis_url, dead_letter_queue="rx-dead") as queue:
        queue.add("t", {"i": 7})
        Worker("rx", fails, connection=redis_url).run(burst=True)
        with DeadLetterQueue("rx-dead", connection=redis_url) as dlq:
            replay = dlq.replay("rx-1")

        result = node.run("work_jobs.mjs", "rx", 1)

        [seen] = result["processed"]
        assert seen["id"] == replay.job_id and seen["data"] == {"i": 7}
        assert seen["opts"]["x-replay-of"] == {"queue": "rx-dead", "id": "rx-1", "jobId": "1"}
