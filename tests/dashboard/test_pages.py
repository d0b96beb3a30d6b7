"""Every read-side page renders the seeded queues (200), bad URLs give 404 or 400 pages, a
page of a big set is read by index, and links work under a mount path."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
import redis
from starlette.applications import Starlette
from starlette.routing import Mount

from corral import Queue
from corral.dashboard import create_app
from tests.dashboard.conftest import TOKEN, TestClient

STATES = ["waiting", "prioritized", "delayed", "active", "waiting-children", "completed", "failed"]


def ids_in(html: str) -> list[str]:
    return re.findall(r'<tr data-job-id="([^"]+)"', html)


def test_overview_lists_every_queue_with_counts_and_charts(api: TestClient) -> None:
    page = api.get("/")
    assert page.status_code == 200
    html = page.text
    for name in ("emails", "reports", "books", "pages"):
        assert f'data-queue="{name}"' in html
    emails = html[html.index('data-queue="emails"') : html.index('data-queue="pages"')]
    assert re.search(r'data-count="waiting">3<', emails)
    assert re.search(r'data-count="delayed">2<', emails)  # one is the scheduler's
    assert re.search(r'data-count="prioritized">1<', emails)
    reports = html[html.index('data-queue="reports"') :]
    assert re.search(r'data-count="failed">2<', reports)
    assert 'data-testid="chart-completed"' in html
    assert "<polyline" in html or "no metrics" in html
    assert 'data-live-url="/live"' in html


def test_overview_with_only_the_queues_given(
    seeded: str, make_client: Callable[..., TestClient]
) -> None:
    client = make_client(queues=["reports"], headers={"Authorization": f"Bearer {TOKEN}"})
    html = client.get("/").text
    assert 'data-queue="reports"' in html
    assert 'data-queue="emails"' not in html
    assert client.get("/queues/emails").status_code == 404


def test_queue_page_summary_actions_and_latest_failed(api: TestClient) -> None:
    html = api.get("/queues/reports").text
    assert 'data-testid="queue-name">reports' in html
    assert sorted(ids_in(html)) == ["bad", "xss"]
    for action in ("pause", "retry-failed", "clean", "drain"):
        assert f'href="/queues/reports/{action}"' in html
    assert 'data-live-url="/queues/reports/live"' in html


@pytest.mark.parametrize(
    ("queue", "state", "ids"),
    [
        ("emails", "waiting", ["w0", "w1", "w2"]),  # the next to run first
        ("emails", "delayed", ["later"]),  # and the scheduler iteration (repeat:...)
        ("emails", "prioritized", ["vip"]),
        ("reports", "completed", ["good"]),
        ("reports", "failed", ["bad", "xss"]),  # the last failed first
        ("books", "waiting-children", ["book"]),
        ("emails", "active", []),
    ],
)
def test_state_lists(api: TestClient, queue: str, state: str, ids: list[str]) -> None:
    page = api.get(f"/queues/{queue}/{state}")
    assert page.status_code == 200
    found = [i for i in ids_in(page.text) if not i.startswith("repeat:")]
    assert found == ids


def test_state_fragment_is_the_table_only(api: TestClient) -> None:
    page = api.get("/queues/emails/waiting?fragment=1")
    assert page.status_code == 200
    assert "<html" not in page.text
    assert ids_in(page.text)[:3] == ["w0", "w1", "w2"]


def test_job_page_of_a_failed_job(api: TestClient) -> None:
    html = api.get("/queues/reports/jobs/bad").text
    assert 'data-testid="job-state">failed' in html
    assert "disk full" in html
    assert html.count('data-testid="stacktrace"') == 2  # both attempts
    assert "attempt 1 of day bad" in html and "attempt 2 of day bad" in html
    assert "&#34;day&#34;: &#34;bad&#34;" in html  # the data, pretty-printed and escaped
    for label in ("added", "started (attempt 2)", "finished"):
        assert label in html
    assert 'href="/queues/reports/jobs/bad/retry"' in html
    assert 'data-fragment-url="/queues/reports/jobs/bad?fragment=1"' in html


def test_job_page_of_a_completed_and_a_delayed_job(api: TestClient) -> None:
    html = api.get("/queues/reports/jobs/good").text
    assert 'data-testid="returnvalue"' in html and "&#34;rows&#34;: 42" in html
    delayed = api.get("/queues/emails/jobs/later").text
    assert "due (delay over)" in delayed
    assert 'href="/queues/emails/jobs/later/promote"' in delayed


def test_flow_parent_and_children_link_each_other(api: TestClient) -> None:
    parent = api.get("/queues/books/jobs/book").text
    assert parent.count('data-testid="child"') == 3
    for n in range(3):
        assert f'href="/queues/pages/jobs/p{n}"' in parent
    assert "waiting" in parent  # the children's state
    child = api.get("/queues/pages/jobs/p1").text
    assert 'data-testid="parent-link"' in child
    assert 'href="/queues/books/jobs/book"' in child


def test_scheduler_page_and_the_link_from_its_iteration(api: TestClient) -> None:
    html = api.get("/queues/emails/schedulers").text
    assert 'id="scheduler-nightly"' in html
    assert "0 3 * * *" in html and "digest" in html and "UTC" in html
    delayed = api.get("/queues/emails/delayed").text
    (iteration,) = [i for i in ids_in(delayed) if i.startswith("repeat:")]
    job = api.get(f"/queues/emails/jobs/{iteration}")
    assert job.status_code == 200
    assert 'data-testid="scheduler-link"' in job.text
    assert "/queues/emails/schedulers#scheduler-nightly" in job.text


def test_metrics_page_charts_the_recorded_minutes(api: TestClient) -> None:
    html = api.get("/queues/reports/metrics").text
    assert 'data-testid="metrics-completed"' in html and 'data-testid="metrics-failed"' in html
    assert html.count("<svg") == 4


def test_search_page_renders_a_page_of_results_with_progress(api: TestClient) -> None:
    form = api.get("/queues/reports/search")
    assert form.status_code == 200 and 'data-testid="search-form"' in form.text
    html = api.get("/queues/reports/search", params={"q": "disk"}).text
    assert ids_in(html) == ["bad"]
    assert re.search(r"scanned \d+ of \d+ jobs", html)
    only = api.get("/queues/reports/search", params={"q": "good", "state": "completed"})
    assert ids_in(only.text) == ["good"]


def test_search_continue_link_carries_the_cursor(api: TestClient, seeded: str) -> None:
    with Queue("big", connection=seeded) as queue:
        queue.add_bulk([("n", {"i": i}) for i in range(3000)])
    html = api.get("/queues/big/search", params={"q": "no-such-text"}).text
    found = re.search(r'href="([^"]+)" data-testid="search-continue"', html)
    if found is None:  # D2's search did everything in one request: nothing to continue
        assert 'data-testid="search-done"' in html
        return
    follow = api.get(found.group(1).replace("&amp;", "&"))
    assert follow.status_code == 200 and "scanned" in follow.text


@pytest.mark.parametrize(
    ("url", "status"),
    [
        ("/queues/nope", 404),
        ("/queues/nope/failed", 404),
        ("/queues/emails/jobs/nope", 404),
        ("/queues/emails/no-such-state", 404),
        ("/queues/emails/jobs/meta", 404),  # a queue key's name, not a job
        ("/nowhere", 404),
        ("/queues/emails/waiting?page=0", 400),
        ("/queues/emails/waiting?page=x", 400),
        ("/queues/emails/waiting?page=99999999999", 400),
        ("/queues/emails/search?q=a&state=bogus", 400),
        ("/queues/emails/search?q=a&cursor=bogus", 400),
    ],
)
def test_bad_urls_give_an_error_page(api: TestClient, url: str, status: int) -> None:
    page = api.get(url)
    assert page.status_code == status
    assert 'data-testid="error-heading"' in page.text
    assert "Traceback" not in page.text
    assert page.headers["content-security-policy"].startswith("default-src 'self'")


def test_a_page_far_into_a_big_set_reads_only_that_page(
    api: TestClient, seeded: str, r: redis.Redis
) -> None:
    with Queue("big", connection=seeded) as queue:
        queue.add_bulk([("n", {"i": i}, {"job_id": f"j{i}"}) for i in range(5000)])
    r.config_resetstat()
    page = api.get("/queues/big/waiting", params={"page": 50})
    assert page.status_code == 200
    assert ids_in(page.text) == [f"j{i}" for i in range(2450, 2500)]
    assert "2451\u20132500 of" in page.text
    stats = r.info("commandstats")
    # One HGETALL per job of the page (and none of the other 4,950), one LRANGE.
    assert stats["cmdstat_hgetall"]["calls"] == 50
    assert stats["cmdstat_lrange"]["calls"] == 1
    last = api.get("/queues/big/waiting", params={"page": 100})
    assert ids_in(last.text)[-1] == "j4999"
    beyond = api.get("/queues/big/waiting", params={"page": 101})
    assert beyond.status_code == 200 and ids_in(beyond.text) == []


def test_names_and_ids_are_quoted_in_links(api: TestClient, seeded: str) -> None:
    with Queue("a/b c", connection=seeded) as queue:
        queue.add("x", {}, job_id="id/with?odd#chars")
    html = api.get("/").text
    assert 'href="/queues/a%2Fb%20c"' in html
    listing = api.get("/queues/a%2Fb%20c/waiting")
    assert listing.status_code == 200
    assert 'href="/queues/a%2Fb%20c/jobs/id%2Fwith%3Fodd%23chars"' in listing.text
    job = api.get("/queues/a%2Fb%20c/jobs/id%2Fwith%3Fodd%23chars")
    assert job.status_code == 200 and 'data-testid="job-id">id/with?odd#chars' in job.text


def test_mounted_under_a_path_every_link_keeps_it(seeded: str) -> None:
    dashboard = create_app(connection=seeded, auth=TOKEN)
    # A mounted app's lifespan runs only when the host runs it (docs/dashboard.md).
    host = Starlette(
        routes=[Mount("/ops/corral", dashboard)],
        lifespan=lambda app: dashboard.router.lifespan_context(dashboard),
    )
    with TestClient(host, headers={"Authorization": f"Bearer {TOKEN}"}) as client:
        html = client.get("/ops/corral/").text
        links = re.findall(r'(?:href|src|action|data-live-url)="([^"#]+)', html)
        assert links and all(link.startswith("/ops/corral/") for link in links), links
        for link in {link for link in links if "/queues/" in link or "/static/" in link}:
            assert client.get(link.replace("&amp;", "&")).status_code == 200, link
        job = client.get("/ops/corral/queues/reports/jobs/bad").text
        assert 'href="/ops/corral/queues/reports/jobs/bad/retry"' in job
        confirm = client.get("/ops/corral/queues/reports/jobs/bad/retry").text
        assert 'action="/ops/corral/queues/reports/jobs/bad/retry"' in confirm


def test_an_unreachable_server_is_a_503_page(make_client: Callable[..., TestClient]) -> None:
    from tests.conftest import free_port

    client = make_client(
        connection=f"redis://127.0.0.1:{free_port()}/0",
        headers={"Authorization": f"Bearer {TOKEN}"},
    )
    page = client.get("/")
    assert page.status_code == 503
    assert "cannot reach the server" in page.text and "Traceback" not in page.text
    assert page.headers["x-frame-options"] == "DENY"


def test_static_files_are_served(api: TestClient) -> None:
    css = api.get("/static/corral.css")
    js = api.get("/static/corral.js")
    assert css.status_code == 200 and "text/css" in css.headers["content-type"]
    assert js.status_code == 200 and "EventSource" in js.text


def test_no_inline_script_or_style_in_any_page(api: TestClient) -> None:
    for url in (
        "/",
        "/queues/reports",
        "/queues/reports/failed",
        "/queues/reports/jobs/bad",
        "/queues/emails/schedulers",
        "/queues/emails/metrics",
        "/queues/emails/pause",
        "/queues/reports/search?q=disk",
    ):
        html = api.get(url).text
        assert re.findall(r"<script(?![^>]*\bsrc=)", html) == [], url
        assert " style=" not in html and "<style" not in html, url
        assert not re.search(r"<[^>]*\son[a-z]+=", html), url
