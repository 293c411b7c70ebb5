"""collectors.sglang.counters with the counters' ``extend`` block (plugin 0.4.6 on: steady gated steps by
whether the draft model's KV extend ran): its per-interval deltas become rows of the modes
``storage.counter_modes.EXTEND_MODES`` beside the decode rows, summed over ranks, a rank's block that turns
malformed never stores a negative delta, and a plugin without the block stores what it always did; then the
scraper and the sink carry them into a real SQLite file, where ``extend_totals`` reads them back for
``control.kept_extend`` and the decode reads ignore them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from spectower.collectors.sglang.counters import CounterDeltas, CounterRow
from spectower.control import kept_extend
from spectower.plugin import engine_counters as ec
from spectower.storage import queries

from tests.test_sglang_counters import _counters, _doc, stored_documents

KEPT, SKIPPED = "extend_kept", "extend_skipped"


def _steady_gated(c: ec.EngineCounters, batch: int, n: int, kept: bool, tok_s: float) -> None:
    """``n`` steady gated steps of ``batch`` (the previous step gated too), 10 ms each at ``tok_s``; a first
    gated step before them so that every one of the ``n`` is steady."""
    if c._last_drafted is not False:
        c.record(batch, False, batch, 0.01)
    for _ in range(n):
        c.record(batch, False, round(tok_s * 0.01), 0.01, extend_kept=kept)


def test_extend_deltas_are_rows_beside_the_decode_rows_summed_over_ranks() -> None:
    r0, r1 = _counters(64), _counters(64)
    deltas = CounterDeltas()
    assert deltas.update(10.0, [r0.snapshot(), r1.snapshot()]) == []
    _steady_gated(r0, 24, 3, kept=True, tok_s=870.0)
    _steady_gated(r1, 24, 2, kept=False, tok_s=1000.0)
    r1.record(4, True, 12, 0.02)  # a drafted step: no extend row
    rows = deltas.update(15.0, [r0.snapshot(), r1.snapshot()])
    assert rows == [
        CounterRow(15.0, 4, "drafted", 1, 12, 0.02),
        CounterRow(15.0, 24, "gated", 7, 24 + 3 * 9 + 24 + 2 * 10, 0.07),
        CounterRow(15.0, 24, KEPT, 3, 27, 0.03),
        CounterRow(15.0, 24, SKIPPED, 2, 20, 0.02),
        CounterRow(15.0, 4, "slots_drafted", 0, 4, 0.0),  # plugin 0.4.15's slots: requests per step summed
        CounterRow(15.0, 24, "slots_gated", 0, 7 * 24, 0.0),
    ]
    # nothing new: no rows; only skipped steps: no kept row
    assert deltas.update(20.0, [r0.snapshot(), r1.snapshot()]) == []
    _steady_gated(r0, 48, 1, kept=False, tok_s=1000.0)
    modes = [r.mode for r in deltas.update(25.0, [r0.snapshot(), r1.snapshot()])]
    assert modes == ["gated", SKIPPED, "slots_gated"]


def test_a_rank_whose_extend_block_turns_malformed_stores_no_negative_delta() -> None:
    """``validate`` checks the decode counters, not the extend block: a rank whose block turned malformed
    stays in (its decode rows count) but leaves the extend sum, which goes down; that interval stores no
    extend row rather than a negative one. A plugin before 0.4.6 has no block: its rows are as they were."""
    r0, r1 = _counters(64), _counters(64)
    _steady_gated(r0, 24, 3, kept=True, tok_s=870.0)
    _steady_gated(r1, 24, 5, kept=True, tok_s=870.0)
    deltas = CounterDeltas()
    deltas.update(10.0, [r0.snapshot(), r1.snapshot()])
    _steady_gated(r0, 24, 1, kept=True, tok_s=870.0)
    broken = r1.snapshot()
    broken["extend"]["kept"]["steps"] = broken["extend"]["kept"]["steps"][:-1]
    assert ec.validate(broken) is None and ec.extend_block(broken) is None
    assert deltas.update(15.0, [r0.snapshot(), broken]) == [CounterRow(15.0, 24, "gated", 1, 9, 0.01),
                                                            CounterRow(15.0, 24, "slots_gated", 0, 24, 0.0)]
    old0, old1 = (_counters(64), _counters(64))
    plain = CounterDeltas()
    snaps = [old0.snapshot(), old1.snapshot()]
    for s in snaps:
        for block in ("extend", "slots", "mix"):  # blocks of later plugins
            del s[block]
    plain.update(10.0, snaps)
    _steady_gated(old0, 24, 2, kept=True, tok_s=870.0)
    snaps = [old0.snapshot(), old1.snapshot()]
    for s in snaps:
        for block in ("extend", "slots", "mix"):
            del s[block]
    assert [r.mode for r in plain.update(15.0, snaps)] == ["gated"]


def test_the_scraper_and_sink_store_extend_rows_that_extend_totals_reads(tmp_path: Path) -> None:
    """Three reads of a two-rank server whose gated bins 24 and 32 keep the draft extend on some steady
    steps (13 % slower) and skip it on others: the rows reach SQLite through the real scraper and sink, the
    decode intervals hold only the decode modes, and ``extend_totals`` sums the rest into a 13 % tax."""
    r0, r1 = _counters(64), _counters(64)
    docs: list[dict[str, Any]] = [_doc(r0.snapshot(), r1.snapshot())]
    for _ in range(2):
        for batch in (24, 32):
            _steady_gated(r0, batch, 40, kept=True, tok_s=8700.0)  # 87 tokens a step
            _steady_gated(r1, batch, 60, kept=False, tok_s=10_000.0)
        docs.append(_doc(r0.snapshot(), r1.snapshot()))
    with stored_documents(tmp_path, docs) as (db, sid):
        intervals = queries.counter_intervals(db, sid, 900.0, 1100.0)
        assert [i["ts"] for i in intervals] == [1005.0, 1010.0]
        # the first interval also has each rank's first gated step (not steady, so in no extend row)
        assert [i["gated"]["steps"] for i in intervals] == [[102, 100], [100, 100]]
        found = queries.extend_totals(db, sid, 900.0, 1100.0)
        assert found is not None
        bins, totals = found
        assert bins == [24, 32]
        assert totals["kept"]["steps"] == [80, 80] and totals["skipped"]["steps"] == [120, 120]
        tax = kept_extend.measure(bins, totals)
        assert tax is not None and tax.tax == pytest.approx(0.13)
        assert tax.label() == "13.0 % measured (bins 24-32, 160 steps with the extend)"
