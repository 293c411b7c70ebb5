"""The console's figures (spectower.console.charts): labels inside the plot, readable time axes, units."""

from __future__ import annotations

import math

import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st
from spectower.console import bench_charts, charts

from tests.conftest import examples


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


def test_live_curve_has_its_interval_as_a_band_and_the_crossover_interval_shaded() -> None:
    live = pd.DataFrame(
        {"batch_size": [2, 4, 8, 16, 32], "speedup": [1.6, 1.4, 1.2, None, 0.8],
         "lo": [1.5, 1.3, None, None, 0.7], "hi": [1.7, 1.5, None, None, 0.9],
         "drafted_steps": [10, 10, 10, 0, 10], "gated_steps": [10, 10, 1, 5, 10]}
    )  # fmt: skip
    fig = charts.speedup_chart(live, {}, {"live": 20.0}, None, 64, (16.0, 24.0)).to_dict()
    traces = {t.get("name"): t for t in fig["data"]}
    curve = traces["live (engine counters, per batch size)"]
    assert list(curve["x"]) == [2, 4, 8, 32]  # the bin measured in one mode only is not drawn
    band = traces["95% interval: live"]
    # one closed shape: up the upper edge, back down the lower one
    assert band["fill"] == "toself" and list(band["x"]) == [2, 4, 32, 32, 4, 2]
    assert list(band["y"]) == [1.7, 1.5, 0.9, 0.7, 1.3, 1.5]
    rect = next(sh for sh in fig["layout"]["shapes"] if sh["type"] == "rect")
    assert (rect["x0"], rect["x1"]) == (16.0, 24.0)
    plain = charts.speedup_chart(live, {}, {"live": 20.0}, None, 64)  # no interval: no shading
    assert _annotation(plain, "crossover live")
    assert not [sh for sh in plain.to_dict()["layout"]["shapes"] if sh["type"] == "rect"]


def test_benchmark_axes_have_units() -> None:
    pts = pd.DataFrame({"concurrency": [1.0, 1.0], "spec_on": [True, False], "median_ttft_ms": [20.0, 18.0],
                        "output_throughput": [100.0, 90.0]})  # fmt: skip
    tok = bench_charts.bench_curves({"#1": pts}).to_dict()["layout"]
    assert tok["yaxis"]["title"]["text"] == "output throughput (tok/s)"
    assert tok["xaxis"]["title"]["text"] == "concurrency (concurrent requests)"
    lat = bench_charts.bench_curves({"#1": pts}, "median_ttft_ms").to_dict()["layout"]
    assert lat["yaxis"]["title"]["text"] == "median TTFT (ms)"


def test_request_rate_runs_and_plain_rows_are_drawn_and_named() -> None:
    # an imported request-rate sweep has no concurrency: it is drawn against its request rate
    rate = pd.DataFrame({"concurrency": [None, None], "request_rate": [1.0, 4.0], "spec_on": [None, None],
                         "output_throughput": [537.0, 1900.0], "extra_json": [None, None]})  # fmt: skip
    fig = bench_charts.bench_curves({"#7": rate}).to_dict()
    assert fig["data"][0]["x"] == [1.0, 4.0]
    assert fig["layout"]["xaxis"]["title"]["text"] == "request rate (req/s, open loop)"
    # a sweep's --plain-server rows are a curve named "plain"
    sweep = pd.DataFrame({"concurrency": [8.0, 8.0, 8.0], "request_rate": [None] * 3,
                          "spec_on": [True, False, None], "output_throughput": [2668.0, 1121.0, 1637.0],
                          "extra_json": [f'{{"mode": "{m}"}}' for m in ("on", "off", "plain")]})  # fmt: skip
    names = [t["name"] for t in bench_charts.bench_curves({"#1": sweep}).to_dict()["data"]]
    assert names == ["#1 spec on", "#1 spec off", "#1 plain"]


def test_a_young_servers_time_axis_starts_where_its_data_does() -> None:
    """A fresh demo drew every chart as a sliver at the right edge of its hour: data younger than the
    window starts the axis; older data, or a gap inside an old server's window, keeps the whole window."""
    t0, t1 = 1_700_000_000.0, 1_700_003_600.0
    young = pd.DataFrame({"ts": [t1 - 300 + s for s in range(0, 300, 5)], "output_tok_s": [100.0] * 60})
    x_range = charts.data_window(t0, t1, t1 - 310, young)
    assert x_range == (t1 - 310, t1)
    fig = charts.timeseries(young, {"output_tok_s": "output"}, "Throughput", x_range=x_range)
    assert list(fig.layout.xaxis.range) == charts.time_axis(t1 - 310, t1)["range"]
    assert charts.data_window(t0, t1, None, young) == (t1 - 300, t1)  # no row: its first sample
    assert charts.data_window(t0, t1, t1 - 100, young) == (t1 - 300, t1)  # a sample before the row
    assert charts.data_window(t0, t1, t0 - 86400, young) == (t0, t1)  # an old server's gap stays a gap
    assert charts.data_window(t0, t1, t1 - 5, young.iloc[-1:]) == (t1 - 60, t1)  # at least a minute
    assert charts.data_window(t0, t1, None, pd.DataFrame()) == (t0, t1)  # nothing at all: the window


@settings(max_examples=examples(200), deadline=None, derandomize=True, database=None)
@given(st.lists(st.one_of(st.floats(-2e9, 4e9), st.just(float("nan"))), max_size=20))
def test_times_format_as_pandas_strftime(stamps: list[float]) -> None:
    ts = pd.Series(stamps, dtype=float)
    want = pd.to_datetime(ts, unit="s", utc=True).dt.strftime("%Y-%m-%dT%H:%M:%SZ").tolist()
    assert charts.utc_times(ts) == want or (
        any(math.isnan(v) for v in stamps) and _same_with_gaps(charts.utc_times(ts), want)
    )


def _same_with_gaps(got: list[object], want: list[object]) -> bool:
    def gap(v: object) -> bool:
        return isinstance(v, float) and math.isnan(v)

    return len(got) == len(want) and all(
        (gap(a) and gap(b)) or a == b for a, b in zip(got, want, strict=True)
    )


@settings(max_examples=examples(200), deadline=None, derandomize=True, database=None)
@given(
    st.lists(st.one_of(st.none(), st.floats(), st.integers(-(2**40), 2**40))),
    st.sampled_from(["float64", "object", "Float64"]),
)
def test_numbers_are_floats_with_none_for_gaps(values: list[float | int | None], dtype: str) -> None:
    column = pd.Series(values, dtype=dtype) if dtype != "float64" else pd.Series(values, dtype=float)
    assert charts.numbers(column) == [None if pd.isna(v) else float(v) for v in column]  # the old definition


def test_a_band_with_a_gap_is_two_shapes_not_a_wedge_across_it() -> None:
    """A time series' min..max band around a blanked stretch (the accept charts' gated buckets): each run of
    known points is its own closed shape, apart at the gap. The two-trace ``tonexty`` band joined the gap's
    neighbours into one dark triangle across it."""
    df = pd.DataFrame({
        "ts": [0.0, 10.0, 20.0, 30.0, 40.0, 50.0],
        "spec_accept_length": [2.5, 2.4, None, None, 2.6, 2.5],
        "spec_accept_length_min": [2.3, 2.2, None, None, 2.4, 2.4],
        "spec_accept_length_max": [2.7, 2.6, None, None, 2.8, 2.6],
    })  # fmt: skip
    fig = charts.timeseries(df, {"spec_accept_length": "accept length"}, "Accept length").to_dict()
    bands = [t for t in fig["data"] if t.get("fill")]
    assert len(bands) == 1 and bands[0]["fill"] == "toself"
    ys = list(bands[0]["y"])
    assert ys == [2.7, 2.6, 2.2, 2.3, None, 2.8, 2.6, 2.4, 2.4]
    assert [x is None for x in bands[0]["x"]] == [y is None for y in ys]
    line = next(t for t in fig["data"] if t.get("name") == "accept length")
    assert list(line["y"]) == [2.5, 2.4, None, None, 2.6, 2.5] and not line.get("connectgaps")


def test_the_knob_line_draws_values_that_held_not_a_buckets_mean() -> None:
    """A bucket across a policy's move from 64 to 16 means 40, a level nobody set: both knob lines draw the
    value the bucket ended at (the extreme the bucket before was not at), up and down alike; a bucket where
    the knob did not move keeps its value, and one with no bucket before takes the value it held longer."""
    df = pd.DataFrame({
        "ts": [0.0, 10.0, 20.0, 30.0, 40.0, 50.0],
        "num_running_reqs": [20.0] * 6,
        "spec_max_bs": [28.0, 64.0, 40.0, 16.0, 52.0, 64.0],
        "spec_max_bs_min": [16.0, 64.0, 16.0, 16.0, 16.0, 64.0],
        "spec_max_bs_max": [64.0, 64.0, 64.0, 16.0, 64.0, 64.0],
    })  # fmt: skip
    held = [16.0, 64.0, 16.0, 16.0, 64.0, 64.0]
    assert charts.knob_held(df).tolist() == held
    figures = (charts.load_and_knob(df, pd.DataFrame(), max_running=64),
               charts.policy_timeline(df, pd.DataFrame(), max_running=64))  # fmt: skip
    for fig in figures:
        knob = next(t for t in fig.to_dict()["data"] if t.get("name") == "knob (spec_max_bs)")
        assert list(knob["y"]) == held
    # without the extremes (an older frame) the line is the column as it is
    assert charts.knob_held(df[["ts", "spec_max_bs"]]).tolist() == df["spec_max_bs"].tolist()
