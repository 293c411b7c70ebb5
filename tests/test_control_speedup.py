"""The one speedup estimator (control/speedup.py): exact per-bin rates from constructed counters, the
batch-means interval, the crossover and its interval, restarts, DP ranks and bins that grew."""

from __future__ import annotations

import math
from typing import Any

import pytest
from spectower.control import speedup as sp
from spectower.plugin import engine_counters as ec


def _counters(max_running: int = 64, started_at: float = 1000.0) -> ec.EngineCounters:
    return ec.EngineCounters(max_running, clock=lambda: 0.0, wall=lambda: started_at)


def _run(c: ec.EngineCounters, speedups: dict[int, float], seconds: float = 1.0, wobble: float = 0.0) -> None:
    """One interval's steps: per bin, gated at 100 * b tok/s and drafted at speedup times that, each for
    ``seconds`` of step time; ``wobble`` scales the drafted tokens (noise between intervals)."""
    for b, s in speedups.items():
        gated = 100.0 * b
        c.record(b, False, round(gated * seconds), seconds)
        c.record(b, True, round(gated * s * seconds * (1.0 + wobble)), seconds)


def _series(speedups: dict[int, float], n: int, wobbles: list[float] | None = None) -> list[dict[str, Any]]:
    """``n`` consecutive intervals from one counters object snapshotted after each."""
    c = _counters()
    snaps = [(0.0, c.snapshot())]
    for i in range(n):
        _run(c, speedups, wobble=(wobbles[i % len(wobbles)] if wobbles else 0.0))
        snaps.append((float(i + 1), c.snapshot()))
    return sp.intervals_from_snapshots(snaps)


def _bin(est: sp.SpeedupEstimate, b: int) -> sp.BinEstimate:
    return next(x for x in est.bins if x.batch_size == b)


def test_exact_rates_from_one_interval_and_no_interval_yet() -> None:
    c = _counters()
    before = c.snapshot()
    c.record(4, True, 300, 0.5)  # 600 tok/s drafted
    c.record(4, True, 300, 0.5)
    c.record(4, False, 200, 1.0)  # 200 tok/s gated
    c.record(16, False, 50, 0.25)  # gated only: no speedup there
    est = sp.estimate([ec.rates(before, c.snapshot())])
    b4 = _bin(est, 4)
    assert (b4.drafted_tok_s, b4.gated_tok_s, b4.speedup) == (600.0, 200.0, 3.0)
    assert (b4.drafted_steps, b4.gated_steps) == (2, 1)
    assert b4.lo is None and b4.hi is None  # one interval: no variance yet
    b16 = _bin(est, 16)
    assert b16.gated_tok_s == 200.0 and b16.drafted_tok_s is None and b16.speedup is None
    assert [b.batch_size for b in est.bins] == [4, 16]
    assert est.seconds == pytest.approx(2.25)
    # one bin measured in both modes and paying: no crossover in range
    assert est.status == "none_in_range" and est.crossover is None
    assert est.label == "> 4 (pays at every load seen)"


def test_interval_is_the_batch_means_ratio_estimator() -> None:
    # Three intervals of bin 8: drafted (tokens, time) = (100, 1), (300, 2), (200, 1); gated (50, 1) each.
    c = _counters()
    snaps = [(0.0, c.snapshot())]
    for t, (tokens, seconds) in enumerate([(100, 1.0), (300, 2.0), (200, 1.0)], start=1):
        c.record(8, True, tokens, seconds)
        c.record(8, False, 50, 1.0)
        snaps.append((float(t), c.snapshot()))
    b8 = _bin(sp.estimate(sp.intervals_from_snapshots(snaps)), 8)
    r_d, r_g = 600 / 4, 50.0
    var_d = ((100 - r_d * 1) ** 2 + (300 - r_d * 2) ** 2 + (200 - r_d * 1) ** 2) / (3 * 2 * (4 / 3) ** 2)
    var_g = 0.0
    # three batch means: Student's t with 2 degrees of freedom (4.30), not the normal 1.96
    half = 4.30 * math.sqrt(var_d / r_d**2 + var_g / r_g**2)
    assert b8.intervals == 3
    assert b8.speedup == pytest.approx(r_d / r_g)
    assert b8.lo == pytest.approx(r_d / r_g * math.exp(-half))
    assert b8.hi == pytest.approx(r_d / r_g * math.exp(half))


def test_fewer_than_three_intervals_give_no_interval() -> None:
    c = _counters()
    snaps = [(0.0, c.snapshot())]
    for t in (1, 2):
        c.record(8, True, 100 * t, 1.0)
        c.record(8, False, 50, 1.0)
        snaps.append((float(t), c.snapshot()))
    b8 = _bin(sp.estimate(sp.intervals_from_snapshots(snaps)), 8)
    assert b8.speedup == pytest.approx(3.0) and b8.intervals == 2
    assert (b8.lo, b8.hi) == (None, None)


def test_interval_shrinks_with_more_intervals() -> None:
    wobbles = [0.1, -0.1, 0.05, -0.05]
    widths = []
    for n in (4, 16, 64):
        b = _bin(sp.estimate(_series({8: 1.5}, n, wobbles)), 8)
        assert b.lo is not None and b.hi is not None and b.speedup is not None
        assert b.lo < b.speedup < b.hi
        assert b.speedup == pytest.approx(1.5, rel=1e-3)
        widths.append(math.log(b.hi / b.lo))
    assert widths[0] > widths[1] > widths[2]
    # batch means: the width falls about as 1 / sqrt(n)
    assert widths[1] / widths[2] == pytest.approx(2.0, rel=0.2)


def test_crossover_within_its_interval_and_where_the_fit_falls_through_one() -> None:
    truth = {1: 2.2, 2: 2.0, 4: 1.7, 8: 1.3, 16: 1.1, 32: 0.8, 64: 0.6}
    est = sp.estimate(_series(truth, 8, [0.08, -0.06, 0.03, -0.05, 0.0]))
    assert est.status == "found" and est.crossover is not None
    assert est.crossover_lo is not None and est.crossover_hi is not None
    assert est.crossover_lo <= est.crossover <= est.crossover_hi
    assert 16 < est.crossover < 32
    # linear in log batch size between 16 (1.1) and 32 (0.8), the sweep's rule
    expected = math.exp(math.log(16) + (1.1 - 1.0) / (1.1 - 0.8) * math.log(2))
    assert est.crossover == pytest.approx(expected, rel=0.05)
    assert est.label.startswith("~") and "(" in est.label
    assert est.intervals == 8


def test_a_noisy_low_bin_does_not_become_the_crossover() -> None:
    # Bin 2 dips below 1 on few intervals; the non-increasing weighted fit keeps it from being the crossover.
    c = _counters()
    s0 = c.snapshot()
    _run(c, {1: 1.8, 4: 1.6, 8: 1.4, 16: 1.2, 32: 0.7}, seconds=5.0)
    c.record(2, True, 190, 1.0)
    c.record(2, False, 200, 1.0)
    est = sp.estimate([ec.rates(s0, c.snapshot())])
    assert est.crossover is not None and est.crossover > 16


def test_below_range_and_no_data_labels() -> None:
    est = sp.estimate(_series({2: 0.9, 4: 0.8}, 3))
    assert est.status == "below_range" and est.crossover is None
    assert est.label == "< 2 (loses at every load seen)"
    empty = sp.estimate([])
    assert empty.status == "no_data" and empty.label == "not enough data" and empty.bins == ()
    c = _counters()
    s0 = c.snapshot()
    c.record(4, True, 10, 0.1)  # drafted only
    assert sp.estimate([ec.rates(s0, c.snapshot())]).label == "not enough data"


def test_restart_in_between_counts_from_zero() -> None:
    a = _counters(started_at=1000.0)
    s0 = a.snapshot()
    _run(a, {4: 2.0})
    s1 = a.snapshot()
    b = _counters(started_at=2000.0)  # the server restarted: counters start over
    _run(b, {4: 1.0}, seconds=0.5)
    s2 = b.snapshot()
    intervals = sp.intervals_from_snapshots([(2.0, s2), (0.0, s0), (1.0, s1)])  # any order in
    assert [i["ts"] for i in intervals] == [1.0, 2.0]
    assert [i["restarted"] for i in intervals] == [False, True]
    # the new process's own count, never negative
    assert intervals[1]["drafted"]["tokens"][intervals[1]["bins"].index(4)] == 200
    b4 = _bin(sp.estimate(intervals), 4)
    # drafted: (800 + 200) tokens over 1.5 s; gated: (400 + 200) over 1.5 s
    assert b4.speedup == pytest.approx(1000 / 600)
    assert b4.drafted_steps == 2 and b4.gated_steps == 2


def test_dp_ranks_sum_on_the_union_of_their_bins() -> None:
    r0 = _counters(4)
    r1 = _counters(8)  # a rank whose bins grew further
    r0.record(4, True, 40, 0.1)
    r1.record(4, True, 60, 0.2)
    r1.record(8, False, 80, 0.4)
    r0.dropped, r1.unmatched = 1, 2
    total = ec.sum_ranks([r0.snapshot(), r1.snapshot()])
    assert ec.validate(total) is None
    assert total["bins"] == [1, 2, 3, 4, 6, 8]
    assert total["drafted"]["tokens"] == [0, 0, 0, 100, 0, 0]
    assert total["drafted"]["time_s"] == [0, 0, 0, pytest.approx(0.3), 0, 0]
    assert total["gated"]["steps"] == [0, 0, 0, 0, 0, 1]
    assert (total["dropped"], total["unmatched"], total["ranks"]) == (1, 2, 2)
    est = sp.estimate([ec.rates(None, total)])
    assert _bin(est, 4).drafted_tok_s == pytest.approx(100 / 0.3)
    with pytest.raises(ValueError):
        ec.sum_ranks([])


def test_bins_that_grew_between_intervals_line_up_by_batch_size() -> None:
    c = _counters(8)
    s0 = c.snapshot()
    _run(c, {8: 1.5})
    s1 = c.snapshot()
    _run(c, {8: 1.5, 32: 0.5})  # a larger batch grows the bins to 32
    s2 = c.snapshot()
    assert s1["bins"] == [1, 2, 3, 4, 6, 8] and s2["bins"] == [1, 2, 3, 4, 6, 8, 12, 16, 24, 32]
    est = sp.estimate(sp.intervals_from_snapshots([(0.0, s0), (1.0, s1), (2.0, s2)]))
    assert [b.batch_size for b in est.bins] == [8, 32]
    assert _bin(est, 8).drafted_steps == 2 and _bin(est, 32).drafted_steps == 1
    assert _bin(est, 8).speedup == pytest.approx(1.5) and _bin(est, 32).speedup == pytest.approx(0.5)
    assert est.crossover is not None and 8 < est.crossover < 32


def test_a_bin_says_which_mode_it_ran_mostly() -> None:
    # 2 % of a gated bin's batches explored drafting: its drafted rate comes from inside a gated stream
    c = _counters()
    before = c.snapshot()
    for _ in range(49):
        c.record(48, False, 48, 0.006)
    c.record(48, True, 130, 0.014)
    for _ in range(49):
        c.record(8, True, 20, 0.005)
    c.record(8, False, 8, 0.004)
    for drafted in (True, False):  # a move inside the window: both modes in bulk
        for _ in range(5):
            c.record(16, drafted, 30 if drafted else 16, 0.006)
    c.record(24, False, 24, 0.005)  # one mode only
    est = sp.estimate([ec.rates(before, c.snapshot())])
    assert _bin(est, 48).ran_mostly == "gated"
    assert _bin(est, 8).ran_mostly == "drafted"
    assert _bin(est, 16).ran_mostly is None
    assert _bin(est, 24).ran_mostly == "gated"
    assert {b["batch_size"]: b["ran_mostly"] for b in est.to_json()["bins"]}[48] == "gated"


def test_to_json_is_plain() -> None:
    import json

    est = sp.estimate(_series({4: 1.5, 16: 0.9}, 3, [0.05, -0.05]))
    doc = json.loads(json.dumps(est.to_json()))
    assert doc["label"] == est.label and doc["bins"][0]["batch_size"] == 4
    assert doc["crossover"] == pytest.approx(est.crossover)


def test_sum_ranks_tolerates_bad_diagnostics() -> None:
    snap = _counters().snapshot()
    snap.update(started_at="yesterday", unmatched="many", dropped=float("nan"))
    total = ec.sum_ranks([snap, _counters(started_at=7.0).snapshot()])
    assert (total["started_at"], total["unmatched"], total["dropped"]) == (7.0, 0, 0)


def test_served_counts_both_modes_bins_and_the_settling_steps_over_ranks() -> None:
    one, two = _counters(), _counters()
    one.record(4, True, 12, 0.005)
    one.record(20, False, 20, 0.004)
    two.record(4, True, 9, 0.003, settling=True)  # in no bin, served all the same
    total = ec.sum_ranks([one.snapshot(), two.snapshot()])
    assert ec.served(total) == pytest.approx({"steps": 3.0, "tokens": 41.0, "time_s": 0.012})


def _partial_series(
    full: dict[int, float], partial: dict[int, float], n: int, n_partial: int
) -> list[dict[str, Any]]:
    """``n`` intervals of the ``full`` bins (wobbling drafted tokens) and the ``partial`` bins in only the
    first ``n_partial`` of them."""
    wobbles = [0.06, -0.04, 0.02, -0.05, 0.03, -0.01]
    c = _counters()
    snaps = [(0.0, c.snapshot())]
    for i in range(n):
        _run(c, full, wobble=wobbles[i % len(wobbles)])
        if i < n_partial:
            _run(c, partial, wobble=wobbles[i % len(wobbles)])
        snaps.append((float(i + 1), c.snapshot()))
    return sp.intervals_from_snapshots(snaps)


def test_a_crossover_with_no_bins_interval_yet_has_no_interval_and_says_so() -> None:
    # two intervals: every bin has a speedup, none an interval (the demo's first minute read "2.8 (2.8-2.8)")
    est = sp.estimate(_series({1: 1.5, 2: 1.2, 4: 0.8, 8: 0.6}, 2, [0.05, -0.05]))
    assert all(b.lo is None and b.hi is None for b in est.bins)
    assert est.status == "found" and est.crossover is not None and 2 < est.crossover < 4
    assert (est.crossover_lo, est.crossover_hi) == (None, None)
    assert est.label == f"~{est.crossover:.1f} ({sp.NO_INTERVAL_YET})"


def test_a_bin_without_an_interval_is_as_uncertain_as_the_least_certain_bin_with_one() -> None:
    # bins 2 and 8 in six intervals, bin 4 (where the curve falls through 1.0) in two: no interval of its own
    est = sp.estimate(_partial_series({2: 1.3, 8: 0.7}, {4: 0.97}, 6, 2))
    b2, b4, b8 = (_bin(est, b) for b in (2, 4, 8))
    assert b4.lo is None and b4.intervals == 2
    assert b2.lo is not None and b2.hi is not None and b8.lo is not None and b8.hi is not None
    assert est.status == "found" and est.crossover is not None and 2 < est.crossover < 4
    assert est.crossover_lo is not None and est.crossover_hi is not None
    # bin 4 stands within the widest of bins 2 and 8's intervals: on the optimistic curve above 1.0, so the
    # interval reaches past it (at its point estimate alone it ended below 4, as the point estimate does)
    assert b4.speedup is not None
    spread = max(math.log(b.hi / b.lo) / 2 for b in (b2, b8) if b.hi is not None and b.lo is not None)
    assert b4.speedup * math.exp(spread) > 1.0
    assert est.crossover_hi > 4
    assert est.crossover_lo <= est.crossover < est.crossover_hi
