"""ShardedQueue against a real server: where jobs go, ids, counts and listings over the
shards, and what a sharded queue refuses (the blocking API, generated from the asyncio one)."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator

import pytest
import redis

from corral import (
    ConfigurationError,
    FlowJob,
    FlowProducer,
    InvalidOptionError,
    Queue,
    QueueBusyError,
    ShardedQueue,
)
from corral._async.queue import BulkItem
from corral._shards import COUNT_FIELD, key_of, shard_names
from corral.options import ParentOptions
from tests.test_cli import run_corral

NAMES = shard_names("orders", 3)


@pytest.fixture
def queue(redis_url: str) -> Iterator[ShardedQueue]:
    q = ShardedQueue("orders", shards=3, connection=redis_url)
    yield q
    q.close()


def ids_in(queue: ShardedQueue, shard: int, n: int, stem: str = "id") -> list[str]:
    """``n`` custom ids that fall in ``shard``."""
    found: list[str] = []
    i = 0
    while len(found) < n:
        if queue.shard_index(f"{stem}-{i}") == shard:
            found.append(f"{stem}-{i}")
        i += 1
    return found


def hgetalls(r: redis.Redis) -> int:
    """How many HGETALL the server has run (each shard asked for a job runs one)."""
    return int(r.info("commandstats").get("cmdstat_hgetall", {}).get("calls", 0))


def test_each_shard_is_a_plain_queue_in_its_own_slot(queue: ShardedQueue, r: redis.Redis) -> None:
    queue.add_bulk([("x", {"i": i}) for i in range(6)])
    assert [q.name for q in queue.queues] == list(NAMES)
    for index, name in enumerate(NAMES):
        assert r.llen(f"bull:{name}:wait") == 2  # the round robin: two each
        assert r.hget(f"bull:{name}:meta", COUNT_FIELD) == "3"
        # A plain queue of that name sees the shard's jobs (so does a Node BullMQ one).
        with Queue(name, connection=queue.queues[0]._connection) as plain:
            assert plain.count() == 2
        assert queue.shard(index).name == name
    assert not r.exists("bull:orders:wait")


def test_ids_are_unique_and_a_job_is_read_from_its_shard_alone(
    queue: ShardedQueue, r: redis.Redis
) -> None:
    jobs = [queue.add("x", {"i": i}) for i in range(30)]
    assert len({job.id for job in jobs}) == 30
    assert Counter(job.queue_name for job in jobs) == dict.fromkeys(NAMES, 10)
    for job in jobs:
        assert job.queue_name == NAMES[queue.shard_index(job.id)]
        assert queue.shard_for(job.id).name == job.queue_name
    # The same id in another shard, put there by hand, is not the one found.
    target = jobs[0]
    other = (queue.shard_index(target.id) + 1) % 3
    queue.shard(other).add("decoy", {"decoy": True}, job_id=target.id)
    before = hgetalls(r)
    found = queue.get_job(target.id)
    assert hgetalls(r) - before == 1
    assert found is not None and found.data == {"i": 0}
    assert queue.get_job_state(target.id) == "waiting"
    assert queue.get_job("nope") is None
    # Two producers share no id either.
    with ShardedQueue("orders", shards=3, connection=queue.queues[0]._connection) as second:
        assert not {second.add("y").id for _ in range(30)} & {job.id for job in jobs}


def test_custom_ids_and_dedup_ids_dedup_over_the_logical_queue(
    queue: ShardedQueue, redis_url: str
) -> None:
    other = ShardedQueue("orders", shards=3, connection=redis_url)  # its turn differs
    try:
        first = queue.add("x", {"n": 1}, job_id="invoice-42")
        again = other.add("x", {"n": 2}, job_id="invoice-42")
        assert again.id == first.id and again.data == {"n": 1}
        deduped = [
            p.add("x", {"n": n}, deduplication={"id": "user-7"})
            for n, p in enumerate([queue, other, queue, other, queue])
        ]
        assert {job.id for job in deduped} == {deduped[0].id}
        assert queue.get_deduplication_job_id("user-7") == deduped[0].id
        assert queue.count() == 2
        idem = [p.add("x", idempotency_key="pay-1") for p in (queue, other, other)]
        assert len({job.id for job in idem}) == 1
    finally:
        other.close()


def test_a_job_id_and_a_dedup_id_in_different_shards_are_refused(queue: ShardedQueue) -> None:
    job_id = ids_in(queue, (key_of("d", 3) + 1) % 3, 1)[0]
    with pytest.raises(InvalidOptionError, match="deduplication id 'd' is in shard"):
        queue.add("x", job_id=job_id, deduplication={"id": "d"})
    same = ids_in(queue, key_of("d", 3), 1)[0]
    assert queue.add("x", job_id=same, deduplication={"id": "d"}).id == same
    assert queue.count() == 1


def test_counts_sum_and_listings_merge_over_the_shards(queue: ShardedQueue) -> None:
    base = 1_700_000_000_000
    jobs = [queue.add("w", {"i": i}, timestamp=base + i) for i in range(9)]
    queue.add("d", delay=60)
    queue.add("p", priority=3)
    queue.add("p", priority=3)
    counts = queue.get_job_counts()
    assert (counts["waiting"], counts["delayed"], counts["prioritized"]) == (9, 1, 2)
    assert queue.get_job_counts("wait") == {"wait": 9}
    assert queue.count() == 12
    assert queue.get_counts_per_priority([0, 3]) == {0: 9, 3: 2}
    # Waiting jobs of every shard, the oldest first, as one list; pages follow each other.
    assert [j.id for j in queue.get_waiting()] == [j.id for j in jobs]
    pages = [queue.get_waiting(0, 3), queue.get_waiting(4, 7), queue.get_waiting(8, 20)]
    assert [j.id for page in pages for j in page] == [j.id for j in jobs]
    assert [j.id for j in queue.get_jobs("waiting")] == [j.id for j in reversed(jobs)]
    assert [j.id for j in queue.get_waiting(-2, -1)] == [j.id for j in jobs[-2:]]
    assert len(queue.get_jobs(["waiting", "delayed", "prioritized"])) == 12
    assert [j.name for j in queue.get_jobs(["delayed", "waiting"], 0, 1, asc=True)] == ["d", "w"]


def test_pause_resume_drain_and_obliterate_act_on_every_shard(
    queue: ShardedQueue, r: redis.Redis
) -> None:
    queue.add_bulk([("x", None)] * 6 + [("later", None, {"delay": 60})])
    queue.pause()
    assert queue.is_paused() and all(q.is_paused() for q in queue.queues)
    queue.shard(1).resume()
    assert not queue.is_paused()
    queue.resume()
    assert not any(q.is_paused() for q in queue.queues)
    queue.drain()
    assert queue.get_job_counts("waiting", "delayed") == {"waiting": 0, "delayed": 1}
    queue.add("x")
    queue.obliterate()
    assert r.keys("*") == []
    again = queue.add("again")  # the count is recorded again on the next use
    assert r.hget(f"bull:{again.queue_name}:meta", COUNT_FIELD) == "3"


def test_obliterate_checks_every_shard_before_deleting_any(
    queue: ShardedQueue, r: redis.Redis, redis_url: str
) -> None:
    queue.add_bulk([("x", None)] * 6)
    busy = queue.shard(2)
    r.lmove(f"bull:{busy.name}:wait", f"bull:{busy.name}:active", "RIGHT", "LEFT")
    with pytest.raises(QueueBusyError, match=f"shard {busy.name} has active jobs"):
        queue.obliterate()
    assert queue.count() == 5  # nothing was deleted
    queue.obliterate(force=True)
    assert r.keys("*") == []


def test_add_bulk_places_each_item_and_keeps_their_order(queue: ShardedQueue) -> None:
    custom = ids_in(queue, 1, 3, "bulk")
    items: list[BulkItem] = [("a", {"i": 0}), ("b", {"i": 1}, {"job_id": custom[0]})]
    items += [("c", {"i": 2}), ("d", {"i": 3}, {"job_id": custom[1]})]
    items += [("e", {"i": 4}, {"priority": 2})]
    jobs = queue.add_bulk(items)
    assert [j.name for j in jobs] == ["a", "b", "c", "d", "e"]
    assert jobs[1].id == custom[0] and jobs[1].queue_name == NAMES[1]
    assert [queue.get_job(j.id).data for j in jobs] == [{"i": i} for i in range(5)]  # type: ignore[union-attr]
    with pytest.raises(InvalidOptionError, match="add_bulk item 1: unknown job option 'bogus'"):
        queue.add_bulk([("ok", None), ("bad", None, {"bogus": 1})])
    assert queue.count() == 5  # nothing of the refused bulk was written


def test_a_scheduler_lives_in_the_shard_of_its_id(queue: ShardedQueue) -> None:
    soon = int(time.time() * 1000) + 3_600_000
    first = queue.upsert_job_scheduler(
        "nightly", every=3600, start_date=soon + 1000, template=("report", {"n": 1})
    )
    queue.upsert_job_scheduler("hourly", every=60, start_date=soon)
    assert first is not None and first.id.startswith("repeat:nightly:")
    home = key_of("nightly", 3)
    assert first.queue_name == NAMES[home]
    assert queue.shard(home).get_job_scheduler("nightly") is not None
    assert queue.get_job(first.id) is not None  # an iteration is found by its scheduler's id
    assert queue.count_job_schedulers() == 2
    assert [s.id for s in queue.get_job_schedulers(asc=True)] == ["hourly", "nightly"]
    assert queue.remove_job_scheduler("nightly") is True
    assert queue.get_job_scheduler("nightly") is None


def test_another_count_of_shards_is_refused(queue: ShardedQueue, redis_url: str) -> None:
    queue.add("x")
    for shards in (2, 4):
        with (
            ShardedQueue("orders", shards=shards, connection=redis_url) as other,
            pytest.raises(ConfigurationError, match=rf"made for 3 shards.*shards={shards}"),
        ):
            other.add("x")


def test_limits_over_the_shards_are_refused(queue: ShardedQueue) -> None:
    with pytest.raises(InvalidOptionError, match="set it per shard"):
        queue.set_global_concurrency(4)
    with pytest.raises(InvalidOptionError, match="global rate limit"):
        queue.set_global_rate_limit(10, 1)
    queue.shard(0).set_global_concurrency(4)  # what one does instead
    assert queue.shard(0).get_global_concurrency() == 4


def test_flows_across_shards_are_refused(queue: ShardedQueue, redis_url: str) -> None:
    parent = queue.add("parent")
    home = queue.shard_index(parent.id)
    link: ParentOptions = {"id": parent.id, "queue": f"bull:{NAMES[home]}"}
    child = queue.add("child", parent=link)  # placed with its parent
    assert child.queue_name == NAMES[home]
    elsewhere = ids_in(queue, (home + 1) % 3, 1, "child")[0]
    with pytest.raises(InvalidOptionError, match="its parent is in shard"):
        queue.add("child", job_id=elsewhere, parent=link)
    with pytest.raises(InvalidOptionError, match="not in a shard of this queue"):
        queue.add("child", parent=ParentOptions(id="p", queue="bull:reports"))
    with FlowProducer(connection=redis_url) as flows:
        for target in (queue, queue.name):
            with pytest.raises(InvalidOptionError, match="has 3 shards: a flow cannot span"):
                flows.add(FlowJob("report", target, children=[FlowJob("page", "pages")]))  # type: ignore[arg-type]
        # One shard is a plain queue: a flow may live there.
        node = flows.add(FlowJob("report", NAMES[0], children=[FlowJob("page", NAMES[0])]))
        assert node.job.queue_name == NAMES[0]


def test_a_hash_tag_in_the_prefix_is_refused(redis_url: str) -> None:
    with pytest.raises(InvalidOptionError, match="has a hash tag: with shards=3"):
        ShardedQueue("orders", shards=3, connection=redis_url, prefix="{bull}")
    with pytest.raises(InvalidOptionError, match="shards must be an integer from 1 to 256"):
        ShardedQueue("orders", shards=0, connection=redis_url)


def test_one_shard_is_the_plain_queue(redis_url: str, r: redis.Redis) -> None:
    with ShardedQueue("plain", shards=1, connection=redis_url, prefix="{bull}") as one:
        job = one.add("x", {"a": 1})
        assert job.id == "1" and job.queue_name == "plain"  # the queue's own counter
        with Queue("plain", connection=redis_url, prefix="{bull}") as plain:
            assert plain.get_job("1") is not None
        assert one.get_job_counts("waiting") == {"waiting": 1}
        assert one.add("x", job_id="c", deduplication={"id": "d"}).id == "c"
        one.set_global_concurrency(2)  # one shard is one queue: nothing to refuse
        assert one.queues[0].get_global_concurrency() == 2
    assert not r.hexists("{bull}:plain:meta", COUNT_FIELD)


def test_the_cli_enqueues_and_works_a_sharded_queue(redis_url: str) -> None:
    ids = []
    for i in range(6):
        proc = run_corral(
            "enqueue", "cli", "shout", "--data", f'{{"text": "hi {i}"}}', "--shards", "3",
            "--url", redis_url,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        ids.append(proc.stdout.strip())
    with ShardedQueue("cli", shards=3, connection=redis_url) as queue:
        assert queue.count() == 6 and all(queue.get_job(i) for i in ids)
        proc = run_corral(
            "worker", "tests.fixtures.processors:shout", "-q", "cli", "--shards", "3",
            "--burst", "--url", redis_url,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        assert "shards=3" in proc.stdout and "drained: 6 completed" in proc.stdout
        done = queue.get_job(ids[0])
        assert done is not None and done.returnvalue == {"shouted": "HI 0"}
        wrong = run_corral("enqueue", "cli", "x", "--shards", "2", "--url", redis_url)
        assert wrong.returncode == 1 and "made for 3 shards" in wrong.stderr
