"""Ratio intervals, the crossover and the best knob value."""

from __future__ import annotations

import math
import random

import pytest
from spectower.collectors.bench.ratio import (
    RatioPoint,
    best_knob,
    find_crossover,
    paired_ratio_interval,
    ratio_interval,
)


def test_ratio_interval_contains_the_ratio_and_narrows_with_more_windows() -> None:
    rng = random.Random(0)
    on = [110 * (1 + 0.05 * rng.gauss(0, 1)) for _ in range(5)]
    off = [100 * (1 + 0.05 * rng.gauss(0, 1)) for _ in range(5)]
    r, lo, hi = ratio_interval(on, off)
    assert lo < r < hi
    assert r == pytest.approx(sum(on) / sum(off))
    on20 = [110 * (1 + 0.05 * rng.gauss(0, 1)) for _ in range(20)]
    off20 = [100 * (1 + 0.05 * rng.gauss(0, 1)) for _ in range(20)]
    _, lo20, hi20 = ratio_interval(on20, off20)
    assert hi20 - lo20 < hi - lo


def test_ratio_interval_coverage_is_about_95_percent() -> None:
    rng = random.Random(1)
    hits = 0
    trials = 400
    for _ in range(trials):
        on = [120 * (1 + 0.1 * rng.gauss(0, 1)) for _ in range(6)]
        off = [100 * (1 + 0.1 * rng.gauss(0, 1)) for _ in range(6)]
        _, lo, hi = ratio_interval(on, off)
        hits += lo <= 1.2 <= hi
    assert 0.88 <= hits / trials <= 0.995


def test_ratio_interval_refuses_empty_or_zero() -> None:
    with pytest.raises(ValueError):
        ratio_interval([], [1.0])
    with pytest.raises(ValueError):
        ratio_interval([0.0, 0.0], [1.0, 1.0])


def test_paired_ratio_sees_through_drift_that_hides_the_ratio_of_means() -> None:
    # each pair's halves share a drift of +-20 % (the prompts' acceptance, the machine's state), the
    # servers differ by 3 %: pairing keeps the 3 % and a tight interval, the ratio of means loses it
    rng = random.Random(2)
    drifts = [1 + 0.2 * rng.uniform(-1, 1) for _ in range(8)]
    on = [0.97 * 100 * d * (1 + 0.005 * rng.gauss(0, 1)) for d in drifts]
    off = [100 * d * (1 + 0.005 * rng.gauss(0, 1)) for d in drifts]
    _, lo, hi = paired_ratio_interval(on, off)
    assert lo < 0.97 < hi and hi - lo < 0.02
    _, means_lo, means_hi = ratio_interval(on, off)
    assert means_hi - means_lo > 5 * (hi - lo)


def test_paired_ratio_moves_little_for_one_pair_with_one_fast_half() -> None:
    on = [100.0] * 12
    off = [100.0] * 11 + [150.0]  # one round where only one server ran 1.5x its others
    r, lo, hi = paired_ratio_interval(on, off)
    assert r == pytest.approx(math.exp(math.log(100 / 150) / 12))  # about 0.967
    means, _, _ = ratio_interval(on, off)
    assert means < r  # the ratio of means pays the whole 50 tok/s of that one round: about 0.961
    assert lo < r < hi


def test_paired_ratio_coverage_is_about_95_percent() -> None:
    rng = random.Random(3)
    trials, hits = 400, 0
    for _ in range(trials):
        drifts = [1 + 0.3 * rng.uniform(-1, 1) for _ in range(6)]
        on = [1.2 * 100 * d * (1 + 0.05 * rng.gauss(0, 1)) for d in drifts]
        off = [100 * d * (1 + 0.05 * rng.gauss(0, 1)) for d in drifts]
        _, lo, hi = paired_ratio_interval(on, off)
        hits += lo <= 1.2 <= hi
    assert 0.88 <= hits / trials <= 0.995


def test_paired_ratio_refuses_unpaired_empty_or_zero() -> None:
    with pytest.raises(ValueError, match="as many values on each side"):
        paired_ratio_interval([1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match="at least one pair"):
        paired_ratio_interval([], [])
    with pytest.raises(ValueError, match="positive"):
        paired_ratio_interval([1.0, 0.0], [1.0, 1.0])
    assert paired_ratio_interval([2.0], [1.0]) == (2.0, 2.0, 2.0)


def _pts(cs, rs, half=0.02):
    return [RatioPoint(c, r, r * (1 - half), r * (1 + half)) for c, r in zip(cs, rs, strict=True)]


def test_crossover_interpolates_in_log_concurrency() -> None:
    cs = [1, 2, 4, 8, 16, 32]
    rs = [1.07, 1.07, 1.06, 1.034, 0.995, 0.9]
    cross = find_crossover(_pts(cs, rs))
    assert cross.status == "found" and cross.bracket == (8, 16)
    expected = math.exp(math.log(8) + (0.034 / 0.039) * math.log(2))
    assert cross.value == pytest.approx(expected)
    assert cross.lo is not None and cross.hi is not None
    assert cross.lo <= cross.value <= cross.hi
    assert cross.lo >= 8 and cross.hi <= 32
    assert best_knob(cross, 64) == math.floor(expected)


def test_no_crossover_in_range_means_always_on() -> None:
    cross = find_crossover(_pts([1, 8, 64], [2.3, 2.1, 1.38]))
    assert cross.status == "none_in_range" and cross.value is None
    assert "none in range" in cross.describe()
    assert best_knob(cross, 48) == 48


def test_losing_everywhere_means_off() -> None:
    cross = find_crossover(_pts([1, 8], [0.9, 0.8]))
    assert cross.status == "below_range"
    assert best_knob(cross, 48) == 0


def test_crossover_order_does_not_matter() -> None:
    pts = _pts([16, 1, 8], [0.9, 1.1, 1.05])
    assert find_crossover(pts).bracket == (8, 16)


def test_one_noisy_low_point_is_not_the_crossover() -> None:
    """Ratios from a real H200 sweep (6 s windows): a noisy dip at C=2 is not the crossover."""
    from spectower.collectors.bench.ratio import RatioPoint, find_crossover, monotone_decreasing

    measured = [
        (1, 1.0895, 1.0261, 1.1567),
        (2, 0.9387, 0.8215, 1.0726),
        (4, 1.0434, 0.9743, 1.1174),
        (8, 1.0959, 0.9222, 1.3025),
        (16, 0.9577, 0.7524, 1.2190),
        (32, 0.7670, 0.6522, 0.9021),
    ]
    found = find_crossover([RatioPoint(c, r, lo, hi) for c, r, lo, hi in measured])
    assert found.status == "found"
    assert found.bracket == (8, 16)
    assert 8 < (found.value or 0) < 16
    fitted = monotone_decreasing([3.0, 1.0, 2.0, 0.5], [1.0, 1.0, 1.0, 1.0])
    assert fitted == [3.0, 1.5, 1.5, 0.5]
