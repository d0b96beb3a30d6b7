"""Every ```python block of the docs/*.md pages is checked, so that a rename in corral cannot
leave a page wrong (docs/migrating/ has its own convention: tests/test_examples.py).

A block says what it is on the line before its fence (blank lines between are fine), in an
HTML comment that the site and GitHub do not show:

- ``<!-- runs -->``: a whole program. It runs as a script against the suite's server
  (``CORRAL_REDIS_URL``) and must print each line it states in a ``# prints: <line>``
  comment (it states at least one).
- ``<!-- fragment -->``: a few lines that show an API and need context they do not have
  (``queue``, a processor, an app...). It must compile (dedented; ``await`` at top level is
  allowed, as in an asyncio REPL), and every corral name it uses must exist: ``import
  corral...`` and ``from corral... import Name``; attributes of corral modules and classes
  (``corral.Breaker``, ``Backoff.exponential``); the keyword arguments of calls to corral
  callables; and the methods, attributes and keyword arguments used on corral objects. An
  object is known by how the block makes it (``queue = Queue(...)``, ``with Queue(...) as q``,
  ``job: Job``, a corral call whose return annotation is a corral class) or, when the block
  does not bind the name, by ``CONTEXT`` in tests/doc_fragments.py (``queue`` is an
  ``AsyncQueue``...); names of corral's ``__all__`` and ``corral`` itself count as imported.
  The check is tests/doc_fragments.py.

Some fragments are checked further elsewhere: the blocks of docs/frameworks.md are copied
from files that run (tests/test_frameworks.py), and the ``title="test_....py"`` blocks of
docs/testing.md run under pytest (tests/test_testing_plugin.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.doc_fragments import check_fragment
from tests.test_examples import DOCS, Block, python_blocks, run_script

PAGES = sorted(DOCS.glob("*.md"))
BLOCKS = [block for page in PAGES for block in python_blocks(page)]
MARKERS = ("runs", "fragment")


def block_id(block: Block) -> str:
    return f"{block.page.stem}:{block.line}"


def where(block: Block) -> str:
    return f"{block.page.name}:{block.line}"


# -- the kinds of block -----------------------------------------------------------------------


def test_the_pages_have_blocks() -> None:
    assert len(BLOCKS) >= 40, [where(b) for b in BLOCKS]
    assert any(b.marker == "runs" for b in BLOCKS)


def test_every_block_says_what_it_is() -> None:
    unmarked = [where(b) for b in BLOCKS if b.marker not in MARKERS]
    assert not unmarked, "put <!-- runs --> or <!-- fragment --> before the fence of " + ", ".join(
        unmarked
    )


def test_every_runnable_block_says_what_it_prints() -> None:
    silent = [where(b) for b in BLOCKS if b.marker == "runs" and not b.prints]
    assert not silent, "say what the block prints (# prints: ...): " + ", ".join(silent)


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.marker == "runs"], ids=block_id)
def test_runnable_block_prints_what_it_says(block: Block, redis_url: str, tmp_path: Path) -> None:
    script = tmp_path / f"{block.page.stem}_{block.line}.py"
    script.write_text(block.code, encoding="utf-8")
    printed = run_script(script, redis_url, tmp_path)
    for line in block.prints:
        assert line in printed, f"{where(block)}: no line {line!r} in\n" + "\n".join(printed)


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.marker == "fragment"], ids=block_id)
def test_fragment_names_what_exists(block: Block) -> None:
    problems = check_fragment(block.code, where(block))
    assert not problems, "\n".join(problems)


# -- the check checks ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("from corral import Nothing\n", "corral has no 'Nothing'"),
        ("import corral.nothing\n", "import corral.nothing"),
        ("corral.Breakr('payments')\n", "corral has no 'Breakr'"),
        ("Worker('q', f, concurency=2)\n", "Worker() takes no keyword 'concurency'"),
        ("Worker({'a': 1}, f, borow=True)\n", "Worker() takes no keyword 'borow'"),
        ("await queue.add_jobz('a', {})\n", "a AsyncQueue has no 'add_jobz'"),
        ("await queue.add('a', {}, atempts=3)\n", "AsyncQueue.add() takes no keyword 'atempts'"),
        ("with Queue('q') as q:\n    q.get_jobz()\n", "a Queue has no 'get_jobz'"),
        ("def f(job: Job):\n    job.updte_progress(1)\n", "a Job has no 'updte_progress'"),
        ("from corral.health import check_health\nr = check_health(q)\nr.okay\n", "no 'okay'"),
        ("from corral.options import Backoff\nBackoff.exponentiel(1)\n", "no 'exponentiel'"),
    ],
)
def test_the_check_finds_what_does_not_exist(code: str, expected: str) -> None:
    problems = check_fragment(code)
    assert any(expected in p for p in problems), problems


def test_the_check_takes_what_exists() -> None:
    code = """
import corral
from corral import Queue, Worker
from corral.dedup import Dedup
from corral.health import check_health

payments = corral.Breaker("payments", failures=5, window=60, cooldown=30)
await queue.add("sync", {}, deduplication=Dedup("crm", ttl=60), attempts=3, breakers=["x"])
Worker({"a": 1}, handle, borrow=True, spare=0)
Worker("q", handle, shards=3, concurrency=4).run(burst=True, max_jobs=10)
with Queue("q", connection="redis://localhost:6379/0") as q:
    job = q.add("a", {}, job_id="1")
    job.update_progress(50)
    job.data, job.id, job.returnvalue
report = check_health(q, max_waiting_age=60, min_workers=1)
report.ok, report.reasons, report.waiting
queue = object()
queue.anything
"""
    assert check_fragment(code) == []


def test_a_block_that_does_not_compile_fails() -> None:
    with pytest.raises(SyntaxError):
        check_fragment("Worker(queue_name, *, concurrency=1)\n")
