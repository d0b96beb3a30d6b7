"""Smoke check of the benchmark harness (``make bench``): a tiny run of one workload.

It starts its own server (like ``make bench``, not the suite's), runs the corral and the Node
BullMQ producer once each, and must print both sides' numbers and their ratio.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from corral import server

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.interop


def test_bench_quick_single_add(tmp_path: Path) -> None:
    if server.find_binary() is None:
        pytest.skip("no valkey-server/redis-server binary available")
    if shutil.which("node") is None or not (ROOT / "tests/interop/node_modules/bullmq").is_dir():
        pytest.fail("Node BullMQ is not installed: run `make test`")
    out = tmp_path / "quick.json"
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--only", "single_add", "--json", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    row = next(line for line in proc.stdout.splitlines() if "single add" in line)
    cells = [c.strip() for c in row.strip("|").split("|")]
    # workload | metric | corral | Node | corral/Node | verdict
    assert cells[1] == "jobs/s"
    assert re.fullmatch(r"[\d,]+", cells[2]) and re.fullmatch(r"[\d,]+", cells[3]), row
    assert float(cells[4]) > 0, row
    assert re.search(r"(corral|Node) [\d.]+x faster|even", cells[5]), row

    report = json.loads(out.read_text())
    (summary,) = report["summary"]
    assert summary["corral"]["median"] > 0 and summary["node"]["median"] > 0
    assert summary["ratio"] == pytest.approx(
        summary["corral"]["median"] / summary["node"]["median"]
    )
