"""control/kept_extend.py: the kept extend's tax from the counters' extend block, per bin and pooled."""

from __future__ import annotations

import math

import pytest
from spectower.control import kept_extend
from spectower.plugin import engine_counters as ec

BINS = [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64]


def interval(per_bin: dict[int, tuple[int, float, int, float]], bins: list[int] = BINS) -> dict:
    """A rates()-shaped interval with only an extend block: bin -> (kept steps, kept s/token, skipped
    steps, skipped s/token), each step of ``b`` tokens."""
    block = {k: {f: [0.0] * len(bins) for f in ec.FIELDS} for k in ec.EXTEND_KINDS}
    for b, (kn, kt, sn, st) in per_bin.items():
        i = bins.index(b)
        for kind, n, per_token in (("kept", kn, kt), ("skipped", sn, st)):
            block[kind]["steps"][i] = n
            block[kind]["tokens"][i] = n * b
            block[kind]["time_s"][i] = n * b * per_token
    return {"bins": list(bins), "extend": block}


def test_a_bins_tax_is_one_less_the_ratio_of_its_rates() -> None:
    found = kept_extend.from_intervals([interval({32: (100, 1.15e-3, 900, 1e-3)})])
    assert found is not None
    assert found.tax == pytest.approx(1 - 1 / 1.15)
    assert [b.batch_size for b in found.bins] == [32]
    assert found.label() == f"{100 * (1 - 1 / 1.15):.1f} % measured (bin 32, 100 steps with the extend)"


def test_bins_pool_as_a_geometric_mean_weighted_by_the_scarcer_side() -> None:
    found = kept_extend.from_intervals(
        [interval({32: (100, 1.10e-3, 900, 1e-3), 48: (300, 1.20e-3, 200, 1e-3)})]
    )
    assert found is not None
    # weights 100 and 200 (the scarcer side of each)
    expected = 1 - math.exp((100 * math.log(1 / 1.10) + 200 * math.log(1 / 1.20)) / 300)
    assert found.tax == pytest.approx(expected)
    assert found.steps == 400


def test_intervals_sum_before_the_ratio_across_growing_bins() -> None:
    """Two intervals of 40 kept steps each make one bin of 80 (past MIN_STEPS); the later one has more
    bins."""
    first = interval({16: (40, 1.1e-3, 100, 1e-3)}, BINS[:-1])
    second = interval({16: (40, 1.1e-3, 100, 1e-3), 64: (10, 1e-3, 10, 1e-3)})
    found = kept_extend.from_intervals([first, second])
    assert found is not None and [b.batch_size for b in found.bins] == [16]
    assert found.bins[0].kept_steps == 80 and found.tax == pytest.approx(1 - 1 / 1.1)
    assert kept_extend.from_intervals([first]) is None  # 40 kept steps: too few


def test_nothing_measured_without_both_sides_or_without_the_block() -> None:
    assert kept_extend.from_intervals([interval({32: (500, 1.1e-3, 0, 0.0)})]) is None
    assert kept_extend.from_intervals([{"bins": BINS}]) is None
    assumed = (0.07, "kept extend 7 % assumed (none measured)")
    assert kept_extend.or_assumed(kept_extend.from_intervals([{"bins": BINS}])) == assumed
    assert kept_extend.or_assumed(None, 0.05) == (0.05, "kept extend 5 % assumed (none measured)")
    assert kept_extend.from_totals(None) is None


def test_the_tax_is_clamped_to_zero_and_below_learns_limit() -> None:
    faster = kept_extend.from_intervals([interval({32: (100, 0.9e-3, 100, 1e-3)})])
    assert faster is not None and faster.tax == 0.0
    dearer = kept_extend.from_intervals([interval({32: (100, 3e-3, 100, 1e-3)})])
    assert dearer is not None and dearer.tax == pytest.approx(kept_extend.MAX_TAX)
