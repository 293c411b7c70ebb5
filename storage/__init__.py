"""spectower storage: SQLite (WAL) by default, any SQLAlchemy URL for fleets.

Core API::

    from storage import open_database, Database, BatchWriter, default_db_url
    db = open_database("sqlite:///path/spectower.db")   # or a plain path, or None (= default_db_url())
        # creates the file; on SQLite sets WAL, busy_timeout, foreign keys; creates or migrates the
        # schema forward (schema_version in table meta; a newer schema -> SchemaError, a ValueError)
    db.url; db.engine                 # the SQLAlchemy URL and engine (readers: own connections)
    with db.session() as s: ...       # sqlmodel Session; commits at the end of the block, rolls back
                                      # on error; db.session(write=True) for read-then-write transactions
    db.server_id(url, ts=None, **facts) -> int       # get-or-create Server; facts = Server columns
    db.gpu_id(host, index, uuid, ts=None, **facts) -> int   # get-or-create Gpu (unique host+uuid)
    db.record_server_info(server_id, info, ts) -> bool      # snapshot only when the stable part changed
    w = db.writer()                   # the one BatchWriter of this Database (a thread fed by a queue)
    w.put(*rows)                      # SQLModel rows (EngineSample, GpuSample, CollectionGap, ...)
    w.flush(timeout=None) -> bool     # wait until everything put so far is committed
    w.stats() -> WriterStats          # written / dropped / rejected / retries / pending / last_error
    w.close()
    db.save_bench_run(run, points) -> int            # one transaction
    db.update_rollups(); db.apply_retention(raw_days=..., rollup_days=..., hourly_days=...)
    db.close()

Queries (``storage.queries``): latest_engine_samples, engine_series / gpu_series (downsampled to
<= max_points buckets with min/mean/max), control_events, bench_runs, bench_points, gaps,
collector_health, servers, gpus, open_gap / close_gap / upsert_collector_health.
Export/import: ``storage.export``, ``storage.bench_serving``. Default database: ``default_db_url()``
(``--db``, else env ``SPECTOWER_DB``, else ``./spectower.db``).

Every timestamp is Unix seconds (float, UTC).
"""

from storage.database import Database, DatabaseURLError, default_db_url, open_database
from storage.schema import SCHEMA_VERSION, SchemaError
from storage.writer import BatchWriter, WriterStats

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
