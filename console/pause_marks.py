"""A server's stored pauses (``server_pause``: scheduler stalls, long collections, the launcher's held
Python) marked on a time chart, and added to its CSV.

On the H200 every stretch of a replay's p99 TTFT was one ~0.35-s full collection in SGLang's launcher: the
operator who opens the Overview because latency doubled sees them on the throughput chart, at their time,
each marker's height its length (an axis of its own on the right), its hover saying which process paused,
how and why.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from . import data
from .charts import COLOR_STALE, numbers, utc_times
from .plain_figure import PlainFigure

# Shorter pauses are a server's ordinary life (a young collection, a scheduling hiccup): not marked.
MIN_MARKED_S = 0.05
PAUSE_TRACE = "server pauses"
PAUSE_AXIS_TITLE = "pause (s)"
KIND_COLORS = {"stall": "#d62728", "gc": "#ff7f0e", "held": "#9467bd"}
KIND_WORDS = {"stall": "stall", "gc": "gc", "held": "Python held"}
PAUSE_COLUMNS = data.PAUSE_COLUMNS  # the frame data.server_pauses reads


def pause_text(process: str, kind: str, seconds: float, detail: Any) -> str:
    """``launcher gc 0.37 s (gen 2)``, ``rank 0 stall 1.20 s: waiting for a batch's result 1.10 s``."""
    said = f"{process} {KIND_WORDS.get(kind, kind)} {seconds:.2f} s"
    if not isinstance(detail, str) or not detail:
        return said
    return f"{said}: {detail}" if kind == "stall" else f"{said} ({detail})"


def mark_pauses(fig: PlainFigure, pauses: pd.DataFrame, stale: bool = False) -> PlainFigure:
    """``fig`` (a time chart) with a marker per pause of ``pauses`` (``PAUSE_COLUMNS``) at its end and at its
    length on a second y axis; unchanged when there are none."""
    if pauses.empty:
        return fig
    shown = pauses.sort_values("ts")
    text = [pause_text(p, k, float(s), d) for p, k, s, d in
            zip(shown["process"], shown["kind"], shown["seconds"], shown["detail"], strict=True)]  # fmt: skip
    colors = [COLOR_STALE if stale else KIND_COLORS.get(k, COLOR_STALE) for k in shown["kind"]]
    trace = {"type": "scatter", "x": utc_times(shown["ts"]), "y": numbers(shown["seconds"]), "yaxis": "y2",
             "name": PAUSE_TRACE, "mode": "markers", "text": text, "hovertemplate": "%{text}<extra></extra>",
             "marker": {"symbol": "x", "size": 8, "color": colors}}  # fmt: skip
    axis = {"title": {"text": PAUSE_AXIS_TITLE}, "overlaying": "y", "side": "right", "showgrid": False,
            "rangemode": "tozero"}  # fmt: skip
    fig.add_plain([trace], {"yaxis2": axis})
    return fig


def with_pauses(series: pd.DataFrame, pauses: pd.DataFrame) -> pd.DataFrame:
    """A chart's series with each pause as an extra row (``ts``, ``pause_seconds``, ``pause_kind``,
    ``pause_process``, ``pause_detail``), in time order: the CSV says what the markers do."""
    if pauses.empty:
        return series
    extra = pauses[PAUSE_COLUMNS].rename(columns={c: f"pause_{c}" for c in PAUSE_COLUMNS if c != "ts"})
    return pd.concat([series, extra], ignore_index=True).sort_values("ts", kind="stable")
