"""The jobs of the orders app, run by ``python manage.py corral_worker`` (Django is set up
there, so jobs use the ORM as views do)."""

from typing import Any

from corral import Job
from orders.models import Order


def confirm_order(job: Job) -> dict[str, Any]:
    pk = job.data["order"]
    # The job was added after the order's transaction committed: the row is there to read.
    if not Order.objects.filter(pk=pk, status="new").update(status="confirmed"):
        raise ValueError(f"no new order {pk}")
    return {"order": pk, "status": "confirmed"}
