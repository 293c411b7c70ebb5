"""The GPUs' small multiples: one panel per GPU for one metric, on hand-placed axes (the GPUs page and the
Overview's GPU row)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from . import charts


def gpu_grid(
    df: pd.DataFrame,
    metric: str,
    labels: Mapping[int, str],
    title: str,
    y_title: str,
    x_range: tuple[float, float] | None = None,
) -> go.Figure:
    """Small multiples: one panel per GPU for one metric.

    Built as a plain figure dict with hand-placed axis domains: make_subplots + add_trace(row, col)
    costs hundreds of milliseconds for 8 panels, which a 5-second live refresh cannot afford.
    """
    ids = list(labels)
    n = max(1, len(ids))
    cols = min(4, n)
    rows = math.ceil(n / cols)
    gap_x, gap_y = 0.05, 0.22 / rows
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
    axis = charts.time_axis(*(x_range or (None, None)))  # every panel's: formatted once, not once a panel
    # each panel's rows: the frame's times formatted once (8 panels: 8 pandas round trips saved)
    gpu_of = df["gpu_id"].to_numpy() if not df.empty else np.zeros(0)
    times = np.array(charts.utc_times(df["ts"]) if not df.empty else [], dtype=object)
    for j, gid in enumerate(ids):
        r, c = divmod(j, cols)
        k = "" if j == 0 else str(j + 1)
        x0, y1 = c * (w + gap_x), 1 - r * (h + gap_y)
        layout.update(
            _panel_axes(k, axis, (x0, y1, w, h), y_title, ymax, first_col=c == 0,
                        tick_labels=r == rows - 1 or j + cols >= n)
        )
        layout["annotations"].append(
            {
                "text": labels[gid],
                "x": x0 + w / 2,
                "y": y1,
                "xref": "paper",
                "yref": "paper",
                "showarrow": False,
                "yanchor": "bottom",
                "font": {"size": 11},
            }
        )
        mine = gpu_of == gid
        if not mine.any() or metric not in df:
            continue
        data.append(
            {
                "type": "scatter",
                "mode": charts.line_mode(int(mine.sum())),
                "name": labels[gid],
                "xaxis": f"x{k}",
                "yaxis": f"y{k}",
                "x": times[mine].tolist(),
                "y": df[metric].to_numpy()[mine].tolist(),
                "line": {"color": charts.PALETTE[j % len(charts.PALETTE)]},
            }
        )
    # without validation: the dict above is built from known-good keys; plotly's validation of 8 panels is
    # the slowest part of a refresh (~200 ms on a busy 2-core host), the figure it produces is the same.
    return charts.figure_of(data, layout)


def _panel_axes(
    k: str,
    axis: dict[str, Any],
    box: tuple[float, float, float, float],
    y_title: str,
    ymax: float | None,
    *,
    first_col: bool,
    tick_labels: bool,
) -> dict[str, Any]:
    """One gpu_grid panel's x and y axes: every panel over the same window, three ticks, the time labels
    that would spill into the next panel hidden, one y scale for all, the y title on the first column."""
    x0, y1, w, h = box
    x = {**axis, "domain": [_unit(x0), _unit(x0 + w)], "anchor": f"y{k}", "nticks": 4}
    x["showticklabels"] = tick_labels
    y: dict[str, Any] = {"domain": [_unit(y1 - h), _unit(y1)], "anchor": f"x{k}", "rangemode": "tozero"}
    if ymax is not None:
        y["range"] = [0, ymax * 1.05 or 1]
    if first_col:
        y["title"] = {"text": y_title}
    else:
        y["showticklabels"] = False
    return {f"xaxis{k}": x, f"yaxis{k}": y}


def _unit(v: float) -> float:
    """Clamp a paper coordinate to [0, 1] (float error may leave -5e-17)."""
    return min(1.0, max(0.0, round(v, 6)))
