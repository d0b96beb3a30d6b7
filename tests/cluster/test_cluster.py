"""Queues, workers, events, flows, schedulers and cancels on a Redis Cluster through a
``redis+cluster://`` URL (and a ``RedisCluster`` client): every queue's keys in one hash slot,
on the master of that slot; keys that would cross slots are refused before anything is sent.
"""

from __future__ import annotations

import asyncio
import json

import pytest
import redis
from click.testing import CliRunner
from redis.asyncio import RedisCluster
from redis.crc import key_slot

from corral import (
    AsyncFlowProducer,
    AsyncJob,
    AsyncQueue,
    AsyncQueueEvents,
    ConfigurationError,
    CrossSlotError,
    FlowJob,
    FlowProducer,
    InvalidOptionError,
    Job,
    Queue,
    QueueEvents,
    Worker,
    _twins,
)
from corral.cli import main
from tests.cluster.conftest import Cluster
from tests.faults.harness import eventually


def slot(name: str) -> int:
    return int(key_slot(name.encode()))


async def drain(worker: Worker, max_jobs: int | None = None) -> None:
    summary = await asyncio.wait_for(worker.run_async(burst=True, max_jobs=max_jobs), 60)
    assert summary.failed == 0


async def test_a_queue_lives_on_the_master_of_its_slot(cluster: Cluster) -> None:
    owner = cluster.owner(slot("q"))
    others = [n for n in cluster.masters() if n is not owner]
    async with AsyncQueue("{q}", connection=cluster.url) as queue:
        await queue.add_bulk([("job", {"i": i}) for i in range(50)])
        with owner.client() as r:
            assert r.llen("bull:{q}:wait") == 50  # every key on the slot's master
        for node in others:
            with node.client() as r:
                assert r.dbsize() == 0
        client = await queue.client()
        twin = _twins.blocking_twin(client, read_timeout=6, client_name="w")
        sync = _twins.sync_twin(client)
        try:  # a worker's extra clients go to the same slot's master, on pools of their own
            for copy in (twin, sync):
                assert copy.connection_pool.slot == client.connection_pool.slot
            assert await twin.ping() and sync.ping()
            assert twin.connection_pool.master == ("127.0.0.1", owner.port)
        finally:
            await _twins.close_async(twin)
            _twins.close_sync(sync)

        completed: list[str] = []
        events = AsyncQueueEvents("{q}", connection=cluster.url, last_event_id="0-0")
        events.on("completed", lambda e: completed.append(e.job_id))
        listening = asyncio.create_task(events.run())

        def plain(job: Job) -> int:  # in a thread, with a Job on the blocking twin
            job.log("seen")
            return int(job.data["i"])

        async def process(job: AsyncJob) -> int:
            return int(job.data["i"])

        try:
            await drain(Worker("{q}", process, connection=cluster.url, concurrency=4), 25)
            await drain(Worker("{q}", plain, connection=cluster.url, concurrency=4))
            counts = await queue.get_job_counts("completed", "wait", "active")
            assert counts == {"completed": 50, "wait": 0, "active": 0}
            await eventually(lambda: len(completed) == 50, "50 completed events")
        finally:
            await events.close()
            await listening
    with Queue("{q}", connection=cluster.url) as sync_queue:  # the blocking API's own pool
        job = sync_queue.get_job(completed[-1])
        assert job is not None and job.returnvalue is not None


def test_keys_that_would_cross_slots_are_refused_before_anything_is_sent(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = cluster.url
    with pytest.raises(CrossSlotError, match=r"bull:q:\.\.\. are not"):
        Queue("q", connection=url)
    with pytest.raises(CrossSlotError):
        AsyncQueueEvents("q", connection=url)
    with pytest.raises(CrossSlotError):
        Worker("q", lambda job: None, connection=url)
    with pytest.raises(CrossSlotError):  # one flow is one transaction over several queues
        FlowProducer(connection=url)
    # Tagged: accepted.
    Queue("q", connection=url, prefix="{bull}").close()
    Queue("{q}", connection=url).close()
    # Found at first use when the URL comes from the environment.
    monkeypatch.setenv("CORRAL_REDIS_URL", url)
    with Queue("q") as queue, pytest.raises(CrossSlotError):
        queue.add("a")
    # A parent in another slot: the add writes nothing.
    with Queue("{a}", connection=url) as a, Queue("{b}", connection=url) as b:
        parent = a.add("parent")
        with pytest.raises(CrossSlotError, match="parent bull:\\{a\\}:1 is in hash slot"):
            b.add("child", parent={"id": parent.id, "queue": "bull:{a}"})
        assert b.get_job_counts() == dict.fromkeys(b.get_job_counts(), 0)
    with cluster.owner(slot("bull:q:id")).client() as r:
        assert not r.exists("bull:q:id"), "a refused queue wrote something"


def test_cluster_urls_are_checked_when_given() -> None:
    for bad, why in [
        ("redis+cluster://", "no node host"),
        ("redis+cluster://h:99999", "bad port"),
        ("redis+cluster://h:7000/1", "database 0 only"),
        ("redis+cluster://h:7000?timeout=3", "unknown option 'timeout'"),
        ("redis+cluster://u:secret@h:7000?socket_timeout=x", "is not a float"),
    ]:
        with pytest.raises(InvalidOptionError, match=why) as caught:
            Queue("{q}", connection=bad)
        assert "secret" not in str(caught.value)


def test_a_node_not_in_cluster_mode_is_a_clear_error(redis_url: str) -> None:
    port = redis_url.rsplit(":", 1)[1].split("/")[0]
    url = f"redis+cluster://127.0.0.1:{port}"
    with Queue("{q}", connection=url) as queue, pytest.raises(ConfigurationError, match="not a"):
        queue.add("a")


async def test_flows_across_queues_of_a_hash_tagged_prefix(cluster: Cluster) -> None:
    url = cluster.url
    async with AsyncFlowProducer(connection=url, prefix="{bull}") as flows:
        node = await flows.add(
            FlowJob(
                "report",
                "reports",
                children=[FlowJob("page", "pages", {"n": n}) for n in range(3)],
            )
        )

    async def page(job: AsyncJob) -> int:
        return int(job.data["n"]) * 10

    async def report(job: AsyncJob) -> int:
        return sum((await job.get_children_values()).values())

    await drain(Worker("pages", page, connection=url, prefix="{bull}"))
    await drain(Worker("reports", report, connection=url, prefix="{bull}"))
    async with AsyncQueue("reports", connection=url, prefix="{bull}") as reports:
        done = await reports.get_job(node.job.id)
        assert done is not None and done.returnvalue == 30
    with cluster.owner(slot("bull")).client() as r:
        assert r.zcard("{bull}:pages:completed") == 3


async def test_a_scheduler_runs_its_iterations(cluster: Cluster) -> None:
    url = cluster.url
    seen: list[str] = []

    async def tick(job: AsyncJob) -> None:
        seen.append(job.id)

    async with AsyncQueue("{ticks}", connection=url) as queue:
        await queue.upsert_job_scheduler("every-50ms", every=0.05, limit=3)
        worker = Worker("{ticks}", tick, connection=url)
        running = asyncio.create_task(worker.run_async())
        try:
            await eventually(lambda: len(seen) == 3, "three iterations")
        finally:
            await worker.close()
            await running
        assert await queue.get_job_counts("completed") == {"completed": 3}


async def test_a_cancel_reaches_the_worker_of_the_job(cluster: Cluster) -> None:
    started = asyncio.Event()

    async def waits(job: AsyncJob) -> None:
        started.set()
        await asyncio.sleep(3600)

    async with AsyncQueue("{c}", connection=cluster.url) as queue:
        job = await queue.add("long")
        worker = Worker("{c}", waits, connection=cluster.url)
        running = asyncio.create_task(worker.run_async())
        try:
            await asyncio.wait_for(started.wait(), 30)
            assert await queue.cancel(job.id, "enough") == "active"

            async def failed() -> bool:
                return await queue.get_job_state(job.id) == "failed"

            await eventually(failed, "the cancelled job failed")
        finally:
            await worker.close()
            await running
        done = await queue.get_job(job.id)
        assert done is not None and done.failed_reason == "cancelled: enough"


async def test_a_redis_cluster_client_is_used_for_its_nodes_and_settings(
    cluster: Cluster,
) -> None:
    first = cluster.nodes[0]
    given = RedisCluster(host="127.0.0.1", port=first.port, decode_responses=True)
    try:
        async with AsyncQueue("{rc}", connection=given) as queue:
            await queue.add("a")
            client = await queue.client()
            assert client is not given  # a client of the slot, of corral's own
            assert client.connection_pool.slot == slot("rc")
        await drain(Worker("{rc}", lambda job: None, connection=given))
        async with AsyncQueue("{rc}", connection=given) as queue:
            assert await queue.get_job_counts("completed") == {"completed": 1}
        assert await given.ping()  # still the caller's, open
    finally:
        await given.aclose()
    raw = redis.RedisCluster(host="127.0.0.1", port=first.port)
    tagless = redis.RedisCluster(host="127.0.0.1", port=first.port, decode_responses=True)
    try:
        with pytest.raises(ConfigurationError, match="decode_responses=True"):
            Queue("{rc}", connection=raw)
        with pytest.raises(CrossSlotError):
            QueueEvents("rc", connection=tagless)
    finally:
        raw.close()
        tagless.close()


def test_the_cli_enqueues_works_and_cancels_on_a_cluster(cluster: Cluster) -> None:
    url = cluster.url

    def corral(*args: str) -> str:
        result = CliRunner().invoke(main, [*args, "--url", url])
        assert result.exit_code == 0, result.output
        return str(result.output)

    corral("enqueue", "{cli}", "report", "--data", '{"n": 1}')
    doomed = corral("enqueue", "{cli}", "doomed").split()[-1]
    assert corral("cancel", "{cli}", doomed) == f"cancelled {doomed}\n"
    corral("worker", "tests.cluster.test_cluster:answer", "--queue", "{cli}", "--burst")
    with Queue("{cli}", connection=url) as queue:
        assert queue.get_job_counts("completed", "failed") == {"completed": 1, "failed": 1}


def answer(job: Job) -> int:
    return int(job.data["n"])


def test_the_read_and_repair_commands_work_on_a_cluster(cluster: Cluster) -> None:
    """stats, jobs, job, retry, schedulers, top and health over a ``redis+cluster://`` URL:
    the queues are found on every master (SCAN of each), each read on its slot's master."""
    url = cluster.url
    names = ["{inspect-a}", "{inspect-b}"]
    assert len({cluster.owner(slot(n)).port for n in names}) == 2, "the queues share a master"

    def corral(*args: str, code: int = 0) -> str:
        result = CliRunner().invoke(main, [*args, "--url", url])
        assert result.exit_code == code, result.output
        return str(result.output)

    for name in names:
        with Queue(name, connection=url) as queue:
            queue.add("report", {"n": 1})
            failed = queue.add("report", {"n": "x"}, attempts=1)
            queue.upsert_job_scheduler("nightly", cron="0 3 * * *")
        corral("worker", "tests.cluster.test_cluster:answer", "--queue", name, "--burst")
    document = json.loads(corral("stats", "--json"))
    found = {row["name"]: row["counts"] for row in document["queues"]}
    assert set(found) == set(names)  # one queue on each of two masters
    for counts in found.values():
        assert (counts["completed"], counts["failed"], counts["delayed"]) == (1, 1, 1)
    jobs = json.loads(corral("jobs", names[0], "--state", "failed", "--json"))["jobs"]
    assert [job["id"] for job in jobs] == [failed.id]
    assert json.loads(corral("job", names[0], failed.id, "--json"))["state"] == "failed"
    assert corral("retry", names[0], failed.id).startswith("retried")
    listed = json.loads(corral("schedulers", names[1], "list", "--json"))
    assert [s["id"] for s in listed["schedulers"]] == ["nightly"]
    assert names[1] in corral("top")  # one frame, not a terminal
    corral("health", "--queue", names[0], "--queue", names[1])
    assert "no such queue" in corral("stats", "{inspect-none}", code=1)
    # No hash tag: refused in one line, naming the problem (the cluster needs one).
    assert "hash tag" in corral("stats", "plain", code=1)
    with Queue(names[0], connection=url) as queue:
        assert queue.get_job_counts("waiting")["waiting"] == 1  # the retried job
