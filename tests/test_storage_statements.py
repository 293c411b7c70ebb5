"""The statements the collector's writes execute several times a second (a batch's inserts, a source's
health) are built once: the same statement object each time, whose compiled form SQLAlchemy finds by
identity instead of building and hashing a new statement per write (issue #36 item 4)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from spectower.storage import open_database, queries
from spectower.storage.models import EngineSample
from spectower.storage.writer import table_row
from sqlalchemy import event
from sqlalchemy.sql.dml import Insert, Update


def _executed(db: Any) -> list[Any]:
    seen: list[Any] = []
    event.listen(db.engine, "before_execute", lambda _conn, stmt, *_a: seen.append(stmt))
    return seen


def test_health_writes_reuse_one_statement_per_kind_of_outcome(tmp_path: Path) -> None:
    db = open_database(tmp_path / "db.sqlite")
    try:
        seen = _executed(db)
        for i in range(3):
            for ok, lag in ((True, 0.1), (True, None), (False, None), (False, 0.2)):
                queries.upsert_collector_health(
                    db, "sglang", f"http://s{i % 2}", ok=ok, ts=100.0 + i, error=f"e{i}", lag_s=lag
                )
        updates = [s for s in seen if isinstance(s, Update)]
        inserts = [s for s in seen if isinstance(s, Insert)]
        assert len(updates) == 12 and len({id(s) for s in updates}) == 4
        assert len(inserts) == 2  # the first write of each target
        rows = {h.target: h for h in queries.collector_health(db)}
        s0, s1 = rows["http://s0"], rows["http://s1"]
        assert (s0.errors_total, s0.last_error, s0.last_success_ts, s0.lag_s, s0.updated_ts) == (
            4, "e2", 102.0, 0.2, 102.0,
        )  # fmt: skip
        assert (s1.errors_total, s1.last_error, s1.last_success_ts, s1.lag_s) == (2, "e1", 101.0, 0.2)
    finally:
        db.close()


def test_a_first_health_write_that_failed_counts_one_error(tmp_path: Path) -> None:
    db = open_database(tmp_path / "db.sqlite")
    try:
        queries.upsert_collector_health(db, "dcgm", "http://g", ok=False, ts=5.0, error="refused")
        (h,) = queries.collector_health(db)
        assert (h.errors_total, h.last_error, h.last_success_ts, h.lag_s) == (1, "refused", None, None)
    finally:
        db.close()


def test_the_writer_inserts_a_table_with_the_same_statement_every_batch(tmp_path: Path) -> None:
    db = open_database(tmp_path / "db.sqlite")
    try:
        sid = db.server_id("http://s")
        seen = _executed(db)
        writer = db.writer()
        for batch in range(3):
            writer.put(
                *(table_row(EngineSample, server_id=sid, dp_rank=0, ts=batch * 10.0 + i) for i in range(4))
            )
            assert writer.flush(timeout=30)
        inserts = [s for s in seen if isinstance(s, Insert) and s.table.name == "engine_sample"]
        assert len(inserts) == 3 and len({id(s) for s in inserts}) == 1
    finally:
        db.close()
