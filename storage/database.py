"""``open_database`` and ``Database``: the engine, the schema, identities (servers, GPUs), sessions."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from spectower.storage import dialect, models, schema
from spectower.storage.redact import redact
from spectower.storage.retention import DEFAULT_RETENTION_INTERVAL_S, RetentionPolicy
from spectower.storage.writer import BatchWriter
from sqlalchemy import Engine, create_engine
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, IntegrityError
from sqlmodel import Session, SQLModel, col, select

log = logging.getLogger(__name__)

DB_ENV_VAR = "SPECTOWER_DB"
DEFAULT_DB_PATH = "spectower.db"
# last_seen is refreshed at most this often per server/GPU unless a fact changed (saves a write per scrape).
DEFAULT_LAST_SEEN_RESOLUTION_S = 30.0
# /server_info keys that change from one scrape to the next; a snapshot is kept only when the rest changes.
VOLATILE_SERVER_INFO_KEYS = frozenset({"internal_states", "last_gen_throughput", "timestamp", "load"})

_SERVER_FACTS = frozenset(
    {"served_model_name", "sglang_version", "launch_command", "max_running_requests", "speculative_algorithm"}
)
_GPU_FACTS = frozenset(
    {"name", "memory_total_mib", "power_limit_w", "driver_version", "cuda_version", "source", "index"}
)


class DatabaseURLError(ValueError):
    """The --db / SPECTOWER_DB value is not a usable database URL or path."""


def default_db_url(explicit: str | None = None) -> str:
    """The database every command uses: ``explicit`` (``--db``), else env ``SPECTOWER_DB``, else
    ``./spectower.db``. Plain paths become ``sqlite:///<absolute path>``."""
    value = explicit or os.environ.get(DB_ENV_VAR) or DEFAULT_DB_PATH
    return normalize_url(value)


def normalize_url(value: str) -> str:
    value = value.strip()
    if not value:
        raise DatabaseURLError("--db: empty database URL")
    if "://" in value:
        try:
            make_url(value)
        except ArgumentError as exc:
            raise DatabaseURLError(f"--db: not a database URL: {value!r} ({exc})") from exc
        return value
    path = Path(value).expanduser().resolve()
    return f"sqlite:///{path}"


def stable_server_info_hash(info: dict[str, Any]) -> str:
    stable = {k: v for k, v in info.items() if k not in VOLATILE_SERVER_INFO_KEYS}
    blob = json.dumps(stable, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


class Database:
    """One spectower database. Thread-safe; one instance per process is the intended use."""

    def __init__(
        self, url: str, *, echo: bool = False, busy_timeout_ms: int = dialect.DEFAULT_BUSY_TIMEOUT_MS
    ) -> None:
        self.url = normalize_url(url)
        parsed = make_url(self.url)
        if parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:"):
            parent = Path(parsed.database).parent
            if not parent.is_dir():
                raise DatabaseURLError(f"--db: folder {parent} does not exist")
        self.engine: Engine = create_engine(self.url, echo=echo, **dialect.engine_kwargs(self.url))
        dialect.install(self.engine, busy_timeout_ms)
        self.dialect_name: str = self.engine.dialect.name
        self.schema_version = schema.ensure_schema(self.engine)
        self._lock = threading.Lock()
        self._writer: BatchWriter | None = None
        self._server_cache: dict[str, tuple[int, dict[str, Any], float]] = {}
        self._gpu_cache: dict[tuple[str, str], tuple[int, dict[str, Any], float]] = {}
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
        now = time.time() if ts is None else ts
        facts = {k: v for k, v in facts.items() if v is not None}
        cached = self._server_cache.get(url)
        if (
            cached
            and all(cached[1].get(k) == v for k, v in facts.items())
            and now - cached[2] < DEFAULT_LAST_SEEN_RESOLUTION_S
        ):
            return cached[0]
        with self._lock:
            sid, known = self._upsert(models.Server, {"url": url}, facts, now)
            self._server_cache[url] = (sid, known, now)
        return sid

    def gpu_id(self, host: str, index: int, uuid: str, *, ts: float | None = None, **facts: Any) -> int:
        """Get or create the Gpu row for (host, uuid); non-None ``facts`` (Gpu columns) update it."""
        unknown = set(facts) - _GPU_FACTS
        if unknown:
            raise ValueError(f"gpu_id: unknown GPU fact(s) {sorted(unknown)}; known: {sorted(_GPU_FACTS)}")
        if not host or not uuid:
            raise ValueError("gpu_id: host and uuid must be non-empty")
        now = time.time() if ts is None else ts
        facts = {k: v for k, v in facts.items() if v is not None}
        facts["index"] = int(index)
        key = (host, uuid)
        cached = self._gpu_cache.get(key)
        if (
            cached
            and all(cached[1].get(k) == v for k, v in facts.items())
            and now - cached[2] < DEFAULT_LAST_SEEN_RESOLUTION_S
        ):
            return cached[0]
        with self._lock:
            gid, known = self._upsert(models.Gpu, {"host": host, "uuid": uuid}, facts, now)
            self._gpu_cache[key] = (gid, known, now)
        return gid

    def _upsert(
        self, model: type[SQLModel], ident: dict[str, Any], facts: dict[str, Any], now: float
    ) -> tuple[int, dict[str, Any]]:
        for attempt in range(2):
            try:
                with self.session(write=True) as s:
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
            except IntegrityError:  # another process created it between our select and insert
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def record_server_info(self, server_id: int, info: dict[str, Any], ts: float | None = None) -> bool:
        """Keep a copy of /server_info when its stable part (all but VOLATILE_SERVER_INFO_KEYS)
        differs from the server's latest snapshot. Returns True when a snapshot was stored."""
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

    # --- writing samples -----------------------------------------------------------------------
    def writer(self, **options: Any) -> BatchWriter:
        """The database's single BatchWriter (created on first call; ``options`` apply then only).
        It also runs ``maintain`` every minute, on its own thread (the one writer)."""
        with self._lock:
            if self._writer is None or not self._writer.alive:
                options.setdefault("maintenance", self.maintain)
                self._writer = BatchWriter(self.engine, **options)
            return self._writer

    # --- maintenance (implemented in storage.rollups / storage.retention) ------------------------
    def update_rollups(self, now: float | None = None) -> int:
        """Fold raw samples written since the last call into the 1-minute and 1-hour rollups."""
        from spectower.storage.rollups import update_rollups

        return update_rollups(self, now=now)

    def maintain(self) -> None:
        """Fold new samples into the rollups; with ``retention`` set, also delete what is past its
        horizon, at most once per ``DEFAULT_RETENTION_INTERVAL_S`` (the first call does it)."""
        policy = self.retention
        if policy is None or time.monotonic() < self._retention_due:
            self.update_rollups()
            return
        self._retention_due = time.monotonic() + DEFAULT_RETENTION_INTERVAL_S
        # apply_retention folds the rollups first, so nothing is deleted unsummarised
        deleted = self.apply_retention(policy.raw_days, policy.rollup_days, policy.hourly_days)
        if any(deleted.values()):
            log.info("retention: deleted %s", ", ".join(f"{k}={v}" for k, v in deleted.items() if v))

    def apply_retention(
        self,
        raw_days: float | None = None,
        rollup_days: float | None = None,
        hourly_days: float | None = None,
        now: float | None = None,
    ) -> dict[str, int]:
        """Delete raw samples older than ``raw_days``, 1-minute rollups older than ``rollup_days``,
        1-hour rollups older than ``hourly_days`` (None: the DEFAULT_* of spectower.storage.retention)."""
        from spectower.storage.retention import apply_retention

        return apply_retention(
            self, raw_days=raw_days, rollup_days=rollup_days, hourly_days=hourly_days, now=now
        )

    def save_bench_run(self, run: models.BenchRun, points: list[models.BenchPoint]) -> int:
        """Insert a run and its points in one transaction; returns the run id."""
        from spectower.storage.bench import save_bench_run

        return save_bench_run(self, run, points)

    # --- health --------------------------------------------------------------------------------
    def integrity_check(self) -> str:
        with self.engine.connect() as conn:
            return dialect.integrity_check(conn)

    def size_bytes(self) -> int | None:
        with self.engine.connect() as conn:
            return dialect.file_size_bytes(conn)

    def close(self) -> None:
        with self._lock:
            writer, self._writer = self._writer, None
        if writer is not None:
            writer.close()
        self.engine.dispose()

    def __enter__(self) -> Database:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_database(
    url: str | os.PathLike[str] | None = None,
    *,
    echo: bool = False,
    busy_timeout_ms: int = dialect.DEFAULT_BUSY_TIMEOUT_MS,
) -> Database:
    """Open (create, migrate) the database at ``url`` (SQLAlchemy URL or plain path; None: the default).
    ``busy_timeout_ms``: how long one statement waits for another writer's lock before the BatchWriter
    backs off and retries (SQLite)."""
    return Database(
        default_db_url(None if url is None else os.fspath(url)), echo=echo, busy_timeout_ms=busy_timeout_ms
    )
