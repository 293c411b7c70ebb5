"""Every piece of SQL that differs between SQLite and PostgreSQL lives here, nowhere else.

The rest of ``storage`` speaks SQLAlchemy Core/ORM and calls these helpers for the few places where
the dialects disagree: connection pragmas, transaction locking, integer bucketing of a float time, an
insert that skips a duplicate.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import BigInteger, Engine, Insert, Table, event, func, literal_column
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection
from sqlalchemy.sql.elements import ColumnElement

DEFAULT_BUSY_TIMEOUT_MS = 10_000


def error_line(exc: BaseException, limit: int = 300) -> str:
    """What the database said, as one line: the driver's own message (SQLAlchemy's wrapper adds the
    statement and a link; drivers word it per dialect), its first line, at most ``limit`` characters."""
    text = str(getattr(exc, "orig", None) or exc) or type(exc).__name__
    return text.splitlines()[0][:limit]


SQLITE_MAGIC = b"SQLite format 3\x00"


def is_sqlite_file(path: Path) -> bool:
    """Whether the file at ``path`` starts as every SQLite database does."""
    with open(path, "rb") as fh:
        return fh.read(len(SQLITE_MAGIC)) == SQLITE_MAGIC


def sqlite_file_is_ours(path: Path) -> bool:
    """Whether the file at ``path`` is a SQLite database holding spectower's ``meta`` table, read without
    writing a byte (an empty file is a valid empty database to SQLite, and opening one would make it so)."""
    if not is_sqlite_file(path):
        return False
    with contextlib.closing(sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)) as conn:
        found = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta'").fetchone()
    return found is not None


def is_sqlite(engine_or_conn: Engine | Connection) -> bool:
    return engine_or_conn.dialect.name == "sqlite"


# PostgreSQL: how long a connection attempt, a silent peer and a lock wait may take. A server that vanished
# (no RST: a blackholed route, a frozen VM) would otherwise hold the writer thread, a console page or the
# policy for as long as the kernel keeps the socket; a lock wait is bounded like SQLite's busy timeout.
PG_CONNECT_TIMEOUT_S = 10
PG_TCP_USER_TIMEOUT_MS = 30_000  # unacknowledged data on a connection: the server is gone
PG_KEEPALIVE = {"keepalives": 1, "keepalives_idle": 30, "keepalives_interval": 10, "keepalives_count": 3}


def engine_kwargs(url: str, busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS) -> dict[str, Any]:
    """Extra ``create_engine`` arguments for a URL."""
    if url.startswith("sqlite"):
        # Threads share the pool (the writer thread, reader threads of the console).
        return {"connect_args": {"check_same_thread": False}}
    connect_args: dict[str, Any] = {
        "connect_timeout": PG_CONNECT_TIMEOUT_S,
        "tcp_user_timeout": PG_TCP_USER_TIMEOUT_MS,
        **PG_KEEPALIVE,
        "options": f"-c lock_timeout={int(busy_timeout_ms)}",
    }
    return {"pool_pre_ping": True, "connect_args": connect_args}


def install(engine: Engine, busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS) -> None:
    """Per-connection setup: on SQLite WAL (readers never blocked by the writer), a busy timeout,
    foreign keys, and our own BEGIN so a writer can take the write lock up front (``BEGIN IMMEDIATE``)
    instead of failing to upgrade a read lock halfway through a transaction."""
    if not is_sqlite(engine):
        return

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None  # we emit BEGIN ourselves (see _on_begin)
        cur = dbapi_conn.cursor()
        if engine.url.database not in (None, "", ":memory:"):
            cur.execute("PRAGMA journal_mode=WAL")
        cur.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
        cur.execute("PRAGMA foreign_keys=ON")
        # WAL + NORMAL: a process crash (even SIGKILL) loses no committed transaction; only an OS crash
        # or power cut may lose the last few. That is the right trade for 1 Hz samples.
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        mode = conn.get_execution_options().get("sqlite_begin", "DEFERRED")
        conn.exec_driver_sql(f"BEGIN {mode}")


def write_options(engine: Engine) -> dict[str, Any]:
    """Execution options for a connection that is going to write (take the lock at BEGIN)."""
    return {"sqlite_begin": "IMMEDIATE"} if is_sqlite(engine) else {}


@contextmanager
def write_transaction(engine: Engine) -> Iterator[Connection]:
    """A connection in a transaction that takes the write lock at BEGIN (so it cannot hit SQLITE_BUSY
    halfway); commits when the block ends, rolls back on an exception."""
    with engine.connect().execution_options(**write_options(engine)) as conn, conn.begin():
        yield conn


def insert_ignoring_duplicates(dialect_name: str, table: Table) -> Insert:
    """An INSERT of ``table`` that skips a row one of its unique keys already holds (``ON CONFLICT DO
    NOTHING``: SQLite 3.24 and PostgreSQL spell it alike, through their own SQLAlchemy constructs)."""
    if dialect_name == "postgresql":
        return postgresql.insert(table).on_conflict_do_nothing()
    if dialect_name == "sqlite":
        return sqlite.insert(table).on_conflict_do_nothing()
    raise ValueError(f"insert_ignoring_duplicates: no rule for the {dialect_name!r} dialect")


def lock_schema(conn: Connection) -> None:
    """Serialise schema creation/migration between processes opening the same database at once.
    SQLite: the connection was begun IMMEDIATE (``write_options``). PostgreSQL: an advisory lock."""
    if conn.dialect.name == "postgresql":
        conn.exec_driver_sql("SELECT pg_advisory_xact_lock(7403112)")


def lock_for_rollup(conn: Connection, sample_table: str) -> None:
    """Make the sample table's highest id a safe rollup watermark for the rest of the transaction.

    PostgreSQL hands out ids from a sequence when a row is inserted, but the rows commit in any order:
    with several writers (collectors), id 101 may be visible while id 100 is still uncommitted, and a
    watermark of 101 would skip row 100 for ever. ``EXCLUSIVE`` waits for every open insert into the
    table to finish (an insert holds ``ROW EXCLUSIVE`` from before it draws its id) and holds new ones
    off until the rollup commits, so every id up to max(id) is then committed. SQLite: the rollup
    transaction began IMMEDIATE (``write_options``), which already excludes every other writer."""
    if conn.dialect.name == "postgresql":
        conn.exec_driver_sql(f'LOCK TABLE "{sample_table}" IN EXCLUSIVE MODE')


def bucket_index(dialect: str, ts: ColumnElement[Any], origin: float, width: float) -> ColumnElement[Any]:
    """floor((ts - origin) / width) as an integer, for ``ts >= origin``.

    SQLite's CAST(x AS INTEGER) truncates (= floor for x >= 0); PostgreSQL's CAST rounds, so it
    needs an explicit FLOOR first."""
    # Numbers inlined (they are ours, never user text) so that the same expression in SELECT and
    # GROUP BY compares equal on PostgreSQL, which cannot match two separate bound parameters.
    expr = (ts - literal_column(repr(float(origin)))) / literal_column(repr(float(width)))
    if dialect == "postgresql":
        expr = func.floor(expr)
    return expr.cast(BigInteger())


def off_index(column: ColumnElement[Any]) -> ColumnElement[Any]:
    """``column + 0``: the same value, which no index covers. For reads of the rows past a rollup
    watermark (found by primary-key range): compared on the bare columns, both dialects' planners walk
    the (source, ts) index over the whole window instead (SQLite: 220 ms for 7 days of counters, to find
    no row)."""
    return column + literal_column("0")


def integrity_check(conn: Connection) -> str:
    """'ok' or the problems the database reports (SQLite only; other servers check themselves)."""
    if conn.dialect.name == "sqlite":
        rows = conn.exec_driver_sql("PRAGMA integrity_check").scalars().all()
        return "; ".join(str(r) for r in rows)
    return "ok"
