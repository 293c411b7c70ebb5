"""Storage: the database (SQLite WAL by default, any SQLAlchemy URL for fleets), snapshots and files written.
May import nothing of ours but plugin.engine_counters (standard library: the counters' names and rates()).
Inside, ``database.py`` is on top: rollups, retention and bench runs take a SQLAlchemy engine or a session
and never import ``Database`` (tests/test_storage_imports.py: no import circle).

Core API::

    from spectower.storage import open_database, Database, BatchWriter, default_db_url
    db = open_database("sqlite:///path/spectower.db")   # or a plain path, or None (= default_db_url()),
        # or any SQLAlchemy URL (postgresql+psycopg://...). Creates the file; on SQLite sets WAL,
        # busy_timeout (busy_timeout_ms=10000), foreign keys; creates or migrates the schema forward
        # (schema_version in table meta; a newer or foreign schema -> SchemaError, a ValueError)
    db.url; db.engine                 # the SQLAlchemy URL and engine (readers: own connections)
    with db.session() as s: ...       # sqlmodel Session; commits at the end of the block, rolls back
                                      # on error; db.session(write=True) for read-then-write transactions
    db.server_id(url, ts=None, **facts) -> int       # get-or-create Server; facts = Server columns
    db.gpu_id(host, index, uuid, ts=None, **facts) -> int   # get-or-create Gpu (unique host+uuid)
    db.record_server_info(server_id, info, ts) -> bool      # snapshot only when the stable part changed
    w = db.writer()                   # the one BatchWriter of this Database (a thread fed by one bounded
                                      # queue: the only buffer between a scrape and the disk; it also
                                      # folds new samples into the rollups once a minute)
    w.put(*rows)                      # SQLModel rows (EngineSample, GpuSample, ...)
    w.put_job(kind, prepare, rows=(), keep=False)   # prepare() runs on the writer thread, in order, then
                                      # rows are inserted (it fills in their ids); keep=True: a record
                                      # (a gap, a health row) that writes itself and is never dropped
    w.flush(timeout=None) -> bool     # wait until everything put so far is committed
    w.stats() -> WriterStats          # written / dropped / rejected (+ rejected_by_kind) / retries /
                                      # pending / records_pending / records_rejected / last_error / lost;
                                      # what the database refuses is quarantined (counted, logged once per
                                      # kind), a busy database (writer.TRANSIENT_ERRORS) is retried, the
                                      # thread never dies
    w.close()
    db.claim_collector([(source, target), ...]) -> CollectorClaim   # SQLite: one collector per file
                                      # (a lock file); PostgreSQL: one collector per source (advisory
                                      # locks); CollectorConflictError (a ValueError) names the holder
    db.save_bench_run(run, points) -> int; db.save_bench_runs([(run, points), ...]) -> [ids]  # 1 txn
    db.insert_many(table, rows) -> int   # bulk load (imports, synthetic histories), one transaction
    db.update_rollups(); db.apply_retention(raw_days=..., rollup_days=..., hourly_days=...)
    db.seal(**options) -> int         # old head rows (already rolled up) into per-series chunks
                                      # (storage/sealed.py, storage/chunks.py); the writer's maintenance
                                      # does it every minute after the rollups
    db.retention = RetentionPolicy(...)  # storage.retention; the writer's maintenance then applies it hourly
    db.close()

Queries (``spectower.storage.queries``)::

    series(db, "engine"|"gpu", source_id, metric, start, end, max_points=500, dp_rank=None) -> Series
        # <= max_points Buckets(ts, min, mean, max, n), from raw / 1-minute / 1-hour tiers so that a
        # 30-day chart reads ~720 rows; Series.rows_read says how many stored rows were aggregated
    series_many(db, kind, source_ids, metrics, start, end, ...) -> {(source_id, metric): Series}
        # the same for many sources x metrics in one grouped statement per tier (a page of 8 GPUs)
    sample_rows(db, "engine"|"gpu", source_ids, start=None, end=None) -> iterator of row dicts
        # every stored sample, head rows and sealed chunks alike, by source then time (exports)
    latest_engine_samples(db, server_id=None); latest_gpu_samples(db, host=None); dp_ranks(db, sid, a, b)
    latest_gpus(db, host=None) -> [(Gpu, GpuSample | None)]; latest_gpu_processes(db, gpu_ids, since)
    servers(db); server_by_url(db, url); gpus(db, host=None); server_info_snapshots(db, server_id)
    control_events(db, server_url=, actor=, actor_prefix=, action=, confirmed=, start=, end=, limit=)
        # newest first; actor "policy" matches "policy:learn"
    bench_runs(db, limit=None); bench_run(db, id) (LookupError if absent); bench_points(db, run_id)
    bench_points_many(db, run_ids); bench_point_counts(db) -> {run_id: points}
    counter_intervals(db, server_id, start, end); has_counters(db, server_id)   # the decode counters
        # each interval with its prefilled block where the window holds its rows (plugin 0.4.14 on), and
        # its slots and mix blocks likewise (0.4.15 on)
    extend_totals(db, server_id, start, end) -> (bins, {"kept"|"skipped": {steps, tokens, time_s}}) | None
        # the extend rows (storage.counter_modes.EXTEND_MODES) summed per bin, control.kept_extend's input
    gaps(db, source=, target=, start=, end=, open_only=); open_gap(...) -> id; close_gap(db, id, end_ts)
    close_stale_gaps(db, source, target, end_ts, note)   # a restarted collector closes what a crash left open
    upsert_collector_health(db, source, target, ok=, ts=, error=, lag_s=); collector_health(db)

Export/import: ``spectower.storage.export`` (export_bench, export_samples, neutralise_cell),
``storage.bench_serving`` (import_files / import_file, export_lines), ``storage.gpu_csv`` (import_gpu_csvs /
import_gpu_csv: nvidia-smi CSV logs); an import of several files is all or nothing. Integers from outside
are range-checked with ``storage.integers.int_or_none``. Times typed by users: ``storage.timeparse``.
Default database: ``default_db_url(explicit=None)`` / ``database_choice`` (with why): ``--db``, env
``SPECTOWER_DB``, a config file, the running demo's, ``./spectower.db`` (``storage.locate``).
Dialect-specific SQL lives only in ``storage/dialect.py`` (with ``write_transaction`` and ``error_line``,
a database error as one line).

Every timestamp is Unix seconds (float, UTC).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .database import Database, DatabaseURLError, default_db_url, open_database
    from .schema import SCHEMA_VERSION, SchemaError
    from .writer import BatchWriter, WriterStats

# Loaded on first use (PEP 562): ``spectower.storage.files`` and ``timeparse`` serve the CLI's every command,
# and importing the package must not load SQLAlchemy and sqlmodel for them (0.4 s of each command's start).
_EXPORTS = {
    "Database": "database",
    "DatabaseURLError": "database",
    "default_db_url": "database",
    "open_database": "database",
    "SCHEMA_VERSION": "schema",
    "SchemaError": "schema",
    "BatchWriter": "writer",
    "WriterStats": "writer",
}

__all__ = [
    "SCHEMA_VERSION",
    "BatchWriter",
    "Database",
    "DatabaseURLError",
    "SchemaError",
    "WriterStats",
    "default_db_url",
    "open_database",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
