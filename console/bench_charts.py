"""Plotly figures of benchmark runs: throughput or latency vs load per mode, and their speedup curves.
Built on console.charts' layout; none reads storage."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pandas as pd
import plotly.graph_objects as go

from .charts import (
    CONCURRENCY_TITLE,
    PALETTE,
    base_layout,
    figure_of,
    note_no_data,
    numbers,
    speedup_chart,
)

RATE_TITLE = "request rate (req/s, open loop)"
# Benchmark columns an axis can show, with their unit.
BENCH_UNITS = {
    "output_throughput": ("output throughput", "tok/s"),
    "median_ttft_ms": ("median TTFT", "ms"),
    "p99_ttft_ms": ("p99 TTFT", "ms"),
    "median_itl_ms": ("median ITL", "ms"),
    "p99_itl_ms": ("p99 ITL", "ms"),
    "median_e2e_latency_ms": ("median end-to-end latency", "ms"),
    "p99_e2e_latency_ms": ("p99 end-to-end latency", "ms"),
}


def _point_mode(extra_json: Any) -> str | None:
    try:
        extra = json.loads(extra_json) if isinstance(extra_json, str) and extra_json else {}
    except ValueError:
        return None
    return extra.get("mode") if isinstance(extra, dict) else None


def bench_curves(runs: Mapping[str, pd.DataFrame], what: str = "output_throughput") -> go.Figure:
    """Throughput (or a latency column) vs load, spec on solid, spec off dashed, a plain server (or a point of
    unknown speculation state) dotted, per run. The load is the concurrency, or for an open-loop run (an
    imported bench_serving request-rate sweep, no max_concurrency) its request rate."""
    data: list[dict[str, Any]] = []
    by_rate = 0
    for i, (label, pts) in enumerate(runs.items()):
        if pts.empty:
            continue
        color = PALETTE[i % len(PALETTE)]
        closed_loop = pts["concurrency"].notna().any() or "request_rate" not in pts
        x_col = "concurrency" if closed_loop else "request_rate"
        by_rate += x_col == "request_rate"
        for flag, dash, name in ((True, "solid", "spec on"), (False, "dash", "spec off"), (None, "dot", "")):
            part = pts[pts["spec_on"].isna()] if flag is None else pts[pts["spec_on"] == flag]
            part = part.dropna(subset=[x_col, what]).sort_values(x_col)
            if part.empty:
                continue
            modes = {_point_mode(t) for t in part["extra_json"]} if "extra_json" in part else set()
            if flag is None and modes == {"plain"}:
                name = "plain"  # a sweep's --plain-server rows (spec_on NULL, mode in extra_json)
            data.append(
                {
                    "type": "scatter",
                    "x": numbers(part[x_col]),
                    "y": numbers(part[what]),
                    "mode": "lines+markers",
                    "name": f"{label} {name}".strip(),
                    "line": {"color": color, "dash": dash},
                }
            )
    name, unit = BENCH_UNITS.get(what, (what.replace("_", " "), ""))
    layout = base_layout(f"{name[0].upper()}{name[1:]} vs load", f"{name} ({unit})" if unit else name, 360)
    layout["xaxis"]["title"] = {"text": RATE_TITLE if by_rate and by_rate == len(runs) else CONCURRENCY_TITLE}
    if not data:
        note_no_data(layout, f"this run has no {name}")
    return figure_of(data, layout)


def bench_speedups(curves: Mapping[str, pd.DataFrame], crossovers: Mapping[str, float | None]) -> go.Figure:
    return speedup_chart(pd.DataFrame(columns=["speedup"]), curves, crossovers, None)
