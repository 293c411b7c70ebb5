"""Retention: raw samples go after N days, the rollups keep the long view."""

from __future__ import annotations

from pathlib import Path

import pytest
from spectower.storage import open_database, queries
from spectower.storage.retention import DAY_S, horizons
from sqlalchemy import text

NOW = 1_764_000_000.0
ENGINE_INSERT = "INSERT INTO engine_sample (server_id, dp_rank, ts, num_running_reqs) VALUES (:s, 0, :t, 1.0)"


def test_raw_deleted_rollups_kept_and_series_still_answers(db_url: str) -> None:
    db = open_database(db_url)  # SQLite and PostgreSQL
    try:
        gid = db.gpu_id("h", 0, "U")
        sid = db.server_id("http://s")
        # one sample a minute over the last 10 days (value = day index)
        ts = [NOW - 10 * DAY_S + 60 * i for i in range(10 * 24 * 60)]
        with db.engine.begin() as conn:
            conn.execute(
                text("INSERT INTO gpu_sample (gpu_id, ts, lost, power_w) VALUES (:g, :t, false, :v)"),
                [{"g": gid, "t": t, "v": float((t - ts[0]) // DAY_S)} for t in ts],
            )
            conn.execute(
                text(ENGINE_INSERT),
                [{"s": sid, "t": t} for t in ts],
            )
        deleted = db.apply_retention(raw_days=2, rollup_days=5, hourly_days=30, now=NOW)
        assert deleted["gpu_sample"] == deleted["engine_sample"] == 8 * 24 * 60
        assert deleted["gpu_rollup_60s"] > 0 and deleted["gpu_rollup_3600s"] == 0
        with db.engine.connect() as conn:
            assert conn.execute(text("SELECT min(ts) FROM gpu_sample")).scalar() >= NOW - 2 * DAY_S
            assert conn.execute(text("SELECT min(bucket_ts) FROM gpu_rollup WHERE res_s = 60")).scalar() >= (
                NOW - 5 * DAY_S - 60
            )
        hz = horizons(db.engine)
        assert hz["raw"] == NOW - 2 * DAY_S
        # a 10-day chart still covers all 10 days, from the hourly rollups
        s = queries.series(db, "gpu", gid, "power_w", NOW - 10 * DAY_S, NOW, max_points=300)
        assert s.tier == "1h"
        assert s.points[0].min == 0.0 and s.points[-1].max == 9.0
        assert sum(b.n for b in s.points) == len(ts)
        # a 1-hour window 4 days ago: the raw tier is gone there, so the minute rollups answer
        s = queries.series(db, "gpu", gid, "power_w", NOW - 4 * DAY_S, NOW - 4 * DAY_S + 3600, max_points=500)
        assert s.tier == "1m" and sum(b.n for b in s.points) >= 60
    finally:
        db.close()


def test_bad_retention_arguments(tmp_path: Path) -> None:
    db = open_database(tmp_path / "db.sqlite")
    try:
        with pytest.raises(ValueError, match="raw_days"):
            db.apply_retention(raw_days=-1)
        with pytest.raises(ValueError, match="raw_days <= rollup_days"):
            db.apply_retention(raw_days=10, rollup_days=5)
    finally:
        db.close()
