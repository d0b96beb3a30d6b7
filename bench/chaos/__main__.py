"""The command line of ``python -m bench.chaos`` (the package docstring says what it runs):
choose the scenarios, run each on the corral copy of a :class:`Run`, print the table and write
the JSON report."""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import platform
import random
import signal
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import bench.chaos
from bench.chaos import RESULTS
from bench.chaos.crash import crash
from bench.chaos.kill9 import kill9
from bench.chaos.outage import outage
from bench.chaos.processes import Run
from bench.chaos.report import Load, compare, report_table, tree_info
from bench.chaos.retention import retention
from bench.chaos.sizes import FULL, QUICK, Sizes

SCENARIOS = ("kill9", "outage", "crash", "retention")

RUNNERS: dict[str, Callable[[Run, Sizes, random.Random], dict[str, Any]]] = {
    "kill9": kill9,
    "outage": outage,
    "crash": crash,
    "retention": retention,
}


def default_tree() -> Path:
    spec = importlib.util.find_spec("corral")
    if spec is None or spec.origin is None:
        raise SystemExit("corral is not importable: give --tree")
    return Path(spec.origin).resolve().parent.parent


def choose(only: list[str]) -> list[str]:
    wanted = [x.strip() for item in only for x in item.split(",") if x.strip()]
    unknown = [x for x in wanted if x not in SCENARIOS]
    if unknown:
        raise SystemExit(f"unknown scenario(s) {', '.join(unknown)}; choose from {SCENARIOS}")
    return [s for s in SCENARIOS if s in wanted] if wanted else list(SCENARIOS)


@contextlib.contextmanager
def terminate_as_exit() -> Iterator[None]:
    """SIGTERM/SIGHUP end the run like Ctrl-C: through the ``finally`` that stops everything."""

    def handler(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)

    old = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m bench.chaos", description=(bench.chaos.__doc__ or "").split("\n\n")[0]
    )
    ap.add_argument("scenario", nargs="*", help=f"any of {', '.join(SCENARIOS)} (default: all)")
    ap.add_argument("--only", action="append", default=[], metavar="NAME")
    ap.add_argument("--quick", action="store_true", help="tiny sizes (a smoke check)")
    ap.add_argument("--json", help="where to write the report (default bench/results/chaos.json)")
    ap.add_argument("--tree", help="the source tree whose corral/ is measured")
    ap.add_argument("--label", default="", help="a name for this run in the report")
    ap.add_argument("--seed", type=int, default=10)
    ap.add_argument("--compare", nargs=2, metavar=("BEFORE", "NOW"), help="print two reports")
    opts = ap.parse_args(argv)
    if opts.compare:
        print(compare(*opts.compare))
        return 0
    chosen = choose(opts.only + opts.scenario)
    sz = QUICK if opts.quick else FULL
    tree = Path(opts.tree).resolve() if opts.tree else default_tree()
    if not (tree / "corral" / "__init__.py").is_file():
        raise SystemExit(f"{tree} has no corral/ package")
    out_path = Path(opts.json) if opts.json else RESULTS / "chaos.json"
    rng = random.Random(opts.seed)
    started = time.monotonic()
    info = {**tree_info(tree)}
    scenarios: dict[str, Any] = {}
    with terminate_as_exit(), contextlib.ExitStack() as stack:
        run = Run(tree)
        stack.callback(run.close)
        try:
            info["digest"] = run.digest
            print(
                f"chaos: corral of {tree} (copied to {run.snapshot}, sources {run.digest}, "
                f"HEAD {info['head']}, {info['dirty_files']} changed files); "
                f"{os.cpu_count()} cores, loadavg {os.getloadavg()[0]:.2f}",
                flush=True,
            )
            for name in chosen:
                load = Load()
                t = time.monotonic()
                print(f"  {name} ...", file=sys.stderr, flush=True)
                result = RUNNERS[name](run, sz, rng)
                result["elapsed_s"] = round(time.monotonic() - t, 1)
                result["load"] = load.done()
                scenarios[name] = result
                info["corral_file"] = run.corral_file
                print(
                    f"  {name}: {result['elapsed_s']}s, load {result['load']}",
                    file=sys.stderr,
                    flush=True,
                )
        finally:
            run.close()
    text = report_table(scenarios)
    print()
    print(text)
    elapsed = time.monotonic() - started
    print(f"\ntotal {elapsed:.0f}s; results in {out_path}")
    report = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "label": opts.label,
        "command": " ".join(
            ["python -m bench.chaos", *(argv if argv is not None else sys.argv[1:])]
        ),
        "tree": info,
        "machine": {
            "nproc": os.cpu_count(),
            "python": platform.python_version(),
            "os": platform.platform(),
        },
        "sizes": asdict(sz),
        "elapsed_s": round(elapsed, 1),
        "scenarios": scenarios,
        "table": text,
    }
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
