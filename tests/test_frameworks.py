"""The framework examples of docs/frameworks.md, driven by each framework's own test client and
the fixtures of corral.testing (the plugin is installed with corral): FastAPI with its worker
in another process, Flask with the sync API, Django with transaction-safe enqueues and
``manage.py corral_worker``."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest

from corral import AsyncQueue, Queue
from corral.testing import assert_completed, assert_completed_async, assert_failed, drain
from tests.conftest import ServerProcess

EXAMPLES = Path(__file__).resolve().parent.parent / "docs" / "examples"
DJANGO_PROJECT = EXAMPLES / "django_project"


@pytest.fixture(scope="session")
def corral_server(test_server: ServerProcess) -> str:
    """The plugin's server is this suite's own (it would otherwise start an embedded one)."""
    return test_server.url


def example(name: str, path: Path = EXAMPLES) -> ModuleType:
    sys.path.insert(0, str(path))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(path))


# -- FastAPI --------------------------------------------------------------------------------


async def test_fastapi_enqueue_status_and_result_with_a_worker_process(
    corral_async_queue: AsyncQueue, corral_server: str
) -> None:
    fastapi_app = example("fastapi_app")
    app = fastapi_app.create_app(corral_async_queue.name, connection=corral_server)
    transport = httpx.ASGITransport(app=app)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://app") as client,
    ):
        reply = await client.post("/thumbnails", json={"image": "cat.png", "width": 64})
        assert reply.status_code == 202
        job_id = reply.json()["id"]
        assert (await client.get(f"/thumbnails/{job_id}")).json() == {
            "id": job_id,
            "state": "waiting",
            "result": None,
        }
        # No worker yet: the wait ends at its timeout with the job's state.
        early = await client.get(f"/thumbnails/{job_id}/result", params={"timeout": 0.05})
        assert (early.status_code, early.json()) == (202, {"id": job_id, "state": "waiting"})

        worker = fastapi_app.start_worker(corral_async_queue.name, corral_server)
        try:
            done = await client.get(f"/thumbnails/{job_id}/result", params={"timeout": 30})
            reply = await client.post("/thumbnails", json={"image": "dog.png", "width": 0})
            bad = reply.json()["id"]
            failed = await client.get(f"/thumbnails/{bad}/result", params={"timeout": 30})
        finally:
            worker.terminate()
            _, err = worker.communicate(timeout=30)
        assert worker.returncode == 0, err
        assert (done.status_code, done.json()["result"]) == (200, {"thumbnail": "cat.png@64w"})
        assert (failed.status_code, failed.json()["reason"]) == (
            422,
            "width must be positive, got 0",
        )
        status = (await client.get(f"/thumbnails/{job_id}")).json()
        assert status["state"] == "completed"
        assert (await client.get("/thumbnails/999")).status_code == 404
    # Enqueued through the app, run by the other process: the plugin's assertions agree.
    job = await corral_async_queue.get_job(job_id)
    assert job is not None
    await assert_completed_async(job, returnvalue={"thumbnail": "cat.png@64w"})


# -- Flask ----------------------------------------------------------------------------------


def test_flask_with_the_sync_api(corral_queue: Queue, corral_server: str) -> None:
    flask_app = example("flask_app")
    app = flask_app.create_app(corral_queue.name, connection=corral_server)
    client = app.test_client()
    try:
        ok = client.post("/reports", json={"title": "q3", "rows": 42})
        assert ok.status_code == 202
        big = client.post("/reports", json={"title": "all", "rows": 10**6}).json["id"]
        early = client.get(f"/reports/{ok.json['id']}/result", query_string={"timeout": 0.05})
        assert (early.status_code, early.json["state"]) == (202, "waiting")

        summary = drain(corral_queue, flask_app.build_report)
        assert (summary.completed, summary.failed) == (1, 1)

        done = client.get(f"/reports/{ok.json['id']}/result")
        assert (done.status_code, done.json["result"]) == (200, {"report": "q3.pdf", "rows": 42})
        assert client.get(f"/reports/{ok.json['id']}").json["state"] == "completed"
        failed = client.get(f"/reports/{big}/result")
        assert (failed.status_code, failed.json["reason"]) == (422, "too many rows: 1000000")
        assert client.get("/reports/999").status_code == 404
        assert_failed(corral_queue.get_job(big), reason="too many rows")
    finally:
        app.extensions["corral_queue"].close()


# -- Django ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def django_shop() -> Iterator[Any]:
    """The example project set up in this process, on its in-memory sqlite database."""
    django = pytest.importorskip("django")
    from django.core.management import call_command

    sys.path.insert(0, str(DJANGO_PROJECT))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DJANGO_SETTINGS_MODULE", "shop.settings")
        django.setup()
        call_command("migrate", run_syncdb=True, verbosity=0)
        yield django
    sys.path.remove(str(DJANGO_PROJECT))


@pytest.fixture
def shop_settings(django_shop: Any, corral_queue: Queue, corral_server: str) -> Iterator[None]:
    """The shop's settings pointed at this test's queue and server."""
    from django.test import override_settings

    queues = {corral_queue.name: "orders.jobs:confirm_order"}
    with override_settings(
        ORDERS_QUEUE=corral_queue.name, CORRAL={"url": corral_server, "queues": queues}
    ):
        yield


def test_django_view_enqueues_on_commit_and_the_command_runs_it(
    shop_settings: None, corral_queue: Queue
) -> None:
    from django.core.management import call_command
    from django.test import Client

    client = Client()
    reply = client.post("/orders/", {"item": "tea", "quantity": 2})
    assert reply.status_code == 201, reply.content
    order = reply.json()["order"]
    (job,) = corral_queue.get_jobs("waiting")
    assert (job.name, job.data, job.opts["attempts"]) == ("confirm", {"order": order}, 3)

    call_command("corral_worker", corral_queue.name, "--burst", "--log-level", "warning")

    assert_completed(job, returnvalue={"order": order, "status": "confirmed"})
    assert client.get(f"/orders/{order}/").json() == {"order": order, "status": "confirmed"}


def test_django_a_rolled_back_transaction_enqueues_nothing(
    shop_settings: None, corral_queue: Queue
) -> None:
    from django.db import transaction
    from django.test import Client

    from corral.django import enqueue_on_commit

    reply = Client().post("/orders/", {"item": "tea", "quantity": 0})
    assert (reply.status_code, reply.json()) == (400, {"error": "quantity must be positive"})
    with pytest.raises(RuntimeError), transaction.atomic():
        enqueue_on_commit(corral_queue, "confirm", {"order": 1})
        raise RuntimeError("rolled back")
    assert corral_queue.count() == 0
    from orders.models import Order

    assert not Order.objects.filter(quantity=0).exists()
    # Outside a transaction (autocommit) the job is added at once.
    enqueue_on_commit(corral_queue.name, "confirm", {"order": 1})
    assert corral_queue.count() == 1


def test_django_a_bad_option_is_refused_before_the_commit(shop_settings: None) -> None:
    from django.conf import settings
    from django.db import transaction

    from corral.django import enqueue_on_commit
    from corral.errors import InvalidOptionError

    refused = pytest.raises(InvalidOptionError, match="unknown job option 'atempts'")
    with refused, transaction.atomic():
        enqueue_on_commit(settings.ORDERS_QUEUE, "confirm", {}, atempts=3)


def test_django_the_command_names_the_configured_queues(shop_settings: None) -> None:
    from django.core.management import CommandError, call_command

    with pytest.raises(CommandError, match=r"queue 'nope' is not in settings.CORRAL\['queues'\]"):
        call_command("corral_worker", "nope", "--burst")


def test_django_manage_py_corral_worker(
    corral_queue: Queue, corral_server: str, tmp_path: Path
) -> None:
    """``python manage.py corral_worker`` as a user runs it: Django set up from the settings
    module, the queue's processor from settings.CORRAL, the ORM inside the job."""
    env = {
        **os.environ,
        "CORRAL_REDIS_URL": corral_server,
        "ORDERS_QUEUE": corral_queue.name,
        "SHOP_DATABASE": str(tmp_path / "shop.sqlite3"),
    }

    def manage(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=DJANGO_PROJECT,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    migrated = manage("migrate", "--run-syncdb", "--verbosity", "0")
    assert migrated.returncode == 0, migrated.stderr
    job = corral_queue.add("confirm", {"order": 41})  # no such order in this database
    done = manage("corral_worker", "--burst", "--fail-on-job-failure")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "corral worker: drained: 0 completed, 1 failed, 0 retried" in done.stdout
    assert_failed(job, reason="no new order 41")


# -- the page -------------------------------------------------------------------------------


def test_the_blocks_of_docs_frameworks_md_are_copied_from_the_files_that_run() -> None:
    from tests.test_examples import DOCS, python_blocks

    sources = [EXAMPLES / "fastapi_app.py", EXAMPLES / "flask_app.py", Path(__file__)]
    sources += sorted(DJANGO_PROJECT.rglob("*.py"))
    texts = [p.read_text(encoding="utf-8") for p in sources]
    blocks = python_blocks(DOCS / "frameworks.md")
    assert len(blocks) >= 5
    for block in blocks:
        assert any(block.code in text for text in texts), f"frameworks.md:{block.line}"
