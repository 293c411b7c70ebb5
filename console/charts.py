"""Plotly figures for the console. Each takes already-bounded frames; none reads storage."""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from .plain_figure import PlainFigure

DEFAULT_HEIGHT = 300
COLOR_ON = "#2ca02c"
COLOR_OFF = "#d62728"
COLOR_LIVE = "#1f77b4"
COLOR_STALE = "#9e9e9e"
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf")
CONCURRENCY_TITLE = "concurrency (concurrent requests)"
# Time tick labels that stay readable at every range: seconds only when ticks are seconds apart, the date
# once ticks are a day or more apart (plotly picks the stop from the tick spacing it chose).
TIME_TICK_STOPS = [
    {"dtickrange": [None, 60_000], "value": "%H:%M:%S"},
    {"dtickrange": [60_000, 86_400_000], "value": "%H:%M"},
    {"dtickrange": [86_400_000, None], "value": "%b %d"},
]

def base_layout(title: str, y_title: str = "", height: int = DEFAULT_HEIGHT) -> dict[str, Any]:
    return {
        "title": {"text": title, "font": {"size": 15}},
        "height": height,
        "margin": {"l": 10, "r": 10, "t": 40, "b": 10},
        # under the plot: a legend above it wraps into the title on a narrow column
        "legend": {"orientation": "h", "yanchor": "top", "y": -0.18, "xanchor": "left", "x": 0.0},
        "hovermode": "x unified",
        "xaxis": {},
        "yaxis": {"title": {"text": y_title}} if y_title else {},
        "shapes": [],
        "annotations": [],
    }


def figure_of(data: list[dict[str, Any]], layout: dict[str, Any]) -> go.Figure:
    """A figure from plain dicts without plotly's per-property validation (the slowest part of a live
    refresh on a busy host); every key used in this module is a documented plotly attribute."""
    return PlainFigure(data, layout)


def _hline(layout: dict[str, Any], y: float, text: str, color: str = "#888", side: str = "right") -> None:
    layout["shapes"].append(
        {
            "type": "line",
            "xref": "paper",
            "x0": 0,
            "x1": 1,
            "yref": "y",
            "y0": y,
            "y1": y,
            "line": {"dash": "dot", "color": color},
        }
    )
    layout["annotations"].append(
        {
            "xref": "paper",
            "x": 1 if side == "right" else 0,
            "yref": "y",
            "y": y,
            "text": text,
            "showarrow": False,
            "xanchor": side,
            "yanchor": "bottom",
        }
    )


# The narrowest time axis a young server's charts get (its first samples are not drawn edge to edge).
MIN_TIME_SPAN_S = 60.0


def data_window(t0: float, t1: float, first_seen: Any, samples: pd.DataFrame) -> tuple[float, float]:
    """The x range of a time chart over the window [t0, t1]: the whole window, where gaps show as gaps,
    unless the data is younger than the window; then from where it starts, the earlier of the source's
    ``first_seen`` and the window's first sample (``samples["ts"]``: a buffered or imported sample may
    predate the row), at least ``MIN_TIME_SPAN_S`` wide. A fresh demo drew every chart as a sliver at the
    right edge of its hour for minutes."""
    starts = [float(first_seen)] if first_seen is not None and not pd.isna(first_seen) else []
    if not samples.empty and "ts" in samples and samples["ts"].notna().any():
        starts.append(float(samples["ts"].min()))
    start = min(starts, default=t0)
    if not math.isfinite(start) or start <= t0:
        return t0, t1
    return max(t0, min(start, t1 - MIN_TIME_SPAN_S)), t1


def time_axis(t0: float | None = None, t1: float | None = None) -> dict[str, Any]:
    """A UTC time axis over the selected window (not just where data is), labels never overlapping."""
    axis: dict[str, Any] = {"type": "date", "tickformatstops": TIME_TICK_STOPS, "nticks": 6,
                            "ticklabeloverflow": "hide past domain"}  # fmt: skip
    if t0 is not None and t1 is not None:
        axis["range"] = list(_window_times(t0, t1))
    return axis


@functools.lru_cache(maxsize=16)
def _window_times(t0: float, t1: float) -> tuple[str, ...]:
    """The window's ends as times: every chart of a page has the same window (a pandas round trip each)."""
    return tuple(utc_times(pd.Series([t0, t1])))


def _vline(
    layout: dict[str, Any],
    x: float,
    text: str,
    color: str,
    dash: str = "dash",
    side: str = "left",
    y: float = 1,
) -> None:
    """A vertical line labelled on ``side`` of it (the side with room: a label never leaves the plot)."""
    layout["shapes"].append(
        {
            "type": "line",
            "yref": "paper",
            "y0": 0,
            "y1": 1,
            "xref": "x",
            "x0": x,
            "x1": x,
            "line": {"dash": dash, "color": color},
        }
    )
    layout["annotations"].append(
        {
            "yref": "paper",
            "y": y,
            "xref": "x",
            "x": x,
            "text": text,
            "showarrow": False,
            "xanchor": "right" if side == "left" else "left",
            "yanchor": "top",
            "bgcolor": "rgba(128,128,128,0.15)",
        }
    )


TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


def utc_times(ts: pd.Series) -> list[str]:
    """Epoch seconds as UTC ``YYYY-MM-DDTHH:MM:SSZ``. numpy formats the instants pandas converts (4x
    faster than pandas' strftime, which formats element by element); strftime where one is missing."""
    stamps = pd.to_datetime(ts, unit="s")
    if stamps.isna().any():
        return stamps.dt.tz_localize("UTC").dt.strftime(TIME_FORMAT).tolist()
    return [text + "Z" for text in np.datetime_as_string(stamps.to_numpy(), unit="s").tolist()]


def numbers(s: pd.Series) -> list[float | None]:
    """A column as JSON-ready floats, None where missing (plotly draws a gap)."""
    values = s.to_numpy(dtype=np.float64, na_value=np.nan)
    out = values.astype(object)
    out[np.isnan(values)] = None
    return out.tolist()


def knob_held(df: pd.DataFrame) -> pd.Series:
    """Per bucket of ``df`` (``spec_max_bs`` with its ``_min`` and ``_max``), a knob value that held at the
    bucket's end, for a step line: a bucket across a move from 64 to 16 means 40, a level nobody set. Where
    the knob did not move in the bucket, its one value; where it moved, of its smallest and largest the one
    the bucket before did not end at (else the one nearer the mean, the value it held longer)."""
    if not {"spec_max_bs_min", "spec_max_bs_max"} <= set(df.columns):
        return df["spec_max_bs"]
    held: list[float] = []
    before = math.nan
    for mean, lo, hi in zip(df["spec_max_bs"], df["spec_max_bs_min"], df["spec_max_bs_max"], strict=True):
        if pd.isna(lo) or pd.isna(hi) or lo == hi:
            value = mean if pd.isna(lo) or pd.isna(hi) else lo
        elif before in (lo, hi):
            value = hi if before == lo else lo
        else:
            value = lo if abs(mean - lo) <= abs(hi - mean) else hi
        held.append(float(value))
        before = float(value)
    return pd.Series(held, index=df.index, dtype=float)


def _band(
    x: list[Any],
    lo: list[Any],
    hi: list[Any],
    fillcolor: str,
    *,
    name: str | None = None,
    group: str | None = None,
) -> list[dict[str, Any]]:
    """A shaded lo..hi band as one trace: each run of points with both edges known is a closed shape (up
    its upper edge, back down its lower one), the runs apart where an edge is missing (plotly's ``toself``
    fills each run between gaps on its own). The two-trace ``tonexty`` band drew a gap's neighbours into one
    triangle across it: a blanked gated stretch of the accept charts came out as a dark wedge from 0 to 2.5.
    ``name``: the band's legend entry (none without); ``group``: its legend group."""
    xs: list[Any] = []
    ys: list[Any] = []
    run: list[tuple[Any, Any, Any]] = []
    for point in [*zip(x, lo, hi, strict=True), (None, None, None)]:
        if point[1] is not None and point[2] is not None and point[0] is not None:
            run.append(point)
            continue
        if run:
            if xs:
                xs.append(None)
                ys.append(None)
            xs += [p[0] for p in run] + [p[0] for p in reversed(run)]
            ys += [p[2] for p in run] + [p[1] for p in reversed(run)]
            run = []
    band: dict[str, Any] = {"type": "scatter", "x": xs, "y": ys, "mode": "lines", "line": {"width": 0},
                            "hoverinfo": "skip", "fill": "toself", "fillcolor": fillcolor}  # fmt: skip
    if group is not None:
        band["legendgroup"] = group
    band.update({"name": name} if name is not None else {"showlegend": False})
    return [band]


def timeseries(
    df: pd.DataFrame,
    columns: Mapping[str, str],
    title: str,
    y_title: str = "",
    band: bool = True,
    stale: bool = False,
    height: int = DEFAULT_HEIGHT,
    x_range: tuple[float, float] | None = None,
) -> go.Figure:
    """Mean line per column (label -> column), shaded min..max band when the frame has it; ``x_range``:
    the selected window, so a chart shows the whole range even where nothing was collected."""
    data: list[dict[str, Any]] = []
    if not df.empty:
        x = utc_times(df["ts"])
        for i, (col, label) in enumerate(columns.items()):
            if col not in df or df[col].isna().all():
                continue
            color = COLOR_STALE if stale else PALETTE[i % len(PALETTE)]
            if band and f"{col}_max" in df and f"{col}_min" in df:
                data += _band(x, numbers(df[f"{col}_min"]), numbers(df[f"{col}_max"]), _rgba(color, 0.15))
            data.append(
                {
                    "type": "scatter",
                    "x": x,
                    "y": numbers(df[col]),
                    "name": label,
                    "mode": line_mode(len(x)),
                    "line": {"color": color},
                }
            )
    if stale:
        title += "  (STALE)"
    layout = base_layout(title, y_title, height)
    layout["xaxis"] = time_axis(*(x_range or (None, None)))
    if not data:
        note_no_data(layout, "no data in this range")
    return figure_of(data, layout)


def note_no_data(layout: dict[str, Any], text: str) -> None:
    """Say in the middle of an empty chart why it is empty."""
    layout["annotations"].append(
        {"text": text, "showarrow": False, "x": 0.5, "y": 0.5, "xref": "paper", "yref": "paper",
         "font": {"size": 15, "color": "#999"}}
    )  # fmt: skip


def load_and_knob(
    df: pd.DataFrame,
    events: pd.DataFrame,
    max_running: int | None,
    x_range: tuple[float, float] | None = None,
    stale: bool = False,
    height: int = 260,
) -> go.Figure:
    """Running and queued requests with the knob (spec_max_bs, a step line) on the same axis, since the
    knob is a running-requests threshold; each confirmed change is a marker naming who set it."""
    layout = base_layout("Requests and the knob" + ("  (STALE)" if stale else ""), "requests", height)
    layout["xaxis"] = time_axis(*(x_range or (None, None)))
    data: list[dict[str, Any]] = []
    if not df.empty:
        x = utc_times(df["ts"])
        for col, name, color in (("num_running_reqs", "running", PALETTE[0]),
                                 ("num_queue_reqs", "queued", PALETTE[1])):  # fmt: skip
            if col in df and df[col].notna().any():
                line = {"color": COLOR_STALE if stale else color}
                data.append({"type": "scatter", "x": x, "y": numbers(df[col]), "name": name,
                             "mode": "lines", "line": line})  # fmt: skip
        if "spec_max_bs" in df and df["spec_max_bs"].notna().any():
            knob = knob_held(df).clip(upper=max_running) if max_running else knob_held(df)
            data.append({"type": "scatter", "x": x, "y": numbers(knob), "name": "knob (spec_max_bs)",
                         "mode": "lines", "line": {"shape": "hv", "color": COLOR_ON, "width": 2,
                                                   "dash": "dot"}})  # fmt: skip
    if not events.empty:
        ev = events.sort_values("ts")
        ys = ev["new_max_bs"].astype(float)
        if max_running:
            ys = ys.clip(upper=max_running)
        text = [f"{a}: {_knob_word(o)} → {_knob_word(n)}<br>{r}" for a, o, n, r in
                zip(ev["actor"], ev["old_max_bs"], ev["new_max_bs"], ev["reason"], strict=True)]  # fmt: skip
        data.append({"type": "scatter", "x": utc_times(ev["ts"]), "y": numbers(ys), "name": "knob set by",
                     "mode": "markers", "text": text, "hovertemplate": "%{text}<extra></extra>",
                     "marker": {"symbol": "diamond", "size": 9, "color": COLOR_ON}})  # fmt: skip
    if max_running:
        _hline(layout, max_running, f"max_running_requests {max_running}", "#999")
    if not data:
        note_no_data(layout, "no data in this range")
    return figure_of(data, layout)


def _knob_word(v: object) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "?"
    return "off" if int(v) <= 0 else str(int(v))  # type: ignore[call-overload]


def line_mode(n_points: int) -> str:
    """Lines, with markers when there are too few points for a line to show (a long range, a new source)."""
    return "lines+markers" if n_points <= 3 else "lines"


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
    live_crossover_interval: tuple[float, float] | None = None,
) -> go.Figure:
    """Speedup (spec on / spec off) vs concurrency: the live estimate per batch-size bin with its 95 %
    interval as a band (``live``: ``batch_size, speedup, lo, hi, drafted_steps, gated_steps``, as
    ``console.data.LiveSpeedup.table``), benchmark curves, crossovers (the live one's interval shaded),
    now."""
    layout = base_layout("Speedup from speculation vs load", "spec on / spec off", 420)
    data: list[dict[str, Any]] = []
    _hline(layout, 1.0, "break-even", side="left")
    data += _bench_speedup_traces(bench)
    data += _live_speedup_traces(live)
    if live_crossover_interval is not None:
        lo, hi = live_crossover_interval
        layout["shapes"].append({"type": "rect", "xref": "x", "yref": "paper", "x0": lo, "x1": hi, "y0": 0,
                                 "y1": 1, "fillcolor": _rgba("#d62728", 0.08), "line": {"width": 0},
                                 "layer": "below"})  # fmt: skip
    x_hi = _x_extent(bench, live, max_running, crossovers)
    for k, (label, x) in enumerate(crossovers.items()):
        if x is not None and not math.isnan(x):
            # each label on the side of its line with room, stacked so two crossovers never overlap
            side = "left" if x > 0.5 * x_hi else "right"
            _vline(layout, x, f"crossover {label}: {x:.1f}", "#d62728", side=side, y=1 - 0.09 * k)
    if operating_point is not None:
        data.append(_now_marker(operating_point, x_hi))
    if max_running:
        _vline(layout, max_running, f"max_running_requests {max_running}", "#999", "dot", y=0.12)
        layout["xaxis"]["range"] = [0, max_running * 1.05]
    if not data:  # nothing measured yet: still draw a readable frame around break-even
        layout["yaxis"]["range"] = [0.5, 1.5]
        layout["annotations"].append(
            {
                "text": "no speedup measured yet",
                "showarrow": False,
                "x": 0.5,
                "y": 0.5,
                "xref": "paper",
                "yref": "paper",
                "font": {"size": 16, "color": "#999"},
            }
        )
    layout["xaxis"]["title"] = {"text": CONCURRENCY_TITLE}
    return figure_of(data, layout)


def _bench_speedup_traces(bench: Mapping[str, pd.DataFrame]) -> list[dict[str, Any]]:
    """Each benchmark's speedup curve (dashed), with its 95 % band where the run has one."""
    data: list[dict[str, Any]] = []
    for i, (label, curve) in enumerate(bench.items()):
        if curve.empty:
            continue
        color = PALETTE[(i + 1) % len(PALETTE)]
        if {"ci_lo", "ci_hi"} <= set(curve.columns) and curve["ci_lo"].notna().any():
            ci = curve.dropna(subset=["ci_lo", "ci_hi"])
            data += _band(numbers(ci["concurrency"]), numbers(ci["ci_lo"]), numbers(ci["ci_hi"]),
                          _rgba(color, 0.18), name=f"95% interval: {label}", group=label)  # fmt: skip
        data.append(
            {
                "type": "scatter",
                "x": numbers(curve["concurrency"]),
                "y": numbers(curve["speedup"]),
                "name": f"benchmark: {label}",
                "mode": "lines+markers",
                "legendgroup": label,
                "line": {"color": color, "dash": "dash"},
            }
        )
    return data


def _live_speedup_traces(live: pd.DataFrame) -> list[dict[str, Any]]:
    """The live estimate per batch-size bin (thick, with the steps behind each point) and its 95 % band."""
    if live.empty or not live["speedup"].notna().any():
        return []
    ok = live.dropna(subset=["speedup"])
    band = ok.dropna(subset=["lo", "hi"])
    data: list[dict[str, Any]] = []
    if not band.empty:
        data += _band(numbers(band["batch_size"]), numbers(band["lo"]), numbers(band["hi"]),
                      _rgba(COLOR_LIVE, 0.2), name="95% interval: live", group="live")  # fmt: skip
    data.append(
        {
            "type": "scatter",
            "x": numbers(ok["batch_size"]),
            "y": numbers(ok["speedup"]),
            "name": "live (engine counters, per batch size)",
            "mode": "lines+markers",
            "legendgroup": "live",
            "line": {"color": COLOR_LIVE, "width": 3},
            "marker": {"size": 9},
            "customdata": ok[["drafted_steps", "gated_steps"]].astype(int).values.tolist(),
            "hovertemplate": "batch %{x:.0f}: speedup=%{y:.3f} (steps drafted %{customdata[0]}, "
            "gated %{customdata[1]})<extra></extra>",
        }
    )
    return data


def _now_marker(operating_point: tuple[float, float, str], x_hi: float) -> dict[str, Any]:
    """Today's load on the chart: a star with its text on the side with room."""
    cx, cy, text = operating_point
    return {
        "type": "scatter",
        "x": [cx],
        "y": [cy],
        "name": "now",
        "mode": "markers+text",
        "text": [text],
        "textposition": "top right" if cx < 0.5 * x_hi else "top left",
        "cliponaxis": False,
        "marker": {"size": 18, "symbol": "star", "color": "#ffbf00", "line": {"width": 1, "color": "#000"}},
    }


def _x_extent(
    bench: Mapping[str, pd.DataFrame],
    live: pd.DataFrame,
    max_running: int | None,
    crossovers: Mapping[str, float | None],
) -> float:
    """The right end of the speedup chart's x axis (what plotly will show), to pick label sides."""
    if max_running:
        return max_running * 1.05
    xs = [float(c["concurrency"].max()) for c in bench.values() if not c.empty]
    if not live.empty and "batch_size" in live and live["batch_size"].notna().any():
        xs.append(float(live["batch_size"].max()))
    xs += [float(x) for x in crossovers.values() if x is not None and not math.isnan(x)]
    return max(xs) if xs else 1.0


def policy_timeline(
    load: pd.DataFrame,
    events: pd.DataFrame,
    max_running: int | None = None,
    x_range: tuple[float, float] | None = None,
) -> go.Figure:
    """Running requests over time with the knob (step line) and each policy decision as a marker."""
    layout = base_layout("Policy decisions under the load they answered", "requests / batch size", 320)
    layout["xaxis"] = time_axis(*(x_range or (None, None)))
    data: list[dict[str, Any]] = []
    if not load.empty:
        x = utc_times(load["ts"])
        data.append(
            {
                "type": "scatter",
                "x": x,
                "y": numbers(load["num_running_reqs"]),
                "name": "running requests",
                "mode": "lines",
            }
        )
        if "spec_max_bs" in load and load["spec_max_bs"].notna().any():
            data.append(
                {
                    "type": "scatter",
                    "x": x,
                    "y": numbers(knob_held(load)),
                    "name": "knob (spec_max_bs)",
                    "mode": "lines",
                    "line": {"shape": "hv", "color": COLOR_ON, "width": 2},
                }
            )
    if not events.empty:
        ev = events.sort_values("ts")
        color = [COLOR_ON if bool(c) else COLOR_OFF for c in ev["confirmed"]]
        text = [
            f"{a}: {o} → {n} ({r})"
            for a, o, n, r in zip(ev["actor"], ev["old_max_bs"], ev["new_max_bs"], ev["reason"], strict=True)
        ]
        data.append(
            {
                "type": "scatter",
                "x": utc_times(ev["ts"]),
                "y": numbers(ev["new_max_bs"].astype(float)),
                "name": "policy decision",
                "mode": "markers",
                "text": text,
                "marker": {"symbol": "diamond", "size": 11, "color": color},
                "hovertemplate": "%{text}<extra></extra>",
            }
        )
    if max_running:
        _hline(layout, max_running, f"max_running_requests {max_running}", "#999")
    return figure_of(data, layout)
