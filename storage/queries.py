"""What the console and control read: latest values, downsampled series, audit, benchmarks, health.

Series come back as at most ``max_points`` buckets with min / mean / max each, computed by the database
(GROUP BY bucket). The tier read depends on the bucket width the range needs, so that a bucket never
summarises more than ``DEFAULT_MAX_ROWS_PER_BUCKET`` stored rows: raw samples for short ranges, 1-minute
rollups for days, 1-hour rollups for months. Raw rows not yet folded into the rollups (past the
watermark) are added to the rollup buckets, so the newest minutes are never missing from a long chart.

Raw samples live in two places (storage/sealed.py): the head (the sample tables, the newest minutes
of each series and anything not yet folded into the rollups) and sealed chunks. Every read of raw
samples here reads both; a chunk only ever holds rows already in the rollups.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

import numpy as np
import numpy.typing as npt
from sqlalchemy import ColumnElement, and_, func
from sqlalchemy import select as sa_select
from sqlmodel import col, select

from . import dialect, models, rollups, sealed

# the decode counters' reads (storage/queries_counters.py): callers read storage through this module
from .queries_counters import (  # noqa: F401
    COUNTER_RAW_RES_S,
    DEFAULT_MAX_COUNTER_INTERVALS,
    CounterSamples,
    ExtendTotals,
    counter_intervals,
    counter_samples,
    extend_totals,
    has_counters,
)

# storage/records.py's reads and writes of the bookkeeping tables: callers read storage through this module
from .records import (  # noqa: F401
    DEFAULT_EVENT_LIMIT,
    SOURCES_WITH_OWN_SAMPLES,
    add_control_event,
    add_gap,
    bench_point_counts,
    bench_points,
    bench_points_many,
    bench_run,
    bench_runs,
    close_gap,
    close_stale_gaps,
    collector_health,
    control_events,
    count_control_events,
    gaps,
    gpus,
    last_collected_ts,
    open_gap,
    policy_state,
    save_policy_said,
    save_policy_state,
    server_by_url,
    server_info_snapshots,
    servers,
    upsert_collector_health,
)
from .retention import horizons

if TYPE_CHECKING:
    from .database import Database

SeriesKind = Literal["engine", "gpu"]
DEFAULT_MAX_POINTS = 500
DEFAULT_MAX_ROWS_PER_BUCKET = 16
DEFAULT_LATEST_SCAN_ROWS = 256  # newest rows of a server scanned to find the latest sample of each DP rank
NOMINAL_RAW_RES_S = 1.0  # collectors sample at ~1 Hz


class Bucket(NamedTuple):
    """One chart bucket (a named tuple: a 15-minute chart of 8 GPUs at 1 s makes 7,200 of them)."""

    ts: float  # bucket start (Unix s)
    min: float | None
    mean: float | None
    max: float | None
    n: int  # samples with a value in the bucket


@dataclass(frozen=True)
class Series:
    kind: SeriesKind
    source_id: int
    metric: str
    start: float
    end: float
    bucket_s: float
    tier: str  # raw | 1m | 1h
    rows_read: int  # stored rows the database aggregated
    points: list[Bucket]


def _spec(kind: str) -> rollups.RollupSpec:
    if kind == "engine":
        return rollups.ENGINE
    if kind == "gpu":
        return rollups.GPU
    raise ValueError(f"kind: must be 'engine' or 'gpu', got {kind!r}")


def _choose_tier(need_s: float, start: float, hz: dict[str | int, float]) -> int:
    """0 = raw, else a rollup resolution in seconds."""
    tiers: list[int] = [0, rollups.MINUTE_S, rollups.HOUR_S]
    for tier in tiers:
        res = NOMINAL_RAW_RES_S if tier == 0 else tier
        covered = start >= hz.get("raw" if tier == 0 else tier, -math.inf)
        if covered and need_s / res <= DEFAULT_MAX_ROWS_PER_BUCKET:
            return tier
    # too coarse for every tier's bound: the hour tier (its buckets are then wider than asked for)
    return rollups.HOUR_S


def series(
    db: Database,
    kind: SeriesKind,
    source_id: int,
    metric: str,
    start: float,
    end: float,
    max_points: int = DEFAULT_MAX_POINTS,
    *,
    dp_rank: int | None = None,
) -> Series:
    """One metric of one source (server for ``engine``, GPU for ``gpu``) over [start, end],
    as <= ``max_points`` buckets aligned to multiples of the bucket width. Buckets without a value are
    omitted. From the rollup tiers, the first and last buckets cover whole 1-minute / 1-hour rollup
    buckets that overlap [start, end] (so they may include samples just outside it).
    ``dp_rank`` (engine only): None pools every rank of the server."""
    got = series_many(db, kind, [source_id], [metric], start, end, max_points, dp_rank=dp_rank)
    return got[(source_id, metric)]


def series_many(
    db: Database,
    kind: SeriesKind,
    source_ids: Sequence[int],
    metrics: Sequence[str],
    start: float,
    end: float,
    max_points: int = DEFAULT_MAX_POINTS,
    *,
    dp_rank: int | None = None,
) -> dict[tuple[int, str], Series]:
    """``series`` for every (source, metric) pair, keyed so, in one grouped statement per tier.

    A page of 8 GPUs x 2 metrics is then 1-2 statements that read each stored row once, instead of 16-32
    that each read it again (the GPUs page spent most of its refresh there)."""
    spec = _spec(kind)
    for metric in metrics:
        if metric not in spec.metrics:
            raise ValueError(f"metric: {metric!r} is not a {kind} metric; one of: {', '.join(spec.metrics)}")
    if not (isinstance(max_points, int) and max_points >= 2):
        raise ValueError(f"max_points: must be an integer >= 2, got {max_points!r}")
    if not (math.isfinite(start) and math.isfinite(end)) or end < start:
        raise ValueError(f"start/end: need finite start <= end, got {start!r}..{end!r}")
    if dp_rank is not None and spec is not rollups.ENGINE:
        raise ValueError("dp_rank: only engine series have DP ranks")
    ids = sorted({int(i) for i in source_ids})
    metrics = list(dict.fromkeys(metrics))
    if not ids or not metrics:
        return {}
    span = max(end - start, 1e-6)
    need = span / (max_points - 1)
    tier = _choose_tier(need, start, horizons(db.engine))
    q = _SeriesQuery(db, spec, ids, metrics, start, end, dp_rank)
    if tier == 0:
        width, tier_name = need, "raw"
        acc = q.raw(width)
    else:
        # rollup rows may start up to one tier bucket before `start`: widen so the count bound holds
        width = math.ceil((span + tier) / (max_points - 1) / tier) * tier
        tier_name = f"{tier // 60}m" if tier < 3600 else "1h"
        acc = q.rollup(width, tier)
    out: dict[tuple[int, str], Series] = {}
    for src in ids:
        buckets, cells = acc.merged(src)
        starts = buckets.astype(np.float64) * width
        for k, metric in enumerate(metrics):
            has = cells[:, 4 * k + 3] > 0
            lo, total, hi, n = (cells[has, 4 * k + j] for j in range(4))
            # the mean divided as Python would (IEEE), the count back to an int
            columns = (starts[has], lo, total / n, hi, n.astype(np.int64))
            pts = list(map(Bucket, *(c.tolist() for c in columns)))
            out[(src, metric)] = Series(kind, src, metric, start, end, width, tier_name, acc.rows(src), pts)
    return out


@dataclass
class _Acc:
    """Per source, parts of a series' buckets: (bucket indexes, cells), a cell row being per metric
    [min, sum, max, n] and then the stored rows aggregated. Combined with numpy in ``merged``."""

    n_metrics: int
    parts: dict[int, list[tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]]] = field(
        default_factory=dict
    )

    def add(self, src: int, buckets: npt.NDArray[np.int64], cells: npt.NDArray[np.float64]) -> None:
        if len(buckets):
            self.parts.setdefault(src, []).append((buckets, cells))

    def add_rows(self, rows: Sequence[Sequence[Any]]) -> None:
        """Rows of (source, bucket, min, sum, max, n per metric..., rows) as the database grouped them
        (NULL min / max / sum where a metric has no value in the bucket)."""
        if not rows:
            return
        arr = np.array([tuple(r) for r in rows], dtype=np.float64)  # NULL -> NaN
        for src in np.unique(arr[:, 0]).tolist():
            sel = arr[arr[:, 0] == src]
            self.add(int(src), sel[:, 1].astype(np.int64), sel[:, 2:])

    def rows(self, src: int) -> int:
        return int(sum(cells[:, -1].sum() for _, cells in self.parts.get(src, [])))

    def merged(self, src: int) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
        """The source's buckets, ascending, each once: min of mins, sums of sums and counts, max of maxes."""
        parts = self.parts.get(src)
        if not parts:
            return np.zeros(0, dtype=np.int64), np.zeros((0, 4 * self.n_metrics + 1))
        buckets = np.concatenate([b for b, _ in parts])
        cells = np.concatenate([c for _, c in parts])
        order = np.argsort(buckets, kind="stable")
        buckets, cells = buckets[order], cells[order]
        first = np.ones(len(buckets), dtype=np.bool_)
        first[1:] = buckets[1:] != buckets[:-1]
        if first.all():
            return buckets, cells
        starts = np.flatnonzero(first)
        out = np.add.reduceat(np.where(np.isnan(cells), 0.0, cells), starts, axis=0)
        lo, hi = slice(0, 4 * self.n_metrics, 4), slice(2, 4 * self.n_metrics, 4)
        out[:, lo] = np.fmin.reduceat(cells[:, lo], starts, axis=0)
        out[:, hi] = np.fmax.reduceat(cells[:, hi], starts, axis=0)
        return buckets[starts], out


@dataclass
class _SeriesQuery:
    db: Database
    spec: rollups.RollupSpec
    ids: list[int]
    metrics: list[str]
    start: float
    end: float
    dp_rank: int | None

    def raw(self, width: float) -> _Acc:
        acc = _Acc(len(self.metrics))
        with self.db.engine.connect() as conn:
            self._sample_rows(conn, acc, width, after_id=None)
            self._sealed_rows(conn, acc, width)
        return acc

    def _sealed_rows(self, conn: Any, acc: _Acc, width: float) -> None:
        """The sealed samples' share of the buckets: decoded, bucketed and aggregated with numpy, the
        bucket index computed as the database computes it (floor(ts / width))."""
        spec = sealed.BY_SAMPLE_TABLE[self.spec.sample_table]
        per_source: dict[int, list[sealed.SealedRun]] = {}
        for run in sealed.iter_runs(
            conn, spec, self.ids, self.start, self.end, self.metrics, dp_rank=self.dp_rank
        ):
            per_source.setdefault(int(run.source[0]), []).append(run)
        for src, runs in per_source.items():
            ts = np.concatenate([r.ts for r in runs])
            buckets, inverse, counts = np.unique(
                np.floor(ts / width).astype(np.int64), return_inverse=True, return_counts=True
            )
            nb = len(buckets)
            cells = np.zeros((nb, 4 * len(self.metrics) + 1))
            cells[:, -1] = counts
            for k, metric in enumerate(self.metrics):
                values = np.concatenate([r.columns[metric][0] for r in runs]).astype(np.float64)
                present = np.concatenate([r.columns[metric][1] for r in runs])
                v, i = values[present], inverse[present]
                lo, hi = np.full(nb, np.nan), np.full(nb, np.nan)
                np.fmin.at(lo, i, v)
                np.fmax.at(hi, i, v)
                cells[:, 4 * k : 4 * k + 4] = np.stack(
                    [lo, np.bincount(i, weights=v, minlength=nb), hi, np.bincount(i, minlength=nb)], axis=1
                )
            acc.add(src, buckets, cells)

    def rollup(self, width: float, tier: int) -> _Acc:
        r = self.spec.rollup
        src = r.c[self.spec.source_cols[0]]
        b = dialect.bucket_index(self.db.dialect_name, r.c.bucket_ts, 0.0, width)
        aggs = []
        for m in self.metrics:
            aggs += [
                func.min(r.c[f"{m}_min"]),
                func.sum(r.c[f"{m}_sum"]),
                func.max(r.c[f"{m}_max"]),
                func.sum(r.c[f"{m}_n"]),
            ]
        lo_ts = math.floor(self.start / tier) * tier
        where = [r.c.res_s == tier, src.in_(self.ids), r.c.bucket_ts >= lo_ts, r.c.bucket_ts <= self.end]
        if self.dp_rank is not None:
            where.append(r.c.dp_rank == self.dp_rank)
        stmt = sa_select(src, b, *aggs, func.count()).where(and_(*where)).group_by(src, b)
        acc = _Acc(len(self.metrics))
        with self.db.engine.connect() as conn:
            acc.add_rows(conn.execute(stmt).all())
            # raw rows not yet folded into the rollups, so the newest minutes are never missing
            self._sample_rows(conn, acc, width, after_id=rollups.watermark(conn, self.spec))
        return acc

    def _sample_rows(self, conn: Any, acc: _Acc, width: float, after_id: int | None) -> None:
        t = self.spec.sample
        b = dialect.bucket_index(self.db.dialect_name, t.c.ts, 0.0, width)
        aggs = []
        for name in self.metrics:
            m = t.c[name]
            aggs += [func.min(m), func.sum(m), func.max(m), func.count(m)]
        tail = after_id is not None

        def match(column: ColumnElement[Any]) -> ColumnElement[Any]:
            # Past the watermark: rows found by primary key range (dialect.off_index). Grouping by that
            # expression too: grouping by the bare column lets SQLite walk the whole (source, ts) index
            # to get its order for free (4.8 M rows: 280 ms).
            return dialect.off_index(column) if tail else column

        src = match(t.c[self.spec.source_cols[0]])
        where = [t.c.id > after_id] if after_id is not None else []
        where += [src.in_(self.ids), t.c.ts >= self.start, t.c.ts <= self.end]
        if self.dp_rank is not None:
            where.append(match(t.c.dp_rank) == self.dp_rank)
        stmt = sa_select(src, b, *aggs, func.count()).where(and_(*where)).group_by(src, b)
        acc.add_rows(conn.execute(stmt).all())


def _f(v: Any) -> float | None:
    return None if v is None else float(v)


# --- latest values ----------------------------------------------------------------------------------
def latest_engine_samples(db: Database, server_id: int | None = None) -> list[models.EngineSample]:
    """The newest sample of every (server, DP rank) (of one server if ``server_id`` is given)."""
    es = models.EngineSample
    t = es.__table__  # type: ignore[attr-defined]
    out: list[models.EngineSample] = []
    with db.engine.connect() as conn:
        ids = (
            [server_id]
            if server_id is not None
            else list(conn.execute(sa_select(col(models.Server.id))).scalars())
        )
        for sid in ids:
            # plain rows, a model made only of each rank's newest (256 models cost a page 8 ms)
            rows = conn.execute(
                sa_select(t)
                .where(t.c.server_id == sid)
                .order_by(t.c.ts.desc())
                .limit(DEFAULT_LATEST_SCAN_ROWS)
            ).mappings()
            seen: set[int] = set()
            for row in rows:
                if row["dp_rank"] not in seen:
                    seen.add(row["dp_rank"])
                    out.append(es(**row))
    return sorted(out, key=lambda r: (r.server_id, r.dp_rank))


@dataclass(frozen=True)
class RecentEngineSamples:
    """What the policy runner reads of one server's samples (``recent_engine_samples``)."""

    server_ids: list[int]  # the servers stored under the URLs asked for; empty: never collected
    latest_ts: float | None  # their newest sample; None before the first
    rows: list[models.EngineSample]  # their samples at or after ``since``, oldest first


def recent_engine_samples(db: Database, urls: Sequence[str], since: float) -> RecentEngineSamples:
    """Every DP rank's samples at or after ``since`` of the servers stored under any of ``urls`` (one URL
    spelt with and without a trailing slash), with the newest sample's time, in one read transaction."""
    es = models.EngineSample
    with db.session() as s:
        found = s.exec(select(models.Server.id).where(col(models.Server.url).in_(list(urls))))
        ids = [int(i) for i in found if i is not None]
        if not ids:
            return RecentEngineSamples([], None, [])
        latest = s.exec(select(func.max(es.ts)).where(col(es.server_id).in_(ids))).one()
        if latest is None or latest < since:  # nothing that new: no row to read
            return RecentEngineSamples(ids, latest, [])
        rows = list(s.exec(select(es).where(col(es.server_id).in_(ids), es.ts >= since).order_by(col(es.ts))))
        spec = sealed.ENGINE
        for run in sealed.iter_runs(s.connection(), spec, ids, since, None, spec.columns):
            rows += [es(**row) for row in run.rows(spec)]  # the head's rows are the newest: rarely any
        rows.sort(key=lambda r: r.ts)
        return RecentEngineSamples(ids, float(latest), rows)


def latest_gpus(db: Database, host: str | None = None) -> list[tuple[models.Gpu, models.GpuSample | None]]:
    """Every GPU (of one host if given) with its newest sample (None before its first), by host and index:
    one statement, each GPU's newest row found through the (gpu_id, ts) index."""
    g, gs = models.Gpu, models.GpuSample
    newest = (
        sa_select(gs.id)  # type: ignore[call-overload]
        .where(col(gs.gpu_id) == col(g.id))
        .order_by(col(gs.ts).desc())
        .limit(1)
        .correlate(g)
        .scalar_subquery()
    )
    stmt = select(g, gs).outerjoin(gs, col(gs.id) == newest).order_by(col(g.host), col(g.index))
    if host is not None:
        stmt = stmt.where(g.host == host)
    with db.session() as s:
        return [(gpu, sample) for gpu, sample in s.exec(stmt)]


def latest_gpu_samples(db: Database, host: str | None = None) -> list[models.GpuSample]:
    """The newest sample of every GPU (of one host if given)."""
    return [sample for _, sample in latest_gpus(db, host) if sample is not None]


def latest_gpu_processes(db: Database, gpu_ids: Sequence[int], since: float) -> list[models.GpuProcessSample]:
    """Per GPU of ``gpu_ids``, the per-process memory rows of its newest process sample at or after
    ``since`` (none for a GPU whose source reports no processes), by GPU and pid."""
    ids = sorted({int(i) for i in gpu_ids})
    if not ids:
        return []
    p = models.GpuProcessSample
    newest = (
        sa_select(col(p.gpu_id).label("gpu_id"), func.max(p.ts).label("ts"))
        .where(col(p.gpu_id).in_(ids), col(p.ts) >= since)
        .group_by(col(p.gpu_id))
        .subquery()
    )
    stmt = (
        select(p)
        .join(newest, and_(newest.c.gpu_id == col(p.gpu_id), newest.c.ts == col(p.ts)))
        .order_by(col(p.gpu_id), col(p.pid))
    )
    with db.session() as s:
        return list(s.exec(stmt))


DEFAULT_PAUSE_LIMIT = 2000  # a window's pauses a chart draws at most (the longest kept past it)


def server_pauses(
    db: Database,
    server_id: int,
    start: float,
    end: float,
    *,
    min_seconds: float = 0.0,
    limit: int = DEFAULT_PAUSE_LIMIT,
) -> list[models.ServerPause]:
    """The server's stored pauses that ended in [start, end] and lasted ``min_seconds`` or more, oldest
    first: at most ``limit``, the longest where there were more (a chart marks the ones that matter)."""
    p = models.ServerPause
    longest = (
        select(p)
        .where(p.server_id == server_id, col(p.ts) >= start, col(p.ts) <= end, col(p.seconds) >= min_seconds)
        .order_by(col(p.seconds).desc(), col(p.ts))
        .limit(max(0, int(limit)))
    )
    with db.session() as s:
        return sorted(s.exec(longest), key=lambda row: (row.ts, row.process, row.kind))


def dp_ranks(db: Database, server_id: int, start: float, end: float) -> list[int]:
    """The DP ranks of a server that reported in [start, end], ascending."""
    es = models.EngineSample
    stmt = (
        sa_select(col(es.dp_rank))
        .where(col(es.server_id) == server_id, col(es.ts) >= start, col(es.ts) <= end)
        .distinct()
    )
    c = models.engine_chunk
    in_chunks = (
        sa_select(c.c.dp_rank)
        .where(c.c.server_id == server_id, c.c.end_ts >= start, c.c.start_ts <= end)
        .distinct()
    )
    with db.engine.connect() as conn:
        found = {int(r) for (r,) in conn.execute(stmt) if r is not None}
        found |= {int(r) for (r,) in conn.execute(in_chunks)}
    return sorted(found)


def sample_rows(
    db: Database,
    kind: SeriesKind,
    source_ids: Sequence[int],
    start: float | None = None,
    end: float | None = None,
) -> Iterator[dict[str, Any]]:
    """Every stored sample of the sources (servers for ``engine``, GPUs for ``gpu``) in [start, end], head
    and sealed, as sample-table rows (column -> value; a sealed row's id is None), by source then time.
    A generator: it holds a connection while it is read, and decodes one chunk at a time."""
    spec = _spec(kind)
    chunk_spec = sealed.BY_SAMPLE_TABLE[spec.sample_table]
    t = spec.sample
    first = t.c[spec.source_cols[0]]
    with db.engine.connect() as conn:
        for src in sorted({int(i) for i in source_ids}):
            where = [first == src]
            if start is not None:
                where.append(t.c.ts >= start)
            if end is not None:
                where.append(t.c.ts <= end)
            head = (
                dict(r)
                for r in conn.execute(sa_select(t).where(and_(*where)).order_by(t.c.ts, t.c.id)).mappings()
            )
            # per series (a DP rank), its chunks follow one another in time, decoded as the merge reaches them
            ranks: list[int | None] = [None]
            if kind == "engine":
                c = chunk_spec.chunk
                ranks = [
                    int(r)
                    for (r,) in conn.execute(sa_select(c.c.dp_rank).where(c.c.server_id == src).distinct())
                ]
            sealed_rows = [
                _rows_of_runs(
                    chunk_spec,
                    sealed.iter_runs(conn, chunk_spec, [src], start, end, chunk_spec.columns, dp_rank=r),
                )
                for r in ranks
            ]
            yield from heapq.merge(*sealed_rows, head, key=lambda r: r["ts"])


def _rows_of_runs(spec: sealed.ChunkSpec, runs: Iterator[sealed.SealedRun]) -> Iterator[dict[str, Any]]:
    for run in runs:
        for row in run.rows(spec):
            yield {"id": None, **row}
