"""collectors.sglang.counters with the counters' ``outside`` block (plugin 0.4.13 on: each mode's seconds
outside every step, before its steps): its per-interval deltas become rows of the modes
``storage.counter_modes.OUTSIDE_MODES`` (0 steps, 0 tokens, the seconds in ``time_s``) beside the decode
rows, summed over ranks; the real scraper and sink carry them into SQLite, where every decode read folds them
into the mode's step time exactly as ``engine_counters.with_outside`` folds learn's own intervals, so the
console, ``control get`` and learn's warm start read the rates learn reads."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from spectower.collectors.sglang.counters import CounterDeltas, CounterRow
from spectower.control import speedup
from spectower.plugin import engine_counters as ec
from spectower.storage import queries

from tests.test_sglang_counters import _counters, _doc, stored_documents


def test_outside_deltas_are_rows_beside_the_decode_rows_summed_over_ranks() -> None:
    r0, r1 = _counters(64), _counters(64)
    deltas = CounterDeltas()
    assert deltas.update(10.0, [r0.snapshot(), r1.snapshot()]) == []
    r0.record(16, True, 48, 0.010, outside_s=0.0004)
    r1.record(16, True, 40, 0.010, outside_s=0.0002)
    r1.record(48, False, 48, 0.008)  # no gap before it: no outside row for bin 48
    rows = deltas.update(15.0, [r0.snapshot(), r1.snapshot()])
    decode = [CounterRow(15.0, 16, "drafted", 2, 88, 0.02), CounterRow(15.0, 48, "gated", 1, 48, 0.008)]
    assert rows[:2] == decode
    outside = rows[2:3]
    assert [(r.batch_size, r.mode, r.steps, r.tokens) for r in outside] == [(16, "outside_drafted", 0, 0)]
    assert outside[0].time_s == pytest.approx(0.0006)
    # then plugin 0.4.15's slots (requests per step summed): 0 steps, no seconds
    assert rows[3:] == [CounterRow(15.0, 16, "slots_drafted", 0, 32, 0.0),
                        CounterRow(15.0, 48, "slots_gated", 0, 48, 0.0)]
    # a plugin before 0.4.13 publishes no block: the rows it always stored
    old = _counters(64)
    snap = {key: value for key, value in old.snapshot().items() if key not in ("outside", "slots", "mix")}
    plain = CounterDeltas()
    plain.update(10.0, [snap])
    old.record(16, True, 48, 0.010, outside_s=0.001)
    snap = {key: value for key, value in old.snapshot().items() if key not in ("outside", "slots", "mix")}
    assert [r.mode for r in plain.update(15.0, [snap])] == ["drafted"]


def _run(r0: ec.EngineCounters, r1: ec.EngineCounters, scale: float) -> None:
    """One scrape's worth of steps on both ranks: drafting at 16 pays 10 % on its spans, but spends a fifth
    of its step time again outside them (``scale``: 1 the first interval, 2 the second); gating at 16 none."""
    for rank in (r0, r1):
        for _ in range(50):
            rank.record(16, True, round(22 * scale), 0.010 * scale, outside_s=0.002 * scale)
            rank.record(16, False, round(20 * scale), 0.010 * scale)


def test_stored_intervals_fold_the_outside_seconds_as_learns_own_intervals_do(tmp_path: Path) -> None:
    """Three reads of a two-rank server through the real scraper and sink into SQLite: each stored interval is
    ``with_outside`` of the collector's own interval (the rates learn reads live), drafting at 16 reads
    1.1 / 1.2 of gating, not the 1.1 its spans alone say, and the estimate over the stored intervals is the
    estimate over the snapshots learn takes."""
    r0, r1 = _counters(64), _counters(64)
    snapshots: list[tuple[float, dict[str, Any]]] = []
    docs: list[dict[str, Any]] = []
    for k, scale in enumerate((0.0, 1.0, 2.0)):
        if scale:
            _run(r0, r1, scale)
        total = ec.sum_ranks([r0.snapshot(), r1.snapshot()])
        snapshots.append((1000.0 + 5.0 * k, total))
        docs.append(_doc(r0.snapshot(), r1.snapshot()))
    with stored_documents(tmp_path, docs) as (db, sid):
        stored = queries.counter_intervals(db, sid, 900.0, 1100.0)
        live = speedup.intervals_from_snapshots(snapshots)
        assert [i["ts"] for i in stored] == [i["ts"] for i in live] == [1005.0, 1010.0]
        for got, want in zip(stored, live, strict=True):
            assert got["bins"] == [16]  # stored: the bins that saw steps; live: every bin of the counters
            i = want["bins"].index(16)
            for mode in ec.MODES:
                assert "outside_s" not in got[mode] and "outside_s" not in want[mode]
                for key in ("steps", "tokens", "time_s", "tok_s", "step_s"):
                    assert got[mode][key] == [pytest.approx(want[mode][key][i])]
        drafted, gated = stored[0]["drafted"], stored[0]["gated"]
        assert drafted["time_s"] == pytest.approx([2 * 50 * 0.012])  # the spans' 0.010 and the 0.002 outside
        assert drafted["tok_s"][0] / gated["tok_s"][0] == pytest.approx(1.1 / 1.2, rel=0.01)
        est = speedup.estimate(stored)
        assert est == speedup.estimate(live)
        samples = queries.counter_samples(db, sid, 900.0, 1100.0)
        assert speedup.estimate_per_bin(samples.per_bin, samples.intervals) == est
        assert est.bins[0].speedup == pytest.approx(1.1 / 1.2, rel=0.01)


def test_control_gets_estimate_since_the_start_reads_the_outside_seconds_too() -> None:
    """``control get`` without stored counters estimates over the server's counters since it started: the
    same fold, so it tells the operator what learn and the console read (1.1 / 1.2 here, not 1.1)."""
    from types import SimpleNamespace

    from spectower.console.commands.control_get import speedup_of

    r0, r1 = _counters(64), _counters(64)
    _run(r0, r1, 1.0)
    state = SimpleNamespace(info=SimpleNamespace(info=_doc(r0.snapshot(), r1.snapshot())))
    got = speedup_of(state, None, 900.0)  # type: ignore[arg-type]
    assert got["source"] == "since_start"
    (row,) = [b for b in got["bins"] if b["batch_size"] == 16]
    assert row["speedup"] == pytest.approx(1.1 / 1.2, rel=0.01)
