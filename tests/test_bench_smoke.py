"""Smoke checks of the benchmark harnesses: tiny runs of ``make bench`` (two workloads), of
its scale curves (``python -m bench --curves``) and of ``python -m bench.chaos`` (three of its
scenarios).

Both start their own servers (not the suite's). The first runs the corral and the Node BullMQ
producer once each, and must print both sides' numbers and their ratio.
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


@pytest.mark.interop
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


@pytest.mark.interop
def test_bench_quick_drain_children(tmp_path: Path) -> None:
    """The child-process drain at its quick size (issue 11): one worker process per variant,
    corral's processes=2 and BullMQ's sandboxed processor each running two children."""
    if server.find_binary() is None:
        pytest.skip("no valkey-server/redis-server binary available")
    if shutil.which("node") is None or not (ROOT / "tests/interop/node_modules/bullmq").is_dir():
        pytest.fail("Node BullMQ is not installed: run `make test`")
    out = tmp_path / "quick.json"
    # One children variant (c=4) instead of the default two: the run stays ~10 s.
    args = ["--quick", "--only", "drain_children", "--children-concurrency", "4"]
    proc = subprocess.run(
        [sys.executable, "-m", "bench", *args, "--json", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "corral children / in-process (threads, c=2): " in proc.stdout, proc.stdout
    assert "corral children / Node sandboxed: " in proc.stdout, proc.stdout

    report = json.loads(out.read_text())
    rows = {row["key"]: row for row in report["summary"]}
    assert rows["rate_sync"]["node"]["median"] is None  # Node has no threads
    for key in ("rate_async", "rate_children", "children_over_inproc"):
        assert rows[key]["corral"]["median"] > 0 and rows[key]["node"]["median"] > 0, key
    ((corral,), (node,)) = report["runs"]["drain_children"].values()
    assert set(corral["variants"]) == {"sync", "async", "children_c4"}
    assert set(node["variants"]) == {"async", "children_c2"}
    for side in (corral, node):
        for name, variant in side["variants"].items():
            assert variant["failed"] == 0 and variant["rate"] > 0, name
            # Two children under the worker exactly when the processor runs in children.
            assert variant["child_processes"] == (2 if name.startswith("children") else 0), name


@pytest.mark.interop
@pytest.mark.timeout(300)  # about 30 s on an idle 2-core machine, twice that when it is busy
def test_bench_curves_scaled(tmp_path: Path) -> None:
    """The scale curves of issue 18 at 1/200 of their size: every point measured for both
    sides, the JSON and one PNG per curve written where asked (not into docs/)."""
    if server.find_binary() is None:
        pytest.skip("no valkey-server/redis-server binary available")
    if shutil.which("node") is None or not (ROOT / "tests/interop/node_modules/bullmq").is_dir():
        pytest.fail("Node BullMQ is not installed: run `make test`")
    out, charts = tmp_path / "curves.json", tmp_path / "charts"
    flags = ["--json", str(out), "--charts", str(charts)]
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "--curves", "--scale", "0.005", *flags],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for heading in ("Drain rate by jobs waiting", "Add rate into a queue", "Server memory"):
        assert f"### {heading}" in proc.stdout, proc.stdout

    report = json.loads(out.read_text())
    sizes = report["sizes"]
    levels = sizes["backlogs"]
    assert levels == [50, 500, 5000]  # 10k, 100k, 1M scaled
    expected = {f"{kind}:{n}" for kind in ("backlog", "single", "bulk", "memory") for n in levels}
    expected |= {"completed:retained", "completed:trim", "completed:keep", "delayed:due"}
    expected |= {"priorities:spread", "queues:many"}
    points = {p["key"]: p for p in report["points"]}
    assert set(points) == expected
    for key, point in points.items():
        main = "queued" if point["kind"] == "memory" else "rate"
        for side in ("corral", "node"):
            assert point[side][main]["median"] > 0, (key, side)
        assert point["ratio"] > 0, key
        if point["kind"] == "rate" and key != point["baseline"]:
            assert point["goals"]["own_0_8"] in (True, False), key
    for key, sides in report["runs"].items():
        for side, (run,) in sides.items():
            assert run.get("failed", 0) == 0, (key, side)
    # The options reached both sides' jobs: keep-last-N trimmed the retained jobs, every job
    # was delayed (or prioritized) when the workers started, one worker per group of queues.
    for side in ("corral", "node"):
        (keep,) = report["runs"]["completed:keep"][side]
        assert keep["completed_left"] == sizes["keep"], side
        (delayed,) = report["runs"]["delayed:due"][side]
        assert delayed["delayed_at_go"] == sizes["delayed"], side
        (spread,) = report["runs"]["priorities:spread"][side]
        assert spread["prioritized_at_go"] == sizes["priority_jobs"], side
        (many,) = report["runs"]["queues:many"][side]
        assert many["worker_processes"] == -(-sizes["queues"] // sizes["queues_per_worker"])

    names = {"backlog", "adds", "memory", "completed", "delayed", "priorities", "queues"}
    assert {p.name for p in charts.iterdir()} == {f"{n}.png" for n in names}
    for png in charts.iterdir():
        data = png.read_bytes()
        assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) < 100_000, png.name


def test_chaos_quick(tmp_path: Path) -> None:
    """``python -m bench.chaos`` (issue 10's fault measurements) at its tiny size: the three
    cheapest scenarios, on servers of its own, must report every figure."""
    if server.find_binary() is None:
        pytest.skip("no valkey-server/redis-server binary available")
    out = tmp_path / "chaos.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.chaos",
            "--quick",
            "--only",
            "outage,crash,retention",
            "--json",
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(out.read_text())
    assert set(report["scenarios"]) == {"outage", "crash", "retention"}
    assert report["tree"]["corral_file"].endswith("corral/__init__.py")
    assert report["tree"]["tree"] == str(ROOT)

    (run,) = report["scenarios"]["outage"]["details"]["runs"]
    assert run["worker_alive"] and run["add_tries"] >= 1
    # The job added after the server came back was processed (a number, not "never"); it may
    # start before its producer has read the add's reply.
    assert 0 < run["ping_to_acked_s"] < 15 and 0 < run["ping_to_start_s"] < 15

    crash = {f["metric"]: f["value"] for f in report["scenarios"]["crash"]["figures"]}
    assert crash["adds acknowledged"] > 0
    assert crash["server kill -9 + restart, lost replies"][0] == 1
    for metric in ("acked adds lost", "duplicates (seq in > 1 job)", "adds that raised in the end"):
        assert isinstance(crash[metric], int), metric

    cases = report["scenarios"]["retention"]["details"]["cases"]
    assert [(c["retained"], c["keep"]) for c in cases] == [(100, 10), (5000, 10), (5000, 5000)]
    for case in cases:
        # Every job finished was seen in SLOWLOG as one call of a finishing script.
        assert case["finishes"] == case["finishes_wanted"], case
        assert case["us_per_finish"]["p50"] > 0
    assert cases[0]["completed_left"] == 10 and cases[1]["completed_left"] == 10
    assert cases[2]["completed_left"] == 5000
    for name, scenario in report["scenarios"].items():
        assert scenario["figures"] and scenario["load"]["busy_cores"] >= 0, name
        assert name in report["table"]
