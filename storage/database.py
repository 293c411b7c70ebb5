"""``open_database`` and ``Database``: the engine, the schema, identities (servers, GPUs), sessions."""

from __future__ import annotations

import contextlib
import json
import logging
import lzma
import os
import shutil
import sqlite3
import tempfile
import threading
import time
import zlib
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, inspect, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, IntegrityError, NoSuchModuleError, SQLAlchemyError
from sqlmodel import Session, SQLModel, col, select

from . import bench, dialect, models, retention, rollups, schema, sealed
from .locate import DatabaseURLError, locate_database
from .redact import redact
from .retention import DEFAULT_RETENTION_INTERVAL_S, RetentionPolicy
from .snapshots import stable_server_info_hash
from .writer import BatchWriter

log = logging.getLogger(__name__)

# last_seen is refreshed at most this often per server/GPU unless a fact changed (saves a write per scrape).
DEFAULT_LAST_SEEN_RESOLUTION_S = 30.0

_SERVER_FACTS = frozenset(
    {"served_model_name", "sglang_version", "launch_command", "max_running_requests", "speculative_algorithm"}
)
_GPU_FACTS = frozenset(
    {"name", "memory_total_mib", "power_limit_w", "driver_version", "cuda_version", "source", "index"}
)


class CollectorConflictError(ValueError):
    """Another collector already writes to this database (SQLite) or collects this source (PostgreSQL)."""


# PostgreSQL advisory locks: (namespace, crc32 of "source target") per collected source.
_PG_SOURCE_LOCK_NAMESPACE = 7403113


class CollectorClaim:
    """What one collector holds while it runs: on SQLite an exclusive lock on ``<db>.collector.lock``
    (one collector per file; the OS drops it when the process dies, kill -9 included); on PostgreSQL a
    session advisory lock per source on a connection of its own (several collectors, each owning its
    sources). ``release()`` (or the end of the process) lets go."""

    def __init__(self, fd: int | None = None, conn: Any = None) -> None:
        self._fd = fd
        self._conn = conn

    def release(self) -> None:
        if self._fd is not None:
            import fcntl

            with contextlib.suppress(OSError):
                fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.exec_driver_sql("SELECT pg_advisory_unlock_all()")
            with contextlib.suppress(Exception):
                self._conn.invalidate()  # never back to the pool with a lock held
            with contextlib.suppress(Exception):
                self._conn.close()
            self._conn = None

    def __enter__(self) -> CollectorClaim:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def default_db_url(explicit: str | None = None) -> str:
    """The database every command uses: ``database_choice``'s URL."""
    return database_choice(explicit)[0]


def database_choice(explicit: str | None = None) -> tuple[str, str]:
    """The database every command uses and why (storage.locate's precedence: ``explicit`` (``--db``), env
    ``SPECTOWER_DB``, a config file, the running demo's, ``./spectower.db``). Plain paths become
    ``sqlite:///<absolute path>``."""
    if explicit is not None and not explicit.strip():
        raise DatabaseURLError("--db: empty database URL or path (leave --db out for the default)")
    choice = locate_database(explicit)
    url = normalize_url(choice.value)
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite" and parsed.database in (None, "", ":memory:"):
        raise DatabaseURLError(
            f"--db: {choice.value!r} is an in-memory SQLite database: nothing would be kept; give a file path"
        )
    return url, choice.why


def shown_database(url: str) -> str:
    """A database URL as a user reads it: a SQLite file as its path (relative to the working directory when
    inside it), any other URL without its password."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite" and parsed.database:
        path = Path(parsed.database)
        with contextlib.suppress(ValueError):
            return str(path.relative_to(Path.cwd()))
        return str(path)
    return _shown(url).strip("'")


# SQLAlchemy backends spectower runs on, and the driver a bare scheme gets.
_BARE_SCHEMES = {"postgresql": "postgresql+psycopg", "postgres": "postgresql+psycopg"}
_SUPPORTED_BACKENDS = ("sqlite", "postgresql")


def normalize_url(value: str) -> str:
    value = value.strip()
    if not value:
        raise DatabaseURLError("--db: empty database URL")
    if "://" in value:
        scheme, rest = value.split("://", 1)
        # postgresql:// means SQLAlchemy's psycopg2 driver; spectower ships psycopg (3)
        value = f"{_BARE_SCHEMES.get(scheme.lower(), scheme)}://{rest}"
        try:
            parsed = make_url(value)
        except (ArgumentError, ValueError) as exc:  # ValueError: a port or an address that does not parse
            raise DatabaseURLError(f"--db: not a database URL: {_shown(value)} ({exc})") from None
        if parsed.get_backend_name() not in _SUPPORTED_BACKENDS:
            raise DatabaseURLError(
                f"--db: unknown database scheme {scheme!r} in {_shown(value)}; use a file path, "
                "sqlite:///PATH or postgresql://USER@HOST/DB"
            )
        return value
    path = Path(value).expanduser().resolve()
    return f"sqlite:///{path}"


def _check_existing_sqlite(path: Path) -> None:
    """A command that only reads (events, exports, compare) opens a database that is there: a mistyped path
    would otherwise be created empty, and any other file (an empty one included) made into a database."""
    if path.is_dir():
        raise DatabaseURLError(f"--db: cannot open {path}: a folder, not a database file")
    if not path.is_file():
        raise DatabaseURLError(
            f"--db: no database at {path} (spectower collect, control and bench sweep --save create one)"
        )
    try:
        ours = dialect.sqlite_file_is_ours(path)
    except (OSError, sqlite3.Error) as exc:
        raise DatabaseURLError(f"--db: cannot read {path}: {exc}") from None
    if not ours:
        raise DatabaseURLError(f"--db: {path} is not a spectower database")


def _shown(url: str) -> str:
    """A URL fit for an error message (no password)."""
    try:
        return repr(make_url(url).render_as_string(hide_password=True))
    except (ArgumentError, ValueError):  # unparsable: shown without its user part, which may hold a password
        scheme, _, rest = url.partition("://")
        return repr(f"{scheme}://{rest.rpartition('@')[2]}" if rest else url)


class Database:
    """One spectower database. Thread-safe; one instance per process is the intended use."""

    def __init__(
        self,
        url: str,
        *,
        echo: bool = False,
        busy_timeout_ms: int = dialect.DEFAULT_BUSY_TIMEOUT_MS,
        existing: bool = False,
    ) -> None:
        self.url = normalize_url(url)
        parsed = make_url(self.url)
        shown = _shown(self.url)
        # the SQLite file this open creates (None: it was there, or no file): ``discard_if_unused``
        self.created: Path | None = None
        if parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:"):
            parent = Path(parsed.database).parent
            if not Path(parsed.database).exists():
                self.created = Path(parsed.database)
            if not parent.is_dir():
                raise DatabaseURLError(f"--db: folder {parent} does not exist")
            if existing:
                _check_existing_sqlite(Path(parsed.database))
        try:
            kwargs = dialect.engine_kwargs(self.url, busy_timeout_ms)
            self.engine: Engine = create_engine(self.url, echo=echo, **kwargs)
        except ModuleNotFoundError as exc:
            pg = parsed.get_backend_name() == "postgresql"
            extra = " (pip install 'spectower[postgres]')" if pg else ""
            raise DatabaseURLError(
                f"--db: {shown} needs the {exc.name} driver, which is not installed{extra}"
            ) from None
        except (ArgumentError, NoSuchModuleError) as exc:
            raise DatabaseURLError(f"--db: cannot use {shown}: {exc}") from None
        dialect.install(self.engine, busy_timeout_ms)
        self.dialect_name: str = self.engine.dialect.name
        try:
            self.schema_version = schema.ensure_schema(self.engine)
        except (SQLAlchemyError, sqlite3.Error, OSError) as exc:
            self.engine.dispose()
            why = dialect.error_line(exc)
            hint = ""
            if parsed.get_backend_name() == "sqlite" and parsed.database:
                folder = Path(parsed.database).parent
                if not os.access(folder, os.W_OK) or (
                    Path(parsed.database).exists() and not os.access(parsed.database, os.W_OK)
                ):
                    hint = f" (no write permission on {folder} or the file: SQLite needs both)"
            raise DatabaseURLError(f"--db: cannot open {shown}: {why}{hint}") from None
        self._lock = threading.Lock()
        self._writer: BatchWriter | None = None
        # identity -> (row id, the facts written, when): see _identity
        self._server_cache: dict[Any, tuple[int, dict[str, Any], float]] = {}
        self._gpu_cache: dict[Any, tuple[int, dict[str, Any], float]] = {}
        # None: nothing is deleted automatically (a collector sets one; see maintain()).
        self.retention: RetentionPolicy | None = None
        self._retention_due = 0.0  # time.monotonic() of the next automatic retention pass

    def __repr__(self) -> str:
        return f"Database({self.engine.url.render_as_string(hide_password=True)!r})"

    # --- sessions ------------------------------------------------------------------------------
    @contextmanager
    def session(self, *, write: bool = False) -> Iterator[Session]:
        """A sqlmodel Session. Commits when the block ends normally, rolls back on an exception.
        ``write=True`` takes SQLite's write lock at BEGIN, so a read-then-write transaction cannot hit
        SQLITE_BUSY halfway (use it for small transactional writes such as audit rows)."""
        bind = self.engine.execution_options(**dialect.write_options(self.engine)) if write else self.engine
        with Session(bind, expire_on_commit=False) as s:
            try:
                yield s
                s.commit()
            except BaseException:
                s.rollback()
                raise

    # --- identities ----------------------------------------------------------------------------
    def server_id(self, url: str, *, ts: float | None = None, **facts: Any) -> int:
        """Get or create the Server row for ``url``; non-None ``facts`` (Server columns) update it."""
        unknown = set(facts) - _SERVER_FACTS
        if unknown:
            raise ValueError(
                f"server_id: unknown server fact(s) {sorted(unknown)}; known: {sorted(_SERVER_FACTS)}"
            )
        if not url:
            raise ValueError("server_id: url is empty")
        known = {k: v for k, v in facts.items() if v is not None}
        return self._identity(self._server_cache, url, models.Server, {"url": url}, known, ts)

    def gpu_id(self, host: str, index: int, uuid: str, *, ts: float | None = None, **facts: Any) -> int:
        """Get or create the Gpu row for (host, uuid); non-None ``facts`` (Gpu columns) update it."""
        known = _gpu_facts(host, index, uuid, facts)
        return self._identity(
            self._gpu_cache, (host, uuid), models.Gpu, {"host": host, "uuid": uuid}, known, ts
        )

    def gpu_id_in(self, s: Session, host: str, index: int, uuid: str, *, ts: float, **facts: Any) -> int:
        """``gpu_id`` inside the caller's transaction ``s`` (an import that writes all or nothing): the row
        is created or updated when ``s`` commits, or not at all. An IntegrityError (another process created
        the row meanwhile, PostgreSQL) ends ``s``'s transaction: the caller retries it whole."""
        known = _gpu_facts(host, index, uuid, facts)
        # the cached facts may no longer be the row's, and a rolled-back transaction voids a new row's id
        with self._lock:
            self._gpu_cache.pop((host, uuid), None)
        row_id, _ = _upsert_row(s, models.Gpu, {"host": host, "uuid": uuid}, known, ts)
        return row_id

    def _identity(
        self,
        cache: dict[Any, tuple[int, dict[str, Any], float]],
        key: Any,
        model: type[SQLModel],
        ident: dict[str, Any],
        facts: dict[str, Any],
        ts: float | None,
    ) -> int:
        """The row id for ``ident``, from ``cache`` while the facts are unchanged and last_seen is recent
        enough (a write per scrape saved), else upserted."""
        now = time.time() if ts is None else ts
        cached = cache.get(key)
        if (
            cached
            and all(cached[1].get(k) == v for k, v in facts.items())
            and now - cached[2] < DEFAULT_LAST_SEEN_RESOLUTION_S
        ):
            return cached[0]
        with self._lock:
            row_id, known = self._upsert(model, ident, facts, now)
            cache[key] = (row_id, known, now)
        return row_id

    def _upsert(
        self, model: type[SQLModel], ident: dict[str, Any], facts: dict[str, Any], now: float
    ) -> tuple[int, dict[str, Any]]:
        for attempt in range(2):
            try:
                with self.session(write=True) as s:
                    return _upsert_row(s, model, ident, facts, now)
            except IntegrityError:  # another process created it between our select and insert
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def record_server_info(self, server_id: int, info: dict[str, Any], ts: float | None = None) -> bool:
        """Keep a copy of /server_info when its stable part (``storage.snapshots``' hash) differs from the
        server's latest snapshot. Returns True when a snapshot was stored."""
        if not isinstance(info, dict):
            raise ValueError("record_server_info: info must be the /server_info JSON object")
        now = time.time() if ts is None else ts
        info = redact(info)  # SGLang's /server_info lists its own api keys
        digest = stable_server_info_hash(info)
        snap = models.ServerInfoSnapshot
        with self.session(write=True) as s:
            latest = s.exec(
                select(snap.info_hash)
                .where(snap.server_id == server_id)
                .order_by(col(snap.ts).desc(), col(snap.id).desc())
                .limit(1)
            ).first()
            if latest == digest:
                return False
            blob = json.dumps(info, default=str)
            s.add(snap(server_id=server_id, ts=now, info_hash=digest, info_json=blob))
        return True

    # --- collectors ----------------------------------------------------------------------------
    def claim_collector(self, sources: Sequence[tuple[str, str]]) -> CollectorClaim:
        """Claim the right to collect ``sources`` ((source, target) pairs) into this database, or raise
        ``CollectorConflictError`` saying who holds it. SQLite: one collector per database file.
        PostgreSQL: one collector per source; several collectors with different sources work side by
        side. Other backends (and in-memory SQLite): nothing to claim."""
        parsed = make_url(self.url)
        if self.dialect_name == "sqlite":
            if parsed.database in (None, "", ":memory:"):
                return CollectorClaim()
            return _claim_sqlite_file(Path(parsed.database))
        if self.dialect_name != "postgresql":
            return CollectorClaim()
        conn = self.engine.connect()
        try:
            for source, target in sorted(set(sources)):
                key = zlib.crc32(f"{source} {target}".encode()) - 2**31  # int4 range
                got = conn.exec_driver_sql(
                    f"SELECT pg_try_advisory_lock({_PG_SOURCE_LOCK_NAMESPACE}, {int(key)})"
                ).scalar_one()
                if not got:
                    raise CollectorConflictError(
                        f"another collector already collects {source} {target} into {self!r}; "
                        "each source belongs to one collector (stop the other one, or drop this source)"
                    )
            conn.commit()
        except BaseException:
            CollectorClaim(conn=conn).release()
            raise
        return CollectorClaim(conn=conn)

    # --- writing samples -----------------------------------------------------------------------
    def writer(self, **options: Any) -> BatchWriter:
        """The database's single BatchWriter (created on first call; ``options`` apply then only).
        It also runs ``maintain`` every minute, on its own thread (the one writer)."""
        with self._lock:
            if self._writer is None or not self._writer.alive:
                options.setdefault("maintenance", self.maintain)
                self._writer = BatchWriter(self.engine, **options)
            return self._writer

    def insert_many(self, table: str, rows: Iterable[dict[str, Any]], *, chunk: int = 5_000) -> int:
        """Bulk-load ``rows`` (column -> value) into ``table`` in one transaction, ``chunk`` rows per
        statement; returns how many. For imports and synthetic histories: a live collector's samples go
        through the writer (its bound, its retries)."""
        target = SQLModel.metadata.tables[table]
        n, batch = 0, []
        with dialect.write_transaction(self.engine) as conn:
            for row in rows:
                batch.append(row)
                if len(batch) >= chunk:
                    conn.execute(target.insert(), batch)
                    n, batch = n + len(batch), []
            if batch:
                conn.execute(target.insert(), batch)
                n += len(batch)
        return n

    # --- maintenance (implemented in storage.rollups / storage.retention, on this engine) ---------
    def update_rollups(self, now: float | None = None) -> int:
        """Fold raw samples written since the last call into the 1-minute and 1-hour rollups."""
        return rollups.update_rollups(self.engine, now=now)

    def seal(self, **options: Any) -> int:
        """Move the head's older rows, already folded into the rollups, into chunks (storage/sealed.py;
        ``options``: ``sealed.seal``'s keywords); returns how many rows were sealed."""
        return rollups.seal_heads(self.engine, **options)

    def maintain(self) -> bool:
        """Fold new samples into the rollups and seal what is due, at most ``sealed.DEFAULT_STEP_ROWS``
        rows of it; with ``retention`` set, also delete what is past its horizon, at most once per
        ``DEFAULT_RETENTION_INTERVAL_S`` (the first call does it). Returns whether more may be due to
        seal (the writer then calls again after its next batch, not a minute later)."""
        policy = self.retention
        if policy is None or time.monotonic() < self._retention_due:
            self.update_rollups()
        else:
            self._retention_due = time.monotonic() + DEFAULT_RETENTION_INTERVAL_S
            # apply_retention folds the rollups first, so nothing is deleted unsummarised
            deleted = self.apply_retention(policy.raw_days, policy.rollup_days, policy.hourly_days)
            if any(deleted.values()):
                log.info("retention: deleted %s", ", ".join(f"{k}={v}" for k, v in deleted.items() if v))
        return self.seal(budget=sealed.DEFAULT_STEP_ROWS) >= sealed.DEFAULT_STEP_ROWS

    def apply_retention(
        self,
        raw_days: float | None = None,
        rollup_days: float | None = None,
        hourly_days: float | None = None,
        now: float | None = None,
    ) -> dict[str, int]:
        """Delete raw samples older than ``raw_days``, 1-minute rollups older than ``rollup_days``,
        1-hour rollups older than ``hourly_days`` (None: the DEFAULT_* of spectower.storage.retention)."""
        return retention.apply_retention(
            self.engine, raw_days=raw_days, rollup_days=rollup_days, hourly_days=hourly_days, now=now
        )

    def save_bench_run(self, run: models.BenchRun, points: list[models.BenchPoint]) -> int:
        """Insert a run and its points in one transaction; returns the run id."""
        return self.save_bench_runs([(run, points)])[0]

    def save_bench_runs(self, runs: list[tuple[models.BenchRun, list[models.BenchPoint]]]) -> list[int]:
        """Insert several runs with their points in one transaction (a file holding several runs);
        returns their ids. On any error nothing is written."""
        with self.session(write=True) as s:
            return bench.save_bench_runs(s, runs)

    # --- health --------------------------------------------------------------------------------
    def integrity_check(self) -> str:
        with self.engine.connect() as conn:
            return dialect.integrity_check(conn)

    def close(self) -> None:
        with self._lock:
            writer, self._writer = self._writer, None
        if writer is not None:
            writer.close()
        self.engine.dispose()

    def discard_if_unused(self) -> bool:
        """Close, and remove the SQLite file this open created if no table but ``meta`` holds a row: a
        command that failed before it wrote anything (a server that never answered) leaves no empty
        database behind in the folder it ran in. True when removed."""
        if self.created is None:
            self.close()
            return False
        with self.engine.connect() as conn:
            tables = [t for t in inspect(conn).get_table_names() if t != "meta"]
            used = any(conn.execute(text(f'SELECT 1 FROM "{t}" LIMIT 1')).first() for t in tables)
        self.close()
        if used:
            return False
        for suffix in ("", "-wal", "-shm", "-journal"):
            Path(f"{self.created}{suffix}").unlink(missing_ok=True)
        return True

    def __enter__(self) -> Database:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _gpu_facts(host: str, index: int, uuid: str, facts: dict[str, Any]) -> dict[str, Any]:
    """The Gpu columns to write for ``gpu_id``'s arguments (unknown facts and empty names refused)."""
    unknown = set(facts) - _GPU_FACTS
    if unknown:
        raise ValueError(f"gpu_id: unknown GPU fact(s) {sorted(unknown)}; known: {sorted(_GPU_FACTS)}")
    if not host or not uuid:
        raise ValueError("gpu_id: host and uuid must be non-empty")
    return {k: v for k, v in facts.items() if v is not None} | {"index": int(index)}


def _upsert_row(
    s: Session, model: type[SQLModel], ident: dict[str, Any], facts: dict[str, Any], now: float
) -> tuple[int, dict[str, Any]]:
    """In ``s``: the row of ``model`` matching ``ident`` created (seen ``now``) or its ``facts`` updated;
    (its id, the facts as written)."""
    stmt = select(model)
    for k, v in ident.items():
        stmt = stmt.where(getattr(model, k) == v)
    row = s.exec(stmt).first()
    if row is None:
        row = model(**ident, **facts, first_seen=now, last_seen=now)
        s.add(row)
    else:
        for k, v in facts.items():
            setattr(row, k, v)
        row.last_seen = max(row.last_seen, now)  # type: ignore[attr-defined]
    s.flush()
    known = {k: getattr(row, k) for k in facts}
    return int(row.id), known  # type: ignore[attr-defined]


def _claim_sqlite_file(db_path: Path) -> CollectorClaim:
    import fcntl

    lock_path = Path(f"{db_path}.collector.lock")
    try:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise CollectorConflictError(
            f"--db: cannot create the collector lock {lock_path}: {exc.strerror}"
        ) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        raise CollectorConflictError(
            f"another collector (pid {holder}) is already writing to {db_path}: one collector per SQLite "
            "database (stop it first; for several collectors use PostgreSQL)"
        ) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return CollectorClaim(fd=fd)


def open_database(
    url: str | os.PathLike[str] | None = None,
    *,
    echo: bool = False,
    busy_timeout_ms: int = dialect.DEFAULT_BUSY_TIMEOUT_MS,
    existing: bool = False,
) -> Database:
    """Open (create, migrate) the database at ``url`` (SQLAlchemy URL or plain path; None: the default).
    ``busy_timeout_ms``: how long one statement waits for another writer's lock before the BatchWriter
    backs off and retries (SQLite). ``existing``: a SQLite file must be there and be spectower's (for the
    commands that only read)."""
    # an explicit URL may be anything SQLAlchemy takes (sqlite:// in memory too); None is the CLI default
    resolved = default_db_url() if url is None else normalize_url(os.fspath(url))
    return Database(resolved, echo=echo, busy_timeout_ms=busy_timeout_ms, existing=existing)


RECORDED_XZ = ".xz"  # data/gpu-runs/ keeps a run's databases as NAME.db.xz (xz -9: SQLite packs ~5x)


def recorded_copy(path: str | os.PathLike[str], dest_dir: str | os.PathLike[str]) -> Path:
    """A recorded database file (a GPU run's, a capture) copied into ``dest_dir`` as ``NAME.db``, to be opened
    there; returns the copy's path. ``path`` names ``NAME.db`` or ``NAME.db.xz`` (the way data/gpu-runs/
    keeps them): the file named is read where it is there, else the other one, and a ``.xz`` one is
    decompressed. Opening migrates a database to this spectower's schema in place, and a recorded one is data
    whose bytes stay as recorded (data/gpu-runs/MANIFEST.csv): open the copy, never the recorded file."""
    given = Path(path)
    plain = given.with_suffix("") if given.suffix == RECORDED_XZ else given
    packed = plain.with_name(plain.name + RECORDED_XZ)
    first, other = (packed, plain) if given == packed else (plain, packed)
    source = first if first.is_file() else other
    if not source.is_file():
        raise FileNotFoundError(f"{given}: no such database file (nor {other.name})")
    copy = Path(dest_dir) / plain.name
    copy.parent.mkdir(parents=True, exist_ok=True)
    if source == packed:
        with lzma.open(source) as src, copy.open("wb") as out:
            shutil.copyfileobj(src, out)
    else:
        shutil.copyfile(source, copy)
    return copy


@contextmanager
def open_recorded(path: str | os.PathLike[str]) -> Iterator[Database]:
    """A recorded database file (``NAME.db`` or ``NAME.db.xz``, ``recorded_copy``) opened from a copy for
    reading; the copy goes with the context."""
    with (
        tempfile.TemporaryDirectory(prefix="spectower-recorded-") as tmp,
        open_database(recorded_copy(path, tmp), existing=True) as db,
    ):
        yield db
