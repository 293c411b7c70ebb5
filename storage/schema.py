"""Schema version, creation and forward migrations.

The version lives in ``meta`` (key ``schema_version``). ``ensure_schema`` runs on every open:

- an empty database gets the current schema and is stamped ``SCHEMA_VERSION``;
- an older one is migrated forward step by step (v1 -> v2 -> ...), every step in the same transaction
  as its new stamp, after a file copy of an SQLite database is kept beside it (``<file>.schema-v1.bak``);
- a newer one (written by a newer spectower) or a foreign database is refused with a clear error.
  Nothing is ever dropped and recreated.

History:
- v1: the first released schema (``storage/schema_v1_sqlite.sql`` is its frozen SQLite DDL).
- v2: rollup tables (``engine_rollup``, ``gpu_rollup``, ``rollup_state``), ``bench_run.source_sha256``
  (+ index), index ``ix_control_event_ts``.
- v3: the engine's decode counters per scrape interval (``engine_counter_sample`` + index) and their
  rollups (``engine_counter_rollup``).
- v4: ``control_event.request_id`` (the knob request, for who holds a lock) and ``control_event.note``
  (what a confirmed row says, which v3 kept in ``error``).
- v5: sealed sample chunks (``engine_chunk``, ``gpu_chunk`` + indexes; storage/sealed.py). The sample
  tables stay as they are and become the head; the writer's first maintenance seals what they hold.
- v6: the pauses of a server's processes the plugin reports (``server_pause`` + indexes: scheduler stalls,
  long collections, the launcher's held Python), kept beside the latency they explain.
- v7: ``policy_state.said`` and ``policy_state.said_ts``: what a running policy says now (its hold's
  reason: why it does not move), since when, for the console.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

from sqlalchemy import Engine, Index, inspect, select, text
from sqlalchemy.engine import Connection
from sqlmodel import SQLModel

from . import dialect, models

SCHEMA_VERSION = 7
SCHEMA_VERSION_KEY = "schema_version"


class SchemaError(ValueError):
    """The database cannot be used by this version of spectower (too new, foreign, or broken)."""


def _index(table: str, name: str) -> Index:
    for ix in SQLModel.metadata.tables[table].indexes:
        if ix.name == name:
            return ix
    raise KeyError(name)


def _v1_to_v2(conn: Connection) -> None:
    conn.execute(text("ALTER TABLE bench_run ADD COLUMN source_sha256 VARCHAR"))
    _index("bench_run", "ix_bench_run_source_sha256").create(conn, checkfirst=True)
    _index("control_event", "ix_control_event_ts").create(conn, checkfirst=True)
    # The rollups start empty; rollup_state has no watermark, so the first maintenance run folds in
    # every raw sample the old database already holds.
    for table in (models.engine_rollup, models.gpu_rollup, models.rollup_state):
        table.create(conn, checkfirst=True)


def _v2_to_v3(conn: Connection) -> None:
    # New tables only; older servers' history has no counters, so they start empty.
    models.EngineCounterSample.__table__.create(conn, checkfirst=True)  # type: ignore[attr-defined]
    models.engine_counter_rollup.create(conn, checkfirst=True)


def _v3_to_v4(conn: Connection) -> None:
    # New nullable columns: older rows have no request id, and their notes stay where v3 wrote them
    # (control.audit.remarks shows a confirmed row's error as its note).
    conn.execute(text("ALTER TABLE control_event ADD COLUMN request_id BIGINT"))
    conn.execute(text("ALTER TABLE control_event ADD COLUMN note VARCHAR"))


def _v4_to_v5(conn: Connection) -> None:
    # New tables only: the rows stay in the sample tables (now the head) until the writer seals them, a
    # chunk per series and time range at a time, each in its own transaction (storage/sealed.py).
    models.engine_chunk.create(conn, checkfirst=True)
    models.gpu_chunk.create(conn, checkfirst=True)


def _v5_to_v6(conn: Connection) -> None:
    # A new table only: the pauses before the upgrade were never stored, and the plugin's newest few are
    # stored at the collector's next /server_info read.
    models.ServerPause.__table__.create(conn, checkfirst=True)  # type: ignore[attr-defined]


def _v6_to_v7(conn: Connection) -> None:
    # Nullable columns: a policy that ran before the upgrade said nothing the database kept. Where they are
    # there already (a database built from these models and stamped older), as the table steps' checkfirst.
    have = {c["name"] for c in inspect(conn).get_columns("policy_state")}
    for name, kind in (("said", "VARCHAR"), ("said_ts", "FLOAT")):
        if name not in have:
            conn.execute(text(f"ALTER TABLE policy_state ADD COLUMN {name} {kind}"))


# MIGRATIONS[v] turns a version-v database into version v+1.
MIGRATIONS: dict[int, Callable[[Connection], None]] = {
    1: _v1_to_v2, 2: _v2_to_v3, 3: _v3_to_v4, 4: _v4_to_v5, 5: _v5_to_v6, 6: _v6_to_v7,
}  # fmt: skip


def read_version(conn: Connection) -> int | None:
    if "meta" not in inspect(conn).get_table_names():
        return None
    meta = SQLModel.metadata.tables["meta"]
    raw = conn.execute(select(meta.c.value).where(meta.c.key == SCHEMA_VERSION_KEY)).scalar_one_or_none()
    if raw is None:
        return None
    try:
        return int(raw)
    except ValueError as exc:
        raise SchemaError(f"meta.schema_version is not an integer: {raw!r}") from exc


def _stamp(conn: Connection, key: str, value: str) -> None:
    table = SQLModel.metadata.tables["meta"]
    updated = conn.execute(table.update().where(table.c.key == key).values(value=value)).rowcount
    if not updated:
        conn.execute(table.insert().values(key=key, value=value))


def _backup_sqlite(engine: Engine, version: int) -> Path | None:
    path = engine.url.database
    if engine.dialect.name != "sqlite" or not path or path == ":memory:":
        return None
    dest = Path(f"{path}.schema-v{version}.bak")
    src = sqlite3.connect(path)
    try:
        out = sqlite3.connect(dest)
        try:
            src.backup(out)
        finally:
            out.close()
    finally:
        src.close()
    return dest


def ensure_schema(engine: Engine) -> int:
    """Create or migrate the schema; returns the version the database is at now (``SCHEMA_VERSION``)."""
    with engine.connect() as conn:
        existing = set(inspect(conn).get_table_names())
        version = read_version(conn) if existing else None
        conn.rollback()
    if version is not None and version > SCHEMA_VERSION:
        raise SchemaError(
            f"database schema_version {version} is newer than this spectower understands "
            f"(up to {SCHEMA_VERSION}); upgrade spectower instead of opening it with this one"
        )
    if version is not None and version < SCHEMA_VERSION:
        _backup_sqlite(engine, version)

    with dialect.write_transaction(engine) as conn:
        dialect.lock_schema(conn)
        existing = set(inspect(conn).get_table_names())
        if not existing:
            SQLModel.metadata.create_all(conn)
            _stamp(conn, SCHEMA_VERSION_KEY, str(SCHEMA_VERSION))
            _stamp(conn, "created_at", repr(time.time()))
            return SCHEMA_VERSION
        version = read_version(conn)  # again, under the lock: another process may have migrated
        if version is None:
            shown = ", ".join(sorted(existing)[:6])
            raise SchemaError(
                f"the database has tables ({shown}) but no meta.schema_version: not a spectower database"
            )
        if version > SCHEMA_VERSION:
            raise SchemaError(
                f"database schema_version {version} is newer than this spectower understands "
                f"(up to {SCHEMA_VERSION}); upgrade spectower instead of opening it with this one"
            )
        if version < 1:
            raise SchemaError(f"meta.schema_version {version} is not a version spectower ever wrote")
        for step in range(version, SCHEMA_VERSION):
            MIGRATIONS[step](conn)
            _stamp(conn, SCHEMA_VERSION_KEY, str(step + 1))
            _stamp(conn, f"migrated_v{step}_to_v{step + 1}_at", repr(time.time()))
        return SCHEMA_VERSION
