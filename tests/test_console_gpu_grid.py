"""The GPUs' small multiples (spectower.console.gpu_grid): each panel its GPU's rows, readable time axes."""

from __future__ import annotations

import math

import pandas as pd
from spectower.console import charts, gpu_grid


def test_time_axes_span_the_window_with_readable_ticks() -> None:
    axis = charts.time_axis(0.0, 7 * 86400.0)
    assert axis["range"] == ["1970-01-01T00:00:00Z", "1970-01-08T00:00:00Z"]
    assert [s["value"] for s in axis["tickformatstops"]] == ["%H:%M:%S", "%H:%M", "%b %d"]
    df = pd.DataFrame({"gpu_id": [1, 2], "ts": [10.0, 10.0], "gpu_util_pct": [50.0, 60.0]})
    labels = {1: "#0", 2: "#1"}
    fig = gpu_grid.gpu_grid(df, "gpu_util_pct", labels, "Utilisation", "%", (0.0, 3600.0)).to_dict()
    axes = [v for k, v in fig["layout"].items() if k.startswith("xaxis")]
    assert len(axes) == 2 and all(a["ticklabeloverflow"] == "hide past domain" for a in axes)
    assert all(t["mode"] == "lines+markers" for t in fig["data"])  # one point each: still visible


def test_gpu_grid_panels_hold_each_gpus_rows() -> None:
    """Each panel's trace is its GPU's rows (times formatted once for the frame, gaps kept as NaN), a GPU
    without rows gets an empty panel, and every panel spans the window."""
    ts = [1_764_000_000.0 + 60 * k for k in range(5)]
    df = pd.DataFrame({
        "gpu_id": [3, 1, 3, 1, 3, 1, 3, 3],
        "ts": [ts[0], ts[0], ts[1], ts[1], ts[2], ts[3], ts[3], ts[4]],
        "power_w": [300.0, 100.0, float("nan"), 110.0, 320.0, 120.0, 330.0, 340.0],
    })  # fmt: skip
    labels = {1: "#0", 2: "#1", 3: "#2"}
    fig = gpu_grid.gpu_grid(df, "power_w", labels, "Power", "W", (ts[0], ts[4])).to_dict()
    traces = {t["name"]: t for t in fig["data"]}
    assert set(traces) == {"#0", "#2"}  # GPU 2 has no rows: its panel stays empty
    for gid, name in ((1, "#0"), (3, "#2")):
        rows = df[df["gpu_id"] == gid]
        assert traces[name]["x"] == charts.utc_times(rows["ts"])
        assert traces[name]["y"][0] == rows["power_w"].iloc[0] and len(traces[name]["y"]) == len(rows)
    assert math.isnan(traces["#2"]["y"][1])
    window = charts.time_axis(ts[0], ts[4])["range"]
    assert [fig["layout"][f"xaxis{k}"]["range"] for k in ("", "2", "3")] == [window] * 3
