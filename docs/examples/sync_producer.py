"""The blocking API: add jobs from plain code (a web view, a script, a cron job)."""

from corral import Queue

with Queue("reports") as queue:
    job = queue.add("monthly", {"month": "2026-11"}, job_id="monthly-2026-11", attempts=3)
    again = queue.add("monthly", {"month": "2026-11"}, job_id="monthly-2026-11")
    print("same job:", job.id == again.id)
    print("counts:", queue.get_job_counts("waiting"))
