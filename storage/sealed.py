"""Sealed samples: a series' older head rows moved into chunk rows (storage/chunks.py), and read back.

The head is the sample table itself (``engine_sample``, ``gpu_sample``): the writer and every import
insert rows there as before. ``seal`` runs on the one writer (its maintenance, after the rollups are
folded): per series (a GPU; a server's DP rank) it takes the rows that are

- already folded into the rollups (id <= the rollup watermark), so the rollups never read a chunk;
- older than ``keep_s`` before the series' newest sample, so the newest minutes (what the latest values,
  the policy and a collector's restart read) stay rows;
- not the table's highest id (SQLite hands out max(id) + 1: deleting it would hand its id out again,
  under the watermark),

and once there are ``min_rows`` of them (or the oldest waited ``max_wait_s``), writes them as chunks of
at most ``max_rows`` samples and deletes them from the head, in one transaction: a crash leaves either
the rows or the chunk, never both nor neither.

A row that arrives late, into a range already sealed, or a row of a minute whose older samples another
collector sealed meanwhile, is folded by the rollups after ``unseal`` put the chunks holding that minute
back into the head (storage/rollups.py), so a minute is always recomputed from all of its samples.
Readers (storage/queries.py) read chunks and head together.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import Boolean, ColumnElement, Float, Table, and_, func, select
from sqlalchemy.engine import Connection
from sqlmodel import SQLModel

from . import dialect, models

if TYPE_CHECKING:  # numpy and the codec are imported where a chunk is written or read: every process that
    # opens a database imports this module, most never touch a chunk, and numpy costs ~0.1 CPU-s to import
    import numpy as np
    import numpy.typing as npt

DEFAULT_KEEP_S = 120.0  # the head keeps each series' newest 2 minutes as rows
DEFAULT_MIN_ROWS = 600  # a chunk waits for 10 minutes of 1 Hz samples ...
DEFAULT_MAX_WAIT_S = 3600.0  # ... or for its oldest row to be an hour older than the head
DEFAULT_MAX_ROWS = 3600  # samples per chunk at most
# Rows one maintenance step seals at most (two full chunks, ~1 s here): the writer inserts what queued
# between steps, so a large head (a database upgraded from v4: days of rows) seals over many steps
# instead of holding the collector's rows for minutes.
DEFAULT_STEP_ROWS = 2 * DEFAULT_MAX_ROWS
DELETE_BATCH = 500  # ids per DELETE statement


@dataclass(frozen=True)
class ChunkSpec:
    sample_table: str
    chunk: Table
    source_cols: tuple[str, ...]

    @property
    def sample(self) -> Table:
        return SQLModel.metadata.tables[self.sample_table]

    @functools.cached_property
    def columns(self) -> tuple[str, ...]:
        """The value columns a chunk holds, in the sample table's order (a column added by a later
        migration is appended: older chunks then read it as NULL)."""
        skip = {"id", "ts", *self.source_cols}
        return tuple(c.name for c in self.sample.columns if c.name not in skip)

    @functools.cached_property
    def kinds(self) -> dict[str, str]:
        """column -> float | int | bool."""
        out = {}
        for name in self.columns:
            t = self.sample.c[name].type
            out[name] = "float" if isinstance(t, Float) else "bool" if isinstance(t, Boolean) else "int"
        return out


ENGINE = ChunkSpec("engine_sample", models.engine_chunk, ("server_id", "dp_rank"))
GPU = ChunkSpec("gpu_sample", models.gpu_chunk, ("gpu_id",))
SPECS: tuple[ChunkSpec, ...] = (ENGINE, GPU)
BY_SAMPLE_TABLE = {s.sample_table: s for s in SPECS}


def _encode(spec: ChunkSpec, rows: Sequence[Sequence[Any]]) -> bytes:
    """Rows of (ts, *spec.columns) -> a chunk."""
    import numpy as np

    from . import chunks

    ts = np.array([r[0] for r in rows], dtype=np.float64)
    cols = []
    for k, name in enumerate(spec.columns, start=1):
        raw = [r[k] for r in rows]
        present = np.array([v is not None for v in raw], dtype=np.bool_)
        if spec.kinds[name] == "float":
            values: npt.NDArray[Any] = np.array([0.0 if v is None else v for v in raw], dtype=np.float64)
        else:
            values = np.array([0 if v is None else int(v) for v in raw], dtype=np.int64)
        cols.append(chunks.ChunkColumn(values, present))
    return chunks.encode(ts, cols)


def seal(
    conn: Connection,
    spec: ChunkSpec,
    watermark: int,
    *,
    keep_s: float = DEFAULT_KEEP_S,
    min_rows: int = DEFAULT_MIN_ROWS,
    max_wait_s: float = DEFAULT_MAX_WAIT_S,
    max_rows: int = DEFAULT_MAX_ROWS,
    limit_rows: int = 20 * DEFAULT_MAX_ROWS,
    budget: int | None = None,
) -> int:
    """Seal what is due of every series of ``spec`` (at most ``limit_rows`` per series in this call, and
    with ``budget`` no series begun once that many rows are sealed); returns the rows sealed.
    ``watermark``: the rollups' (rows above it are never sealed)."""
    t = spec.sample
    # PostgreSQL with several collectors: one sealer at a time (two would seal the same rows twice)
    dialect.lock_for_rollup(conn, spec.sample_table)
    src_cols = [t.c[c] for c in spec.source_cols]
    max_id = conn.execute(select(func.max(t.c.id))).scalar_one_or_none()
    if max_id is None:
        return 0
    ceiling = min(int(watermark), int(max_id) - 1)
    newest = conn.execute(select(*src_cols, func.max(t.c.ts)).group_by(*src_cols)).all()
    sealed = 0
    for *source, newest_ts in newest:
        if budget is not None and sealed >= budget:
            break
        cutoff = float(newest_ts) - keep_s
        where = and_(
            *[c == v for c, v in zip(src_cols, source, strict=True)], t.c.ts < cutoff, t.c.id <= ceiling
        )
        n, oldest = conn.execute(select(func.count(), func.min(t.c.ts)).where(where)).one()
        if not n or (n < min_rows and oldest > cutoff - max_wait_s):
            continue
        rows = conn.execute(
            select(t.c.id, t.c.ts, *[t.c[c] for c in spec.columns])
            .where(where)
            .order_by(t.c.ts, t.c.id)
            .limit(limit_rows if budget is None else min(limit_rows, max(max_rows, budget - sealed)))
        ).all()
        for lo in range(0, len(rows), max_rows):
            part = rows[lo : lo + max_rows]
            _write_chunk(conn, spec, source, [r[1:] for r in part])
        ids = [r[0] for r in rows]
        for lo in range(0, len(ids), DELETE_BATCH):
            conn.execute(t.delete().where(t.c.id.in_(ids[lo : lo + DELETE_BATCH])))
        sealed += len(rows)
    return sealed


def _write_chunk(
    conn: Connection, spec: ChunkSpec, source: Sequence[Any], rows: Sequence[Sequence[Any]]
) -> None:
    ts = [r[0] for r in rows]
    conn.execute(
        spec.chunk.insert().values(
            **dict(zip(spec.source_cols, source, strict=True)),
            start_ts=min(ts),
            end_ts=max(ts),
            n=len(rows),
            data=_encode(spec, rows),
        )
    )


def unseal(conn: Connection, spec: ChunkSpec, source: Sequence[Any], start: float, end: float) -> int:
    """Put the chunks of ``source`` holding samples in [start, end) back into the head as rows (new
    ids); returns the rows put back. A chunk is taken whole, samples outside the range included."""
    c = spec.chunk
    where = and_(
        *[c.c[k] == v for k, v in zip(spec.source_cols, source, strict=True)],
        c.c.end_ts >= start,
        c.c.start_ts < end,
    )
    found = conn.execute(select(c.c.id, c.c.data).where(where)).all()
    back = 0
    for chunk_id, data in found:
        run = _decode(spec, tuple(source), data, spec.columns)
        rows = run.rows(spec)
        conn.execute(spec.sample.insert(), rows)
        conn.execute(c.delete().where(c.c.id == chunk_id))
        back += len(rows)
    return back


@dataclass
class SealedRun:
    """One series' samples from one chunk: timestamps and the columns asked for (values, present)."""

    source: tuple[Any, ...]
    ts: npt.NDArray[np.float64]
    columns: dict[str, tuple[npt.NDArray[Any], npt.NDArray[np.bool_]]]

    def within(self, start: float | None, end: float | None) -> SealedRun:
        import numpy as np

        keep = np.ones(len(self.ts), dtype=np.bool_)
        if start is not None:
            keep &= self.ts >= start
        if end is not None:
            keep &= self.ts <= end
        if keep.all():
            return self
        cols = {k: (v[keep], p[keep]) for k, (v, p) in self.columns.items()}
        return SealedRun(self.source, self.ts[keep], cols)

    def rows(self, spec: ChunkSpec) -> list[dict[str, Any]]:
        """As sample-table rows (column -> Python value or None), without ids."""
        out: list[dict[str, Any]] = [
            {**dict(zip(spec.source_cols, self.source, strict=True)), "ts": t} for t in self.ts.tolist()
        ]
        for name, (values, present) in self.columns.items():
            kind = spec.kinds[name]
            conv = bool if kind == "bool" else None
            for row, v, p in zip(out, values.tolist(), present.tolist(), strict=True):
                row[name] = (conv(v) if conv else v) if p else None
        return out


def _decode(spec: ChunkSpec, source: tuple[Any, ...], data: bytes, columns: Sequence[str]) -> SealedRun:
    import numpy as np

    from . import chunks

    chunk = chunks.Chunk.parse(data)
    got: dict[str, tuple[npt.NDArray[Any], npt.NDArray[np.bool_]]] = {}
    ncols = len(chunk.codes) - 1
    for name in columns:
        k = spec.columns.index(name)
        if k < ncols:
            got[name] = chunk.column(k)
        else:  # a column newer than the chunk
            got[name] = (np.zeros(chunk.n), np.zeros(chunk.n, dtype=np.bool_))
    return SealedRun(source, chunk.timestamps(), got)


def iter_runs(
    conn: Connection,
    spec: ChunkSpec,
    source_ids: Sequence[int] | None,
    start: float | None,
    end: float | None,
    columns: Sequence[str],
    *,
    dp_rank: int | None = None,
) -> Iterator[SealedRun]:
    """The sealed samples in [start, end] of the sources ``source_ids`` (their first source column; None:
    every source), ``columns`` of them, a chunk at a time (decoded when reached), by source then time."""
    c = spec.chunk
    first = c.c[spec.source_cols[0]]
    where: list[ColumnElement[bool]] = []
    if source_ids is not None:
        where.append(first.in_(list(source_ids)))
    if start is not None:
        where.append(c.c.end_ts >= start)
    if end is not None:
        where.append(c.c.start_ts <= end)
    if dp_rank is not None:
        where.append(c.c.dp_rank == dp_rank)
    src = [c.c[k] for k in spec.source_cols]
    stmt = select(*src, c.c.data).where(and_(*where)).order_by(*src, c.c.start_ts)
    for *source, data in conn.execute(stmt).all():  # compressed: small; decoded one at a time
        run = _decode(spec, tuple(source), data, columns).within(start, end)
        if len(run.ts):
            yield run
