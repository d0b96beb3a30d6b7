"""The report of a chaos run beyond the figures: the table printed, the before/now table
of ``--compare``, and what it records of the tree measured and of the machine's load."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

from bench.chaos.figures import fmt
from bench.run import machine_busy_seconds


def table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(x) for x in col) for col in zip(headers, *rows, strict=True)]

    def line(cols: list[str]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cols, widths, strict=True)) + " |"

    sep = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([line(headers), sep, *(line(r) for r in rows)])


def verdict(ok: bool | None) -> str:
    return "" if ok is None else ("ok" if ok else "MISSED")


def report_table(scenarios: dict[str, Any]) -> str:
    rows = []
    for name, result in scenarios.items():
        for k, f in enumerate(result["figures"]):
            rows.append(
                [name if k == 0 else "", f["metric"], fmt(f["value"]), f["goal"], verdict(f["ok"])]
            )
    return table(["scenario", "metric", "value", "goal", "verdict"], rows)


def compare(before_path: str, now_path: str) -> str:
    before = json.loads(Path(before_path).read_text())
    now = json.loads(Path(now_path).read_text())
    rows = []
    for name, result in now["scenarios"].items():
        old = {f["metric"]: f for f in before.get("scenarios", {}).get(name, {}).get("figures", [])}
        for k, f in enumerate(result["figures"]):
            o = old.get(f["metric"])
            rows.append(
                [
                    name if k == 0 else "",
                    f["metric"],
                    fmt(o["value"]) if o else "-",
                    fmt(f["value"]),
                    f["goal"],
                    verdict(f["ok"]),
                ]
            )
    heads = ["scenario", "metric", before.get("label") or "before", now.get("label") or "now"]
    out = table([*heads, "goal", "now vs goal"], rows)
    notes = []
    for r in (before, now):
        t = r["tree"]
        notes.append(
            f"{r.get('label') or '?'}: {t['corral_file']} (HEAD {t.get('head')}, "
            f"{t.get('dirty_files')} changed files, sources {t['digest']}), ended {r['date']}, "
            "load "
            + ", ".join(
                f"{n} {s['load']['loadavg_start'][0]}/{s['load']['busy_cores']}"
                for n, s in r["scenarios"].items()
            )
        )
    return out + "\n\n" + "\n".join(notes) + "\n(load: 1-min loadavg at start / cores busy)"


def tree_info(tree: Path) -> dict[str, Any]:
    def git(*args: str) -> str | None:
        proc = subprocess.run(
            ["git", "-C", str(tree), *args], capture_output=True, text=True, check=False
        )
        return proc.stdout.strip() if proc.returncode == 0 else None

    status = git("status", "--short") if (tree / ".git").exists() else None
    return {
        "tree": str(tree),
        "head": git("rev-parse", "HEAD") if (tree / ".git").exists() else None,
        "dirty_files": None if status is None else len(status.splitlines()),
    }


class Load:
    """The machine's load during a scenario: loadavg at both ends, cores busy on average
    (this run's processes included) from /proc/stat."""

    def __init__(self) -> None:
        self.t0 = time.monotonic()
        self.busy0 = machine_busy_seconds()
        self.avg0 = os.getloadavg()

    def done(self) -> dict[str, Any]:
        busy = (machine_busy_seconds() - self.busy0) / max(1e-9, time.monotonic() - self.t0)
        return {
            "loadavg_start": [round(x, 2) for x in self.avg0],
            "loadavg_end": [round(x, 2) for x in os.getloadavg()],
            "busy_cores": round(busy, 2),
        }
