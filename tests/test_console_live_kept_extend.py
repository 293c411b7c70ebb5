"""The console's live estimate (``console.data.live_speedup``, which ``control get --db`` shows too) corrects
the gated side of a bin that ran mostly drafted for the kept draft extend, as learn does: by the tax the
stored extend rows measure (plugin 0.4.6), else 7 %."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from spectower.console import data
from spectower.control.policy import learn_counters
from spectower.control.speedup import estimate_per_bin
from spectower.storage import open_database, queries
from spectower.storage.database import open_recorded

from tests.conftest import REPO_ROOT
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


REQUEST_MIX_DB = REPO_ROOT / "data/gpu-runs/h100-8b-pair-triton-request-mix-2026-12-06/runs/policy.db.xz"
# threshold:8 at a steady 16 on an H100 (plugin 0.4.15), from 10 s after its set: bin 16 gated, with two
# exploring parts' drafting in it whose requests held the low-accept kind more often than always on's
THRESHOLD_8 = (1796585443.18, 1796585675.96)


def test_a_gated_bins_explored_drafting_reads_as_learn_reads_it_levelled_for_the_parts_request_mix() -> None:
    """The console's live curve reads the stored 0.4.15 intervals as learn does (``as_choices``' drafting side
    of the same intervals under the run's ceiling): bin 16's explored drafted rate as measured, 0.942 of
    always on on 2026-12-06's H100 run. The window's H (2 parts, 30 requests, 2.609) read 5.3 % over the
    cell's accept per request, well inside its draw over 2 intervals (+-55 %: Student's t with one degree of
    freedom), so neither levels it; before that gate both read 1.053x the rate measured (0.992)."""
    t0, t1 = THRESHOLD_8
    with open_recorded(REQUEST_MIX_DB) as db:
        sid = queries.servers(db)[0].id
        assert sid is not None
        live = data.live_speedup(db, sid, t0, t1)
        intervals = queries.counter_intervals(db, sid, t0, t1)
    at_16 = {b.batch_size: b for b in live.estimate.bins}[16]
    assert at_16.ran_mostly == "gated"
    i = [list(x["bins"]).index(16) if 16 in x["bins"] else None for x in intervals]

    def drafted_rate(xs: list[dict[str, Any]]) -> float:
        cells = [(x["drafted"]["tokens"][k], x["drafted"]["time_s"][k]) for x, k in zip(xs, i, strict=True)
                 if k is not None]  # fmt: skip
        return sum(t for t, _ in cells) / sum(s for _, s in cells)

    masks = [learn_counters.drafted_by(list(x["bins"]), 8) for x in intervals]
    learn = drafted_rate(learn_counters.as_choices(intervals, masks, 1.0))
    assert at_16.drafted_tok_s == pytest.approx(learn, rel=1e-9)
    assert at_16.drafted_tok_s / drafted_rate(intervals) == pytest.approx(1.0)
