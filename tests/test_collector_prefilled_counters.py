"""collectors.sglang.counters with the counters' ``prefilled`` block (plugin 0.4.14 on: each mode's steps
whose span held a prefill): its per-interval deltas become rows of the modes
``storage.counter_modes.PREFILLED_MODES`` beside the decode rows, summed over ranks; a plugin without the
block stores what it always did; through the real scraper and sink into SQLite, ``counter_intervals`` reads
them back as each interval's block and ``control.prefilled`` levels a drafting bin's explored gated steps to
the steady gated rate."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from spectower.collectors.sglang.counters import CounterDeltas, CounterRow
from spectower.control import speedup
from spectower.control.policy import learn_counters
from spectower.control.prefilled import levelled_intervals
from spectower.plugin import engine_counters as ec
from spectower.storage import queries

from tests.test_sglang_counters import _counters, _doc, stored_documents

P_DRAFTED, P_GATED = "prefilled_drafted", "prefilled_gated"


def _steps(c: ec.EngineCounters, batch: int, drafted: bool, n: int, tokens: int, step_s: float,
           every: int, prefill_s: float) -> None:
    """``n`` steps of one mode; every ``every``-th carries a prefill of ``prefill_s`` in its span."""
    for k in range(n):
        prefilled = every > 0 and k % every == every - 1
        c.record(batch, drafted, tokens, step_s + (prefill_s if prefilled else 0.0), prefilled=prefilled)


def test_prefilled_deltas_are_rows_beside_the_decode_rows_summed_over_ranks() -> None:
    r0, r1 = _counters(64), _counters(64)
    deltas = CounterDeltas()
    assert deltas.update(10.0, [r0.snapshot(), r1.snapshot()]) == []
    _steps(r0, 16, True, 4, 40, 0.01, every=2, prefill_s=0.004)
    _steps(r1, 16, False, 3, 16, 0.007, every=3, prefill_s=0.004)
    rows = deltas.update(15.0, [r0.snapshot(), r1.snapshot()])
    assert CounterRow(15.0, 16, P_DRAFTED, 2, 80, pytest.approx(0.028)) in rows  # type: ignore[arg-type]
    assert CounterRow(15.0, 16, P_GATED, 1, 16, pytest.approx(0.011)) in rows  # type: ignore[arg-type]
    assert {r.mode for r in rows} == {"drafted", "gated", P_DRAFTED, P_GATED, "slots_drafted", "slots_gated"}
    # nothing new: no rows
    assert deltas.update(20.0, [r0.snapshot(), r1.snapshot()]) == []
    # a plugin before 0.4.14 publishes no block: only the rows it always stored
    old = _counters(64)
    plain = CounterDeltas()
    snap = {key: value for key, value in old.snapshot().items() if key not in ("prefilled", "slots", "mix")}
    plain.update(10.0, [snap])
    _steps(old, 16, True, 4, 40, 0.01, every=2, prefill_s=0.004)
    snap = {key: value for key, value in old.snapshot().items() if key not in ("prefilled", "slots", "mix")}
    assert [r.mode for r in plain.update(15.0, [snap])] == ["drafted"]


def test_the_scraper_and_sink_store_prefilled_rows_that_level_the_explored_gated_rate(tmp_path: Path) -> None:
    """Under a ceiling of 16: a drafting bin 16 (40 tokens a 10-ms step) with explored gated steps (16 tokens
    a 7-ms step) among its steps, the drafting stream's prefills (5 ms each, the draft's pass too, one every 6
    steps: about 256 output tokens) in both; and bin 32 gated, a steady gated stream (32 tokens a 7.5-ms
    step, a 4-ms prefill every 8 steps). Read back from SQLite, each interval carries its ``prefilled`` block,
    and levelled as learn levels them (the gated stream's prefill seconds per token, from bin 32) the explored
    gated steps read the steady gated rate at 16, where their raw rate reads low."""
    r0 = _counters(64)
    docs: list[dict[str, Any]] = [_doc(r0.snapshot())]
    for _ in range(4):
        _steps(r0, 16, True, 640, 40, 0.010, every=6, prefill_s=0.005)
        _steps(r0, 16, False, 96, 16, 0.007, every=6, prefill_s=0.005)
        _steps(r0, 32, False, 400, 32, 0.0075, every=8, prefill_s=0.004)
        docs.append(_doc(r0.snapshot()))
    with stored_documents(tmp_path, docs) as (db, sid):
        intervals = queries.counter_intervals(db, sid, 900.0, 1100.0)
    assert len(intervals) == 4 and all("prefilled" in i for i in intervals)
    i16 = intervals[0]["bins"].index(16)
    assert [i["prefilled"]["drafted"]["steps"][i16] for i in intervals] == [106] * 4
    assert [i["prefilled"]["gated"]["steps"][i16] for i in intervals] == [16] * 4
    masks = [learn_counters.drafted_by(i["bins"], 16) for i in intervals]
    raw = next(b for b in speedup.estimate(intervals).bins if b.batch_size == 16).gated_tok_s
    levelled = next(b for b in speedup.estimate(levelled_intervals(intervals, masks)).bins
                    if b.batch_size == 16).gated_tok_s  # fmt: skip
    steady = 16 / (0.007 + 0.004 * 16 / 256)  # a gated stream: a 4-ms prefill per 256 tokens
    assert raw is not None and levelled is not None
    assert raw / steady < 0.97
    assert levelled / steady == pytest.approx(1.0, abs=0.01)
