"""The console's figures (spectower.console.charts): labels inside the plot, readable time axes, units."""

from __future__ import annotations

import pandas as pd
from spectower.console import charts


def _annotation(fig: object, prefix: str) -> dict[str, object]:
    return next(a for a in fig.to_dict()["layout"]["annotations"] if a["text"].startswith(prefix))  # type: ignore[attr-defined]


def test_line_labels_sit_on_the_side_with_room() -> None:
    curve = pd.DataFrame({"concurrency": [1.0, 16.0, 48.0], "speedup": [1.3, 1.0, 0.8]})
    fig = charts.speedup_chart(pd.DataFrame(columns=["speedup"]), {"a": curve}, {"a": 14.0, "b": 50.0},
                               (60.0, 0.9, "now: 60 running, knob threshold 13"), max_running=64)  # fmt: skip
    assert _annotation(fig, "crossover a")["xanchor"] == "left"  # near the left edge: text to the right
    assert _annotation(fig, "crossover b")["xanchor"] == "right"  # near the right edge: text to the left
    assert _annotation(fig, "max_running_requests 64")["xanchor"] == "right"
    ys = {_annotation(fig, "crossover a")["y"], _annotation(fig, "crossover b")["y"]}
    assert len(ys) == 2  # stacked, never on top of each other
    star = next(t for t in fig.to_dict()["data"] if t.get("name") == "now")
    assert star["textposition"] == "top left" and star["cliponaxis"] is False


def test_time_axes_span_the_window_with_readable_ticks() -> None:
    axis = charts.time_axis(0.0, 7 * 86400.0)
    assert axis["range"] == ["1970-01-01T00:00:00Z", "1970-01-08T00:00:00Z"]
    assert [s["value"] for s in axis["tickformatstops"]] == ["%H:%M:%S", "%H:%M", "%b %d"]
    df = pd.DataFrame({"gpu_id": [1, 2], "ts": [10.0, 10.0], "gpu_util_pct": [50.0, 60.0]})
    fig = charts.gpu_grid(df, "gpu_util_pct", {1: "#0", 2: "#1"}, "Utilisation", "%", (0.0, 3600.0)).to_dict()
    axes = [v for k, v in fig["layout"].items() if k.startswith("xaxis")]
    assert len(axes) == 2 and all(a["ticklabeloverflow"] == "hide past domain" for a in axes)
    assert all(t["mode"] == "lines+markers" for t in fig["data"])  # one point each: still visible


def test_benchmark_axes_have_units() -> None:
    pts = pd.DataFrame({"concurrency": [1.0, 1.0], "spec_on": [True, False], "median_ttft_ms": [20.0, 18.0],
                        "output_throughput": [100.0, 90.0]})  # fmt: skip
    tok = charts.bench_curves({"#1": pts}).to_dict()["layout"]
    assert tok["yaxis"]["title"]["text"] == "output throughput (tok/s)"
    assert tok["xaxis"]["title"]["text"] == "concurrency (concurrent requests)"
    lat = charts.bench_curves({"#1": pts}, "median_ttft_ms").to_dict()["layout"]
    assert lat["yaxis"]["title"]["text"] == "median TTFT (ms)"
