"""The report of the scale curves (bench/curves.py): each point's medians and goals, one
Markdown table per curve, and one PNG chart per curve (matplotlib, Agg backend).

Goals (issue 18), reported, never asserted: no point of corral's curves below 0.8x its own
rate at the first (10k-job) point of the backlog curve, and every point at or above Node's
(for memory: at or below).
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bench.curves import CurveSizes

SIDES = ("corral", "node")
COLORS = {"corral": "#1f77b4", "node": "#d62728"}
NAMES = {"corral": "corral", "node": "Node BullMQ"}
OWN_GOAL = 0.8
TITLES = {
    "backlog": "Drain rate by jobs waiting (one worker process, c=100)",
    "adds": "Add rate into a queue by jobs waiting (one producer process)",
    "memory": "Server memory per job (bytes)",
    "completed": "Drain rate with completed jobs in the queue",
    "delayed": "Delayed jobs all due at once",
    "priorities": "Jobs over many priority levels",
    "queues": "Many queues, one worker process per group of queues",
}


def human(n: float) -> str:
    """10000 -> "10k", 1000000 -> "1M"."""
    for size, suffix in ((1_000_000, "M"), (1000, "k")):
        if n >= size and n % (size // 10) == 0:
            return f"{n / size:g}{suffix}"
    return f"{n:,.0f}"


def specs(sz: CurveSizes, groups: list[str]) -> list[dict[str, Any]]:
    """The points the chosen groups measure: curve, key, label, x, kind, baseline key."""
    out: list[dict[str, Any]] = []
    first = sz.backlogs[0]
    base = f"backlog:{first}"

    def add(curve: str, key: str, label: str, x: Any, kind: str = "rate", **more: Any) -> None:
        point = {"curve": curve, "key": key, "label": label, "x": x, "kind": kind, **more}
        if "baseline" in more:
            point["baseline_x"] = first
        out.append(point)

    if "backlog" in groups:
        for level in sz.backlogs:
            add("backlog", f"backlog:{level}", f"{human(level)} waiting", level, baseline=base)
        for mode in ("single", "bulk"):
            for level in sz.backlogs:
                label = f"{mode} add, {human(level)} waiting"
                add(
                    "adds", f"{mode}:{level}", label, level, series=mode, baseline=f"{mode}:{first}"
                )
        for level in sz.backlogs:
            add("memory", f"memory:{level}", f"{human(level)} waiting", level, kind="memory")
    if "completed" in groups:
        n = human(sz.completed)
        add(
            "completed", "completed:retained", f"{n} completed, all kept", "all kept", baseline=base
        )
        label = f"{n} completed, keep last {sz.keep:,}: the trim"
        add("completed", "completed:trim", label, f"trim to {sz.keep:,}", baseline=base)
        label = f"{n} completed, keep last {sz.keep:,}: after it"
        add("completed", "completed:keep", label, f"keep {sz.keep:,}", baseline=base)
    if "delayed" in groups:
        label = f"{human(sz.delayed)} delayed, due at once"
        add("delayed", "delayed:due", label, f"{human(sz.delayed)} due", baseline=base)
    if "priorities" in groups:
        label = f"{human(sz.priority_jobs)} jobs over {sz.priorities} priorities"
        add("priorities", "priorities:spread", label, f"{sz.priorities} levels", baseline=base)
    if "queues" in groups:
        label = f"{sz.queues} queues, {sz.queues_per_worker} per worker process"
        add("queues", "queues:many", label, f"{sz.queues} queues", baseline=base)
    return out


def stats(values: list[float]) -> dict[str, Any]:
    if not values:
        return {"median": None, "min": None, "max": None, "runs": []}
    return {
        "median": statistics.median(values),
        "min": min(values),
        "max": max(values),
        "runs": values,
    }


def summarize(
    sz: CurveSizes, groups: list[str], results: dict[str, dict[str, list[dict[str, Any]]]]
) -> list[dict[str, Any]]:
    """Every point with each side's medians, the ratios and the goals' verdicts."""
    points = specs(sz, groups)
    by_key = {p["key"]: p for p in points}
    for p in points:
        runs = results.get(p["key"], {})
        fields: tuple[str, ...] = ("queued", "completed")
        if p["kind"] != "memory":
            fields = ("rate", "server_us_per_job", "rate_2nd_half")
        for side in SIDES:
            p[side] = {
                f: stats([r[f] for r in runs.get(side, []) if r.get(f) is not None]) for f in fields
            }
        main = fields[0]
        c, n = p["corral"][main]["median"], p["node"][main]["median"]
        p["ratio"] = c / n if c and n else None
        if p["kind"] == "memory":
            cc, nc = p["corral"]["completed"]["median"], p["node"]["completed"]["median"]
            p["ratio_completed"] = cc / nc if cc and nc else None
            p["goals"] = {
                "at_most_node": p["ratio"] is not None and p["ratio"] <= 1.0,
                "at_most_node_completed": p["ratio_completed"] is not None
                and p["ratio_completed"] <= 1.0,
            }
            continue
        base = by_key.get(p.get("baseline", ""))
        own = base["corral"]["rate"]["median"] if base and base.get("corral") else None
        p["own_ratio"] = c / own if c and own else None
        p["goals"] = {
            "own_0_8": None
            if p["own_ratio"] is None or p["key"] == p.get("baseline")
            else p["own_ratio"] >= OWN_GOAL,
            "at_least_node": p["ratio"] is not None and p["ratio"] >= 1.0,
        }
    return points


def verdict(p: dict[str, Any]) -> str:
    g = p["goals"]
    if p["kind"] == "memory":
        return "; ".join(
            f"{what} {'<= Node: met' if ok else '> Node: NOT met'}"
            for what, ok in (
                ("queued", g["at_most_node"]),
                ("completed", g["at_most_node_completed"]),
            )
        )
    parts = []
    if g["own_0_8"] is not None:
        at = human(p["baseline_x"])
        parts.append(f">= 0.8x own at {at}: {'met' if g['own_0_8'] else 'NOT met'}")
    parts.append(f">= Node: {'met' if g['at_least_node'] else 'NOT met'}")
    return "; ".join(parts)


def num(x: float | None, fmt: str = "{:,.0f}") -> str:
    return "-" if x is None else fmt.format(x)


def markdown(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(x) for x in col) for col in zip(header, *rows, strict=True)]

    def line(cols: list[str]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cols, widths, strict=True)) + " |"

    sep = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([line(header), sep, *(line(r) for r in rows)])


def tables(points: list[dict[str, Any]]) -> str:
    """One Markdown table per curve, each under a ``###`` heading."""
    blocks = []
    for curve in TITLES:
        ps = [p for p in points if p["curve"] == curve]
        if not ps:
            continue
        if curve == "memory":
            header = [
                "point",
                "queued corral / Node",
                "ratio",
                "completed corral / Node",
                "ratio",
                "goals",
            ]
            rows = [
                [
                    p["label"],
                    f"{num(p['corral']['queued']['median'])} / "
                    f"{num(p['node']['queued']['median'])}",
                    num(p["ratio"], "{:.2f}"),
                    f"{num(p['corral']['completed']['median'])} / "
                    f"{num(p['node']['completed']['median'])}",
                    num(p["ratio_completed"], "{:.2f}"),
                    verdict(p),
                ]
                for p in ps
            ]
        else:
            own = f"corral / own at {human(ps[0]['baseline_x'])}" if "baseline_x" in ps[0] else "-"
            header = ["point", "corral jobs/s", "Node jobs/s", "corral/Node", own]
            drains = curve != "adds"
            if drains:
                header.append("server CPU us/job corral / Node")
            if curve == "completed":  # a trim of the kept jobs is over by the second half
                header.append("2nd half jobs/s corral / Node")
            header.append("goals")
            rows = []
            for p in ps:
                row = [
                    p["label"],
                    num(p["corral"]["rate"]["median"]),
                    num(p["node"]["rate"]["median"]),
                    num(p["ratio"], "{:.2f}"),
                    num(p["own_ratio"], "{:.2f}"),
                ]
                if drains:
                    cpu = [num(p[s]["server_us_per_job"]["median"], "{:.1f}") for s in SIDES]
                    row.append(" / ".join(cpu))
                if curve == "completed":
                    row.append(" / ".join(num(p[s]["rate_2nd_half"]["median"]) for s in SIDES))
                rows.append([*row, verdict(p)])
        blocks.append(f"### {TITLES[curve]}\n\n{markdown(header, rows)}")
    return "\n\n".join(blocks)


# ---------------------------------------------------------------------------------------------
# charts


def charts(points: list[dict[str, Any]], out_dir: Path) -> list[Path]:
    """One PNG per curve measured, into ``out_dir``; the paths written."""
    try:
        import matplotlib
    except ImportError:
        raise SystemExit(
            "matplotlib is not installed: pip install -e '.[dev]' (make bench does)"
        ) from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    base = next((p for p in points if p["curve"] == "backlog"), None)
    ref = (base["corral"]["rate"]["median"], human(base["x"])) if base else None
    for curve in TITLES:
        ps = [p for p in points if p["curve"] == curve]
        if not ps:
            continue
        if curve in ("backlog", "adds", "memory"):
            fig = _lines(plt, curve, ps)
        else:
            fig = _bars(plt, curve, ps, ref)
        path = out_dir / f"{curve}.png"
        fig.savefig(path, dpi=90, bbox_inches="tight", pil_kwargs={"optimize": True})
        plt.close(fig)
        written.append(path)
    return written


def _reference(ax: Any, rate: float | None, at: str) -> None:
    """Corral's drain rate at the first backlog (10k jobs) and 0.8x of it."""
    if rate:
        label = f"corral, {at} waiting"
        ax.axhline(rate, color=COLORS["corral"], lw=0.8, ls="--", alpha=0.6, label=label)
        ax.axhline(rate * OWN_GOAL, color=COLORS["corral"], lw=0.8, ls=":", label="0.8x that")


def _lines(plt: Any, curve: str, ps: list[dict[str, Any]]) -> Any:
    panels: list[tuple[str, str, str | None]]  # field, y label, series (None: every point)
    if curve == "backlog":
        panels = [("rate", "jobs/s", None), ("server_us_per_job", "server CPU, us per job", None)]
    elif curve == "adds":
        panels = [("rate", "single adds, jobs/s", "single"), ("rate", "bulk adds, jobs/s", "bulk")]
    else:
        panels = [
            ("queued", "bytes per queued job", None),
            ("completed", "bytes per completed job", None),
        ]
    fig, axes = plt.subplots(1, len(panels), figsize=(8.0, 3.2))
    for ax, (field, ylabel, series) in zip(axes, panels, strict=True):
        sel = [p for p in ps if series is None or p.get("series") == series]
        for side in SIDES:
            xy = [(p["x"], p[side][field]["median"]) for p in sel]
            xy = [(x, y) for x, y in xy if y is not None]
            if xy:
                ax.plot(*zip(*xy, strict=True), marker="o", color=COLORS[side], label=NAMES[side])
        if field == "rate":  # the goal of this curve: corral's own rate at its first point
            _reference(ax, sel[0]["corral"]["rate"]["median"], human(sel[0]["x"]))
        ax.set_xscale("log")
        ax.set_xticks([p["x"] for p in sel], [human(p["x"]) for p in sel])
        ax.minorticks_off()
        ax.set_xlabel("jobs waiting")
        ax.set_ylabel(ylabel)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(TITLES[curve], fontsize=10)
    fig.tight_layout()
    return fig


def _bars(
    plt: Any, curve: str, ps: list[dict[str, Any]], ref: tuple[float | None, str] | None
) -> Any:
    fig, ax = plt.subplots(figsize=(5.0 + 1.2 * len(ps), 3.2))
    width = 0.38
    for k, side in enumerate(SIDES):
        xs = [i + (k - 0.5) * width for i in range(len(ps))]
        ys = [p[side]["rate"]["median"] or 0 for p in ps]
        bars = ax.bar(xs, ys, width, color=COLORS[side], label=NAMES[side])
        ax.bar_label(bars, fmt="{:,.0f}", fontsize=7)
    if ref:
        _reference(ax, *ref)
    ax.set_xticks(range(len(ps)), [p["label"] for p in ps], fontsize=8)
    ax.set_ylabel("jobs/s")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=7)
    ax.set_title(TITLES[curve], fontsize=10)
    fig.tight_layout()
    return fig
