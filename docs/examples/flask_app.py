"""A Flask app that hands work to corral with the sync API (docs/frameworks.md): an endpoint
enqueues a report, another tells its state, a third waits for its result up to a timeout.

Serve it with ``flask --app flask_app run`` and run ``corral worker flask_app:build_report -q
reports`` beside it. Run as a script, it drives the app with Flask's test client and runs a
worker in burst mode in between, printing what the docs quote.
"""

import os
from typing import Any

from flask import Flask, abort, request

from corral import Job, JobFailedError, Queue

QUEUE = "reports"


def build_report(job: Job) -> dict[str, Any]:
    """The job: a plain function (the worker runs it in a thread)."""
    rows = job.data["rows"]
    if rows > 1000:
        raise ValueError(f"too many rows: {rows}")
    return {"report": f"{job.data['title']}.pdf", "rows": rows}


def create_app(queue_name: str = QUEUE, connection: str | None = None) -> Flask:
    """The app, on ``queue_name`` (tests give theirs); ``connection=None``: CORRAL_REDIS_URL."""
    app = Flask(__name__)
    # One sync Queue for the app: its connection pool is shared by the request threads.
    queue = Queue(queue_name, connection=connection)
    app.extensions["corral_queue"] = queue

    @app.post("/reports")
    def enqueue() -> tuple[dict[str, str], int]:
        body = request.get_json()
        job = queue.add("report", {"title": body["title"], "rows": body["rows"]})
        return {"id": job.id}, 202

    @app.get("/reports/<job_id>")
    def status(job_id: str) -> dict[str, Any]:
        job = queue.get_job(job_id) or abort(404)
        return {"id": job.id, "state": str(job.get_state()), "result": job.returnvalue}

    @app.get("/reports/<job_id>/result")
    def result(job_id: str) -> tuple[dict[str, Any], int]:
        job = queue.get_job(job_id) or abort(404)
        try:
            value = job.wait_until_finished(timeout=request.args.get("timeout", 5.0, type=float))
        except TimeoutError:
            return {"id": job_id, "state": str(job.get_state())}, 202  # ask again later
        except JobFailedError as exc:
            return {"id": job_id, "state": "failed", "reason": str(exc)}, 422
        return {"id": job_id, "state": "completed", "result": value}, 200

    return app


if __name__ == "__main__":
    from corral import Worker

    url = os.environ.get("CORRAL_REDIS_URL")  # the tests give their server; else the embedded one
    app = create_app(connection=url)
    app.extensions["corral_queue"].obliterate(force=True)  # a fresh queue each run
    client = app.test_client()
    ok = client.post("/reports", json={"title": "q3", "rows": 42}).json["id"]
    big = client.post("/reports", json={"title": "all", "rows": 10**6}).json["id"]
    early = client.get(f"/reports/{ok}/result", query_string={"timeout": 0.1})
    print("before a worker runs:", early.status_code, early.json["state"])
    summary = Worker(QUEUE, build_report, connection=url).run(burst=True)
    print(f"worker: {summary.completed} completed, {summary.failed} failed")
    print("status:", client.get(f"/reports/{ok}").json["state"])
    done = client.get(f"/reports/{ok}/result")
    print("result:", done.status_code, done.json["result"])
    failed = client.get(f"/reports/{big}/result")
    print("too big:", failed.status_code, failed.json["reason"])
    print("unknown job:", client.get("/reports/999").status_code)
