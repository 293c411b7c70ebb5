"""Schema versions: a v1 file (the first released schema) is migrated forward on open, with its data;
a newer or foreign database is refused with a clear error; nothing is ever recreated."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from spectower.console.cli import app
from spectower.storage import SCHEMA_VERSION, SchemaError, open_database, queries
from spectower.storage.models import BenchPoint, BenchRun
from sqlalchemy import inspect, text
from typer.testing import CliRunner

from tests.conftest import REPO_ROOT

V1_DDL = REPO_ROOT / "storage" / "schema_v1_sqlite.sql"


def stamped(path: Path, version: int, sql: str = "") -> None:
    """At ``path``, what this version creates, changed by ``sql`` (what another version lacks) and stamped
    ``version``: an older or newer spectower's database, made by hand."""
    open_database(path).close()
    con = sqlite3.connect(path)
    con.executescript(f"{sql}\nUPDATE meta SET value='{version}' WHERE key='schema_version';")
    con.commit()
    con.close()


def make_v1_file(path: Path) -> None:
    con = sqlite3.connect(path)
    con.executescript(V1_DDL.read_text())
    con.executescript(
        """
        INSERT INTO meta VALUES ('schema_version', '1');
        INSERT INTO server (id, url, first_seen, last_seen) VALUES (1, 'http://old:30000', 100.0, 200.0);
        INSERT INTO gpu (id, host, "index", uuid, source, first_seen, last_seen)
            VALUES (1, 'h', 0, 'GPU-old', 'nvml', 100.0, 200.0);
        INSERT INTO bench_run (id, created_at, source, tag) VALUES (1, 50.0, 'sweep', 'old-run');
        INSERT INTO bench_point (run_id, concurrency, output_throughput) VALUES (1, 8, 123.5);
        INSERT INTO control_event (ts, actor, server_url, action, reason, confirmed)
            VALUES (150.0, 'operator:ann', 'http://old:30000', 'set', 'incident', 1);
        """
    )
    # 10 minutes of 1 Hz samples written by the old version
    con.executemany(
        "INSERT INTO gpu_sample (gpu_id, ts, lost, gpu_util_pct) VALUES (1, ?, 0, ?)",
        [(3600.0 + i, float(i % 10)) for i in range(600)],
    )
    con.commit()
    con.close()


def schema_of(url: str) -> dict[str, object]:
    db = open_database(url)
    try:
        insp = inspect(db.engine)
        return {
            t: (
                sorted(c["name"] for c in insp.get_columns(t)),
                sorted(str(i["name"]) for i in insp.get_indexes(t)),
            )
            for t in insp.get_table_names()
        }
    finally:
        db.close()


def test_v1_file_is_migrated_forward_with_its_data(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    make_v1_file(path)
    db = open_database(path)
    try:
        assert db.schema_version == SCHEMA_VERSION == 7
        with db.engine.connect() as conn:
            assert conn.execute(text("SELECT value FROM meta WHERE key='schema_version'")).scalar() == "7"
            cols = {c["name"] for c in inspect(conn).get_columns("bench_run")}
            assert "source_sha256" in cols
            assert conn.execute(text("SELECT count(*) FROM gpu_sample")).scalar() == 600
        # old rows are all still there and usable through the new code
        assert queries.bench_run(db, 1).tag == "old-run"
        assert queries.bench_points(db, 1)[0].output_throughput == 123.5
        assert [e.reason for e in queries.control_events(db, actor="operator")] == ["incident"]
        # the new rollups fold in the samples the old version wrote
        assert db.update_rollups() == 600
        s = queries.series(db, "gpu", 1, "gpu_util_pct", 3600.0, 4199.0, max_points=5)
        assert s.tier == "1m"
        assert sum(b.n for b in s.points) == 600
        assert min(b.min for b in s.points if b.min is not None) == 0.0
        # and new writes use the new column
        run_id = db.save_bench_run(BenchRun(created_at=1.0, source="x", source_sha256="abc"), [BenchPoint()])
        assert queries.bench_run(db, run_id).source_sha256 == "abc"
    finally:
        db.close()
    # a copy of the v1 file was kept before migrating
    backup = tmp_path / "old.db.schema-v1.bak"
    assert backup.exists()
    con = sqlite3.connect(backup)
    assert con.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone() == ("1",)
    con.close()


def test_migrated_schema_equals_a_fresh_one(tmp_path: Path) -> None:
    old = tmp_path / "old.db"
    make_v1_file(old)
    assert schema_of(f"sqlite:///{old}") == schema_of(f"sqlite:///{tmp_path / 'fresh.db'}")


def test_reopening_does_not_migrate_again(tmp_path: Path) -> None:
    path = tmp_path / "db.sqlite"
    open_database(path).close()
    db = open_database(path)
    db.close()
    assert not list(tmp_path.glob("*.bak"))


def test_newer_schema_is_refused_untouched(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    stamped(path, 99)
    with pytest.raises(SchemaError, match="newer than this spectower"):
        open_database(path)
    con = sqlite3.connect(path)
    assert con.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone() == ("99",)
    con.close()


def test_foreign_database_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY)")
    con.commit()
    con.close()
    with pytest.raises(SchemaError, match="not a spectower database"):
        open_database(path)


def test_v2_file_gets_the_counter_tables_and_keeps_its_data(tmp_path: Path) -> None:
    # A v2 database: what this version creates, less the v3 tables and v4 columns, stamped 2.
    path = tmp_path / "v2.db"
    stamped(
        path,
        2,
        """
        ALTER TABLE control_event DROP COLUMN request_id;
        ALTER TABLE control_event DROP COLUMN note;
        DROP TABLE engine_counter_sample;
        DROP TABLE engine_counter_rollup;
        DROP TABLE engine_chunk;
        DROP TABLE gpu_chunk;
        DROP TABLE server_pause;
        INSERT INTO server (id, url, first_seen, last_seen) VALUES (1, 'http://v2:30000', 100.0, 200.0);
        INSERT INTO engine_sample (server_id, dp_rank, ts, num_running_reqs) VALUES (1, 0, 150.0, 3.0);
        """,
    )
    db = open_database(path)
    try:
        assert db.schema_version == SCHEMA_VERSION
        assert queries.counter_intervals(db, 1, 0.0, 300.0) == []
        assert [r.num_running_reqs for r in queries.latest_engine_samples(db)] == [3.0]
    finally:
        db.close()
    assert (tmp_path / "v2.db.schema-v2.bak").exists()
    assert schema_of(f"sqlite:///{path}") == schema_of(f"sqlite:///{tmp_path / 'fresh.db'}")


def test_v3_file_gets_the_audit_columns_and_its_notes_read_as_notes(tmp_path: Path) -> None:
    """v4 (#34): a confirmed set's note (the lock it took) has a column of its own; a v3 row kept it in
    ``error``, and ``control events`` shows it as the note it is, not as an error."""
    path = tmp_path / "v3.db"
    stamped(
        path,
        3,
        """
        ALTER TABLE control_event DROP COLUMN request_id;
        ALTER TABLE control_event DROP COLUMN note;
        DROP TABLE engine_chunk;
        DROP TABLE gpu_chunk;
        DROP TABLE server_pause;
        INSERT INTO control_event (ts, actor, server_url, action, old_max_bs, new_max_bs, reason, confirmed,
                                   error)
        VALUES (100.0, 'operator:alice', 'http://v3:30000', 'set', 16, 0, 'incident', 1,
                'manual lock until released');
        """,
    )
    db = open_database(path)
    try:
        assert db.schema_version == SCHEMA_VERSION
        (row,) = queries.control_events(db)
        assert (row.error, row.note, row.request_id) == ("manual lock until released", None, None)
    finally:
        db.close()
    assert (tmp_path / "v3.db.schema-v3.bak").exists()
    assert schema_of(f"sqlite:///{path}") == schema_of(f"sqlite:///{tmp_path / 'fresh.db'}")
    res = CliRunner().invoke(app, ["control", "events", "--db", str(path)])
    assert res.exit_code == 0, res.output
    line = " ".join(res.output.split())
    assert "set 16 -> 0 ok http://v3:30000: incident note: manual lock until released" in line, line
    assert "error" not in line


def test_v6_file_gets_what_the_policy_says_and_keeps_what_it_learned(tmp_path: Path) -> None:
    """v7: ``policy_state`` holds what the running policy says now (``said``, since ``said_ts``); a v6 row
    keeps its learned state and says nothing until its runner's next line."""
    path = tmp_path / "v6.db"
    stamped(
        path,
        6,
        """
        ALTER TABLE policy_state DROP COLUMN said;
        ALTER TABLE policy_state DROP COLUMN said_ts;
        INSERT INTO policy_state (server_url, updated_ts, mode, state_json)
        VALUES ('http://v6:30000', 100.0, 'learn', '{"policy": "learn"}');
        """,
    )
    with open_database(path) as db:
        assert db.schema_version == SCHEMA_VERSION
        row = queries.policy_state(db, "http://v6:30000")
        assert row is not None and row.state_json == '{"policy": "learn"}'
        assert (row.said, row.said_ts) == (None, None)
        queries.save_policy_said(db, "http://v6:30000", said="hold: counters too thin", ts=120.0)
        queries.save_policy_said(db, "http://unknown:30000", said="hold: nothing", ts=120.0)  # no row: none
        row = queries.policy_state(db, "http://v6:30000")
        assert row is not None and (row.said, row.said_ts) == ("hold: counters too thin", 120.0)
        assert row.updated_ts == 100.0
        assert queries.policy_state(db, "http://unknown:30000") is None
    assert (tmp_path / "v6.db.schema-v6.bak").exists()
    assert schema_of(f"sqlite:///{path}") == schema_of(f"sqlite:///{tmp_path / 'fresh.db'}")
