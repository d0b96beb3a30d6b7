"""The ``drain_children`` workload of ``python -m bench``: no-op jobs drained by ONE worker
process, its processor in-process or in child processes, on each side.

Variants (each a drain of its own, on a flushed server, with the same no-op):

- corral ``sync``: a plain function at concurrency 2, run in the worker's threads (what a
  sync processor gets without ``processes=``: the fair in-process baseline for sync code);
- corral ``async``: the ``async def`` twin on the event loop, concurrency 2;
- corral ``children``: ``Worker(..., "bench.processors:noop", processes=2)`` at concurrency C
  (``--children-concurrency``, default the best measured: see docs/benchmarks.md);
- Node ``async``: BullMQ's in-process ``Worker``, concurrency 2;
- Node ``children``: BullMQ's sandboxed processor (bench/node/noop_processor.cjs as the
  processor file, ``useWorkerThreads: false``), concurrency 2, so two child processes.

Child start-up is not timed, for either side: corral starts its pool inside ``run_async``
(after GO) and waits for every child before its first fetch; BullMQ spawns its children as
the first jobs arrive. So the rate is taken between the completion of the first 1% of the
jobs and the last one (their ``finishedOn``, the scores of the completed set), the same
window for every variant; the time from GO to the first completion is reported apart
(``startup_ms``). Worker CPU counts the worker and all its child processes, over the window.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bench.run import Metric, Server, Sizes, Workload

#: The in-process variants' concurrency, and the number of child processes (both sides).
CONCURRENCY = 2
PROCESSES = 2


def variants(side: str, children_concurrency: list[int]) -> list[tuple[str, dict[str, Any]]]:
    """``(name, worker arguments)`` of each variant the side runs, in order."""
    if side == "corral":
        out = [
            ("sync", {"processor": "sync", "concurrency": CONCURRENCY}),
            ("async", {"processor": "async", "concurrency": CONCURRENCY}),
        ]
        for c in children_concurrency:
            out.append(
                (f"children_c{c}", {"processor": "sync", "processes": PROCESSES, "concurrency": c})
            )
        return out
    return [
        ("async", {"concurrency": CONCURRENCY}),
        (f"children_c{PROCESSES}", {"sandboxed": 1, "concurrency": PROCESSES}),
    ]


def descendants(pid: int) -> list[int]:
    """The pids of every process below ``pid`` (children, their children, ...)."""
    parents: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue  # gone meanwhile
        ppid = int(text.rpartition(")")[2].split()[1])
        parents.setdefault(ppid, []).append(int(stat.parent.name))
    found: list[int] = []
    todo = [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def tree_cpu(pid: int) -> dict[int, float]:
    """CPU seconds so far of ``pid`` and of each of its descendants."""
    from bench.run import cpu_seconds

    return {p: cpu_seconds(p) for p in [pid, *descendants(pid)]}


def _py_spy(pid: int, output: Path) -> subprocess.Popen[bytes]:
    """py-spy on the worker and, with ``--subprocesses``, on the children it starts later."""
    output.parent.mkdir(parents=True, exist_ok=True)
    binary = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    args = ["record", "--subprocesses", "--pid", str(pid), "--rate", "250", "--format", "raw"]
    spy = subprocess.Popen(
        [binary, *args, "--output", str(output)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    time.sleep(1.0)  # let py-spy attach before the clock starts
    return spy


def drain_once(
    srv: Server,
    side: str,
    n: int,
    chunk: int,
    args: dict[str, Any],
    spy: Path | None = None,
) -> dict[str, Any]:
    """One drain of ``n`` no-op jobs by one worker process started with ``args``; ``spy``:
    where py-spy writes the profile of a corral worker and its children."""
    from bench.run import QUEUE_KEY, cpu_seconds, run_producer, workers

    srv.flush()
    run_producer(side, srv.url, mode="bulk", count=n, chunk=chunk)  # untimed
    assert srv.client.llen(f"{QUEUE_KEY}:wait") == n
    skip = max(1, n // 100)
    key = f"{QUEUE_KEY}:completed"
    with workers(side, srv.url, 1, mode="drain", **args) as (proc,):
        spying = _py_spy(proc.pid, spy) if spy is not None and side == "corral" else None
        srv.client.config_resetstat()
        t0_wall = time.time() * 1000
        proc.send("GO")
        # The window starts once the first 1% are done: sample the CPU of the worker and its
        # children (started by then on both sides) as soon as the count is reached.
        deadline = time.monotonic() + 600
        while (done0 := srv.client.zcard(key)) < skip:
            if not proc.alive() or time.monotonic() > deadline:
                raise RuntimeError(f"{side} {args}: {done0} of {n} done:\n{proc.stderr_tail()}")
            time.sleep(0.005)
        cpu0 = tree_cpu(proc.pid)
        srv_cpu0 = cpu_seconds(srv.process.pid)
        while srv.client.zcard(key) < n:
            if not proc.alive() or time.monotonic() > deadline:
                done = srv.client.zcard(key)
                raise RuntimeError(f"{side} {args}: {done} of {n} done:\n{proc.stderr_tail()}")
            time.sleep(0.02)
        cpu1 = tree_cpu(proc.pid)
        srv_cpu1 = cpu_seconds(srv.process.pid)
        stats = srv.client.info("commandstats")
        scores = [srv.client.zrange(key, k, k, withscores=True)[0][1] for k in (0, skip - 1, n - 1)]
        failed = srv.client.zcard(f"{QUEUE_KEY}:failed")
        children = len(cpu1) - 1
        proc.send("STOP")
        proc.finish()
        if spying is not None:
            spying.wait(60)
    first, at_skip, last = (float(s) for s in scores)
    window = (last - at_skip) / 1000
    # Processes that exist at both samples (a child that started after the first one counts
    # from zero: its own start-up is then inside the window, which only makes that side look
    # slower).
    used = {p: t - cpu0.get(p, 0.0) for p, t in cpu1.items()}
    done_in_window = n - done0
    calls = {k.removeprefix("cmdstat_"): v for k, v in stats.items()}
    script_usec = sum(int(calls[k]["usec"]) for k in ("eval", "evalsha") if k in calls)
    return {
        "rate": (n - skip) / window if window > 0 else float("nan"),
        "rate_from_go": n / ((last - t0_wall) / 1000),
        "startup_ms": first - t0_wall,
        "window_s": window,
        "worker_cpu_ms_per_1k": sum(used.values()) / done_in_window * 1e6,
        "parent_cpu_ms_per_1k": used[proc.pid] / done_in_window * 1e6,
        "server_cpu_ms_per_1k": (srv_cpu1 - srv_cpu0) / done_in_window * 1e6,
        "server_script_us_per_job": script_usec / n,
        "child_processes": children,
        "failed": failed,
        "args": args,
    }


def drain_children(
    srv: Server, side: str, sz: Sizes, opts: argparse.Namespace, i: int
) -> dict[str, Any]:
    """Every variant of ``side``, one after the other; the table's values from them."""
    n = sz.drain_children
    out: dict[str, Any] = {"variants": {}}
    for name, args in variants(side, opts.children_concurrency):
        spy = Path(opts.py_spy) / f"children-{name}-run{i}.txt" if opts.py_spy else None
        result = drain_once(srv, side, n, sz.bulk_chunk, args, spy)
        out["variants"][name] = result
        print(
            f"    {side} {name:<12} {result['rate']:>8,.0f} jobs/s "
            f"(start-up {result['startup_ms']:,.0f} ms, worker CPU "
            f"{result['worker_cpu_ms_per_1k']:.0f} ms/1k of which the parent "
            f"{result['parent_cpu_ms_per_1k']:.0f}, {result['child_processes']} children)",
            file=sys.stderr,
            flush=True,
        )
    v = out["variants"]
    # The table's row: the first concurrency asked for (the others are in report()).
    shown = f"children_c{opts.children_concurrency[0] if side == 'corral' else PROCESSES}"
    kids = v[shown]
    base = v["sync"] if side == "corral" else v["async"]
    out.update(
        rate_sync=v["sync"]["rate"] if "sync" in v else None,
        rate_async=v["async"]["rate"],
        rate_children=kids["rate"],
        children_over_inproc=kids["rate"] / base["rate"],
        children_worker_cpu=kids["worker_cpu_ms_per_1k"],
        children_server_cpu=kids["server_cpu_ms_per_1k"],
        children_startup_ms=kids["startup_ms"],
    )
    return out


def metrics(children_concurrency: list[int]) -> list[Metric]:
    from bench.run import Metric

    c = children_concurrency[0]
    return [
        Metric(
            "rate_sync", f"jobs/s in-process, plain function (threads), c={CONCURRENCY}", "higher"
        ),
        Metric("rate_async", f"jobs/s in-process, async, c={CONCURRENCY}", "higher"),
        Metric(
            "rate_children",
            f"jobs/s in {PROCESSES} child processes (corral c={c}, Node c={PROCESSES})",
            "higher",
        ),
        Metric(
            "children_over_inproc",
            "children / in-process (corral: / threads, Node: / async)",
            "higher",
            "{:.2f}",
        ),
        Metric("children_worker_cpu", "children: worker + children CPU, ms per 1k", "lower"),
        Metric("children_server_cpu", "children: server CPU, ms per 1k", "lower"),
        Metric("children_startup_ms", "children: GO to first completion, ms", "lower"),
    ]


def workload(sz: Sizes, children_concurrency: list[int]) -> Workload:
    from bench.run import Workload

    return Workload(
        "drain_children",
        f"drain {sz.drain_children:,}, 1 proc, no-op",
        metrics(children_concurrency),
        drain_children,
        by_prefix=False,
        report=report,
        # 100,000 jobs x 5 variants take ~3 min a run: one in `make bench`, more with --runs.
        max_runs=1,
    )


def report(w: Workload) -> str:
    """Lines under the table: every variant's median rate and its ratio to the side's
    in-process baseline (corral: threads, Node: async), and the two ratios of the goal."""
    lines = [
        "drain_children, every variant: median jobs/s [min-max] (after the first 1%), "
        "/ in-process, CPU ms per 1k jobs (worker + children; the worker alone):"
    ]
    for side in ("corral", "node"):
        runs = w.runs.get(side, [])
        base = "sync" if side == "corral" else "async"
        for name in runs[0]["variants"] if runs else ():
            got = [r["variants"][name] for r in runs]
            rates = [g["rate"] for g in got]
            ratio = statistics.median(
                r["variants"][name]["rate"] / r["variants"][base]["rate"] for r in runs
            )
            cpu = statistics.median(g["worker_cpu_ms_per_1k"] for g in got)
            parent = statistics.median(g["parent_cpu_ms_per_1k"] for g in got)
            lines.append(
                f"  {side:<6} {name:<12} {statistics.median(rates):>7,.0f} "
                f"[{min(rates):,.0f}-{max(rates):,.0f}]  {ratio:.2f}  CPU {cpu:.0f} ({parent:.0f})"
            )
    corral, node = w.runs.get("corral", []), w.runs.get("node", [])
    if corral:
        ratio = statistics.median(r["children_over_inproc"] for r in corral)
        lines.append(f"  corral children / in-process (threads, c=2): {ratio:.2f} (goal >= 0.5)")
    if corral and node:
        c = statistics.median(r["rate_children"] for r in corral)
        nd = statistics.median(r["rate_children"] for r in node)
        lines.append(f"  corral children / Node sandboxed: {c / nd:.2f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """``python -m bench.drain_children``: corral alone, threads against children at each
    concurrency (the like-for-like view the table's fixed c=2 baseline does not give)."""
    from bench import run

    ap = argparse.ArgumentParser(prog="python -m bench.drain_children", description=main.__doc__)
    ap.add_argument("--jobs", type=int, default=30_000)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument(
        "--concurrency", type=lambda t: [int(x) for x in t.split(",")], default=[2, 4, 8, 16]
    )
    opts = ap.parse_args(argv)
    snapshot, digest = run.snapshot_corral()
    srv = run.Server()
    rates: dict[tuple[str, int], list[dict[str, Any]]] = {}
    other = run.OtherLoad(srv)
    try:
        for k in range(opts.runs):
            for c in opts.concurrency:
                for kind, extra in (("threads", {}), ("children", {"processes": PROCESSES})):
                    args = {"processor": "sync", "concurrency": c, **extra}
                    result = drain_once(srv, "corral", opts.jobs, 1000, args)
                    rates.setdefault((kind, c), []).append(result)
                    print(
                        f"  run {k + 1} {kind:<8} c={c:<3} {result['rate']:>7,.0f} jobs/s",
                        file=sys.stderr,
                        flush=True,
                    )
    finally:
        srv.stop()
        shutil.rmtree(snapshot, ignore_errors=True)

    def med(kind: str, c: int, key: str) -> float:
        return float(statistics.median(r[key] for r in rates[(kind, c)]))

    print(
        f"corral sources {digest}, {opts.jobs:,} no-op jobs, median of {opts.runs} runs; "
        f"load from other processes {other.cores():.2f} cores"
    )
    print("| c | threads jobs/s | 2 children jobs/s | children / threads | CPU ms per 1k jobs |")
    print("| --- | --- | --- | --- | --- |")
    for c in opts.concurrency:
        t, ch = med("threads", c, "rate"), med("children", c, "rate")
        parent = med("children", c, "parent_cpu_ms_per_1k")
        kids = med("children", c, "worker_cpu_ms_per_1k") - parent
        cpu = f"threads {med('threads', c, 'worker_cpu_ms_per_1k'):.0f}; children: "
        cpu += f"parent {parent:.0f} + children {kids:.0f}"
        print(f"| {c} | {t:,.0f} | {ch:,.0f} | {ch / t:.2f} | {cpu} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
