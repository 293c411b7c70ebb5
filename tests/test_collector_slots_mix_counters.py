"""collectors.sglang.counters with the counters' ``slots`` and ``mix`` blocks (plugin 0.4.15 on: each mode's
batch sizes of its counted steps summed, the exploring parts' request mix): their per-interval deltas become
rows of the modes ``storage.counter_modes.SLOTS_MODES`` (0 steps, the slots in ``tokens``, 0 seconds) and
``MIX_MODES`` (per bin ``mix_accept``: the parts, their requests and the sum of their accepts;
``mix_inverse``: the sum of the inverses) beside the decode rows, summed over ranks, never negative; a plugin
without the blocks stores what it always did; through the real scraper and sink the stored rows hold
``rates()``'s values exactly."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from spectower.collectors.sglang.counters import CounterDeltas, CounterRow
from spectower.plugin import engine_counters as ec
from spectower.storage.counter_modes import MIX_MODES, MIX_ROWS, SLOTS_MODES
from sqlalchemy import text

from tests.test_part_mix import Req
from tests.test_sglang_counters import _counters, _doc, stored_documents

LIST_MODES = {*SLOTS_MODES.values(), *MIX_ROWS}


def _part(c: ec.EngineCounters, accepts: list[float], verifies: int = 3) -> None:
    """One exploring part whose first batch holds a request of each of ``accepts`` (tokens a verify)."""
    reqs = [Req(a) for a in accepts]
    c.part_mix.batch(True, True, len(reqs), lambda: reqs)
    for _ in range(verifies):
        for req in reqs:
            req.verify()
    c.part_mix.batch(False, False, len(reqs), lambda: reqs)


def test_slots_and_mix_deltas_are_rows_beside_the_decode_rows_summed_over_ranks() -> None:
    r0, r1 = _counters(64), _counters(64)
    deltas = CounterDeltas()
    assert deltas.update(10.0, [r0.snapshot(), r1.snapshot()]) == []
    r0.record(30, True, 90, 0.02)  # bin 32: 30 requests
    r1.record(32, True, 96, 0.02)
    r1.record(12, False, 12, 0.01)
    _part(r0, [4.0, 4.0, 2.0, 2.0] * 7)  # 28 requests: bin 32
    _part(r1, [4.0, 2.0] * 16)  # 32 requests: bin 32
    rows = deltas.update(15.0, [r0.snapshot(), r1.snapshot()])
    assert [r for r in rows if r.mode in LIST_MODES] == [
        CounterRow(15.0, 32, "slots_drafted", 0, 62, 0.0),
        CounterRow(15.0, 12, "slots_gated", 0, 12, 0.0),
        CounterRow(15.0, 32, "mix_accept", 2, 60, 180.0),  # 30 at 4, 30 at 2
        CounterRow(15.0, 32, "mix_inverse", 0, 0, 22.5),  # 30 / 4 + 30 / 2
    ]
    assert [r.mode for r in rows if r.mode not in LIST_MODES] == ["drafted", "gated"]
    # each mix field sits where MIX_MODES says
    interval = ec.rates(r0.snapshot(), r0.snapshot())
    assert not any(sum(v) for v in interval["mix"].values())
    assert {field: column for field, (_, column) in MIX_MODES.items()} == {
        "parts": "steps", "requests": "tokens", "accept_sum": "time_s", "inverse_sum": "time_s",
    }  # fmt: skip
    # nothing new: no rows
    assert deltas.update(20.0, [r0.snapshot(), r1.snapshot()]) == []
    # a plugin before 0.4.15 publishes neither block: only the rows it always stored
    old = _counters(64)
    plain = CounterDeltas()
    plain.update(10.0, [{k: v for k, v in old.snapshot().items() if k not in ("slots", "mix")}])
    old.record(16, True, 40, 0.01)
    _part(old, [3.0] * 16)
    snap = {k: v for k, v in old.snapshot().items() if k not in ("slots", "mix")}
    assert [r.mode for r in plain.update(15.0, [snap])] == ["drafted"]


def test_a_rank_whose_mix_block_turns_malformed_stores_no_negative_row() -> None:
    """``validate`` checks the decode counters, not the optional blocks: a rank whose mix block turns
    malformed stays in (its decode rows count) but leaves the mix's sum, which goes down: no mix row, none
    negative."""
    r0, r1 = _counters(64), _counters(64)
    _part(r0, [4.0, 2.0] * 8)
    _part(r1, [4.0, 2.0] * 8)
    deltas = CounterDeltas()
    deltas.update(10.0, [r0.snapshot(), r1.snapshot()])
    r0.record(16, True, 40, 0.01)
    broken = r1.snapshot()
    broken["mix"]["parts"] = broken["mix"]["parts"][:-1]
    assert ec.validate(broken) is None and ec.mix_block(broken) is None
    rows = deltas.update(15.0, [r0.snapshot(), broken])
    assert [r.mode for r in rows] == ["drafted", "slots_drafted"]
    assert all(min(r.steps, r.tokens, r.time_s) >= 0 for r in rows)


def test_the_scraper_and_sink_store_the_blocks_rows_holding_rates_values(tmp_path: Path) -> None:
    """Two ranks read three times through the real scraper and sink into SQLite: per interval, bin and stored
    mode, the rows hold ``rates()``'s deltas of the ranks' summed snapshots exactly (the sums of accepts as
    floats in ``time_s``)."""
    r0, r1 = _counters(64), _counters(64)
    docs: list[dict[str, Any]] = [_doc(r0.snapshot(), r1.snapshot())]
    snaps = [ec.sum_ranks([r0.snapshot(), r1.snapshot()])]
    for k in range(2):
        r0.record(24, True, 70, 0.02)
        r1.record(40, False, 40, 0.01)
        _part(r0, [3.7, 1.3, 2.9] * 6 + [1.1] * k)
        _part(r1, [5.0, 2.0] * 20)  # bin 48
        docs.append(_doc(r0.snapshot(), r1.snapshot()))
        snaps.append(ec.sum_ranks([r0.snapshot(), r1.snapshot()]))
    with stored_documents(tmp_path, docs) as (db, sid), db.engine.connect() as conn:
        stored = conn.execute(text(
            "SELECT ts, batch_size, mode, steps, tokens, time_s FROM engine_counter_sample "
            "WHERE server_id = :sid ORDER BY ts, mode, batch_size"), {"sid": sid}).all()  # fmt: skip
    got = {(ts, b, mode): (steps, tokens, seconds) for ts, b, mode, steps, tokens, seconds in stored
           if mode in LIST_MODES}  # fmt: skip
    want = {}
    for k in (1, 2):
        interval = ec.rates(snaps[k - 1], snaps[k])
        ts = 1000.0 + 5 * k
        for i, b in enumerate(interval["bins"]):
            for mode, stored_as in SLOTS_MODES.items():
                if interval["slots"][mode][i]:
                    want[(ts, b, stored_as)] = (0, interval["slots"][mode][i], 0.0)
            for row in MIX_ROWS:
                cells = {column: interval["mix"][field][i]
                         for field, (m, column) in MIX_MODES.items() if m == row}  # fmt: skip
                if any(cells.values()):
                    want[(ts, b, row)] = tuple(cells.get(f, 0) for f in ec.FIELDS)
    assert got == want
    assert got[(1005.0, 48, "mix_accept")] == (1, 40, 140.0)
    assert got[(1005.0, 48, "mix_inverse")] == (0, 0, pytest.approx(20 * 0.7))
    assert {key[2] for key in got} == LIST_MODES
