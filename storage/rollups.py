"""Rollups: min / max / sum / count per metric per 1-minute and 1-hour bucket, kept incrementally.

Raw samples newer than the watermark (``rollup_state.last_id``, the highest sample id already folded
in) are found by primary key, so each maintenance run reads only what arrived since the last one. The
(source, minute) buckets those rows touch are recomputed whole from raw samples, and the hours around
them from the minute rollups, so a late sample (a collector flushing its buffer after an outage) lands
in the right bucket instead of being lost, and a run every minute costs about a minute of samples.

PostgreSQL with several collectors: ids from a sequence can commit out of order under concurrent
writers, so each fold first locks the sample table against inserts (``dialect.lock_for_rollup``) and
only then reads max(id): every row up to the new watermark is committed, none is skipped.
"""

from __future__ import annotations

import functools
import math
import time
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine, Float, Table, and_, bindparam, func, literal_column, select
from sqlalchemy.engine import Connection
from sqlmodel import SQLModel

from . import dialect, models, sealed

MINUTE_S = 60
HOUR_S = 3600
ROLLUP_RESOLUTIONS_S: tuple[int, ...] = (MINUTE_S, HOUR_S)


@dataclass(frozen=True)
class RollupSpec:
    sample_table: str
    rollup: Table
    source_cols: tuple[str, ...]  # identify one series source
    metrics: tuple[str, ...]

    @property
    def sample(self) -> Table:
        return SQLModel.metadata.tables[self.sample_table]


ENGINE = RollupSpec(
    "engine_sample", models.engine_rollup, ("server_id", "dp_rank"), models.ENGINE_ROLLUP_METRICS
)
GPU = RollupSpec("gpu_sample", models.gpu_rollup, ("gpu_id",), models.GPU_ROLLUP_METRICS)
# The decode counters (schema v3): per-interval deltas, so a bucket's *_sum is the bucket's total steps,
# tokens and step time of one bin and mode (what control.speedup.estimate reads as one interval).
COUNTERS = RollupSpec(
    "engine_counter_sample",
    models.engine_counter_rollup,
    ("server_id", "batch_size", "mode"),
    models.COUNTER_ROLLUP_METRICS,
)
SPECS: tuple[RollupSpec, ...] = (ENGINE, GPU, COUNTERS)


def watermark(conn: Connection, spec: RollupSpec) -> int:
    st = models.rollup_state
    value = conn.execute(
        select(st.c.last_id).where(st.c.sample_table == spec.sample_table)
    ).scalar_one_or_none()
    return int(value or 0)


def _set_watermark(conn: Connection, spec: RollupSpec, last_id: int, now: float) -> None:
    st = models.rollup_state
    where = st.c.sample_table == spec.sample_table
    if not conn.execute(st.update().where(where).values(last_id=last_id, updated_ts=now)).rowcount:
        conn.execute(st.insert().values(sample_table=spec.sample_table, last_id=last_id, updated_ts=now))


def _ranges(indexes: list[int]) -> list[tuple[int, int]]:
    """Contiguous runs of bucket indexes -> [(first, last_exclusive)]."""
    out: list[tuple[int, int]] = []
    for h in sorted(set(indexes)):
        if out and out[-1][1] == h:
            out[-1] = (out[-1][0], h + 1)
        else:
            out.append((h, h + 1))
    return out


@dataclass(frozen=True)
class _RebuildStatements:
    """``_rebuild``'s four statements for one spec and dialect, built once: the source, the minute range
    and the hour range are bound parameters (building them per source and minute cost the writer more
    CPU than running them)."""

    clear_minutes: Any
    minutes: Any
    clear_hours: Any
    hours: Any


@functools.cache
def _rebuild_statements(spec: RollupSpec, dialect_name: str) -> _RebuildStatements:
    sample, rollup = spec.sample, spec.rollup
    src_where = [sample.c[c] == bindparam(f"src_{c}") for c in spec.source_cols]
    roll_where = [rollup.c[c] == bindparam(f"src_{c}") for c in spec.source_cols]
    metric_cols = [f"{m}_{agg}" for m in spec.metrics for agg in ("min", "max", "sum", "n")]
    cols = ["res_s", *spec.source_cols, "bucket_ts", "n", *metric_cols]
    lo, hi = bindparam("lo", type_=Float), bindparam("hi", type_=Float)
    h_lo, h_hi = bindparam("h_lo", type_=Float), bindparam("h_hi", type_=Float)

    def clear(res: int, a: Any, b: Any) -> Any:
        return rollup.delete().where(
            and_(rollup.c.res_s == res, *roll_where, rollup.c.bucket_ts >= a, rollup.c.bucket_ts < b)
        )

    # minute buckets from raw samples
    bucket = dialect.bucket_index(dialect_name, sample.c.ts, 0.0, MINUTE_S)
    aggs: list[Any] = []
    for m in spec.metrics:
        c = sample.c[m]
        aggs += [func.min(c), func.max(c), func.sum(c), func.count(c)]
    minute_sel = (
        select(
            literal_column(str(MINUTE_S)),
            *[sample.c[c] for c in spec.source_cols],
            bucket * MINUTE_S,
            func.count(),
            *aggs,
        )
        .where(and_(*src_where, sample.c.ts >= lo, sample.c.ts < hi))
        .group_by(*[sample.c[c] for c in spec.source_cols], bucket)
    )
    # hour buckets from the minute buckets (60 rows an hour: cheap to redo whole)
    hbucket = dialect.bucket_index(dialect_name, rollup.c.bucket_ts, 0.0, HOUR_S)
    haggs: list[Any] = []
    for m in spec.metrics:
        haggs += [
            func.min(rollup.c[f"{m}_min"]),
            func.max(rollup.c[f"{m}_max"]),
            func.sum(rollup.c[f"{m}_sum"]),
            func.sum(rollup.c[f"{m}_n"]),
        ]
    hour_sel = (
        select(
            literal_column(str(HOUR_S)),
            *[rollup.c[c] for c in spec.source_cols],
            hbucket * HOUR_S,
            func.sum(rollup.c.n),
            *haggs,
        )
        .where(
            and_(
                rollup.c.res_s == MINUTE_S, *roll_where, rollup.c.bucket_ts >= h_lo, rollup.c.bucket_ts < h_hi
            )
        )
        .group_by(*[rollup.c[c] for c in spec.source_cols], hbucket)
    )
    return _RebuildStatements(
        clear(MINUTE_S, lo, hi),
        rollup.insert().from_select(cols, minute_sel),
        clear(HOUR_S, h_lo, h_hi),
        rollup.insert().from_select(cols, hour_sel),
    )


def _rebuild(conn: Connection, spec: RollupSpec, source: tuple[Any, ...], lo: float, hi: float) -> None:
    """Recompute one source's minute rollups over [lo, hi) (minute-aligned) from raw samples, then
    its hour rollups over the whole hours that range touches, from the minute rollups."""
    st = _rebuild_statements(spec, conn.dialect.name)
    params: dict[str, Any] = {f"src_{c}": v for c, v in zip(spec.source_cols, source, strict=True)}
    params |= {"lo": lo, "hi": hi}
    params |= {
        "h_lo": float(math.floor(lo / HOUR_S) * HOUR_S),
        "h_hi": float(math.ceil(hi / HOUR_S) * HOUR_S),
    }
    conn.execute(st.clear_minutes, params)
    conn.execute(st.minutes, params)
    conn.execute(st.clear_hours, params)
    conn.execute(st.hours, params)


def update_spec(conn: Connection, spec: RollupSpec, now: float) -> int:
    """Fold the raw rows of one sample table past the watermark; returns how many were new."""
    sample = spec.sample
    dialect.lock_for_rollup(conn, spec.sample_table)  # before reading the watermark and max(id)
    last_id = watermark(conn, spec)
    max_id = conn.execute(select(func.max(sample.c.id))).scalar_one_or_none()
    if max_id is None or max_id <= last_id:
        return 0
    minute = dialect.bucket_index(conn.dialect.name, sample.c.ts, 0.0, MINUTE_S)
    new_rows = and_(sample.c.id > last_id, sample.c.id <= max_id)
    touched = conn.execute(
        select(*[sample.c[c] for c in spec.source_cols], minute, func.count())
        .where(new_rows)
        .group_by(*[sample.c[c] for c in spec.source_cols], minute)
    ).all()
    per_source: dict[tuple[Any, ...], list[int]] = {}
    n_new = 0
    for row in touched:
        *src, m, n = row
        per_source.setdefault(tuple(src), []).append(int(m))
        n_new += int(n)
    for source, minutes in per_source.items():
        for m0, m1 in _ranges(minutes):
            _unseal_minutes(conn, spec, source, m0, m1)
            _rebuild(conn, spec, source, float(m0 * MINUTE_S), float(m1 * MINUTE_S))
    # The rows unsealed above drew ids past max_id; they were folded before they were sealed and still are
    # (their other minutes' samples did not change), so the watermark passes them too. Nothing else can
    # have drawn one: the table is locked (SQLite: the transaction began IMMEDIATE).
    folded_to = conn.execute(select(func.max(sample.c.id))).scalar_one()
    _set_watermark(conn, spec, int(folded_to), now)
    return n_new


def _unseal_minutes(conn: Connection, spec: RollupSpec, source: tuple[Any, ...], m0: int, m1: int) -> None:
    """Put every chunk holding a sample of minutes [m0, m1) of ``source`` back into the head, so that
    ``_rebuild`` recomputes those minutes from all their samples.

    A chunk can end mid-minute: it was sealed before the minute's later samples arrived (a late row; or
    another collector sealed this series' folded rows while its own collector inserted the next ones).
    Looking for chunks that end at or after the new rows' oldest timestamp misses such a chunk, and the
    minute was rebuilt from the head alone, without the chunk's part of it (PostgreSQL with two
    collectors: 19 of 3 000 rows). Only the new rows' minutes are rebuilt, not every minute of the
    chunks put back: those still hold the same samples, and rebuilding them would reach into the chunk
    before, which may end mid-minute too. The second of margin either side costs at most an extra chunk,
    never a missed one (a minute's index and its bounds are computed in different arithmetic)."""
    chunk_spec = sealed.BY_SAMPLE_TABLE.get(spec.sample_table)
    if chunk_spec is not None:
        sealed.unseal(conn, chunk_spec, source, m0 * MINUTE_S - 1.0, m1 * MINUTE_S + 1.0)


def seal_heads(engine: Engine, *, budget: int | None = None, **options: Any) -> int:
    """Seal what is due in every sample table's head (``storage.sealed.seal``; ``options`` are its
    keywords), one transaction per table and round, until nothing more is due or (``budget``) about
    that many rows are sealed; returns rows sealed (at least ``budget``: more may be due)."""
    total = 0
    for chunk_spec in sealed.SPECS:
        spec = next(s for s in SPECS if s.sample_table == chunk_spec.sample_table)
        while budget is None or total < budget:
            left = None if budget is None else budget - total
            with dialect.write_transaction(engine) as conn:
                # the watermark read after the lock: the one the last fold committed, not an older one
                dialect.lock_for_rollup(conn, spec.sample_table)
                n = sealed.seal(conn, chunk_spec, watermark(conn, spec), budget=left, **options)
            total += n
            if not n:
                break
    return total


def update_rollups(engine: Engine, now: float | None = None) -> int:
    """Bring every rollup up to date (one transaction per sample table); returns raw rows folded in."""
    now = time.time() if now is None else now
    total = 0
    for spec in SPECS:
        with dialect.write_transaction(engine) as conn:
            total += update_spec(conn, spec, now)
    return total
