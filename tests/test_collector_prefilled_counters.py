"""collectors.sglang.counters with the counters' ``prefilled`` block (plugin 0.4.14 on: each mode's steps
whose span held a prefill): its per-interval deltas become rows of the modes
``storage.counter_modes.PREFILLED_MODES`` beside the decode rows, summed over ranks; a plugin without the
block stores what it always did; through the real scraper and sink into SQLite, ``prefilled_totals`` reads
them back and ``control.prefilled`` levels a drafting bin's explored gated steps to the steady gated rate."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from spectower.collectors.sglang.counters import CounterDeltas, CounterRow
from spectower.control.prefilled import ModeSteps, levelled_tok_s, prefill_s_per_token
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
    assert {r.mode for r in rows} == {"drafted", "gated", P_DRAFTED, P_GATED}
    # nothing new: no rows
    assert deltas.update(20.0, [r0.snapshot(), r1.snapshot()]) == []
    # a plugin before 0.4.14 publishes no block: only the rows it always stored
    old = _counters(64)
    plain = CounterDeltas()
    snap = old.snapshot()
    del snap["prefilled"]
    plain.update(10.0, [snap])
    _steps(old, 16, True, 4, 40, 0.01, every=2, prefill_s=0.004)
    snap = old.snapshot()
    del snap["prefilled"]
    assert [r.mode for r in plain.update(15.0, [snap])] == ["drafted"]


def test_the_scraper_and_sink_store_prefilled_rows_that_level_the_explored_gated_rate(tmp_path: Path) -> None:
    """A drafting bin 16 (40 tokens a 10-ms step) with explored gated steps (16 tokens a 7-ms step) among its
    steps, and a prefill of 4 ms per 256 output tokens in the stream: the drafting stream's steps carry one
    every 6.4 steps, its explored gated steps as many. Read back from SQLite, the gated steps level to the
    steady gated stream's rate (one prefill per 16 steps), where their raw rate reads low."""
    r0 = _counters(64)
    docs: list[dict[str, Any]] = [_doc(r0.snapshot())]
    for _ in range(2):
        _steps(r0, 16, True, 640, 40, 0.010, every=6, prefill_s=0.004)  # ~256/40 steps a prefill
        _steps(r0, 16, False, 96, 16, 0.007, every=6, prefill_s=0.004)
        docs.append(_doc(r0.snapshot()))
    with stored_documents(tmp_path, docs) as (db, sid):
        found = queries.prefilled_totals(db, sid, 900.0, 1100.0)
        assert found is not None
        bins, block = found
        assert bins == [16] and block["drafted"]["steps"] == [2 * 106] and block["gated"]["steps"] == [2 * 16]
        intervals = queries.counter_intervals(db, sid, 900.0, 1100.0)
        modes = {}
        for mode in ("drafted", "gated"):
            steps, tokens, seconds = (sum(i[mode][key][i["bins"].index(16)] for i in intervals)
                                      for key in ("steps", "tokens", "time_s"))  # fmt: skip
            modes[mode] = ModeSteps(steps, tokens, seconds, *(block[mode][key][0]
                                                              for key in ("steps", "tokens", "time_s")))
        per_token = prefill_s_per_token(list(modes.values()))
        assert per_token is not None
        steady = 16 / (0.007 + 0.004 / 16)  # a gated stream: a prefill per 256 tokens, 16 steps
        raw = modes["gated"].tokens / modes["gated"].time_s
        assert raw / steady < 0.97
        assert (levelled_tok_s(modes["gated"], per_token) or 0) / steady == pytest.approx(1.0, abs=0.01)
