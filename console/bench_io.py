"""Benchmark export (CSV / JSONL / Parquet bytes for a download) and import (uploaded bench_serving files).

Both go through storage (storage.export.export_bench, storage.bench_serving.import_file) so the console
and `spectower export/import` produce and accept exactly the same files.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..storage import Database
from ..storage.bench_serving import import_file as storage_import_file
from ..storage.export import export_bench

FORMATS = ("CSV", "JSONL", "Parquet")
MIME = {"CSV": "text/csv", "JSONL": "application/jsonl", "Parquet": "application/vnd.apache.parquet"}
SUFFIX = {"CSV": "csv", "JSONL": "jsonl", "Parquet": "parquet"}
MAX_UPLOAD_BYTES = 64 * 1024 * 1024


def export_name(run_ids: Sequence[int], fmt: str) -> str:
    return f"spectower-bench-{'-'.join(str(int(i)) for i in run_ids)}.{SUFFIX.get(fmt, 'out')}"


def export_runs(db: Database, run_ids: Sequence[int], fmt: str) -> tuple[bytes, str, str]:
    """(payload, mime type, file name) for st.download_button."""
    if fmt not in FORMATS:
        raise ValueError(f"format: expected one of {', '.join(FORMATS)}, got {fmt!r}")
    name = export_name(run_ids, fmt)
    with tempfile.TemporaryDirectory(prefix="spectower-export-") as tmp:
        out = Path(tmp) / name
        export_bench(db, list(run_ids), fmt.lower(), out)
        return out.read_bytes(), MIME[fmt], name


@dataclass(frozen=True)
class Imported:
    name: str
    run_id: int | None
    points: int
    duplicate_of: int | None = None
    line_errors: list[tuple[int, str]] = field(default_factory=list)


def import_upload(db: Database, name: str, payload: bytes) -> Imported:
    """Import one uploaded SGLang bench_serving JSONL file as one run. Bad content -> ValueError."""
    if len(payload) > MAX_UPLOAD_BYTES:
        raise ValueError(f"{name}: larger than {MAX_UPLOAD_BYTES // (1024 * 1024)} MiB")
    safe = Path(name).name or "upload.jsonl"  # the run's source names the file, never a client path
    with tempfile.TemporaryDirectory(prefix="spectower-import-") as tmp:
        path = Path(tmp) / safe
        path.write_bytes(payload)
        try:
            result = storage_import_file(db, path)
        except ValueError as exc:  # its line names the file it read: the upload's name, not a temp path
            raise ValueError(str(exc).replace(str(path), safe)) from None
    return Imported(safe, result.run_id, result.points, result.duplicate_of, list(result.line_errors))
