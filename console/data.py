"""Everything the console reads from storage, as small bounded queries returning pandas frames.

Reads only: the console never writes samples. Every time series is downsampled in SQL to at most
``max_points`` buckets (min / mean / max per bucket), so a page costs the same over 15 minutes or 7 days
of 1 Hz data up to the index range scan.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
from spectower.storage import Database, open_database, queries, rollups
from sqlalchemy import inspect, text
from sqlalchemy.engine import Engine, make_url

# The numeric sample columns storage keeps series (and rollups) of: one list, owned by storage.
ENGINE_COLUMNS = rollups.ENGINE.metrics
# Summed over DP ranks when a server has several; everything else is averaged.
ADDITIVE_ENGINE_COLUMNS = frozenset(
    {"num_running_reqs", "num_queue_reqs", "gen_throughput", "output_tok_s", "prefill_tok_s", "request_rate"}
)
GPU_COLUMNS = rollups.GPU.metrics
DEFAULT_MIN_BIN_SAMPLES = 5  # a live speedup bin needs this many samples on each side to be drawn
DEFAULT_AUDIT_LIMIT = 500
# The live estimate scans every sample in its window (it splits by knob state, which the rollups do not),
# so its window is capped: a refresh stays bounded whatever time range the operator picks.
DEFAULT_LIVE_ESTIMATE_MAX_S = 6 * 3600.0
_REQUIRED_TABLES = ("server", "engine_sample")


def open_store(url: str) -> Database | None:
    """The storage Database at ``url``, or None when a SQLite file does not exist yet (it is not created:
    a mistyped --db must not silently start an empty database)."""
    parsed = make_url(url)
    is_file_db = parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:")
    if is_file_db and not Path(str(parsed.database)).is_file():
        return None
    return open_database(url)


def has_schema(db: Database | None) -> bool:
    if db is None:
        return False
    try:
        names = set(inspect(db.engine).get_table_names())
    except Exception:
        return False
    return all(t in names for t in _REQUIRED_TABLES)


def _frame(engine: Engine, sql: str, params: dict[str, Any] | None = None) -> pd.DataFrame:
    with engine.connect() as conn:
        result = conn.execute(text(sql), params or {})
        return pd.DataFrame(result.fetchall(), columns=list(result.keys()))


# ---------------------------------------------------------------- inventory


def servers(db: Database) -> pd.DataFrame:
    return _frame(db.engine, "SELECT * FROM server ORDER BY url")


def gpus(db: Database) -> pd.DataFrame:
    return _frame(db.engine, 'SELECT * FROM gpu ORDER BY host, "index"')


def data_extent(db: Database) -> tuple[float | None, float | None]:
    """(oldest, newest) engine sample timestamp, or (None, None)."""
    df = _frame(db.engine, "SELECT MIN(ts) AS lo, MAX(ts) AS hi FROM engine_sample")
    lo, hi = df.iloc[0]["lo"], df.iloc[0]["hi"]
    return (None if pd.isna(lo) else float(lo), None if pd.isna(hi) else float(hi))


# ---------------------------------------------------------------- engine samples


def latest_engine(db: Database, server_id: int) -> dict[str, Any] | None:
    """The newest sample of a server, DP ranks combined (additive columns summed), or None."""
    df = _frame(
        db.engine,
        "SELECT * FROM engine_sample WHERE server_id = :s AND ts >= "
        "(SELECT MAX(ts) FROM engine_sample WHERE server_id = :s) - 5 ORDER BY ts DESC",
        {"s": server_id},
    )
    if df.empty:
        return None
    newest = df.groupby("dp_rank", sort=False).head(1)
    row: dict[str, Any] = {"ts": float(newest["ts"].max()), "dp_ranks": len(newest)}
    for col in ENGINE_COLUMNS:
        values = newest[col].dropna()
        if values.empty:
            row[col] = None
        elif col in ADDITIVE_ENGINE_COLUMNS:
            row[col] = float(values.sum())
        else:
            row[col] = float(values.mean())
    for col in ("batches_drafted", "batches_gated"):
        values = newest[col].dropna()
        row[col] = int(values.sum()) if not values.empty else None
    return row


def _series_frame(
    db: Database,
    kind: queries.SeriesKind,
    source_ids: Sequence[int],
    columns: Sequence[str],
    t0: float,
    t1: float,
    max_points: int,
    *,
    dp_rank: int | None = None,
) -> pd.DataFrame:
    """``source_id, ts, <col>, <col>_min, <col>_max``: storage.queries.series_many (raw or rollup tier,
    <= max_points buckets per source), one row per source and bucket."""
    names = ["source_id", "ts", *[f"{c}{x}" for c in columns for x in ("", "_min", "_max")]]
    got = queries.series_many(db, kind, source_ids, columns, t0, t1, max(2, max_points), dp_rank=dp_rank)
    rows: dict[tuple[int, float], dict[str, float | None]] = {}
    for (src, c), s in got.items():
        for p in s.points:
            row = rows.setdefault((src, p.ts), {"source_id": src, "ts": p.ts})
            row[c], row[f"{c}_min"], row[f"{c}_max"] = p.mean, p.min, p.max
    return pd.DataFrame([rows[k] for k in sorted(rows)], columns=names)


def engine_series(
    db: Database,
    server_id: int,
    t0: float,
    t1: float,
    columns: Sequence[str],
    max_points: int,
) -> pd.DataFrame:
    """Bucketed engine samples: ``ts`` plus ``<col>`` (mean), ``<col>_min``, ``<col>_max`` per column,
    at most ``max_points`` rows (storage picks raw samples or the 1-minute / 1-hour rollups)."""
    cols = [c for c in columns if c in ENGINE_COLUMNS]
    ranks = _dp_ranks(db, server_id, t0, t1)
    if len(ranks) <= 1:
        return _series_frame(db, "engine", [server_id], cols, t0, t1, max_points).drop(columns="source_id")
    # Several DP ranks: each reports its own batch, so a server's tok/s or running requests is the sum
    # over ranks (pooling their samples would give the mean, 1/dp of it); the rest is averaged.
    # Summed min / max make a band that holds the sum (sum of the ranks' minima <= min of the sum).
    frames = [_series_frame(db, "engine", [server_id], cols, t0, t1, max_points, dp_rank=r) for r in ranks]
    stacked = pd.concat(frames, ignore_index=True).drop(columns="source_id")
    how = {
        f"{c}{x}": ("sum" if c in ADDITIVE_ENGINE_COLUMNS else "mean")
        for c in cols
        for x in ("", "_min", "_max")
    }
    return stacked.groupby("ts", as_index=False).agg(how) if how else stacked[["ts"]].drop_duplicates()


def _dp_ranks(db: Database, server_id: int, t0: float, t1: float) -> list[int]:
    """The DP ranks that reported in [t0, t1] (the newest hour of it: ranks are fixed per launch)."""
    df = _frame(
        db.engine,
        "SELECT DISTINCT dp_rank FROM engine_sample WHERE server_id = :s AND ts >= :a AND ts <= :b",
        {"s": server_id, "a": max(t0, t1 - 3600.0), "b": t1},
    )
    return sorted(int(r) for r in df["dp_rank"].dropna())


@dataclass(frozen=True)
class SpeedupBins:
    """Production traffic binned by running requests, split by whether speculation was active."""

    table: pd.DataFrame  # bin_lo, bin_hi, concurrency, tok_s_on, n_on, tok_s_off, n_off, speedup
    bin_width: float


def speedup_bins(
    db: Database,
    server_id: int,
    t0: float,
    t1: float,
    max_running: int | None,
    n_bins: int = 24,
    min_samples: int = DEFAULT_MIN_BIN_SAMPLES,
) -> SpeedupBins:
    """The live speedup estimate: mean output tok/s with speculation active vs inactive per load bin.

    A sample counts as "spec active" when the knob let that batch draft
    (``num_running_reqs <= spec_max_bs``) and the engine reported a non-zero active step count.
    """
    width = max(1.0, math.ceil((max_running or 64) / n_bins))
    t0 = max(t0, t1 - DEFAULT_LIVE_ESTIMATE_MAX_S)
    df = _frame(
        db.engine,
        "SELECT CAST(num_running_reqs / :w AS INTEGER) AS bin, "
        "CASE WHEN spec_max_bs IS NOT NULL AND num_running_reqs <= spec_max_bs "
        "AND COALESCE(spec_num_steps, 0) > 0 THEN 1 ELSE 0 END AS active, "
        "AVG(output_tok_s) AS tok_s, AVG(num_running_reqs) AS conc, COUNT(*) AS n "
        "FROM engine_sample WHERE server_id = :s AND ts >= :t0 AND ts <= :t1 "
        "AND output_tok_s IS NOT NULL AND num_running_reqs IS NOT NULL AND num_running_reqs > 0 "
        "GROUP BY bin, active",
        {"s": server_id, "t0": t0, "t1": t1, "w": width},
    )
    cols = ["bin_lo", "bin_hi", "concurrency", "tok_s_on", "n_on", "tok_s_off", "n_off", "speedup"]
    if df.empty:
        return SpeedupBins(pd.DataFrame(columns=cols), width)
    on = df[df["active"] == 1].set_index("bin")
    off = df[df["active"] == 0].set_index("bin")
    rows = []
    for b in sorted(set(df["bin"])):
        n_on = int(on["n"].get(b, 0))
        n_off = int(off["n"].get(b, 0))
        t_on = float(on["tok_s"][b]) if n_on else None
        t_off = float(off["tok_s"][b]) if n_off else None
        conc = float(df[df["bin"] == b]["conc"].mean())
        ok = n_on >= min_samples and n_off >= min_samples and t_off
        speed = (t_on / t_off) if ok and t_on is not None and t_off else None
        rows.append([b * width, (b + 1) * width, conc, t_on, n_on, t_off, n_off, speed])
    return SpeedupBins(pd.DataFrame(rows, columns=cols), width)


# ---------------------------------------------------------------- GPUs


def latest_gpu(db: Database) -> pd.DataFrame:
    """The newest sample of every GPU joined with its inventory row (one row per GPU)."""
    return _frame(
        db.engine,
        'SELECT g.id AS gpu_id, g.host, g."index" AS gpu_index, g.name, g.source, g.uuid, s.* '
        "FROM gpu g LEFT JOIN gpu_sample s ON s.id = ("
        " SELECT s2.id FROM gpu_sample s2 WHERE s2.gpu_id = g.id ORDER BY s2.ts DESC LIMIT 1) "
        'ORDER BY g.host, g."index"',
    ).loc[:, lambda d: ~d.columns.duplicated()]


def gpu_series(
    db: Database,
    gpu_ids: Sequence[int],
    t0: float,
    t1: float,
    columns: Sequence[str],
    max_points: int,
) -> pd.DataFrame:
    """Bucketed GPU samples per GPU: ``gpu_id, ts, <col>, <col>_min, <col>_max`` (<= max_points per GPU)."""
    cols = [c for c in columns if c in GPU_COLUMNS]
    if not gpu_ids or not cols:
        return pd.DataFrame(columns=["gpu_id", "ts", *cols])
    frame = _series_frame(db, "gpu", [int(g) for g in gpu_ids], cols, t0, t1, max_points)
    return frame.rename(columns={"source_id": "gpu_id"})


def gpu_processes(db: Database, gpu_ids: Sequence[int], since: float) -> pd.DataFrame:
    """The newest per-process memory rows of each GPU (empty when the source has none)."""
    if not gpu_ids:
        return pd.DataFrame()
    ids = ",".join(str(int(i)) for i in gpu_ids)
    return _frame(
        db.engine,
        "SELECT p.gpu_id, p.ts, p.pid, p.process_name, p.used_memory_mib FROM gpu_process_sample p "
        f"JOIN (SELECT gpu_id, MAX(ts) AS ts FROM gpu_process_sample WHERE gpu_id IN ({ids}) "
        "AND ts >= :since GROUP BY gpu_id) m ON m.gpu_id = p.gpu_id AND m.ts = p.ts ORDER BY p.gpu_id, p.pid",
        {"since": since},
    )


# ---------------------------------------------------------------- control


def control_events(
    db: Database,
    server_url: str | None = None,
    t0: float | None = None,
    actor_prefix: str | None = None,
    limit: int = DEFAULT_AUDIT_LIMIT,
) -> pd.DataFrame:
    where: list[str] = ["1 = 1"]
    params: dict[str, Any] = {"limit": int(limit)}
    if server_url:
        where.append("server_url = :u")
        params["u"] = server_url
    if t0 is not None:
        where.append("ts >= :t0")
        params["t0"] = t0
    if actor_prefix:
        where.append("actor LIKE :a")
        params["a"] = actor_prefix + "%"
    return _frame(
        db.engine,
        f"SELECT * FROM control_event WHERE {' AND '.join(where)} ORDER BY ts DESC, id DESC LIMIT :limit",
        params,
    )


def last_setter(db: Database, server_url: str) -> dict[str, Any] | None:
    df = _frame(
        db.engine,
        "SELECT * FROM control_event WHERE server_url = :u AND action = 'set' AND confirmed = 1 "
        "ORDER BY ts DESC, id DESC LIMIT 1",
        {"u": server_url},
    )
    return None if df.empty else df.iloc[0].to_dict()


def policy_states(db: Database) -> pd.DataFrame:
    try:
        return _frame(db.engine, "SELECT * FROM policy_state ORDER BY server_url")
    except Exception:
        return pd.DataFrame()


# ---------------------------------------------------------------- collectors


def collector_health(db: Database) -> pd.DataFrame:
    try:
        return _frame(db.engine, "SELECT * FROM collector_health ORDER BY source, target")
    except Exception:
        return pd.DataFrame()


def open_gaps(db: Database) -> pd.DataFrame:
    try:
        return _frame(db.engine, "SELECT * FROM collection_gap WHERE end_ts IS NULL ORDER BY start_ts")
    except Exception:
        return pd.DataFrame()


# ---------------------------------------------------------------- benchmarks


def bench_runs(db: Database) -> pd.DataFrame:
    return _frame(
        db.engine,
        "SELECT r.*, (SELECT COUNT(*) FROM bench_point p WHERE p.run_id = r.id) AS points "
        "FROM bench_run r ORDER BY r.created_at DESC, r.id DESC",
    )


def bench_points(db: Database, run_ids: Sequence[int]) -> pd.DataFrame:
    if not run_ids:
        return pd.DataFrame()
    ids = ",".join(str(int(i)) for i in run_ids)
    return _frame(
        db.engine, f"SELECT * FROM bench_point WHERE run_id IN ({ids}) ORDER BY run_id, concurrency, spec_on"
    )
