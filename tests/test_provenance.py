"""Provenance (corral.provenance): the scope, the record jobs carry through adds, bulks,
flows, nested adds in processors (async, threads, child processes), retries and schedulers,
its signature (a record edited in Redis is caught), and where people read it (``corral job``,
the dashboard)."""

from __future__ import annotations

import asyncio
import importlib
import json
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from click.testing import CliRunner
from opentelemetry.sdk.trace import TracerProvider

from corral import (
    AsyncDeadLetterQueue,
    AsyncFlowProducer,
    AsyncJob,
    AsyncQueue,
    FlowJob,
    InvalidOptionError,
    Job,
    Provenance,
    ProvenanceHop,
    Queue,
    Worker,
    current_provenance,
    provenance,
    set_provenance_key,
)
from corral.cli import main
from corral.job import JobRecord
from corral.otel import Telemetry
from tests.test_worker import drive, finished

# The module: ``corral.provenance`` is the function it exports.
prov_module = importlib.import_module("corral._provenance")

KEY = b"k" * 32
OTHER_KEY = b"o" * 32


@pytest.fixture(autouse=True)
def no_key(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each test starts with no key (and no environment's), and leaves none behind."""
    monkeypatch.delenv("CORRAL_PROVENANCE_KEY", raising=False)
    monkeypatch.delenv("CORRAL_PROVENANCE_REQUIRE_SIGNED", raising=False)
    # Restored (to "not configured yet") after the test, whatever the test set.
    monkeypatch.setattr(prov_module, "_keys", None)
    yield


def stored(r: redis.Redis, queue: str, job_id: str) -> dict[str, Any]:
    opts = json.loads(r.hget(f"bull:{queue}:{job_id}", "opts"))  # type: ignore[arg-type]
    record: dict[str, Any] = opts["x-prov"]
    return record


def record_of(queue: str, job_id: str, opts: dict[str, Any]) -> Provenance | None:
    return JobRecord(queue, job_id, "n", None, opts=opts).provenance


# -- the scope, with no server -------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"actor": ""}, "actor must be a non-empty string"),
        ({"tenant": 7}, "tenant must be a non-empty string"),
        ({"origin": "x" * 257}, "origin must be at most 256 characters"),
        ({"request_id": "\ud800"}, "request_id must be valid text"),
    ],
)
def test_fields_are_bounded_strings(given: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidOptionError, match=message):
        provenance(**given)


def test_keys_are_checked() -> None:
    with pytest.raises(InvalidOptionError, match="at least 16 bytes"):
        set_provenance_key(b"short")
    with pytest.raises(InvalidOptionError, match="needs a key"):
        set_provenance_key(None, require_signed=True)
    with pytest.raises(InvalidOptionError, match="a list of keys"):
        set_provenance_key(KEY, old_keys=OTHER_KEY)  # type: ignore[arg-type]
    with pytest.raises(InvalidOptionError, match="bytes or str"):
        set_provenance_key(12345678901234567)  # type: ignore[arg-type]


def test_scopes_nest_and_end() -> None:
    assert current_provenance() is None
    with provenance(actor="user:42", tenant="acme") as outer:
        assert outer == Provenance(actor="user:42", tenant="acme")
        with provenance(actor="agent:planner", on_behalf_of="user:42"):
            assert current_provenance() == Provenance(
                actor="agent:planner", on_behalf_of="user:42", tenant="acme"
            )
        assert current_provenance() == outer
    assert current_provenance() is None


async def test_async_scopes_stay_in_their_task() -> None:
    seen: dict[str, Provenance | None] = {}

    async def request(actor: str) -> None:
        async with provenance(actor=actor):
            await asyncio.sleep(0)  # the other task runs its scope meanwhile
            seen[actor] = current_provenance()

    await asyncio.gather(request("user:1"), request("user:2"))
    assert seen == {"user:1": Provenance(actor="user:1"), "user:2": Provenance(actor="user:2")}
    assert current_provenance() is None


def test_the_chain_keeps_the_latest_hops() -> None:
    record = Provenance(actor="a")
    for i in range(prov_module.MAX_HOPS + 3):
        record = record.through(JobRecord("q", str(i), "n", None))
    assert len(record.chain) == prov_module.MAX_HOPS
    assert record.chain[0] == ProvenanceHop("q", "3", "a")
    assert record.dropped == 3
    assert "via 3 earlier, q/3 (a) > q/4 (a)" in record.summary()


def test_a_signature_survives_re_encoding_and_catches_any_edit() -> None:
    set_provenance_key(KEY)
    with provenance(actor="user:42", on_behalf_of="user:7", origin="api/v1"):
        record = prov_module.stamp("q")
    assert record is not None
    # Lua's cjson writes "/" as "\/", Node reorders nothing but may: the values are signed.
    text = json.dumps(dict(reversed(record.items()))).replace("/", "\\/")
    again = record_of("q", "1", {"x-prov": json.loads(text)})
    assert again is not None and again.verified
    for edit in (
        {"actor": "user:1"},
        {"onBehalfOf": None},
        {"chain": [{"queue": "q", "job": "1"}]},
    ):
        assert not record_of("q", "1", {"x-prov": {**record, **edit}}).verified  # type: ignore[union-attr]
    assert not record_of("other", "1", {"x-prov": record}).verified  # type: ignore[union-attr]
    set_provenance_key(OTHER_KEY)
    other = record_of("q", "1", {"x-prov": record})
    assert other is not None and other.signed and not other.verified
    set_provenance_key(OTHER_KEY, old_keys=[KEY])  # verified again after a rotation
    assert record_of("q", "1", {"x-prov": record}).verified  # type: ignore[union-attr]


def test_ill_typed_records_are_read_without_the_bad_fields() -> None:
    got = record_of("q", "1", {"x-prov": {"actor": 7, "tenant": "acme", "chain": ["x", {}]}})
    assert got == Provenance(tenant="acme")
    assert record_of("q", "1", {"x-prov": "user:42"}) is None
    assert record_of("q", "1", {}) is None


# -- adds ------------------------------------------------------------------------------------


async def test_every_kind_of_add_carries_the_scope(redis_url: str, r: redis.Redis) -> None:
    set_provenance_key(KEY)
    async with (
        AsyncQueue("a", connection=redis_url) as a,
        AsyncQueue("b", connection=redis_url) as b,
        AsyncFlowProducer(connection=redis_url) as flows,
    ):
        plain = await a.add("outside", 1)
        async with provenance(actor="user:42", on_behalf_of="user:7", tenant="acme"):
            one = await a.add("one", 1, attempts=3)
            bulk = await a.add_bulk([("short", 1), ("long", 2, {"priority": 3})])
            tree = await flows.add(FlowJob("parent", "a", children=[FlowJob("child", "b")]))
        with Queue("a", connection=redis_url) as sync_queue, provenance(actor="cron", origin="cli"):
            sync_job = sync_queue.add("sync", 1)
        children = tree.children or []
    assert "x-prov" not in json.loads(r.hget("bull:a:1", "opts"))  # type: ignore[arg-type]
    assert plain.provenance is None
    expected = Provenance(actor="user:42", on_behalf_of="user:7", tenant="acme")
    jobs: list[AsyncJob] = [one, *bulk, tree.job, children[0].job]
    async with (
        AsyncQueue("a", connection=redis_url) as a,
        AsyncQueue("b", connection=redis_url) as b,
    ):
        for job in jobs:
            again = await (a if job.queue_name == "a" else b).get_job(job.id)
            assert again is not None and again.provenance == expected, job.name
            assert again.provenance.verified, job.name
            assert job.provenance == expected  # the job add() returned says the same
    assert stored(r, "a", one.id) == {
        "actor": "user:42",
        "onBehalfOf": "user:7",
        "tenant": "acme",
        "sig": stored(r, "a", one.id)["sig"],
    }
    assert len(stored(r, "a", one.id)["sig"]) == 22  # compact: 128 bits of base64
    assert sync_job.provenance == Provenance(actor="cron", origin="cli")


async def test_an_active_span_gives_the_traceparent_once(redis_url: str, r: redis.Redis) -> None:
    tracer = TracerProvider().get_tracer("tests")
    telemetry = Telemetry(tracer_provider=TracerProvider(), metrics=False)
    async with (
        AsyncQueue("plain", connection=redis_url) as plain,
        AsyncQueue("traced", connection=redis_url, telemetry=telemetry) as traced,
    ):
        with tracer.start_as_current_span("request") as span:
            untraced = await plain.add("no-scope", 1)
            with provenance(actor="user:42"):
                job = await plain.add("scoped", 1)
                own = await traced.add("scoped", 1)
    trace_id = f"{span.get_span_context().trace_id:032x}"
    assert "tm" not in untraced.opts  # only a scope (or telemetry) writes the carrier
    assert job.provenance is not None and job.provenance.traceparent is not None
    assert job.provenance.traceparent.split("-")[1] == trace_id
    # With telemetry the carrier is the add span's, stored once in opts.tm, as before.
    tm = json.loads(json.loads(r.hget(f"bull:traced:{own.id}", "opts"))["tm"])  # type: ignore[arg-type]
    assert own.provenance is not None and own.provenance.traceparent == tm["traceparent"]
    assert tm["traceparent"].split("-")[1] == trace_id


# -- workers ---------------------------------------------------------------------------------


def flaky_then_adds(redis_url: str) -> Any:
    """A processor that fails the first attempt of ``{"flaky": True}`` jobs, then adds two
    jobs to ``kids``: one as it is, one in a scope of its own."""

    async def process(job: AsyncJob) -> str:
        if job.attempts_made == 0 and job.data.get("flaky"):
            raise RuntimeError("first attempt fails")
        async with AsyncQueue("kids", connection=redis_url) as kids:
            await kids.add("follow-up", {"of": job.id})
            async with provenance(actor="agent:planner"):
                await kids.add("planned", {"of": job.id})
        return "ok"

    return process


async def test_jobs_added_by_a_processor_carry_the_chain_through_retries(
    redis_url: str,
) -> None:
    set_provenance_key(KEY)
    async with (
        AsyncQueue("q", connection=redis_url) as q,
        AsyncQueue("kids", connection=redis_url) as kids,
    ):
        with provenance(actor="user:42", on_behalf_of="user:7"):
            job = await q.add("task", {"flaky": True}, attempts=2)
        await drive(Worker("q", flaky_then_adds(redis_url), connection=redis_url), finished(q, 1))
        done = await q.get_job(job.id)
        assert done is not None and done.attempts_made == 2 and done.returnvalue == "ok"
        assert done.provenance is not None and done.provenance.verified  # kept by the retry
        follow_up, planned = await kids.get_jobs(["waiting"], asc=True)
    hop = ProvenanceHop("q", job.id, "user:42", "user:7")
    assert follow_up.provenance == Provenance(actor="user:42", on_behalf_of="user:7", chain=(hop,))
    assert planned.provenance == Provenance(
        actor="agent:planner", on_behalf_of="user:7", chain=(hop,)
    )
    assert follow_up.provenance.verified and planned.provenance.verified


def sync_adds(redis_url: str) -> Any:
    def process(job: Job) -> str | None:
        with Queue("kids", connection=redis_url) as kids:
            kids.add("follow-up", {"of": job.id})
        scope = current_provenance()
        return None if scope is None else scope.actor

    return process


async def test_a_thread_processor_gets_the_scope_and_only_its_jobs_carry_one(
    redis_url: str,
) -> None:
    async with (
        AsyncQueue("q", connection=redis_url) as q,
        AsyncQueue("kids", connection=redis_url) as kids,
    ):
        with provenance(actor="user:42"):
            attributed = await q.add("task", 1)
        anonymous = await q.add("task", 2)
        # A worker started inside a scope: a job without a record still adds none.
        with provenance(actor="the-worker's-own"):
            await drive(Worker("q", sync_adds(redis_url), connection=redis_url), finished(q, 2))
        results = {j.id: j.returnvalue for j in await q.get_jobs(["completed"])}
        assert results == {attributed.id: "user:42", anonymous.id: None}
        by_parent = {k.data["of"]: k.provenance for k in await kids.get_jobs(["waiting"])}
    assert by_parent[attributed.id] == Provenance(
        actor="user:42", chain=(ProvenanceHop("q", attributed.id, "user:42"),)
    )
    assert by_parent[attributed.id].signed is False  # type: ignore[union-attr]
    assert by_parent[anonymous.id] is None


async def test_a_child_process_gets_the_scope(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CORRAL_REDIS_URL", redis_url)
    monkeypatch.setenv("CORRAL_PROVENANCE_KEY", KEY.decode())  # the children's key
    set_provenance_key(KEY)
    async with (
        AsyncQueue("q", connection=redis_url) as q,
        AsyncQueue("kids", connection=redis_url) as kids,
    ):
        with provenance(actor="user:42"):
            job = await q.add("task", 1)
        worker = Worker(
            "q",
            "tests.fixtures.provenance_processors:add_follow_up",
            connection=redis_url,
            processes=1,
        )
        summary = await asyncio.wait_for(worker.run_async(burst=True), 60)
        assert summary.completed == 1
        done = await q.get_job(job.id)
        assert done is not None and done.returnvalue["actor"] == "user:42"
        kid = await kids.get_job(done.returnvalue["kid"])
    assert kid is not None and kid.provenance is not None and kid.provenance.verified
    assert kid.provenance.chain == (ProvenanceHop("q", job.id, "user:42"),)


async def test_scheduler_iterations_carry_the_creators_record(redis_url: str) -> None:
    set_provenance_key(KEY)
    runs: list[Provenance | None] = []

    async def record(job: AsyncJob) -> None:
        runs.append(job.provenance)

    async with AsyncQueue("ticks", connection=redis_url) as q:
        with provenance(actor="user:42", origin="admin"):
            first = await q.upsert_job_scheduler("tick", every=0.05, template=("tick", {}))
        assert first is not None and first.provenance is not None and first.provenance.verified

        async def three() -> bool:
            return len(runs) >= 3

        await drive(Worker("ticks", record, connection=redis_url), three)
    expected = Provenance(actor="user:42", origin="admin")
    assert runs[:3] == [expected] * 3
    assert all(run is not None and run.verified for run in runs)


async def test_a_replayed_dead_letter_keeps_the_first_runs_record(redis_url: str) -> None:
    set_provenance_key(KEY, require_signed=True)

    async def fails(job: AsyncJob) -> None:
        raise RuntimeError("card declined")

    async with (
        AsyncQueue("orders", connection=redis_url, dead_letter_queue="orders-dead") as orders,
        AsyncDeadLetterQueue("orders-dead", connection=redis_url) as dlq,
    ):
        with provenance(actor="user:42"):
            await orders.add("charge", {"amount": 9})
        await Worker("orders", fails, connection=redis_url).run_async(burst=True)
        [letter] = await dlq.get_dead_letters()
        replay = await dlq.replay(letter.id)
        again = await orders.get_job(replay.job_id)
    assert again is not None and again.provenance == Provenance(actor="user:42")
    assert again.provenance.verified


# -- signatures in the worker -----------------------------------------------------------------


def tamper(r: redis.Redis, queue: str, job_id: str, **fields: Any) -> None:
    """Edit a job's stored record with raw commands, as someone with write access could."""
    key = f"bull:{queue}:{job_id}"
    opts = json.loads(r.hget(key, "opts"))  # type: ignore[arg-type]
    opts["x-prov"].update(fields)
    r.hset(key, "opts", json.dumps(opts))


async def test_a_tampered_record_fails_the_job_for_good_when_signatures_are_required(
    redis_url: str, r: redis.Redis
) -> None:
    set_provenance_key(KEY, require_signed=True)
    ran: list[str] = []

    async def process(job: AsyncJob) -> None:
        ran.append(job.name)

    async with AsyncQueue("q", connection=redis_url) as q:
        with provenance(actor="user:7"):
            good = await q.add("good", 1, attempts=3)
            forged = await q.add("forged", 1, attempts=3)
        tamper(r, "q", forged.id, actor="admin")
        stripped = await q.add("no-record", 1, attempts=3)
        set_provenance_key(None)
        with provenance(actor="user:7"):
            unsigned = await q.add("unsigned", 1, attempts=3)
        set_provenance_key(KEY, require_signed=True)
        await drive(Worker("q", process, connection=redis_url), finished(q, 4))
        assert ran == ["good"]
        reasons = {j.name: (j.failed_reason, j.attempts_made) for j in await q.get_jobs(["failed"])}
    assert reasons == {
        "forged": (
            f"refused: job {forged.id} carries a provenance record whose signature does not "
            "verify (altered, or signed with another key); signed ones are required",
            1,
        ),
        "no-record": (
            f"refused: job {stripped.id} carries no provenance record; signed ones are required",
            1,
        ),
        "unsigned": (
            f"refused: job {unsigned.id} carries an unsigned provenance record; signed ones "
            "are required",
            1,
        ),
    }
    assert good.id not in reasons


async def test_an_unverified_record_runs_but_is_never_signed_onwards(
    redis_url: str, r: redis.Redis
) -> None:
    set_provenance_key(KEY)
    async with (
        AsyncQueue("q", connection=redis_url) as q,
        AsyncQueue("kids", connection=redis_url) as kids,
    ):
        with provenance(actor="user:7"):
            forged = await q.add("task", {})
        tamper(r, "q", forged.id, actor="admin")
        seen: list[Provenance | None] = []
        adds = flaky_then_adds(redis_url)

        async def process(job: AsyncJob) -> str:
            seen.append(job.provenance)
            return str(await adds(job))

        await drive(Worker("q", process, connection=redis_url), finished(q, 1))
        kid_records = [k.provenance for k in await kids.get_jobs(["waiting"])]
    assert seen[0] is not None and seen[0].actor == "admin"
    assert seen[0].signed and not seen[0].verified
    # The worker's key must not turn a forged claim into a signed one.
    assert [k is not None and (k.actor, k.signed) for k in kid_records] in (
        [("admin", False), ("agent:planner", False)],
        [("agent:planner", False), ("admin", False)],
    )


# -- where people read it ----------------------------------------------------------------------


def test_corral_job_shows_the_record(redis_url: str) -> None:
    set_provenance_key(KEY)
    scope = provenance(actor="user:42", on_behalf_of="user:7", request_id="r-1")
    with Queue("q", connection=redis_url) as q, scope:
        job = q.add("task", 1)
    result = CliRunner().invoke(main, ["job", "q", job.id, "--url", redis_url])
    assert result.exit_code == 0, result.output
    line = next(line for line in result.stdout.splitlines() if line.startswith("provenance"))
    assert "user:42 for user:7, request r-1, signature verified" in line
    result = CliRunner().invoke(main, ["job", "q", job.id, "--url", redis_url, "--json"])
    doc = json.loads(result.stdout)["provenance"]
    assert (doc["actor"], doc["on_behalf_of"], doc["chain"], doc["verified"]) == (
        "user:42",
        "user:7",
        [],
        True,
    )


def test_the_dashboard_job_page_shows_the_record(redis_url: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # Starlette's TestClient, see its conftest
        from starlette.testclient import TestClient

    from corral.dashboard import create_app

    scope = provenance(actor="<script>alert(1)</script>", tenant="acme")
    with Queue("q", connection=redis_url) as q, scope:
        job = q.add("task", 1)
    app = create_app(connection=redis_url, auth="test-token-0123456789")
    headers = {"Authorization": "Bearer test-token-0123456789"}
    with TestClient(app, headers=headers) as client:
        html = client.get(f"/queues/q/jobs/{job.id}").text
    assert 'data-testid="provenance"' in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;, tenant acme, signature none" in html
