"""Provenance across Node BullMQ 6.7.0: Node reads a corral job's record as one of its
options (what bull-board shows), keeps it through its own retries, flows and scheduler
iterations, and a corral worker after it still verifies the signature and extends the chain.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from corral import (
    AsyncFlowProducer,
    AsyncJob,
    AsyncQueue,
    FlowJob,
    Provenance,
    ProvenanceHop,
    Worker,
    provenance,
    set_provenance_key,
)
from tests.interop.conftest import Node
from tests.test_worker import drive, finished

pytestmark = pytest.mark.interop

KEY = b"interop-provenance-key-0123456789"
RECORD = Provenance(actor="support:ann", on_behalf_of="user:7", tenant="acme")


@pytest.fixture(autouse=True)
def signing(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(importlib.import_module("corral._provenance"), "_keys", None)
    set_provenance_key(KEY, require_signed=True)
    yield


def stored(r: redis.Redis, queue: str, job_id: str) -> dict[str, Any]:
    record: dict[str, Any] = json.loads(r.hget(f"bull:{queue}:{job_id}", "opts"))["x-prov"]  # type: ignore[arg-type]
    return record


async def test_a_node_worker_in_the_middle_of_a_chain_keeps_the_record(
    node: Node, redis_url: str, r: redis.Redis
) -> None:
    async with (
        AsyncQueue("chain", connection=redis_url) as queue,
        AsyncQueue("kids", connection=redis_url) as kids,
    ):
        async with provenance(actor="support:ann", on_behalf_of="user:7", tenant="acme"):
            # The backoff keeps the retry from the Node worker, which closes at its failure.
            job = await queue.add("refund", {"order": 1}, attempts=2, backoff=2)
        written = stored(r, "chain", job.id)
        failed = node.run("fail_once.mjs", "chain", 1)["failed"]
        assert [(f["id"], f["attemptsMade"]) for f in failed] == [(job.id, 1)]
        assert failed[0]["opts"]["x-prov"] == written  # Node's job.opts: what bull-board shows
        seen = node.run("read_jobs.mjs", "chain", job.id)["jobs"][job.id]
        assert seen["opts"]["x-prov"] == written and seen["state"] == "delayed"
        assert stored(r, "chain", job.id) == written  # Node's retry left it as it was

        async def process(job: AsyncJob) -> str:
            await kids.add("notify", {"order": job.data["order"]})
            return "refunded"

        await drive(Worker("chain", process, connection=redis_url), finished(queue, 1))
        done = await queue.get_job(job.id)
        assert done is not None and (done.returnvalue, done.attempts_made) == ("refunded", 2)
        assert done.provenance == RECORD and done.provenance.verified
        (notify,) = await kids.get_jobs(["waiting"])
    assert notify.provenance is not None and notify.provenance.verified
    assert notify.provenance.chain == (ProvenanceHop("chain", job.id, "support:ann", "user:7"),)


async def test_node_runs_the_children_and_a_corral_worker_the_parent(
    node: Node, redis_url: str
) -> None:
    async with AsyncFlowProducer(connection=redis_url) as flows:
        with provenance(actor="support:ann", on_behalf_of="user:7", tenant="acme"):
            tree = await flows.add(
                FlowJob("report", "parents", children=[FlowJob("part", "node-parts")])
            )
    assert (tree.children or [])[0].job.provenance == RECORD
    completed = node.run("work_flow.mjs", "node-parts", 1)["completed"]
    assert [c["name"] for c in completed] == ["part"]
    seen: list[Provenance | None] = []

    async def process(job: AsyncJob) -> None:
        seen.append(job.provenance)

    async with AsyncQueue("parents", connection=redis_url) as parents:
        await drive(Worker("parents", process, connection=redis_url), finished(parents, 1))
    assert seen == [RECORD] and seen[0] is not None and seen[0].verified


async def test_node_workers_keep_it_in_the_scheduler_iterations_they_create(
    node: Node, redis_url: str, r: redis.Redis
) -> None:
    async with AsyncQueue("ticks", connection=redis_url) as queue:
        with provenance(actor="support:ann", on_behalf_of="user:7", tenant="acme"):
            await queue.upsert_job_scheduler("tick", every=0.05, template=("tick", {}))
        out = node.run("work_jobs.mjs", "ticks", 2)
        # At least 2: Node's worker (concurrency 10) may take another before it closes.
        assert len(out["processed"]) >= 2 and {p["name"] for p in out["processed"]} == {"tick"}
        assert all("x-prov" in p["opts"] for p in out["processed"])
        # The next iteration, which Node's worker created from the template.
        pending = [j for j in await queue.get_jobs(["delayed", "waiting"]) if j.repeat_job_key]
        assert pending, "no pending iteration"
        assert pending[0].id not in {p["id"] for p in out["processed"]}
        assert pending[0].provenance == RECORD and pending[0].provenance.verified
