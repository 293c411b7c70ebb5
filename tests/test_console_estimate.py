"""Speedup curves and crossovers (spectower.console.estimate)."""

from __future__ import annotations

import pandas as pd
import pytest
from spectower.console.estimate import (
    bench_speedup,
    crossover,
    crossover_label,
    interpolate,
    knob_label,
    knob_setter,
    live_crossover_metric,
    ratio_interval_text,
)
from spectower.control.speedup import NO_INTERVAL_YET, SpeedupEstimate
from spectower.simulator.profile import load_profile


def test_crossover_interpolates_where_speedup_falls_through_one() -> None:
    # halfway between 2 and 4 in log(concurrency), the sweep's rule
    assert crossover([1, 2, 4, 8], [1.2, 1.1, 0.9, 0.8]) == pytest.approx(8**0.5)
    assert crossover([1, 2], [1.2, 1.1]) is None  # never falls: no crossover
    assert crossover([], []) is None


def test_one_noisy_low_bin_is_not_the_crossover() -> None:
    # a thin point at 2 dips below 1.0; the well-sampled ones fall through 1.0 between 12 and 16
    cs, ss, n = [1, 2, 4, 8, 12, 16, 24], [1.3, 0.97, 1.2, 1.1, 1.02, 0.97, 0.9], [50, 3, 60, 60, 60, 60, 60]
    x = crossover(cs, ss, n)
    assert x is not None and 12 < x < 16
    assert crossover(cs, ss, [1] * 7) is not None  # unweighted the fit still pools the dip away
    assert crossover_label(cs, ss, n) == f"{x:.1f}"


def test_crossover_label_says_which_side_of_the_range() -> None:
    assert crossover_label([16, 24, 32], [0.99, 0.95, 0.9]) == "< 16"  # loses at every load seen
    assert crossover_label([1, 2, 4], [1.5, 1.4, 1.3]) == "> 4"  # wins at every load seen
    assert crossover_label([], []) == "—"


def test_crossover_matches_the_profile() -> None:
    p = load_profile("glm5-nvfp4-8x-rtx-pro-6000")
    cs = list(p.concurrency)
    ss = [p.output_tok_s(c, True) / p.output_tok_s(c, False) for c in cs]
    x = crossover(cs, ss)
    assert x is not None and 8 < x < 16  # the measured points cross between 8 and 16


def test_interpolate_inside_only() -> None:
    assert interpolate(3, [1, 5], [1.0, 2.0]) == pytest.approx(1.5)
    assert interpolate(6, [1, 5], [1.0, 2.0]) is None
    assert interpolate(1, [], []) is None


def test_bench_speedup_pairs_on_and_off_points() -> None:
    pts = pd.DataFrame(
        {
            "concurrency": [1, 1, 8, 8, 16],
            "spec_on": [True, False, True, False, True],
            "output_throughput": [110.0, 100.0, 500.0, 625.0, 900.0],
        }
    )
    got = bench_speedup(pts)
    assert list(got["concurrency"]) == [1, 8]  # 16 has no spec-off partner
    assert list(got["speedup"]) == pytest.approx([1.1, 0.8])
    assert bench_speedup(pd.DataFrame()).empty


@pytest.mark.parametrize(
    ("max_bs", "max_running", "label"),
    [(0, 64, "off"), (64, 64, "on"), (100, 64, "on"), (24, 64, "threshold 24"), (None, 64, "unknown")],
)
def test_knob_label(max_bs: int | None, max_running: int, label: str) -> None:
    assert knob_label(max_bs, max_running) == label


def test_bench_speedup_carries_the_sweeps_interval() -> None:
    points = pd.DataFrame(
        {
            "concurrency": [1, 1, 8, 8],
            "spec_on": [True, False, True, False],
            "output_throughput": [120.0, 100.0, 400.0, 500.0],
            "ratio_ci_lo": [1.1, 1.1, None, None],
            "ratio_ci_hi": [1.3, 1.3, None, None],
        }
    )
    curve = bench_speedup(points)
    assert list(curve["ci_lo"].isna()) == [False, True]  # an imported run has no interval: none is drawn
    assert curve.iloc[0][["speedup", "ci_lo", "ci_hi"]].tolist() == pytest.approx([1.2, 1.1, 1.3])


def test_live_crossover_metric_calls_only_a_range_its_95_interval() -> None:
    with_interval = SpeedupEstimate((), 21.0, 2.8, 28.0, "~21 (2.8-28)", 10.0, "found", 34)
    assert live_crossover_metric(with_interval) == ("~21", "95 % interval 2.8-28")
    without = SpeedupEstimate((), 2.8, None, None, f"~2.8 ({NO_INTERVAL_YET})", 10.0, "found", 2)
    assert live_crossover_metric(without) == ("~2.8", NO_INTERVAL_YET)
    pays = SpeedupEstimate((), None, 3.0, None, "> 4 (pays at every load seen)", 1.0, "none_in_range", 4)
    assert live_crossover_metric(pays) == ("> 4", "pays at every load seen")
    none = SpeedupEstimate((), None, None, None, "not enough data", 0.0, "no_data", 0)
    assert live_crossover_metric(none) == ("—", "not enough data")


def test_the_knob_says_who_set_it_and_a_policys_crossover() -> None:
    """learn's set reason carries the crossover it read, which counts the drain against drafting and can sit
    far below the live curve's: the Knob metric says whose value it shows and that crossover; nothing where
    the newest set is not what the knob reads now (moved outside spectower since, or never set)."""
    learn = {"actor": "policy:learn", "new_max_bs": 4, "reason": "move the ceiling 16 -> 4: crossover ~5.3 "
             "(1.6-8.8), speedup per bin 1: 1.05x; kept extend 7.4 % measured"}  # fmt: skip
    assert knob_setter(learn, 4) == ("policy:learn", "~5.3 (1.6-8.8)")
    assert knob_setter(learn, 16) is None and knob_setter(learn, None) is None
    assert knob_setter(None, 4) is None
    operator = {"actor": "operator:alice", "new_max_bs": 0, "reason": "incident: crossover 3"}
    assert knob_setter(operator, 0) == ("operator:alice", None)  # an operator's reason is theirs, not read
    assert knob_setter({**learn, "reason": "explore"}, 4) == ("policy:learn", None)


@pytest.mark.parametrize(
    "lo, hi, text",
    [
        (0.79, 1.64, "0.79-1.64"),
        (1.004, 1.08, "1.004-1.08"),  # "1.00-1.08" beside "is paying off" read as undecided
        (0.9962, 1.2, "0.996-1.20"),
        (0.8, 0.9996, "0.80-0.9996"),
        (1.0, 1.1, "1.00-1.10"),  # break-even itself stays at two decimals
    ],
)
def test_a_bound_next_to_break_even_shows_which_side_it_is_on(lo: float, hi: float, text: str) -> None:
    assert ratio_interval_text(lo, hi) == text
