"""Every docs/examples/*.py runs against the test server and prints what the docs say, twice
on the same server (as a second run on the embedded server, which keeps its data, would), and
so does every corral code block of the pages in docs/migrating/ (once).

In those pages each ```python block carries a title: ``title="corral"`` blocks run as scripts
(each on its own) and state what they print with ``# prints: <line>`` comments; a block titled
with another library's name (``title="RQ"``) is that library's code: it is only compiled, as
those libraries are not installed here. The blocks of the other pages are checked by
tests/test_doc_blocks.py, with this module's parser.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import pytest

DOCS = Path(__file__).resolve().parent.parent / "docs"
EXAMPLES = sorted((DOCS / "examples").glob("*.py"))
#: Pages whose ```python blocks are themselves the examples.
BLOCK_PAGES = sorted((DOCS / "migrating").glob("*.md"))

#: Lines each example must print (the docs quote them).
EXPECTED = {
    "quickstart.py": [
        "completed=2 failed=1",
        "job 1 returned {'status': 'sent', 'to': 'ada@example.com'}",
    ],
    "sync_producer.py": ["same job: True", "counts: {'waiting': 1}"],
    "dedup.py": [
        "simple: True",
        "debounced to: {'n': 2}",
        "idempotent: True {'charged': 1250}",
        "job still stored: False",
    ],
    "events_listener.py": [
        "result: HELLO",
        "failure: nothing to translate",
        "completed 1: 'HELLO'",
        "failed 2: nothing to translate",
        "replayed: ['completed:1', 'failed:2']",
    ],
    "queue_admin.py": [
        "paused: True waiting: 6",
        "first page: ['1', '2', '3']",
        "retried: 2 counts: {'completed': 6, 'failed': 0}",
        "cleaned: 6",
    ],
    "retries.py": [
        "flaky: attempts=3 ok after 3 attempts",
        "linear: attempts=3 ok after 3 attempts",
        "bad: attempts=1 400: the request itself is wrong",
    ],
    "worker_events.py": [
        "job 1: 25%",
        "job 1: 100%",
        "job 1 done: {'frames': 1200}",
        "logs: ['encoded intro.mp4'] processed by: encoder-1",
    ],
    "step_job.py": ["step: welcome", "step: follow-up", "result: onboarded attempts: 1"],
    "flow_fanout.py": [
        "parent waits for 3 children: waiting-children",
        "book: {'pages': 3, 'words': 9}",
    ],
    "llm_pipeline.py": [
        "model calls: 4",
        "merged: Flows run children first / A flaky model call is retried / "
        "The parent reads every result",
    ],
    "scheduler.py": [
        "schedulers: ['heartbeat', 'nightly']",
        "heartbeat runs: [1, 2, 3]",
        "nightly: '0 3 * * *' next at 03:00 Paris time, "
        "JobTemplate(name='report', data={'kind': 'daily'}, opts={'attempts': 3})",
        "removed: True",
        "left: 1",
    ],
    "timeouts_cancel.py": [
        "cancel active: active",
        "cancel delayed: failed",
        "hangs: attempts=2 timed out after 0.5 s",
        "summarise: attempts=1 partial summary",
        "waits: attempts=1 cancelled: user closed the tab",
        "later: attempts=0 cancelled: not needed",
        "crunch: stopped early, soft_timed_out=True (1 completed)",
    ],
    "child_processes.py": [
        "completed=2 failed=2",
        "primes: 78498",
        "crash: the child process running the job was killed by SIGABRT "
        "(an abort, such as a failed C assertion)",
        "forever: timed out after 0.5 s",
        "primes: 25",
        "logged: True",
    ],
    "sharded_queue.py": [
        "shards: ['{thumbnails.shard0.1}', '{thumbnails.shard1.0}', '{thumbnails.shard2.0}']",
        "same job: True in shard 2",
        "waiting: 13",
        "completed: 13 drained",
        "photo-99 returned 198",
        "refused: a global concurrency is counted in one queue, and queue thumbnails is 3 shards",
    ],
    "lanes.py": [
        "chat answered: reply 1",
        "reports running meanwhile: 1",
        "completed: 7 closed most at once: {'reports': 1, 'chat': 1}",
        "with borrow: 6 reports at once: 3",
    ],
    "health_check.py": [
        "no worker: False ['thumbnails: 0 worker(s) connected, fewer than 1'] waiting: 3",
        "with a worker: True workers: 1",
        "GET /healthz: 200 True",
        "after close: 503 ['thumbnails: 0 worker(s) connected, fewer than 1']",
        "corral_job_processing_seconds_count{'outcome': 'completed', 'queue': 'thumbnails'}: 3",
        "corral_job_waiting_seconds_count{'queue': 'thumbnails'}: 3",
    ],
    "dashboard_mount.py": [
        "without the token: 401",
        "overview: 200 links: ['/corral/queues/invoices']",
        "csp: default-src 'self'",
        "login: 303 cookie: True",
        "pause without CSRF token: 403",
    ],
    "agent_approval.py": [
        "parked: state=delayed active=0 (1 slot, free)",
        "meanwhile: job 2 ran on the free slot and parked too",
        "signal: woken",
        "resumed, completed: {'published': True, 'by': 'ada', 'sent': True, 'words': 9}",
        "tool calls: 2 attempts: 2",
        "sse: Dear customer, about order 42: we will refund you.",
        "sse end: end completed",
        "draft written once: True steps: ['draft', 'publish']",
        "second: woken {'published': False, 'reason': 'no'}",
    ],
    "dead_letters.py": [
        "still stored: False",
        "dead letter payments-1: payments/1 payment service down (call 2)",
        "attempts: 2 stacks: 2",
        "replayed as: 2 again: True",
        "result: {'charged': 1250}",
        "replay of: {'queue': 'payments-dead', 'id': 'payments-1', 'jobId': '1'}",
        "purged: 1",
    ],
    "fastapi_app.py": [
        "before a worker runs: 202 waiting",
        "result: 200 {'thumbnail': 'cat.png@64w'}",
        "status: completed",
        "bad width: 422 width must be positive, got 0",
        "unknown job: 404",
        "worker exit code: 0",
    ],
    "flask_app.py": [
        "before a worker runs: 202 waiting",
        "worker: 1 completed, 1 failed",
        "status: completed",
        "result: 200 {'report': 'q3.pdf', 'rows': 42}",
        "too big: 422 too many rows: 1000000",
        "unknown job: 404",
    ],
    "processors.py": [
        "failed job says: width must be a positive integer, got -1",
        "attempts made: 1",
    ],
    "provenance_support.py": [
        "claimed: support:ann for user:7, tenant acme, origin admin-ui, signature verified",
        "completed=1 failed=2",
        "anonymous: refused: job anonymous carries no provenance record; signed ones are required",
        "edited: refused: job edited carries a provenance record whose signature does not verify "
        "(altered, or signed with another key); signed ones are required",
        "receipt: support:ann for user:7, tenant acme, origin admin-ui, via refunds/1 "
        "(support:ann), signature verified",
        "survey: agent:follow-up for user:7, tenant acme, origin admin-ui, via refunds/1 "
        "(support:ann), signature verified",
    ],
    "breaker_payments.py": [
        "open after 3 failed calls; attempts burned: 3",
        "closed: completed 5, provider calls: 8, attempts made: 8",
        "summarise: delayed, attempts=0 runs=0",
        "summarise: summary, attempts=1, llm closed",
        "event: payments closed -> open",
        "event: payments open -> half_open",
        "event: payments half_open -> closed",
        "event: llm open -> half_open",
        "deadline: deadline of 0.1 s exceeded; a TimeoutError: True",
    ],
    "otel_tracing.py": [
        "opts.tm carries: ['traceparent']",
        "POST /checkout [INTERNAL]",
        "  add receipts.receipt [PRODUCER] job=receipt",
        "    process receipts [CONSUMER] job=receipt attempt=1 state=retried status=ERROR",
        "      render pdf [INTERNAL]",
        "    process receipts [CONSUMER] job=receipt attempt=2 state=completed status=UNSET",
        "  addFlow billing [PRODUCER]",
        "    addNode billing [PRODUCER] job=invoice",
        "      addNode billing [PRODUCER] job=tax",
        "        process billing [CONSUMER] job=tax attempt=1 state=completed status=UNSET",
        "      process billing [CONSUMER] job=invoice attempt=1 state=completed status=UNSET",
        "bullmq.jobs.completed{job.name=receipt,job.state=completed,queue.name=receipts} 1",
        "bullmq.jobs.retried{job.name=receipt,job.state=retried,queue.name=receipts} 1",
        "bullmq.job.duration{job.name=receipt,job.state=retried,queue.name=receipts} count=1",
        "corral.job.waiting.duration{job.name=receipt,queue.name=receipts} count=1",
    ],
}


def test_every_example_is_checked() -> None:
    assert sorted(p.name for p in EXAMPLES) == sorted(EXPECTED)


def run_script(path: Path, redis_url: str, cwd: Path) -> list[str]:
    """Run ``path`` with ``CORRAL_REDIS_URL=redis_url``; the lines it printed (it must exit 0)."""
    proc = subprocess.run(
        [sys.executable, str(path)],
        cwd=cwd,
        env={**os.environ, "CORRAL_REDIS_URL": redis_url},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_example_runs(path: Path, redis_url: str) -> None:
    # Twice on one server: the embedded server keeps its data, so a user who runs an example
    # again must see the same lines, not those of a queue the first run left behind.
    for run in ("first", "second"):
        printed = run_script(path, redis_url, path.parent)
        for line in EXPECTED[path.name]:
            assert line in printed, f"{run} run:\n" + "\n".join(printed)


class Block(NamedTuple):
    page: Path
    line: int  # of the opening fence, 1-based
    title: str
    code: str
    #: The word of the ``<!-- word -->`` line just before the fence (blank lines between
    #: allowed), or "": how tests/test_doc_blocks.py checks a block of docs/*.md.
    marker: str = ""

    @property
    def runs(self) -> bool:
        return self.title == "corral" or self.marker == "runs"

    @property
    def prints(self) -> list[str]:
        return re.findall(r"# prints: (.*)$", self.code, flags=re.MULTILINE)


FENCE = re.compile(r"^```python(?:\s+title=\"(?P<title>[^\"]*)\")?\s*$")
MARKER = re.compile(r"^<!--\s*(?P<word>[\w-]+)\s*-->$")


def marker_before(lines: list[str], fence: int) -> str:
    """The word of the HTML comment on the last non-blank line before ``lines[fence]``."""
    i = fence - 1
    while i >= 0 and not lines[i].strip():
        i -= 1
    found = MARKER.match(lines[i].strip()) if i >= 0 else None
    return found["word"] if found else ""


def python_blocks(page: Path) -> list[Block]:
    blocks = []
    lines = page.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if opening is None:
            i += 1
            continue
        end = lines.index("```", i + 1)
        code = "\n".join(lines[i + 1 : end]) + "\n"
        title = opening["title"] or ""
        blocks.append(Block(page, i + 1, title, code, marker_before(lines, i)))
        i = end + 1
    return blocks


BLOCKS = [block for page in BLOCK_PAGES for block in python_blocks(page)]


def block_id(block: Block) -> str:
    return f"{block.page.stem}:{block.line}"


def test_every_migration_page_has_blocks_that_run() -> None:
    assert BLOCK_PAGES, "no page in docs/migrating/"
    for page in BLOCK_PAGES:
        blocks = [b for b in BLOCKS if b.page == page]
        assert any(b.runs for b in blocks), f'{page.name}: no ```python title="corral" block'
        for block in blocks:
            where = f"{page.name}:{block.line}"
            assert block.title, f'{where}: a python block needs title="corral" or the library'
            if block.runs:
                assert block.prints, f"{where}: say what the block prints (# prints: ...)"


@pytest.mark.parametrize("block", [b for b in BLOCKS if not b.runs], ids=block_id)
def test_other_library_block_compiles(block: Block) -> None:
    # Snippets of async libraries await at top level, as in an asyncio REPL.
    compile(block.code, block_id(block), "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.runs], ids=block_id)
def test_corral_block_runs(block: Block, redis_url: str, tmp_path: Path) -> None:
    script = tmp_path / f"{block.page.stem}_{block.line}.py"
    script.write_text(block.code, encoding="utf-8")
    printed = run_script(script, redis_url, tmp_path)
    for line in block.prints:
        assert line in printed, "\n".join(printed)
