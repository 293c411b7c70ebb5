"""The engine's decode counters in storage (schema v3), on SQLite and PostgreSQL: rows through the one
BatchWriter, intervals read back in ``rates()``'s shape (raw, then 1-minute and 1-hour rollups with the
rows past the watermark merged in), retention, and ``control.speedup.estimate`` over what comes back."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from spectower.control import speedup
from spectower.storage import Database, open_database, queries
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
