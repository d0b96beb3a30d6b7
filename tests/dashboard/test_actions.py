"""Every action: its confirmation page, the POST that changes the server (checked with a
Queue), the flash message after the redirect; refused (403, nothing changed) without the
CSRF token, with a wrong one, and in read-only mode."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from corral import Queue
from tests.dashboard.conftest import TOKEN, TestClient, csrf_of, log_in


def counts(url: str, name: str) -> dict[str, int]:
    with Queue(name, connection=url) as queue:
        return queue.get_job_counts("waiting", "prioritized", "delayed", "completed", "failed")


def paused(url: str, name: str) -> bool:
    with Queue(name, connection=url) as queue:
        return queue.is_paused()


def state_of(url: str, name: str, job_id: str) -> str:
    with Queue(name, connection=url) as queue:
        return str(queue.get_job_state(job_id))


def failed_reason(url: str, name: str, job_id: str) -> str | None:
    with Queue(name, connection=url) as queue:
        job = queue.get_job(job_id)
        assert job is not None
        return job.failed_reason


def _pause(url: str) -> None:
    with Queue("emails", connection=url) as queue:
        queue.pause()


#: (action URL, fields, a check that it happened, what the flash says); setup runs first.
ACTIONS: list[tuple[str, dict[str, str], Callable[[str], Any], str]] = [
    ("/queues/emails/pause", {}, lambda u: paused(u, "emails"), "paused"),
    (
        "/queues/emails/drain",
        {},
        lambda u: (
            counts(u, "emails")["waiting"] == 0
            and counts(u, "emails")["prioritized"] == 0
            and counts(u, "emails")["delayed"] == 2
        ),
        "drained emails",
    ),
    (
        "/queues/emails/drain",
        {"delayed": "1"},
        lambda u: counts(u, "emails")["delayed"] == 0,
        "delayed jobs too",
    ),
    (
        "/queues/reports/clean",
        {"state": "failed", "grace": "0", "limit": "10"},
        lambda u: counts(u, "reports")["failed"] == 0,
        "cleaned 2 failed jobs",
    ),
    (
        "/queues/reports/retry-failed",
        {},
        lambda u: counts(u, "reports")["failed"] == 0 and counts(u, "reports")["waiting"] == 2,
        "2 failed jobs sent back",
    ),
    (
        "/queues/reports/jobs/bad/retry",
        {},
        lambda u: state_of(u, "reports", "bad") == "waiting",
        "retried",
    ),
    (
        "/queues/reports/jobs/good/retry",
        {},
        lambda u: state_of(u, "reports", "good") == "waiting",
        "retried",
    ),
    (
        "/queues/emails/jobs/later/promote",
        {},
        lambda u: state_of(u, "emails", "later") == "waiting",
        "promoted",
    ),
    (
        "/queues/emails/jobs/w1/remove",
        {},
        lambda u: state_of(u, "emails", "w1") == "unknown",
        "removed job w1",
    ),
    (
        "/queues/emails/jobs/vip/cancel",
        {"reason": "not needed"},
        lambda u: failed_reason(u, "emails", "vip") == "cancelled: not needed",
        "cancelled vip",
    ),
]


def test_resume(browser: tuple[TestClient, str], seeded: str) -> None:
    client, csrf = browser
    _pause(seeded)
    response = client.post("/queues/emails/resume", data={"csrf_token": csrf})
    assert response.status_code == 303
    assert not paused(seeded, "emails")


@pytest.mark.parametrize(("url", "fields", "done", "said"), ACTIONS, ids=[a[0] for a in ACTIONS])
def test_action_confirms_then_changes_the_server(
    browser: tuple[TestClient, str],
    seeded: str,
    url: str,
    fields: dict[str, str],
    done: Callable[[str], Any],
    said: str,
) -> None:
    client, _ = browser
    confirm = client.get(url)
    assert confirm.status_code == 200
    assert f'action="{url}"' in confirm.text and 'data-testid="confirm"' in confirm.text
    assert not done(seeded)  # the confirmation page changed nothing
    response = client.post(url, data={"csrf_token": csrf_of(confirm.text), **fields})
    assert response.status_code == 303
    assert done(seeded)
    landing = client.get(response.headers["location"])
    assert landing.status_code == 200
    assert 'data-testid="flash"' in landing.text and said in landing.text
    # Shown once: the next page has no flash.
    assert 'data-testid="flash"' not in client.get(response.headers["location"]).text


@pytest.mark.parametrize("token", [None, "", "wrong-token"])
@pytest.mark.parametrize(("url", "fields", "done", "said"), ACTIONS, ids=[a[0] for a in ACTIONS])
def test_action_without_the_right_csrf_token_is_refused(
    browser: tuple[TestClient, str],
    seeded: str,
    url: str,
    fields: dict[str, str],
    done: Callable[[str], Any],
    said: str,
    token: str | None,
) -> None:
    client, _ = browser
    data = dict(fields) if token is None else {"csrf_token": token, **fields}
    response = client.post(url, data=data)
    assert response.status_code == 403
    assert "CSRF" in response.text
    assert not done(seeded)


def test_a_csrf_token_of_another_session_is_refused(
    seeded: str, make_client: Callable[..., TestClient]
) -> None:
    ours, theirs = make_client(), make_client()
    log_in(ours)
    their_token = log_in(theirs)
    response = ours.post("/queues/emails/pause", data={"csrf_token": their_token})
    assert response.status_code == 403
    assert not paused(seeded, "emails")


def test_a_bearer_request_needs_no_csrf_token(api: TestClient, seeded: str) -> None:
    response = api.post("/queues/emails/pause")
    assert response.status_code == 303
    assert paused(seeded, "emails")


def test_a_refused_action_is_a_flash_error_not_a_crash(
    browser: tuple[TestClient, str], seeded: str
) -> None:
    client, csrf = browser
    # "w0" waits: there is nothing to promote.
    response = client.post("/queues/emails/jobs/w0/promote", data={"csrf_token": csrf})
    assert response.status_code == 303
    landing = client.get(response.headers["location"])
    assert "flash-error" in landing.text
    assert state_of(seeded, "emails", "w0") == "waiting"


@pytest.mark.parametrize(
    "fields",
    [{"state": "bogus"}, {"state": "failed", "grace": "-1"}, {"state": "failed", "limit": "x"}],
)
def test_clean_with_bad_fields_is_a_400(
    browser: tuple[TestClient, str], seeded: str, fields: dict[str, str]
) -> None:
    client, csrf = browser
    response = client.post("/queues/reports/clean", data={"csrf_token": csrf, **fields})
    assert response.status_code == 400
    assert counts(seeded, "reports")["failed"] == 2


def test_actions_of_unknown_queues_and_jobs_are_404(browser: tuple[TestClient, str]) -> None:
    client, csrf = browser
    assert client.post("/queues/nope/pause", data={"csrf_token": csrf}).status_code == 404
    assert (
        client.post("/queues/emails/jobs/nope/retry", data={"csrf_token": csrf}).status_code == 404
    )


@pytest.mark.parametrize(("url", "fields", "done", "said"), ACTIONS, ids=[a[0] for a in ACTIONS])
def test_read_only_refuses_every_action(
    seeded: str,
    make_client: Callable[..., TestClient],
    url: str,
    fields: dict[str, str],
    done: Callable[[str], Any],
    said: str,
) -> None:
    client = make_client(read_only=True)
    csrf = log_in(client)
    assert client.get(url).status_code == 403
    response = client.post(url, data={"csrf_token": csrf, **fields})
    assert response.status_code == 403 and "read-only" in response.text
    assert not done(seeded)
    bearer = make_client(read_only=True, headers={"Authorization": f"Bearer {TOKEN}"})
    assert bearer.post(url, data=fields).status_code == 403
    assert not done(seeded)


def test_read_only_hides_every_action(seeded: str, make_client: Callable[..., TestClient]) -> None:
    client = make_client(read_only=True, headers={"Authorization": f"Bearer {TOKEN}"})
    for url in (
        "/queues/reports",
        "/queues/reports/failed",
        "/queues/reports/jobs/bad",
        "/queues/emails/jobs/later",
    ):
        html = client.get(url).text
        assert 'data-testid="read-only"' in html
        assert 'data-testid="action-' not in html, url
