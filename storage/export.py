"""Export benchmark runs and sample ranges to CSV, JSON Lines or Parquet.

- Runs as JSONL use bench_serving's key names (one line per point, ``server_info`` nested), so tools
  written for SGLang's benchmark client read them, and ``spectower import bench-serving`` reads them back.
- JSONL is strict JSON: NaN and +-Infinity are written as null (``request_rate: Infinity``, the client's
  "no arrival-rate limit", comes back as null: a closed-loop run, as spectower's own runs store it).
- Runs as CSV/Parquet are one flat row per point (run facts repeated, ``extra_json`` as text).
- Samples are streamed in chunks, so a month of 1 Hz data does not sit in memory.
- CSV cells a spreadsheet would execute (leading ``=``, ``+``, ``-``, ``@``, tab, CR) get a leading
  ``'``; numbers, negative ones included, are written as numbers.
- The output appears only when complete (written beside it, then renamed): an error leaves nothing.
"""

from __future__ import annotations

import contextlib
import csv
import json
import math
import re
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import IO, Any, Literal

from sqlalchemy import Boolean, Float, Integer, select
from sqlmodel import SQLModel

from . import queries
from .bench_serving import export_lines
from .database import Database
from .files import atomic_path, check_out, finite_or_null

Format = Literal["csv", "jsonl", "parquet"]
FORMATS: tuple[str, ...] = ("csv", "jsonl", "parquet")
SampleKind = Literal["engine", "gpu", "control"]
SAMPLE_KINDS: tuple[str, ...] = ("engine", "gpu", "control")
DEFAULT_CHUNK_ROWS = 20_000
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
_PLAIN_NUMBER = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")


def check_format(fmt: str) -> Format:
    if fmt not in FORMATS:
        raise ValueError(f"--format: {fmt!r} is not one of {', '.join(FORMATS)}")
    return fmt  # type: ignore[return-value]


def neutralise_cell(value: Any) -> Any:
    """A CSV cell safe to open in a spreadsheet: text starting like a formula gets a leading ``'``.
    Numbers (and text that is just a plain number, such as ``-3.5``) are left alone."""
    if not isinstance(value, str) or not value:
        return value
    if value.startswith(_FORMULA_START) and not _PLAIN_NUMBER.match(value):
        return "'" + value
    return value


def _csv_value(v: Any) -> Any:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, dict | list):
        v = json.dumps(v, allow_nan=True)
    return neutralise_cell(v)


# --- atomic output ----------------------------------------------------------------------------
@contextlib.contextmanager
def _atomic_path(out: str | Path) -> Iterator[Path]:
    dest = check_out(out)
    try:
        with atomic_path(dest) as tmp:
            yield tmp
            check_out(dest)  # still not a link/device (it may have changed while the export ran)
    except OSError as exc:  # full disk, read-only file system, quota: one line naming the file
        raise ValueError(f"--out: cannot write {dest}: {exc.strerror or exc}") from None


def _arrow_type(sqltype: Any) -> Any:
    import pyarrow as pa

    if isinstance(sqltype, Boolean):
        return pa.bool_()
    if isinstance(sqltype, Integer):
        return pa.int64()
    if isinstance(sqltype, Float):
        return pa.float64()
    return pa.string()


def write_rows(
    rows: Iterable[dict[str, Any]],
    columns: Sequence[str],
    fmt: Format,
    out: str | Path,
    arrow_types: dict[str, Any] | None = None,
) -> int:
    """Write dict rows (keys = ``columns``) in ``fmt``; returns the number of rows."""
    n = 0
    with _atomic_path(out) as tmp:
        if fmt == "parquet":
            import pyarrow as pa
            import pyarrow.parquet as pq

            types = arrow_types or {}
            schema = pa.schema([(c, types.get(c, pa.string())) for c in columns])
            with pq.ParquetWriter(tmp, schema) as writer:
                chunk: list[dict[str, Any]] = []
                for row in rows:
                    chunk.append({c: _parquet_value(row.get(c), schema.field(c).type) for c in columns})
                    n += 1
                    if len(chunk) >= DEFAULT_CHUNK_ROWS:
                        writer.write_table(pa.Table.from_pylist(chunk, schema=schema))
                        chunk = []
                if chunk or n == 0:
                    writer.write_table(pa.Table.from_pylist(chunk, schema=schema))
            return n
        with open(tmp, "w", newline="", encoding="utf-8") as fh:
            if fmt == "csv":
                w = csv.writer(fh)
                w.writerow([neutralise_cell(c) for c in columns])
                for row in rows:
                    w.writerow([_csv_value(row.get(c)) for c in columns])
                    n += 1
            else:
                for row in rows:
                    _write_jsonl(fh, {c: row.get(c) for c in columns})
                    n += 1
    return n


def _parquet_value(v: Any, pa_type: Any) -> Any:
    import pyarrow as pa

    if v is None:
        return None
    if pa_type == pa.string() and not isinstance(v, str):
        return json.dumps(v, allow_nan=True)
    return v


def _write_jsonl(fh: IO[str], obj: dict[str, Any]) -> None:
    # Strict JSON, so jq, JavaScript and pandas read every line: a stored NaN or +-Infinity (a figure
    # imported before such figures were refused, bench_serving's request_rate inf) is written as null.
    fh.write(json.dumps(finite_or_null(obj), allow_nan=False, ensure_ascii=False))
    fh.write("\n")


# --- benchmark runs ---------------------------------------------------------------------------
RUN_COLUMNS: tuple[str, ...] = (
    "run_id", "run_source", "run_created_at", "run_tag", "served_model_name", "sglang_version", "backend",
    "dataset_name", "server_url",
)  # fmt: skip


def _point_columns() -> list[str]:
    cols = [c.name for c in SQLModel.metadata.tables["bench_point"].columns if c.name not in ("run_id",)]
    return ["point_id" if c == "id" else c for c in cols]


def export_bench(
    db: Database, run_ids: Sequence[int], fmt: str, out: str | Path, *, name_each: bool = False
) -> int:
    """Write the points of ``run_ids`` (in that order); returns the number of points written. As JSONL,
    every line names its run (``spectower_run``, with its server) when there are several runs or
    ``name_each`` (a fleet's export: every line says which replica it came from)."""
    fmt = check_format(fmt)
    check_out(out)
    if not run_ids:
        raise ValueError("run id: give at least one benchmark run id")
    runs = [queries.bench_run(db, rid) for rid in run_ids]  # LookupError naming a missing id, before writing
    if fmt == "jsonl":
        # several runs in one file: every line says its run (spectower_run), so import splits them again
        several = len({r.id for r in runs}) > 1 or name_each
        lines = [
            line
            for run in runs
            if run.id is not None
            for line in export_lines(db, run.id, with_run=True if several else None)
        ]
        with _atomic_path(out) as tmp, open(tmp, "w", encoding="utf-8") as fh:
            for line in lines:
                _write_jsonl(fh, line)
        return len(lines)
    point_cols = _point_columns()
    columns = [*RUN_COLUMNS, *point_cols]
    bp = SQLModel.metadata.tables["bench_point"]
    types = {("point_id" if c.name == "id" else c.name): _arrow_type(c.type) for c in bp.columns}
    types.update({"run_id": _arrow_type(Integer()), "run_created_at": _arrow_type(Float())})

    def rows() -> Iterator[dict[str, Any]]:
        for run in runs:
            assert run.id is not None
            facts = {
                "run_id": run.id,
                "run_source": run.source,
                "run_created_at": run.created_at,
                "run_tag": run.tag,
                "served_model_name": run.served_model_name,
                "sglang_version": run.sglang_version,
                "backend": run.backend,
                "dataset_name": run.dataset_name,
                "server_url": run.server_url,
            }
            for p in queries.bench_points(db, run.id):
                d = p.model_dump()
                d["point_id"] = d.pop("id")
                d.pop("run_id", None)
                yield {**facts, **d}

    return write_rows(rows(), columns, fmt, out, types)


def bench_runs_of(db: Database, servers: Sequence[str]) -> dict[str, list[int]]:
    """The ids of every run stored for each server (oldest first), by server in the order given (a
    server with none: an empty list)."""
    wanted = {url.rstrip("/"): url for url in servers}
    found: dict[str, list[int]] = {url: [] for url in servers}
    for run in sorted(queries.bench_runs(db), key=lambda r: int(r.id or 0)):
        url = wanted.get((run.server_url or "").rstrip("/"))
        if url is not None and run.id is not None:
            found[url].append(int(run.id))
    return found


# --- samples ----------------------------------------------------------------------------------
def _sample_query(
    kind: str, server: list[str] | None, host: list[str] | None, start: float | None, end: float | None
) -> tuple[Any, list[str], dict[str, Any]]:
    t = SQLModel.metadata.tables
    if kind == "engine":
        es, srv = t["engine_sample"], t["server"]
        cols = [srv.c.url.label("server_url"), *[c for c in es.columns]]
        stmt = select(*cols).join(srv, srv.c.id == es.c.server_id)
        if server is not None:
            stmt = stmt.where(srv.c.url.in_(server))
        if host is not None:
            raise ValueError("--host: applies to --kind gpu only")
        ts, order = es.c.ts, [es.c.server_id, es.c.ts]
    elif kind == "gpu":
        gs, gpu = t["gpu_sample"], t["gpu"]
        cols = [gpu.c.host, gpu.c.index.label("gpu_index"), gpu.c.uuid, *[c for c in gs.columns]]
        stmt = select(*cols).join(gpu, gpu.c.id == gs.c.gpu_id)
        if server is not None:
            raise ValueError("--server: applies to --kind engine and control; use --host for GPUs")
        if host is not None:
            stmt = stmt.where(gpu.c.host.in_(host))
        ts, order = gs.c.ts, [gs.c.gpu_id, gs.c.ts]
    elif kind == "control":
        ce = t["control_event"]
        cols = list(ce.columns)
        stmt = select(*cols)
        if server is not None:
            stmt = stmt.where(ce.c.server_url.in_(server))
        if host is not None:
            raise ValueError("--host: applies to --kind gpu only")
        ts, order = ce.c.ts, [ce.c.ts, ce.c.id]
    else:
        raise ValueError(f"--kind: {kind!r} is not one of {', '.join(SAMPLE_KINDS)}")
    if start is not None:
        stmt = stmt.where(ts >= start)
    if end is not None:
        stmt = stmt.where(ts <= end)
    names = [str(c.key) for c in stmt.selected_columns]
    types = {str(c.key): _arrow_type(c.type) for c in stmt.selected_columns}
    return stmt.order_by(*order), names, types


def export_samples(
    db: Database,
    kind: str,
    fmt: str,
    out: str | Path,
    *,
    server: str | None = None,
    host: str | None = None,
    start: float | None = None,
    end: float | None = None,
    servers: Sequence[str] | None = None,
    hosts: Sequence[str] | None = None,
    tally: Counter[str] | None = None,
) -> int:
    """Stream engine samples, GPU samples or control events in [start, end] to ``out``. ``server`` /
    ``host``: only that one (an unknown server is an error); ``servers`` / ``hosts``: only those (a fleet's
    replicas, each row naming its own; one with nothing stored adds no row). ``tally``: rows written by
    server URL (engine, control) or host (gpu)."""
    fmt = check_format(fmt)
    check_out(out)
    if start is not None and end is not None and end < start:
        raise ValueError("--end: is before --start")
    if server is not None and kind in ("engine",):
        queries.server_by_url(db, server)  # LookupError naming the unknown server
    only_servers = [server] if server is not None else (list(servers) if servers is not None else None)
    only_hosts = [host] if host is not None else (list(hosts) if hosts is not None else None)
    stmt, names, types = _sample_query(kind, only_servers, only_hosts, start, end)

    def stored() -> Iterator[dict[str, Any]]:
        if kind == "control":
            with db.engine.connect() as conn:
                result = conn.execution_options(stream_results=True, yield_per=DEFAULT_CHUNK_ROWS).execute(
                    stmt
                )
                yield from (dict(row._mapping) for row in result)
            return
        # samples: head and sealed chunks, through the query module, with the source's identity in front
        found: list[tuple[int | None, dict[str, Any]]]
        if kind == "engine":
            found = [
                (sv.id, {"server_url": sv.url})
                for sv in queries.servers(db)
                if only_servers is None or sv.url in only_servers
            ]
        else:
            found = [
                (g.id, {"host": g.host, "gpu_index": g.index, "uuid": g.uuid})
                for g in queries.gpus(db)
                if only_hosts is None or g.host in only_hosts
            ]
        for source_id, facts in sorted(((int(i or 0), f) for i, f in found), key=lambda x: x[0]):
            for row in queries.sample_rows(db, kind, [source_id], start, end):  # type: ignore[arg-type]
                yield {**facts, **row}

    source_key = "host" if kind == "gpu" else "server_url"

    def rows() -> Iterator[dict[str, Any]]:
        for d in stored():
            for k, v in d.items():
                if isinstance(v, float) and math.isnan(v):
                    d[k] = None
            if tally is not None:
                tally[str(d.get(source_key))] += 1
            yield d

    return write_rows(rows(), names, fmt, out, types)
