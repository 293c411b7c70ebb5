"""The same storage code on PostgreSQL (dialect-specific SQL lives only in storage/dialect.py).

Runs against ``SPECTOWER_TEST_POSTGRES_URL`` if set, else the throwaway PostgreSQL server of
tests/conftest.py (``postgres_server``: one per session/worker); skipped when the binaries or psycopg are
missing, saying why, except under SPECTOWER_REQUIRE_POSTGRES=1 (tests/run), where that is a failure.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from spectower.storage import SCHEMA_VERSION, Database, open_database, queries
from spectower.storage.bench_serving import export_lines, import_file
from spectower.storage.models import ControlEvent, EngineSample, GpuSample

T0 = 1_764_000_000.0


@pytest.fixture
def db(postgres_url: str) -> Iterator[Database]:
    # a fresh database per test on the session's server (tests/conftest.py: postgres_server)
    d = open_database(postgres_url)
    yield d
    d.close()


def test_core_api_series_and_rollups_on_postgres(db: Database) -> None:
    assert db.dialect_name == "postgresql" and db.schema_version == SCHEMA_VERSION
    sid = db.server_id("http://a", served_model_name="m")
    assert db.server_id("http://a") == sid
    gid = db.gpu_id("h", 0, "U")
    assert db.record_server_info(sid, {"v": 1}, 1.0) and not db.record_server_info(sid, {"v": 1}, 2.0)
    w = db.writer(maintenance=None)
    w.put(*[GpuSample(gpu_id=gid, ts=T0 + i, gpu_util_pct=float(i % 100)) for i in range(7200)])
    w.put(
        *[
            EngineSample(server_id=sid, dp_rank=i % 2, ts=T0 + i // 2, num_running_reqs=1.0)
            for i in range(400)
        ]
    )
    assert w.flush(120)
    raw = queries.series(db, "gpu", gid, "gpu_util_pct", T0 + 10, T0 + 110, 500)
    assert raw.tier == "raw" and sum(b.n for b in raw.points) == 101
    assert db.update_rollups() == 7600
    s = queries.series(db, "gpu", gid, "gpu_util_pct", T0, T0 + 7200, 20)
    assert s.tier == "1m" and len(s.points) <= 20 and sum(b.n for b in s.points) == 7200
    assert (min(b.min for b in s.points), max(b.max for b in s.points)) == (0.0, 99.0)
    mean = sum((b.mean or 0) * b.n for b in s.points) / 7200
    assert mean == pytest.approx(49.5)
    # a late row past the watermark is merged in
    w.put(GpuSample(gpu_id=gid, ts=T0 + 5, gpu_util_pct=1000.0))
    assert w.flush(30)
    assert (
        max(b.max for b in queries.series(db, "gpu", gid, "gpu_util_pct", T0, T0 + 7200, 20).points) == 1000
    )
    assert [r.dp_rank for r in queries.latest_engine_samples(db)] == [0, 1]
    with db.session(write=True) as s2:
        s2.add(ControlEvent(ts=1.0, actor="policy:auto", server_url="http://a", action="set", reason="r"))
    assert [e.reason for e in queries.control_events(db, actor="policy")] == ["r"]
    deleted = db.apply_retention(raw_days=1, rollup_days=2, hourly_days=3, now=T0 + 1.5 * 86400)
    assert deleted["gpu_sample"] == 7201


def test_bench_serving_round_trip_on_postgres(db: Database, real_data: Path) -> None:
    for f in sorted((real_data / "bench_serving").glob("*.jsonl")):
        r = import_file(db, f)
        original = [json.loads(x) for x in f.read_text().splitlines() if x.strip()]
        assert [json.dumps(x) for x in export_lines(db, r.run_id or 0)] == [json.dumps(x) for x in original]


def test_missing_postgres_fails_when_required(monkeypatch: pytest.MonkeyPatch) -> None:
    """tests/run sets SPECTOWER_REQUIRE_POSTGRES=1: an unavailable PostgreSQL then fails, never skips."""
    from tests.conftest import _postgres_unavailable

    monkeypatch.setenv("SPECTOWER_REQUIRE_POSTGRES", "1")
    with pytest.raises(pytest.fail.Exception, match="PostgreSQL required"):
        _postgres_unavailable("no initdb")
    monkeypatch.delenv("SPECTOWER_REQUIRE_POSTGRES")
    with pytest.raises(pytest.skip.Exception, match="no initdb"):
        _postgres_unavailable("no initdb")


def test_a_lock_wait_and_a_silent_server_are_bounded_on_postgres(db: Database) -> None:
    """A lock held elsewhere fails a writer after the busy timeout (as SQLite's does) instead of holding the
    writer thread for ever; a vanished server is given up on by the connection, not waited for."""
    from sqlalchemy import text

    with db.engine.connect() as conn:
        assert conn.execute(text("SHOW lock_timeout")).scalar() == "10s"
        params = conn.connection.dbapi_connection.info.get_parameters()  # type: ignore[union-attr]
        assert params["connect_timeout"] == "10" and params["keepalives"] == "1"
        assert params["tcp_user_timeout"] == "30000"
