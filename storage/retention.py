"""Retention: raw samples for a few days, 1-minute rollups for months, 1-hour rollups for years.

Every rolled-up sample table (rollups.SPECS: engine and GPU samples, the engine's decode counters) is
kept to the same horizons; a server's stored pauses (``server_pause``) and the GPUs' per-process rows go
with the raw samples. Sealed samples (storage/sealed.py) go a whole chunk at a time, once its newest
sample is past the raw horizon.

Rollups are brought up to date before raw rows go, so nothing reaches the bin unsummarised. The
horizons reached are written to ``meta`` (``retention_<tier>_before``) so queries know which tier still
covers a range. Audit rows (control events), gaps and benchmark runs are never deleted here.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from sqlalchemy import Engine, and_, select
from sqlmodel import SQLModel

from . import dialect, schema, sealed
from .rollups import HOUR_S, MINUTE_S, SPECS, update_rollups

DEFAULT_RAW_DAYS = 14.0
DEFAULT_ROLLUP_DAYS = 180.0  # 1-minute rollups
DEFAULT_HOURLY_DAYS = 3650.0  # 1-hour rollups
DAY_S = 86_400.0
HORIZON_KEYS: dict[str | int, str] = {
    "raw": "retention_raw_before",
    MINUTE_S: "retention_minute_before",
    HOUR_S: "retention_hour_before",
}


DEFAULT_RETENTION_INTERVAL_S = 3600.0  # how often the writer's maintenance applies a RetentionPolicy


@dataclass(frozen=True)
class RetentionPolicy:
    """How long each tier is kept; ``Database.retention`` set to one makes the writer apply it hourly."""

    raw_days: float = DEFAULT_RAW_DAYS
    rollup_days: float = DEFAULT_ROLLUP_DAYS
    hourly_days: float = DEFAULT_HOURLY_DAYS

    def __post_init__(self) -> None:
        _check_days("raw_days", self.raw_days)
        _check_days("rollup_days", self.rollup_days)
        _check_days("hourly_days", self.hourly_days)
        if not self.raw_days <= self.rollup_days <= self.hourly_days:
            raise ValueError("retention: raw_days <= rollup_days <= hourly_days is required")


def _check_days(name: str, value: float) -> float:
    if not isinstance(value, int | float) or value != value or value <= 0:
        raise ValueError(f"{name}: must be a positive number of days, got {value!r}")
    return float(value)


def apply_retention(
    engine: Engine,
    *,
    raw_days: float | None = None,
    rollup_days: float | None = None,
    hourly_days: float | None = None,
    now: float | None = None,
) -> dict[str, int]:
    """Delete what is past its horizon; returns rows deleted per table (and tier)."""
    policy = RetentionPolicy(  # validates (ValueError naming the field)
        DEFAULT_RAW_DAYS if raw_days is None else raw_days,
        DEFAULT_ROLLUP_DAYS if rollup_days is None else rollup_days,
        DEFAULT_HOURLY_DAYS if hourly_days is None else hourly_days,
    )
    raw_days, rollup_days, hourly_days = policy.raw_days, policy.rollup_days, policy.hourly_days
    now = time.time() if now is None else now
    update_rollups(engine, now=now)
    raw_cut = now - raw_days * DAY_S
    cuts = {MINUTE_S: now - rollup_days * DAY_S, HOUR_S: now - hourly_days * DAY_S}
    deleted: dict[str, int] = {}
    tables = SQLModel.metadata.tables
    with dialect.write_transaction(engine) as conn:
        # per source, so each DELETE walks the (source, ts) index instead of the whole table
        for spec in SPECS:
            sample = spec.sample
            parent = tables["gpu" if spec.source_cols[0] == "gpu_id" else "server"]
            sources = conn.execute(select(parent.c.id)).all()
            n = 0
            for (src,) in sources:
                col = sample.c[spec.source_cols[0]]
                n += conn.execute(sample.delete().where(and_(col == src, sample.c.ts < raw_cut))).rowcount
            deleted[spec.sample_table] = n
            chunk_spec = sealed.BY_SAMPLE_TABLE.get(spec.sample_table)
            if chunk_spec is not None:  # whole chunks only: one that ends after the cut is kept
                c = chunk_spec.chunk
                deleted[c.name] = conn.execute(c.delete().where(c.c.end_ts < raw_cut)).rowcount
            for res, cut in cuts.items():
                r = spec.rollup
                deleted[f"{r.name}_{res}s"] = conn.execute(
                    r.delete().where(and_(r.c.res_s == res, r.c.bucket_ts < cut))
                ).rowcount
        proc = tables["gpu_process_sample"]
        deleted["gpu_process_sample"] = conn.execute(proc.delete().where(proc.c.ts < raw_cut)).rowcount
        # a server's pauses explain its raw samples' latency: kept as long as those are
        pause = tables["server_pause"]
        deleted["server_pause"] = conn.execute(pause.delete().where(pause.c.ts < raw_cut)).rowcount
        for key, value in ((HORIZON_KEYS["raw"], raw_cut), *((HORIZON_KEYS[r], c) for r, c in cuts.items())):
            schema._stamp(conn, key, repr(value))
    return deleted


def horizons(engine: Engine) -> dict[str | int, float]:
    """The oldest timestamp each tier still covers (absent: nothing deleted yet)."""
    meta = SQLModel.metadata.tables["meta"]
    with engine.connect() as conn:
        rows = dict(conn.execute(select(meta.c.key, meta.c.value)).all())
    out: dict[str | int, float] = {}
    for tier, key in HORIZON_KEYS.items():
        if key in rows:
            out[tier] = float(rows[key])
    return out
