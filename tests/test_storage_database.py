"""open_database, identities, server_info snapshots, the default database URL."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from spectower.storage import DatabaseURLError, default_db_url, open_database, queries
from spectower.storage.models import BenchPoint, BenchRun


def test_open_creates_file_with_wal_and_foreign_keys(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    db = open_database(str(path))
    try:
        assert path.exists()
        assert db.url == f"sqlite:///{path}"
        with db.engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
            assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
            assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() >= 1000
    finally:
        db.close()
    assert sqlite3.connect(path).execute("PRAGMA journal_mode").fetchone() == ("wal",)


def test_url_forms_and_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPECTOWER_DB", raising=False)
    monkeypatch.chdir(tmp_path)
    assert default_db_url() == f"sqlite:///{tmp_path / 'spectower.db'}"
    monkeypatch.setenv("SPECTOWER_DB", "sqlite:////x/y.db")
    assert default_db_url() == "sqlite:////x/y.db"
    assert default_db_url("rel.db") == f"sqlite:///{tmp_path / 'rel.db'}"
    with pytest.raises(DatabaseURLError, match="--db"):
        open_database(tmp_path / "missing-folder" / "x.db")


@pytest.mark.parametrize("url", ["postgresql://u:secret@[::1", "postgresql://u:secret@host:99x/db"])
def test_a_url_that_does_not_parse_is_one_line_without_its_password(url: str) -> None:
    with pytest.raises(DatabaseURLError, match=r"^--db: not a database URL: ") as err:
        open_database(url)
    assert "secret" not in str(err.value) and "\n" not in str(err.value)


def test_server_and_gpu_identities(tmp_path: Path) -> None:
    db = open_database(tmp_path / "db.sqlite")
    try:
        a = db.server_id("http://127.0.0.1:30000", ts=10.0, served_model_name="m1")
        assert db.server_id("http://127.0.0.1:30000", ts=11.0) == a
        assert db.server_id("http://127.0.0.1:30000", ts=12.0, sglang_version="0.5.23") == a
        b = db.server_id("http://127.0.0.1:30001", ts=10.0)
        assert a != b
        srv = queries.server_by_url(db, "http://127.0.0.1:30000")
        assert (srv.served_model_name, srv.sglang_version, srv.first_seen, srv.last_seen) == (
            "m1",
            "0.5.23",
            10.0,
            12.0,
        )
        with pytest.raises(ValueError, match="unknown server fact"):
            db.server_id("http://x", colour="red")
        g0 = db.gpu_id("host1", 0, "GPU-aaa", name="NVIDIA H200", memory_total_mib=143771.0)
        g1 = db.gpu_id("host1", 1, "GPU-bbb")
        assert db.gpu_id("host1", 0, "GPU-aaa") == g0 != g1
        assert [(g.index, g.name) for g in queries.gpus(db, host="host1")] == [(0, "NVIDIA H200"), (1, None)]
        with pytest.raises(LookupError, match="no server"):
            queries.server_by_url(db, "http://nope")
    finally:
        db.close()


def test_identities_are_shared_between_two_openers(tmp_path: Path) -> None:
    path = tmp_path / "db.sqlite"
    db1, db2 = open_database(path), open_database(path)
    try:
        assert db1.server_id("http://s") == db2.server_id("http://s")
        assert db1.gpu_id("h", 0, "U") == db2.gpu_id("h", 0, "U")
    finally:
        db1.close()
        db2.close()


def test_server_info_snapshot_only_when_stable_part_changes(tmp_path: Path) -> None:
    db = open_database(tmp_path / "db.sqlite")
    try:
        sid = db.server_id("http://s")
        info = {"version": "0.5.23", "cuda_graph_max_bs": 48, "internal_states": [{"last_gen_throughput": 1}]}
        assert db.record_server_info(sid, info, 1.0) is True
        info2 = {**info, "internal_states": [{"last_gen_throughput": 99.0}]}
        assert db.record_server_info(sid, info2, 2.0) is False  # only volatile parts moved
        assert db.record_server_info(sid, {**info, "cuda_graph_max_bs": 64}, 3.0) is True
        snaps = queries.server_info_snapshots(db, sid)
        assert [s.ts for s in snaps] == [3.0, 1.0]
        assert '"cuda_graph_max_bs": 64' in snaps[0].info_json
    finally:
        db.close()


def test_save_bench_run_is_one_transaction(tmp_path: Path) -> None:
    db = open_database(tmp_path / "db.sqlite")
    try:
        rid = db.save_bench_run(
            BenchRun(created_at=1.0, source="sweep"),
            [BenchPoint(concurrency=1, spec_on=True, output_throughput=96.1), BenchPoint(concurrency=1)],
        )
        assert [p.output_throughput for p in queries.bench_points(db, rid)] == [96.1, None]
        bad = BenchPoint(concurrency=2)
        bad.extra_json = {"not": "a string"}  # type: ignore[assignment]  # the driver cannot bind a dict
        with pytest.raises(Exception):  # noqa: B017 - any driver error; what matters is what is left
            db.save_bench_run(BenchRun(created_at=2.0, source="sweep", tag="half"), [BenchPoint(), bad])
        assert [r.tag for r in queries.bench_runs(db)] == [None]
        assert len(queries.bench_points(db, rid + 1)) == 0
    finally:
        db.close()


def test_gaps_and_collector_health(tmp_path: Path) -> None:
    db = open_database(tmp_path / "db.sqlite")
    try:
        g = queries.open_gap(db, "sglang", "http://s", 100.0, "connection refused")
        assert queries.open_gap(db, "sglang", "http://s", 105.0, "again") == g  # still the same outage
        assert [x.id for x in queries.gaps(db, open_only=True)] == [g]
        queries.close_gap(db, g, 160.0)
        assert queries.gaps(db, open_only=True) == []
        assert [x.end_ts for x in queries.gaps(db, start=150.0, end=200.0)] == [160.0]
        assert queries.gaps(db, start=161.0) == []
        queries.upsert_collector_health(db, "sglang", "http://s", ok=False, ts=100.0, error="refused")
        queries.upsert_collector_health(db, "sglang", "http://s", ok=True, ts=170.0, lag_s=0.2)
        (h,) = queries.collector_health(db)
        assert (h.errors_total, h.last_error, h.last_success_ts, h.lag_s) == (1, "refused", 170.0, 0.2)
    finally:
        db.close()


def test_a_recorded_database_is_read_from_a_copy_that_keeps_its_bytes(tmp_path: Path) -> None:
    """open_recorded: a database of an older schema is migrated in the copy only (the recorded file keeps
    its bytes and gets no backup beside it), and reads as the file holds it; a missing file is one error."""
    from spectower.storage import SCHEMA_VERSION
    from spectower.storage.database import open_recorded

    recorded = tmp_path / "run" / "policy.db"
    recorded.parent.mkdir()
    with open_database(recorded) as db:
        db.server_id("http://gpu-1:30000", ts=1.0)
    conn = sqlite3.connect(recorded)  # as an older spectower left it: one version back
    conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION - 1),))
    conn.execute("DROP TABLE IF EXISTS server_pause")
    conn.commit()
    conn.close()  # the last connection: SQLite folds its write-ahead log back into the file
    before = recorded.read_bytes()
    with open_recorded(recorded) as db:
        assert db.schema_version == SCHEMA_VERSION
        assert [s.url for s in queries.servers(db)] == ["http://gpu-1:30000"]
    assert recorded.read_bytes() == before
    assert sorted(p.name for p in recorded.parent.iterdir()) == ["policy.db"]
    with pytest.raises(FileNotFoundError, match="no such database file"), open_recorded(tmp_path / "none.db"):
        pass


def test_a_database_this_open_created_and_nothing_wrote_to_is_discarded(tmp_path: Path) -> None:
    """``discard_if_unused``: a command that failed before writing (a server that never answered) removes the
    empty SQLite file its open created; a file that was there, or one with a row, stays."""
    fresh = tmp_path / "fresh.db"
    db = open_database(fresh)
    assert db.created == fresh and fresh.is_file()
    assert db.discard_if_unused() is True
    assert sorted(tmp_path.iterdir()) == []
    written = open_database(tmp_path / "written.db")
    written.server_id("http://127.0.0.1:30000")
    assert written.discard_if_unused() is False and (tmp_path / "written.db").is_file()
    again = open_database(tmp_path / "written.db")  # there already: never this open's to remove
    assert again.created is None and again.discard_if_unused() is False
    assert (tmp_path / "written.db").is_file()
