"""The dashboard in a real headless Chromium: what an operator sees and does, and what an
attacker's job data cannot do (run script, open a dialog, get past the CSP).

The screenshots of docs/dashboard.md (docs/images/dashboard-*.png) are written by
:func:`test_screenshots_of_the_main_pages`.
"""

from __future__ import annotations

import json
import struct
import time
from collections.abc import Callable
from pathlib import Path

from playwright.sync_api import Browser, BrowserContext, Dialog, Locator, Page, expect

from tests.browser.conftest import IMAGES, TIMEOUT_MS, TOKEN, VIEWPORT, Dashboard
from tests.dashboard.conftest import XSS


def count_cell(page: Page, queue: str, state: str) -> Locator:
    """The overview's count of ``state`` in the row of ``queue``."""
    return page.locator(f'tr[data-queue="{queue}"] [data-count="{state}"]')


def record_dialogs(page: Page) -> list[str]:
    """Every dialog (alert, confirm, prompt) the page opens, dismissed at once."""
    opened: list[str] = []

    def on_dialog(dialog: Dialog) -> None:
        opened.append(f"{dialog.type}: {dialog.message}")
        dialog.dismiss()

    page.on("dialog", on_dialog)
    return opened


def wait_live(page: Page) -> None:
    """Wait until the page's event stream is open (the header's "live" badge shows)."""
    expect(page.get_by_test_id("live-status")).to_have_text("live")
    expect(page.get_by_test_id("live-status")).to_be_visible()


def test_overview_shows_queues_of_corral_and_of_node_bullmq(
    node_jobs: list[str], page: Page
) -> None:
    assert len(node_jobs) == 4
    page.goto("/")
    rows = page.get_by_test_id("queue-row")
    expect(rows.filter(has_text="node-mail")).to_have_count(1)
    expect(count_cell(page, "node-mail", "waiting")).to_have_text("4")
    # corral's queues of the seed, beside it.
    expect(count_cell(page, "emails", "waiting")).to_have_text("3")
    # "later", and the next run of the scheduler "nightly".
    expect(count_cell(page, "emails", "delayed")).to_have_text("2")
    expect(count_cell(page, "emails", "prioritized")).to_have_text("1")
    expect(count_cell(page, "reports", "failed")).to_have_text("2")
    expect(count_cell(page, "reports", "completed")).to_have_text("1")
    names = rows.locator('[data-testid="queue-link"]').all_inner_texts()
    assert {"emails", "reports", "books", "pages", "node-mail"} <= set(names)
    # A Node job opens, its unicode data intact.
    page.get_by_role("link", name="node-mail", exact=True).click()
    page.get_by_test_id("tab-waiting").click()
    page.locator(f'tr[data-job-id="{node_jobs[1]}"] a.job-link').click()
    expect(page.get_by_test_id("job-name")).to_have_text("job-1")
    expect(page.get_by_test_id("job-data")).to_contain_text("héllo wörld 日本語 🚀")


def test_search_finds_a_job_by_a_word_of_its_data(page: Page) -> None:
    page.goto("/queues/emails")
    page.get_by_test_id("tab-search").click()
    page.get_by_test_id("search-input").fill("user1@")
    page.get_by_test_id("search-submit").click()
    results = page.get_by_test_id("search-results")
    expect(results.get_by_test_id("job-row")).to_have_count(1)
    expect(results.locator('tr[data-job-id="w1"]')).to_be_visible()
    expect(page.get_by_test_id("search-done")).to_be_visible()
    assert "q=user1%40" in page.url
    # A word in no job finds nothing.
    page.get_by_test_id("search-input").fill("nobody-has-this")
    page.get_by_test_id("search-submit").click()
    expect(page.get_by_test_id("search-done")).to_be_visible()
    expect(page.get_by_test_id("search-results").get_by_test_id("job-row")).to_have_count(0)


def test_retry_of_a_failed_job_updates_an_open_overview_live(
    context: BrowserContext, add_jobs: Callable[[str, int], None]
) -> None:
    overview = context.new_page()
    navigations: list[str] = []
    overview.on("framenavigated", lambda frame: navigations.append(frame.url))
    overview.goto("/")
    wait_live(overview)
    # A reload or navigation would drop this, and add to `navigations`.
    overview.evaluate("window.notReloaded = true")
    expect(count_cell(overview, "reports", "failed")).to_have_text("2")
    expect(count_cell(overview, "reports", "waiting")).to_have_text("0")
    seen = len(navigations)

    ops = context.new_page()
    ops.goto("/queues/reports/failed")
    expect(ops.get_by_test_id("job-row")).to_have_count(2)
    ops.locator('tr[data-job-id="bad"] a.job-link').click()
    expect(ops.get_by_test_id("job-state")).to_have_text("failed")
    ops.get_by_test_id("action-retry").click()
    ops.get_by_test_id("confirm").click()
    expect(ops.get_by_test_id("flash")).to_contain_text("retried")
    expect(ops.get_by_test_id("job-state")).to_have_text("waiting")

    expect(count_cell(overview, "reports", "failed")).to_have_text("1")
    expect(count_cell(overview, "reports", "waiting")).to_have_text("1")
    # Jobs added from Python show too.
    add_jobs("emails", 2)
    expect(count_cell(overview, "emails", "waiting")).to_have_text("5")
    assert overview.evaluate("window.notReloaded") is True
    assert navigations[seen:] == []


def test_job_text_that_looks_like_html_stays_text(page: Page) -> None:
    dialogs = record_dialogs(page)
    page.goto("/queues/reports/jobs/xss")
    for testid in ("job-name", "logs", "failed-reason"):
        text = page.get_by_test_id(testid).inner_text()
        for attack in XSS:
            assert attack in text, (testid, text)
    assert json.loads(page.get_by_test_id("job-data").inner_text())["html"] == XSS
    stack = page.get_by_test_id("stacktrace").first.inner_text()
    assert XSS[0] in stack and XSS[1] in stack
    assert page.locator("main img, main script").count() == 0

    page.goto("/queues/reports/failed")
    row = page.locator('tr[data-job-id="xss"]')
    expect(row).to_contain_text(XSS[0])
    expect(row).to_contain_text(XSS[1])
    page.goto("/queues/reports/search?q=alert")
    expect(page.locator('#search-results tr[data-job-id="xss"]')).to_contain_text(XSS[0])
    page.goto("/")
    assert page.locator("img").count() == 0
    assert page.locator("script:not([src])").count() == 0
    assert dialogs == []


INJECT = """() => new Promise((resolve) => {
    const violations = [];
    document.addEventListener("securitypolicyviolation", (e) => {
        violations.push(e.violatedDirective);
        resolve(violations);
    });
    const script = document.createElement("script");
    script.textContent = "window.pwned = 1";
    document.body.appendChild(script);
    const button = document.createElement("button");
    button.setAttribute("onclick", "window.pwned = 2");
    document.body.appendChild(button);
    button.click();
    if (window.pwned !== undefined) resolve(violations);
    setTimeout(() => resolve(violations), 10000);  // neither: the asserts below say so
})"""


def test_the_csp_blocks_an_injected_inline_script(page: Page) -> None:
    # The same injection on a page without the dashboard's CSP runs: the check can fail.
    page.set_content("<html><body></body></html>")
    page.evaluate(INJECT)
    assert page.evaluate("window.pwned") == 2

    page.goto("/queues/reports")
    expect(page.get_by_test_id("queue-name")).to_contain_text("reports")
    with page.expect_console_message(lambda m: "Content Security Policy" in m.text) as message:
        violations = page.evaluate(INJECT)
    assert violations and violations[0].startswith("script-src"), violations
    assert "script-src" in message.value.text, message.value.text
    assert message.value.type == "error"
    assert page.evaluate("window.pwned") is None


SHOTS = ["login", "overview", "failed", "job", "search", "schedulers"]


def png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    width, height = struct.unpack(">II", head[16:24])
    return int(width), int(height)


def test_screenshots_of_the_main_pages(
    chromium: Browser, dashboard: Dashboard, flow_with_failure: str
) -> None:
    started = time.time()
    IMAGES.mkdir(parents=True, exist_ok=True)
    ctx = chromium.new_context(
        viewport=VIEWPORT, locale="en-US", timezone_id="UTC", base_url=dashboard.url
    )
    ctx.set_default_timeout(TIMEOUT_MS)
    try:
        page = ctx.new_page()

        def shot(name: str, full_page: bool = False) -> None:
            page.screenshot(path=str(IMAGES / f"dashboard-{name}.png"), full_page=full_page)

        page.goto("/login")
        expect(page.get_by_test_id("login-form")).to_be_visible()
        shot("login")
        page.get_by_test_id("login-token").fill(TOKEN)
        page.get_by_test_id("login-submit").click()
        expect(count_cell(page, "renders", "failed")).to_have_text("1")
        wait_live(page)
        shot("overview")
        page.goto("/queues/reports/failed")
        expect(page.get_by_test_id("job-row")).to_have_count(2)
        wait_live(page)
        shot("failed")
        page.goto("/queues/renders/jobs/chapter2")
        expect(page.get_by_test_id("stacktrace")).to_have_count(2)
        expect(page.get_by_test_id("parent-link")).to_contain_text("annual")
        expect(page.get_by_test_id("child")).to_have_count(2)
        wait_live(page)
        shot("job", full_page=True)
        page.goto("/queues/emails/search?q=example.com")
        expect(page.get_by_test_id("search-results").get_by_test_id("job-row")).to_have_count(5)
        shot("search")
        page.goto("/queues/emails/schedulers")
        expect(page.get_by_test_id("scheduler-row")).to_have_count(2)
        page.locator('[id="scheduler-nightly"] summary').click()
        expect(page.locator('[id="scheduler-nightly"] pre').first).to_contain_text("k")
        shot("schedulers")
    finally:
        ctx.close()
    for name in SHOTS:
        path = IMAGES / f"dashboard-{name}.png"
        assert path.stat().st_mtime >= started - 1, f"{path} was not written by this run"
        width, height = png_size(path)
        assert width == VIEWPORT["width"] and height >= VIEWPORT["height"], (path, width, height)
