"""The engine's decode counters in storage (schema v3), on SQLite and PostgreSQL: rows through the one
BatchWriter, intervals read back in ``rates()``'s shape (raw, then 1-minute and 1-hour rollups with the
rows past the watermark merged in), retention, and ``control.speedup.estimate`` over what comes back; the
extend block's rows beside them summed per bin (``extend_totals``) for ``control.kept_extend``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from spectower.control import kept_extend, speedup
from spectower.plugin.engine_counters import EXTEND_KINDS, FIELDS, MIX_FIELDS, MODES
from spectower.storage import Database, open_database, queries
from spectower.storage.counter_modes import (
    EXTEND_MODES,
    MIX_MODES,
    MIX_ROWS,
    OUTSIDE_MODES,
    PREFILLED_MODES,
    SLOTS_MODES,
)
from spectower.storage.models import EngineCounterSample
from spectower.storage.retention import DAY_S, horizons
from sqlalchemy import text

T0 = 1_764_000_000.0  # a whole hour


@pytest.fixture
def db(db_url: str) -> Iterator[Database]:
    d = open_database(db_url)  # SQLite and PostgreSQL
    yield d
    d.close()


def _rows(
    sid: int, ts: float, drafted_tok_s: float = 600.0, gated_tok_s: float = 400.0
) -> list[EngineCounterSample]:
    """One 5 s interval: bin 8 drafted for 2 s and gated for 3 s at the given rates; bin 32 gated only."""
    return [
        EngineCounterSample(server_id=sid, ts=ts, batch_size=8, mode="drafted", steps=100,
                            tokens=round(drafted_tok_s * 2.0), time_s=2.0),
        EngineCounterSample(server_id=sid, ts=ts, batch_size=8, mode="gated", steps=150,
                            tokens=round(gated_tok_s * 3.0), time_s=3.0),
        EngineCounterSample(server_id=sid, ts=ts, batch_size=32, mode="gated", steps=10,
                            tokens=320, time_s=0.5),
    ]  # fmt: skip


def _write(db: Database, rows: list[EngineCounterSample]) -> None:
    w = db.writer(maintenance=None)
    try:
        w.put(*rows)
        assert w.flush(60)
        assert w.stats().rejected == 0
    finally:
        w.close()


def test_raw_intervals_come_back_in_rates_shape(db: Database) -> None:
    sid = db.server_id("http://a")
    other = db.server_id("http://b")
    _write(db, [r for i in range(3) for r in _rows(sid, T0 + 5 * (i + 1))] + _rows(other, T0 + 5))
    got = queries.counter_intervals(db, sid, T0, T0 + 60)
    assert [i["ts"] for i in got] == [T0 + 5, T0 + 10, T0 + 15]
    first = got[0]
    assert first["res_s"] == 0 and first["bins"] == [8, 32] and first["restarted"] is False
    assert first["drafted"]["steps"] == [100, 0] and first["drafted"]["tokens"] == [1200, 0]
    assert first["drafted"]["tok_s"] == [600.0, None] and first["drafted"]["step_s"] == [0.02, None]
    assert first["gated"]["steps"] == [150, 10] and first["gated"]["time_s"] == [3.0, 0.5]
    # the window bounds hold; another server's rows never mix in
    assert len(queries.counter_intervals(db, sid, T0 + 6, T0 + 14)) == 1
    assert queries.has_counters(db, sid) and not queries.has_counters(db, 999)
    est = speedup.estimate(got)
    b8 = next(b for b in est.bins if b.batch_size == 8)
    assert b8.speedup == pytest.approx(1.5) and b8.drafted_steps == 300
    # identical intervals: the interval has collapsed to the point
    assert b8.lo == pytest.approx(1.5) and b8.hi == pytest.approx(1.5)
    with pytest.raises(ValueError, match="start/end"):
        queries.counter_intervals(db, sid, T0 + 10, T0)


def test_long_windows_read_the_rollups_and_the_rows_past_the_watermark(db: Database) -> None:
    sid = db.server_id("http://a")
    # 3 hours of 5 s intervals; the drafted rate alternates so the minutes differ a little
    stamps = [T0 + 5 * (i + 1) for i in range(3 * 720)]
    _write(db, [r for i, t in enumerate(stamps) for r in _rows(sid, t, 600.0 + (i % 2) * 12.0)])
    assert db.update_rollups() == 3 * len(stamps)
    late = T0 + 3 * 3600 + 30  # arrived after the fold: not in any rollup yet
    _write(db, _rows(sid, late))
    minute = queries.counter_intervals(db, sid, T0, T0 + 3 * 3600 + 60)
    assert {i["res_s"] for i in minute} == {60} and len(minute) == 181
    assert minute[0]["ts"] == T0 and minute[0]["drafted"]["steps"] == [11 * 100, 0]  # T0+5 .. T0+55
    assert minute[-1]["ts"] == T0 + 3 * 3600 and minute[-1]["drafted"]["steps"] == [2 * 100, 0]
    total = sum(i["drafted"]["steps"][0] for i in minute)
    assert total == 100 * (len(stamps) + 1)
    hour = queries.counter_intervals(db, sid, T0, T0 + 3 * 3600 + 60, max_intervals=50)
    assert {i["res_s"] for i in hour} == {3600} and [i["ts"] for i in hour] == [
        T0 + h * 3600 for h in range(4)
    ]
    assert sum(i["drafted"]["steps"][0] for i in hour) == total
    # every tier gives the same estimate of the same traffic
    points = [speedup.estimate(x).bins[0].speedup for x in (minute, hour)]
    raw = queries.counter_intervals(db, sid, T0, T0 + 3 * 3600 + 60, max_intervals=10_000)
    assert {i["res_s"] for i in raw} == {0}
    points.append(speedup.estimate(raw).bins[0].speedup)
    assert points == pytest.approx([points[2]] * 3)
    est = speedup.estimate(minute)
    b8 = est.bins[0]
    assert b8.lo is not None and b8.hi is not None and b8.lo < b8.speedup < b8.hi  # type: ignore[operator]
    # the raw rows gone (retention), the rollups still say the server has counters
    with db.engine.begin() as conn:
        conn.execute(text("DELETE FROM engine_counter_sample"))
    assert queries.has_counters(db, sid) and not queries.has_counters(db, sid + 1)


def test_retention_covers_the_counters(db: Database) -> None:
    sid = db.server_id("http://a")
    now = T0 + 10 * DAY_S
    stamps = [T0 + 60 * i for i in range(10 * 24 * 60)]  # one interval a minute for 10 days
    # 43,200 rows: bulk-loaded as an import is (the same rows as _rows'; building them as models for the
    # writer took 11 of this test's 14 s), since retention, not the writer, is what this test is about
    fields = ("server_id", "ts", "batch_size", "mode", "steps", "tokens", "time_s")
    prototype = [{f: getattr(r, f) for f in fields} for r in _rows(sid, T0)]
    db.insert_many("engine_counter_sample", ({**r, "ts": t} for t in stamps for r in prototype))
    deleted = db.apply_retention(raw_days=2, rollup_days=5, hourly_days=30, now=now)
    assert deleted["engine_counter_sample"] == 3 * 8 * 24 * 60
    assert deleted["engine_counter_rollup_60s"] > 0 and deleted["engine_counter_rollup_3600s"] == 0
    assert horizons(db.engine)["raw"] == now - 2 * DAY_S
    # an hour 4 days ago: raw rows are gone there, the minute rollups answer
    got = queries.counter_intervals(db, sid, now - 4 * DAY_S, now - 4 * DAY_S + 3600)
    assert got and {i["res_s"] for i in got} == {60}
    assert speedup.estimate(got).bins[0].speedup == pytest.approx(1.5)
    # the whole 10 days, from the hourly rollups
    everything = queries.counter_intervals(db, sid, T0, now)
    assert {i["res_s"] for i in everything} == {3600}
    assert sum(i["gated"]["steps"][1] for i in everything) == 10 * len(stamps)


# --- the extend block's rows (plugin 0.4.6 on): beside the decode rows, summed by extend_totals -------------


def _extend_rows(
    sid: int, ts: float, kept_tok_s: float = 870.0, skipped_tok_s: float = 1000.0
) -> list[EngineCounterSample]:
    """One interval's extend rows as the collector stores them: bin 32's steady gated steps, 20 that kept
    the draft extend and 80 that skipped it (10 ms a step at these rates), and 4 kept ones in bin 48."""
    kept, skipped = EXTEND_MODES["kept"], EXTEND_MODES["skipped"]
    return [
        EngineCounterSample(server_id=sid, ts=ts, batch_size=32, mode=kept, steps=20,
                            tokens=round(kept_tok_s * 0.2), time_s=0.2),
        EngineCounterSample(server_id=sid, ts=ts, batch_size=32, mode=skipped, steps=80,
                            tokens=round(skipped_tok_s * 0.8), time_s=0.8),
        EngineCounterSample(server_id=sid, ts=ts, batch_size=48, mode=kept, steps=4, tokens=150, time_s=0.05),
    ]  # fmt: skip


def test_extend_totals_sum_the_extend_rows_per_bin_raw_and_rolled_up(db: Database) -> None:
    """``extend_totals`` sums the extend rows of the window per bin and kind, from the same tier
    ``counter_intervals`` reads (raw; the minute and hour rollups with the rows past the watermark); what it
    returns is what ``kept_extend.measure`` takes, and a window (or a server) without extend rows is None."""
    sid = db.server_id("http://a")
    plain = db.server_id("http://b")  # decode rows only: a plugin before 0.4.6
    stamps = [T0 + 5 * (i + 1) for i in range(3 * 720)]  # 3 hours of 5 s intervals
    _write(db, [r for t in stamps for r in (*_rows(sid, t), *_extend_rows(sid, t), *_rows(plain, t))])
    n = 12  # the first minute's intervals: T0+5 .. T0+60
    bins, totals = queries.extend_totals(db, sid, T0, T0 + 60) or ([], {})
    assert bins == [32, 48] and set(totals) == {"kept", "skipped"}
    assert totals["kept"] == {"steps": [20 * n, 4 * n], "tokens": [174 * n, 150 * n],
                              "time_s": [pytest.approx(0.2 * n), pytest.approx(0.05 * n)]}  # fmt: skip
    assert totals["skipped"] == {"steps": [80 * n, 0], "tokens": [800 * n, 0],
                                 "time_s": [pytest.approx(0.8 * n), 0.0]}  # fmt: skip
    assert [type(v) for v in totals["kept"]["steps"]] == [int, int]
    tax = kept_extend.measure(bins, totals)
    assert tax is not None and tax.tax == pytest.approx(0.13) and [b.batch_size for b in tax.bins] == [32]
    assert queries.extend_totals(db, plain, T0, T0 + 60) is None
    assert queries.extend_totals(db, sid, T0 - 60, T0) is None  # before the first interval
    # the rollups: the same sums over the whole 3 hours from every tier, the late rows in their bucket
    assert db.update_rollups() == len(stamps) * (3 + 3 + 3)
    late = T0 + 3 * 3600 + 30
    _write(db, [*_rows(sid, late), *_extend_rows(sid, late)])
    end = T0 + 3 * 3600 + 60
    want_steps = 20 * (len(stamps) + 1)
    tiers = {}
    for limit in (10_000, 2000, 50):  # raw, minutes, hours (counter_intervals' tiers for the window)
        tiers[limit] = {i["res_s"] for i in queries.counter_intervals(db, sid, T0, end, max_intervals=limit)}
        found = queries.extend_totals(db, sid, T0, end, max_intervals=limit)
        assert found is not None and found[0] == [32, 48]
        assert found[1]["kept"]["steps"] == [want_steps, 4 * (len(stamps) + 1)]
        assert found[1]["skipped"]["time_s"][0] == pytest.approx(0.8 * (len(stamps) + 1))
        measured = kept_extend.measure(*found)
        assert measured is not None and measured.tax == pytest.approx(0.13)
    assert tiers == {10_000: {0}, 2000: {60}, 50: {3600}}
    # a minute bucket is taken whole, as counter_intervals takes it: T0+30..T0+60 reads T0..T0+60
    partial = queries.extend_totals(db, sid, T0 + 30, T0 + 3 * 3600, max_intervals=200)
    assert partial is not None and partial[1]["kept"]["steps"][0] == 20 * len(stamps)
    with pytest.raises(ValueError, match="start/end"):
        queries.extend_totals(db, sid, T0 + 10, T0)


def test_prefilled_rows_come_back_as_each_intervals_block_and_in_no_other_read(db: Database) -> None:
    """The prefilled rows (plugin 0.4.14: steps whose span held a prefill) come back as each interval's
    ``prefilled`` block per bin and decode mode; the decode modes and the extend's read never add them in, and
    a server without them (a plugin before 0.4.14) reads as it always did."""
    sid = db.server_id("http://a")
    drafted, gated = PREFILLED_MODES["drafted"], PREFILLED_MODES["gated"]
    stamps = [T0 + 5 * (i + 1) for i in range(12)]
    row = EngineCounterSample
    _write(db, [r for t in stamps for r in (
        *_rows(sid, t), *_extend_rows(sid, t),
        row(server_id=sid, ts=t, batch_size=8, mode=drafted, steps=3, tokens=90, time_s=0.06),
        row(server_id=sid, ts=t, batch_size=32, mode=gated, steps=2, tokens=64, time_s=0.03),
    )])  # fmt: skip
    intervals = queries.counter_intervals(db, sid, T0, T0 + 60)
    assert len(intervals) == 12 and all(i["bins"] == [8, 32] for i in intervals)
    for interval in intervals:
        assert interval["prefilled"]["drafted"] == {"steps": [3, 0], "tokens": [90, 0], "time_s": [0.06, 0.0]}
        assert interval["prefilled"]["gated"] == {"steps": [0, 2], "tokens": [0, 64], "time_s": [0.0, 0.03]}
        assert interval["drafted"]["steps"] == [100, 0] and interval["gated"]["steps"] == [150, 10]
    extend = queries.extend_totals(db, sid, T0, T0 + 60)
    assert extend is not None and extend[0] == [32, 48]  # no prefilled bin 8 among the extend's
    plain = db.server_id("http://b")  # a plugin before 0.4.14
    _write(db, _rows(plain, T0 + 5))
    assert all("prefilled" not in i for i in queries.counter_intervals(db, plain, T0, T0 + 60))


def test_the_stored_extend_modes_name_the_plugins_extend_kinds() -> None:
    """The mode names are what the database holds: one per kind of the plugin's extend block, none a decode
    mode (every decode reader filters on those)."""
    assert set(EXTEND_MODES) == set(EXTEND_KINDS)
    assert not set(EXTEND_MODES.values()) & set(MODES)
    # the prefilled rows: one per decode mode, a name of their own
    assert set(PREFILLED_MODES) == set(MODES)
    # the slots rows (plugin 0.4.15): one per decode mode; the mix's: each field of the plugin's block in a
    # column of its own of one of two rows, the counts in the integer columns, the sums in time_s
    assert set(SLOTS_MODES) == set(MODES)
    assert list(MIX_MODES) == list(MIX_FIELDS) and MIX_ROWS == ("mix_accept", "mix_inverse")
    places = list(MIX_MODES.values())
    assert len(set(places)) == len(places) and {column for _, column in places} <= set(FIELDS)
    assert {field for field, (_, column) in MIX_MODES.items() if column == "time_s"} == {"accept_sum",
                                                                                        "inverse_sum"}
    stored = [*EXTEND_MODES.values(), *OUTSIDE_MODES.values(), *PREFILLED_MODES.values(),
              *SLOTS_MODES.values(), *MIX_ROWS, *MODES]  # fmt: skip
    assert len(set(stored)) == len(stored)


def test_slots_and_mix_rows_come_back_as_each_intervals_blocks_and_in_no_other_read(db: Database) -> None:
    """The slots and mix rows (plugin 0.4.15) come back as each interval's ``slots`` and ``mix`` blocks per
    bin, summed in the rollups as the decode rows are; a mix row in a bin its interval has no decode row in
    shows that bin with zero decode counts; the decode modes and ``extend_totals`` never add them in, and a
    server without them reads as it always did."""
    sid = db.server_id("http://a")
    stamps = [T0 + 5 * (i + 1) for i in range(12)]
    row = EngineCounterSample
    _write(db, [r for t in stamps for r in (
        *_rows(sid, t), *_extend_rows(sid, t),
        row(server_id=sid, ts=t, batch_size=8, mode=SLOTS_MODES["drafted"], steps=0, tokens=700, time_s=0.0),
        row(server_id=sid, ts=t, batch_size=8, mode=SLOTS_MODES["gated"], steps=0, tokens=1050, time_s=0.0),
        row(server_id=sid, ts=t, batch_size=32, mode=SLOTS_MODES["gated"], steps=0, tokens=300, time_s=0.0),
        row(server_id=sid, ts=t, batch_size=32, mode="mix_accept", steps=2, tokens=60, time_s=180.25),
        row(server_id=sid, ts=t, batch_size=32, mode="mix_inverse", steps=0, tokens=0, time_s=22.5),
        row(server_id=sid, ts=t, batch_size=64, mode="mix_accept", steps=1, tokens=50, time_s=150.0),
        row(server_id=sid, ts=t, batch_size=64, mode="mix_inverse", steps=0, tokens=0, time_s=18.75),
    )])  # fmt: skip
    intervals = queries.counter_intervals(db, sid, T0, T0 + 60)
    assert len(intervals) == 12 and all(i["bins"] == [8, 32, 64] for i in intervals)
    for interval in intervals:
        assert interval["slots"] == {"drafted": [700.0, 0.0, 0.0], "gated": [1050.0, 300.0, 0.0]}
        assert interval["mix"] == {"parts": [0.0, 2.0, 1.0], "requests": [0.0, 60.0, 50.0],
                                   "accept_sum": [0.0, 180.25, 150.0], "inverse_sum": [0.0, 22.5, 18.75]}
        assert interval["drafted"]["steps"] == [100, 0, 0] and interval["gated"]["steps"] == [150, 10, 0]
    db.update_rollups()
    hour = queries.counter_intervals(db, sid, T0, T0 + 120, max_intervals=1)
    assert len(hour) == 1 and hour[0]["res_s"] == 3600
    assert hour[0]["slots"] == {"drafted": [8400.0, 0.0, 0.0], "gated": [12600.0, 3600.0, 0.0]}
    assert hour[0]["mix"]["accept_sum"] == [0.0, 12 * 180.25, 12 * 150.0]
    assert hour[0]["mix"]["parts"] == [0.0, 24.0, 12.0] and hour[0]["gated"]["steps"] == [1800, 120, 0]
    extend = queries.extend_totals(db, sid, T0, T0 + 60)
    assert extend is not None and extend[0] == [32, 48]
    plain = db.server_id("http://b")  # a plugin before 0.4.15
    _write(db, _rows(plain, T0 + 5))
    assert all(not {"slots", "mix"} & set(i) for i in queries.counter_intervals(db, plain, T0, T0 + 60))
