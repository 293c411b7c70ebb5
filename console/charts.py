"""Plotly figures for the console. Each takes already-bounded frames; none reads storage."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

DEFAULT_HEIGHT = 300
COLOR_ON = "#2ca02c"
COLOR_OFF = "#d62728"
COLOR_LIVE = "#1f77b4"
COLOR_STALE = "#9e9e9e"
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf")


def _layout(fig: go.Figure, title: str, y_title: str = "", height: int = DEFAULT_HEIGHT) -> go.Figure:
    fig.update_layout(
        title={"text": title, "font": {"size": 15}},
        height=height,
        margin={"l": 10, "r": 10, "t": 40, "b": 10},
        legend={"orientation": "h", "yanchor": "bottom", "y": 1.0, "xanchor": "right", "x": 1.0},
        hovermode="x unified",
    )
    if y_title:
        fig.update_yaxes(title_text=y_title)
    return fig


def _times(ts: pd.Series) -> pd.Series:
    return pd.to_datetime(ts, unit="s", utc=True)


def timeseries(
    df: pd.DataFrame,
    columns: Mapping[str, str],
    title: str,
    y_title: str = "",
    band: bool = True,
    stale: bool = False,
    height: int = DEFAULT_HEIGHT,
) -> go.Figure:
    """Mean line per column (label -> column), shaded min..max band when the frame has it."""
    fig = go.Figure()
    if not df.empty:
        x = _times(df["ts"])
        for i, (col, label) in enumerate(columns.items()):
            if col not in df or df[col].isna().all():
                continue
            color = COLOR_STALE if stale else PALETTE[i % len(PALETTE)]
            if band and f"{col}_max" in df and f"{col}_min" in df:
                fig.add_trace(
                    go.Scatter(x=x, y=df[f"{col}_max"], line={"width": 0}, showlegend=False, hoverinfo="skip")
                )
                fig.add_trace(
                    go.Scatter(
                        x=x,
                        y=df[f"{col}_min"],
                        line={"width": 0},
                        fill="tonexty",
                        showlegend=False,
                        hoverinfo="skip",
                        fillcolor=_rgba(color, 0.15),
                    )
                )
            fig.add_trace(go.Scatter(x=x, y=df[col], name=label, mode="lines", line={"color": color}))
    if stale:
        title += "  (STALE)"
    return _layout(fig, title, y_title, height)


def _rgba(hex_color: str, alpha: float) -> str:
    h = hex_color.lstrip("#")
    r, g, b = int(h[0:2], 16), int(h[2:4], 16), int(h[4:6], 16)
    return f"rgba({r},{g},{b},{alpha})"


def speedup_chart(
    live: pd.DataFrame,
    bench: Mapping[str, pd.DataFrame],
    crossovers: Mapping[str, float | None],
    operating_point: tuple[float, float, str] | None,
    max_running: int | None = None,
) -> go.Figure:
    """Speedup (spec on / spec off) vs concurrency: live bins, benchmark curves, crossovers, now."""
    fig = go.Figure()
    fig.add_hline(y=1.0, line={"dash": "dot", "color": "#888"}, annotation_text="break-even")
    for i, (label, curve) in enumerate(bench.items()):
        if curve.empty:
            continue
        fig.add_trace(
            go.Scatter(
                x=curve["concurrency"],
                y=curve["speedup"],
                name=f"benchmark: {label}",
                mode="lines+markers",
                line={"color": PALETTE[(i + 1) % len(PALETTE)], "dash": "dash"},
            )
        )
    if not live.empty and live["speedup"].notna().any():
        ok = live.dropna(subset=["speedup"])
        fig.add_trace(
            go.Scatter(
                x=ok["concurrency"],
                y=ok["speedup"],
                name="live (production traffic)",
                mode="lines+markers",
                line={"color": COLOR_LIVE, "width": 3},
                marker={"size": 9},
                customdata=ok[["n_on", "n_off"]],
                hovertemplate="c=%{x:.1f} speedup=%{y:.3f} (samples on %{customdata[0]}, "
                "off %{customdata[1]})<extra></extra>",
            )
        )
    for label, x in crossovers.items():
        if x is not None and not math.isnan(x):
            fig.add_vline(
                x=x,
                line={"dash": "dash", "color": "#d62728"},
                annotation_text=f"crossover {label}: {x:.1f}",
                annotation_position="top left",
            )
    if operating_point is not None:
        cx, cy, text = operating_point
        fig.add_trace(
            go.Scatter(
                x=[cx],
                y=[cy],
                name="now",
                mode="markers+text",
                text=[text],
                textposition="top center",
                marker={
                    "size": 18,
                    "symbol": "star",
                    "color": "#ffbf00",
                    "line": {"width": 1, "color": "#000"},
                },
            )
        )
    if max_running:
        fig.add_vline(x=max_running, line={"dash": "dot", "color": "#999"}, annotation_text="max_running")
        fig.update_xaxes(range=[0, max_running * 1.05])
    if not fig.data:  # nothing measured yet: still draw a readable frame around break-even
        fig.update_yaxes(range=[0.5, 1.5])
        fig.add_annotation(
            text="no speedup measured yet",
            showarrow=False,
            x=0.5,
            y=0.5,
            xref="paper",
            yref="paper",
            font={"size": 16, "color": "#999"},
        )
    fig.update_xaxes(title_text="concurrency (running requests)")
    return _layout(fig, "Speedup from speculation vs load", "spec on / spec off", height=420)


def policy_timeline(load: pd.DataFrame, events: pd.DataFrame, max_running: int | None = None) -> go.Figure:
    """Running requests over time with the knob (step line) and each policy decision as a marker."""
    fig = make_subplots(specs=[[{"secondary_y": False}]])
    if not load.empty:
        x = _times(load["ts"])
        fig.add_trace(go.Scatter(x=x, y=load["num_running_reqs"], name="running requests", mode="lines"))
        if "spec_max_bs" in load and load["spec_max_bs"].notna().any():
            fig.add_trace(
                go.Scatter(
                    x=x,
                    y=load["spec_max_bs"],
                    name="knob (spec_max_bs)",
                    mode="lines",
                    line={"shape": "hv", "color": COLOR_ON, "width": 2},
                )
            )
    if not events.empty:
        ev = events.sort_values("ts")
        color = [COLOR_ON if bool(c) else COLOR_OFF for c in ev["confirmed"]]
        fig.add_trace(
            go.Scatter(
                x=_times(ev["ts"]),
                y=ev["new_max_bs"].astype(float),
                name="policy decision",
                mode="markers",
                marker={"symbol": "diamond", "size": 11, "color": color},
                text=[
                    f"{a}: {o} → {n} ({r})"
                    for a, o, n, r in zip(
                        ev["actor"], ev["old_max_bs"], ev["new_max_bs"], ev["reason"], strict=True
                    )
                ],
                hovertemplate="%{text}<extra></extra>",
            )
        )
    if max_running:
        fig.add_hline(y=max_running, line={"dash": "dot", "color": "#999"}, annotation_text="max_running")
    return _layout(fig, "Policy decisions under the load they answered", "requests / batch size", 320)


def gpu_grid(
    df: pd.DataFrame, metric: str, labels: Mapping[int, str], title: str, y_title: str
) -> go.Figure:
    """Small multiples: one panel per GPU for one metric.

    Built as a plain figure dict with hand-placed axis domains: make_subplots + add_trace(row, col)
    costs hundreds of milliseconds for 8 panels, which a 5-second live refresh cannot afford.
    """
    ids = list(labels)
    n = max(1, len(ids))
    cols = min(4, n)
    rows = math.ceil(n / cols)
    gap_x, gap_y = 0.03, 0.22 / rows
    w, h = (1 - gap_x * (cols - 1)) / cols, (1 - gap_y * (rows - 1)) / rows
    layout: dict[str, Any] = {
        "title": {"text": title, "font": {"size": 15}},
        "height": 170 * rows + 70,
        "margin": {"l": 10, "r": 10, "t": 50, "b": 10},
        "showlegend": False,
        "hovermode": "closest",
        "annotations": [],
    }
    data: list[dict[str, Any]] = []
    ymax = float(df[metric].max()) if not df.empty and metric in df and df[metric].notna().any() else None
    for j, gid in enumerate(ids):
        r, c = divmod(j, cols)
        k = "" if j == 0 else str(j + 1)
        x0, y1 = c * (w + gap_x), 1 - r * (h + gap_y)
        layout[f"xaxis{k}"] = {"domain": [_unit(x0), _unit(x0 + w)], "anchor": f"y{k}", "type": "date", "tickformat": "%H:%M",
                               "nticks": 4, "showticklabels": r == rows - 1 or j + cols >= n}  # fmt: skip
        layout[f"yaxis{k}"] = {"domain": [_unit(y1 - h), _unit(y1)], "anchor": f"x{k}", "rangemode": "tozero"}
        if ymax is not None:
            layout[f"yaxis{k}"]["range"] = [0, ymax * 1.05 or 1]
        if c == 0:
            layout[f"yaxis{k}"]["title"] = {"text": y_title}
        else:
            layout[f"yaxis{k}"]["showticklabels"] = False
        layout["annotations"].append({"text": labels[gid], "x": x0 + w / 2, "y": y1, "xref": "paper",
                                      "yref": "paper", "showarrow": False, "yanchor": "bottom",
                                      "font": {"size": 11}})  # fmt: skip
        part = df[df["gpu_id"] == gid] if not df.empty else df
        if part.empty or metric not in part:
            continue
        data.append({"type": "scatter", "mode": "lines", "name": labels[gid], "xaxis": f"x{k}", "yaxis": f"y{k}",
                     "x": _times(part["ts"]).dt.strftime("%Y-%m-%dT%H:%M:%SZ").tolist(),
                     "y": part[metric].tolist(), "line": {"color": PALETTE[j % len(PALETTE)]}})  # fmt: skip
    # _validate=False: the dict above is built from known-good keys; plotly's validation of 8 panels is the
    # slowest part of a refresh (~200 ms on a busy 2-core host), the figure it produces is the same.
    return go.Figure({"data": data, "layout": layout}, _validate=False)


def _unit(v: float) -> float:
    """Clamp a paper coordinate to [0, 1] (float error may leave -5e-17)."""
    return min(1.0, max(0.0, round(v, 6)))


def bench_curves(runs: Mapping[str, pd.DataFrame], what: str = "output_throughput") -> go.Figure:
    """Throughput (or a latency column) vs concurrency, spec on solid, spec off dashed, per run."""
    fig = go.Figure()
    for i, (label, pts) in enumerate(runs.items()):
        if pts.empty:
            continue
        color = PALETTE[i % len(PALETTE)]
        for flag, dash, name in ((True, "solid", "spec on"), (False, "dash", "spec off"), (None, "dot", "")):
            part = pts[pts["spec_on"].isna()] if flag is None else pts[pts["spec_on"] == flag]
            part = part.dropna(subset=["concurrency", what]).sort_values("concurrency")
            if part.empty:
                continue
            fig.add_trace(
                go.Scatter(
                    x=part["concurrency"],
                    y=part[what],
                    mode="lines+markers",
                    name=f"{label} {name}".strip(),
                    line={"color": color, "dash": dash},
                )
            )
    fig.update_xaxes(title_text="concurrency")
    return _layout(fig, what.replace("_", " "), "", 360)


def bench_speedups(curves: Mapping[str, pd.DataFrame], crossovers: Mapping[str, float | None]) -> go.Figure:
    return speedup_chart(pd.DataFrame(columns=["speedup"]), curves, crossovers, None)


def sparkline_values(values: Sequence[float]) -> list[float]:
    return [float(v) for v in values if v is not None and not math.isnan(float(v))]
