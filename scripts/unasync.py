"""Generate corral/_sync/ from corral/_async/ (and tests/_sync from tests/_async).

Run ``python scripts/unasync.py`` to write the files, ``--check`` to fail when the generated
files differ from what is committed (the check step of ``make test`` does this).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAIRS = [
    (ROOT / "corral" / "_async", ROOT / "corral" / "_sync"),
    (ROOT / "tests" / "_async", ROOT / "tests" / "_sync"),
]
# Whole-word replacements, applied in order.
SUBS = [
    (r"from redis\.asyncio import", "from redis import"),
    (r"^from asyncio import sleep$", "from time import sleep"),
    (r"redis\.asyncio", "redis"),
    # AsyncQueue -> Queue, AsyncJob -> Job, AsyncIterator -> Iterator...
    (r"\bAsync([A-Z]\w*)", r"\1"),
    (r"\basync def\b", "def"),
    (r"\basync with\b", "with"),
    (r"\basync for\b", "for"),
    # A call the asyncio API makes in a thread is a plain call in the blocking API.
    (r"\bawait asyncio\.to_thread\(([\w.]+), ", r"\1("),
    (r"\bawait ", ""),
    # The blocking API has no event loop (corral._async._redis.running_loop).
    (r"\basyncio\.get_running_loop\(\)", "None"),
    (r"\b__aenter__\b", "__enter__"),
    (r"\b__aiter__\b", "__iter__"),
    (r"\b__anext__\b", "__next__"),
    (r"\bStopAsyncIteration\b", "StopIteration"),
    (r"\b_listeners\.emit\(", "_listeners.emit_sync("),
    (r"\b__aexit__\b", "__exit__"),
    (r"\baclose\b", "close"),
    (r"\bcorral\._async\b", "corral._sync"),
    (r"\btests\._async\b", "tests._sync"),
    (r"Hand-written asyncio I/O\.", "Generated blocking I/O, do not edit."),
]
HEADER = "# Generated from {src} by scripts/unasync.py: do not edit.\n"


def convert(text: str) -> str:
    for pattern, repl in SUBS:
        text = re.sub(pattern, repl, text, flags=re.MULTILINE)
    return text


def main(check: bool) -> int:
    stale = []
    for src_dir, dst_dir in PAIRS:
        if not src_dir.exists():
            continue
        dst_dir.mkdir(exist_ok=True)
        expected = {}
        for src in sorted(src_dir.rglob("*.py")):
            rel = src.relative_to(src_dir)
            header = HEADER.format(src=src.relative_to(ROOT).as_posix())
            expected[dst_dir / rel] = header + convert(src.read_text())
        for dst, text in expected.items():
            if not dst.exists() or dst.read_text() != text:
                stale.append(dst)
                if not check:
                    dst.parent.mkdir(parents=True, exist_ok=True)
                    dst.write_text(text)
        for dst in dst_dir.rglob("*.py"):
            if dst not in expected:
                stale.append(dst)
                if not check:
                    dst.unlink()
    if check and stale:
        for path in stale:
            print(f"out of date: {path.relative_to(ROOT)}", file=sys.stderr)
        print("run: python scripts/unasync.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main("--check" in sys.argv[1:]))
