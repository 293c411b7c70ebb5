"""The console's live estimate (``console.data.live_speedup``, which ``control get --db`` shows too) corrects
the gated side of a bin that ran mostly drafted for the kept draft extend, as learn does: by the tax the
stored extend rows measure (plugin 0.4.6), else 7 %."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from spectower.console import data
from spectower.control.speedup import estimate_per_bin
from spectower.storage import open_database, queries

from tests.test_warm_start import store_counters

URL = "http://sglang.test:30000"
# bin 8 drafts (its gated side explored, with the extend), bin 32 gates (warm and cold steps: the tax)
CURVE = {8: (1.10, True), 32: (0.80, False)}


def _live(tmp_path: Path, extend_tax: float | None) -> tuple[data.LiveSpeedup, dict[int, float]]:
    now = time.time()
    db_path = tmp_path / f"live-{extend_tax}.db"
    store_counters(db_path, URL, CURVE, end=now, extend_tax=extend_tax)
    with open_database(db_path) as db:
        sid = queries.server_by_url(db, URL).id
        assert sid is not None
        live = data.live_speedup(db, sid, now - 300, now)
        samples = queries.counter_samples(db, sid, now - 300, now)
    raw = {b.batch_size: b.speedup for b in estimate_per_bin(samples.per_bin, samples.intervals).bins}
    return live, {b: s for b, s in raw.items() if s is not None}


@pytest.mark.parametrize(
    ("extend_tax", "tax", "text"),
    [
        (0.12, 0.12, "kept extend 12.0 % measured (bin 32, 240 steps with the extend)"),
        (None, 0.07, "kept extend 7 % assumed (none measured)"),
    ],
)
def test_a_drafting_bins_gated_side_is_corrected_by_the_measured_tax(
    tmp_path: Path, extend_tax: float | None, tax: float, text: str
) -> None:
    live, raw = _live(tmp_path, extend_tax)
    by_bin = {b.batch_size: b for b in live.estimate.bins}
    assert live.corrected_bins == (8,) and live.kept_extend == text
    assert by_bin[8].speedup == pytest.approx(raw[8] * (1 - tax), rel=1e-6)
    assert by_bin[32].speedup == pytest.approx(raw[32], rel=1e-9)  # a gated bin's gated side is its cold one
    assert (live.tax_measured is not None) == (extend_tax is not None)
