"""Provenance: a support agent refunds an order for a customer; an agent job plans the
follow-ups; every job says who triggered it and for whom, signed; an edited or missing record is
refused."""

import asyncio
import json

import corral
from corral import AsyncJob, AsyncQueue, Worker

# Every process of the deployment sets the same key (or CORRAL_PROVENANCE_KEY).
corral.set_provenance_key(b"a-long-random-secret-from-the-vault", require_signed=True)


async def refund(job: AsyncJob) -> str:
    # Jobs added here carry the refund's record, plus a hop through this job.
    async with AsyncQueue("emails") as emails:
        await emails.add("receipt", {"order": job.data["order"]})
        async with corral.provenance(actor="agent:follow-up"):
            await emails.add("survey", {"order": job.data["order"]})
    return "refunded"


async def main() -> None:
    async with AsyncQueue("refunds") as refunds, AsyncQueue("emails") as emails:
        for queue in (refunds, emails):
            await queue.obliterate(force=True)  # start empty: the embedded server keeps old jobs
        # The web handler knows who is logged in and whom they act for.
        async with corral.provenance(
            actor="support:ann", on_behalf_of="user:7", tenant="acme", origin="admin-ui"
        ):
            job = await refunds.add("refund", {"order": 1234})
        anonymous = await refunds.add("refund", {"order": 999}, job_id="anonymous")
        print("claimed:", job.provenance.summary() if job.provenance else None)

        # Someone with write access to Redis edits a record: the signature no longer fits.
        with corral.provenance(actor="user:7"):
            await refunds.add("refund", {"order": 5678}, job_id="edited")
        r = await refunds.client()
        opts = json.loads(await r.hget("bull:refunds:edited", "opts"))
        opts["x-prov"]["actor"] = "admin"
        await r.hset("bull:refunds:edited", "opts", json.dumps(opts))

        summary = await Worker("refunds", refund).run_async(burst=True)
        print(f"completed={summary.completed} failed={summary.failed}")
        for job_id in (anonymous.id, "edited"):
            failed = await refunds.get_job(job_id)
            assert failed is not None
            print(f"{job_id}: {failed.failed_reason}")
        for email in await emails.get_jobs(["waiting"], asc=True):
            assert email.provenance is not None
            print(f"{email.name}: {email.provenance.summary()}")


asyncio.run(main())
