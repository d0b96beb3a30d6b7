"""A scenario's figures: the stats of measured values, the figure record of the report
(metric, value, goal, ok) and how a value is printed."""

from __future__ import annotations

import statistics
from typing import Any

from bench.run import percentile


def stats(values: list[float]) -> dict[str, Any]:
    v = sorted(values)
    if not v:
        return {"n": 0, "p50": None, "max": None, "values": []}
    return {
        "n": len(v),
        "p50": percentile(v, 50),
        "p90": percentile(v, 90),
        "max": v[-1],
        "min": v[0],
        "mean": statistics.fmean(v),
        "values": [round(x, 4) for x in v],
    }


def figure(metric: str, value: Any, goal: str = "", ok: bool | None = None) -> dict[str, Any]:
    return {"metric": metric, "value": value, "goal": goal, "ok": ok}


def fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "NO"
    if isinstance(value, float):
        return f"{value:.3f}" if abs(value) < 100 else f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, (list, tuple)):
        return " ".join(fmt(v) for v in value)
    return str(value)
