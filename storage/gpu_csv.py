"""``nvidia-smi --query-gpu=... --format=csv`` logs -> GPU history (``Gpu`` + ``GpuSample`` rows).

A log written with ``nvidia-smi --query-gpu=timestamp,index,uuid,name,utilization.gpu,memory.used,...
--format=csv -l 1 > gpu.csv`` holds a header line (field names, units in brackets: ``power.draw [W]``)
and one line per GPU per interval (``2024/05/01 12:00:00.123, 0, GPU-..., 35 %, 1234 MiB, ...``). Fields
a GPU does not support read ``[N/A]`` / ``[Not Supported]``: stored as empty, never as 0. Repeated header
lines (several logs concatenated) are skipped. ``timestamp`` is nvidia-smi's local time without a zone:
it is read as UTC plus ``utc_offset_h``. Units ``nounits`` logs leave out are the same ones.
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spectower.storage import models

if TYPE_CHECKING:
    from spectower.storage.database import Database

# nvidia-smi field (unit dropped) -> GpuSample column
SAMPLE_FIELDS: dict[str, str] = {
    "utilization.gpu": "gpu_util_pct",
    "utilization.memory": "mem_util_pct",
    "memory.used": "memory_used_mib",
    "memory.total": "memory_total_mib",
    "power.draw": "power_w",
    "power.draw.instant": "power_w",
    "power.draw.average": "power_w",
    "power.limit": "power_limit_w",
    "enforced.power.limit": "power_limit_w",
    "temperature.gpu": "temperature_c",
    "clocks.sm": "sm_clock_mhz",
    "clocks.current.sm": "sm_clock_mhz",
    "clocks.mem": "mem_clock_mhz",
    "clocks.current.memory": "mem_clock_mhz",
    "clocks_throttle_reasons.active": "throttle_reasons",
    "clocks_event_reasons.active": "throttle_reasons",
    "ecc.errors.corrected.volatile.total": "ecc_corrected",
    "ecc.errors.uncorrected.volatile.total": "ecc_uncorrected",
}
INT_SAMPLE_COLUMNS = frozenset({"throttle_reasons", "ecc_corrected", "ecc_uncorrected"})
MISSING = frozenset(
    {"", "[n/a]", "n/a", "[not supported]", "not supported", "[unknown error]", "[gpu is lost]"}
)
UNITS = (" %", " MiB", " MB", " W", " MHz", " C", "%", "MiB", "W", "MHz")
CHUNK_ROWS = 5_000


class GpuCsvError(ValueError):
    """The file is not an nvidia-smi CSV log this importer can read (the message names file and line)."""


@dataclass
class GpuCsvResult:
    path: str
    samples: int = 0
    gpus: list[int] = field(default_factory=list)  # Gpu ids written to
    warnings: list[tuple[int, str]] = field(default_factory=list)  # (line, why): value or line not taken


def _field_name(header: str) -> str:
    """'power.draw [W]' -> 'power.draw'."""
    return header.split("[", 1)[0].strip().lower()


def _number(raw: str) -> float | None:
    text = raw.strip()
    if text.lower() in MISSING:
        return None
    for unit in UNITS:
        if text.endswith(unit):
            text = text[: -len(unit)].strip()
            break
    value = int(text, 16) if text.lower().startswith("0x") else float(text)  # ValueError: caller names it
    return value if math.isfinite(value) else None


# Clocks are set between UTC-12 and UTC+14; past these an offset is a typo (and inf overflowed the timedelta).
MAX_UTC_OFFSET_H = 14.0


def parse_timestamp(raw: str, utc_offset_h: float = 0.0) -> float:
    text = raw.strip()
    for fmt in ("%Y/%m/%d %H:%M:%S.%f", "%Y/%m/%d %H:%M:%S", "%Y-%m-%d %H:%M:%S.%f", "%Y-%m-%d %H:%M:%S"):
        try:
            dt = datetime.strptime(text, fmt).replace(tzinfo=UTC)
        except ValueError:
            continue
        return (dt - timedelta(hours=utc_offset_h)).timestamp()
    raise ValueError(f"timestamp {text!r} is not nvidia-smi's YYYY/MM/DD HH:MM:SS.mmm")


def import_gpu_csv(db: Database, path: str | Path, *, host: str, utc_offset_h: float = 0.0) -> GpuCsvResult:
    """Import one nvidia-smi CSV log for the GPUs of ``host``. Raises ``GpuCsvError`` when nothing can
    be read (no header, no timestamp or index/uuid column); a bad line or value is a warning."""
    p = Path(path)
    if not host.strip():
        raise GpuCsvError("--host: give the host the log was written on")
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise GpuCsvError(f"{p}: cannot read ({exc.strerror or exc})") from None
    except UnicodeDecodeError as exc:
        raise GpuCsvError(f"{p}: not UTF-8 text (byte {exc.start})") from None
    rows = list(csv.reader(io.StringIO(text), skipinitialspace=True))
    first = next((i for i, r in enumerate(rows) if any(c.strip() for c in r)), None)
    if first is None:
        raise GpuCsvError(f"{p}: the file is empty")
    header = [_field_name(h) for h in rows[first]]
    if "timestamp" not in header:
        raise GpuCsvError(
            f"{p}: line {first + 1}: no header with a timestamp column (log with "
            "--query-gpu=timestamp,index,uuid,... --format=csv, not noheader)"
        )
    if "uuid" not in header and "index" not in header and "pci.bus_id" not in header:
        raise GpuCsvError(f"{p}: line {first + 1}: the header names no index, uuid or pci.bus_id column")
    col = {name: i for i, name in enumerate(header)}
    result = GpuCsvResult(path=str(p))
    gpu_ids: dict[tuple[str, int], int] = {}
    batch: list[dict[str, Any]] = []

    def flush() -> None:
        result.samples += db.insert_many("gpu_sample", batch)
        batch.clear()

    def cell(r: list[str], name: str) -> str | None:
        i = col.get(name)
        return r[i].strip() if i is not None and i < len(r) else None

    for line_no, r in enumerate(rows[first + 1 :], start=first + 2):
        if not any(c.strip() for c in r):
            continue
        if [_field_name(c) for c in r] == header:
            continue  # a header again: logs concatenated
        if len(r) != len(header):
            result.warnings.append((line_no, f"{len(r)} fields, the header has {len(header)} (skipped)"))
            continue
        try:
            ts = parse_timestamp(cell(r, "timestamp") or "", utc_offset_h)
        except ValueError as exc:
            result.warnings.append((line_no, f"{exc} (skipped)"))
            continue
        raw_index = cell(r, "index")
        index = models.int_or_none(_safe_int(raw_index), lo=0)
        if raw_index is not None and index is None:
            result.warnings.append((line_no, f"index {raw_index!r} is not a GPU index (skipped)"))
            continue
        uuid = cell(r, "uuid") or cell(r, "pci.bus_id") or f"index-{index}"
        if uuid.lower() in MISSING:
            uuid = f"index-{index}"
        key = (uuid, index or 0)
        values: dict[str, Any] = {}
        for name, column in SAMPLE_FIELDS.items():
            raw = cell(r, name)
            if raw is None or column in values:
                continue
            try:
                v = _number(raw)
            except ValueError:
                result.warnings.append((line_no, f"{name}: {raw!r} is not a number (left empty)"))
                v = None
            if v is not None and column in INT_SAMPLE_COLUMNS:
                v = models.int_or_none(v, lo=0)
            values[column] = v
        if key not in gpu_ids:
            gpu_ids[key] = db.gpu_id(
                host,
                index or 0,
                uuid,
                ts=ts,
                name=_fact(cell(r, "name")),
                driver_version=_fact(cell(r, "driver_version")),
                memory_total_mib=values.get("memory_total_mib"),
                power_limit_w=values.get("power_limit_w"),
                source="nvidia-smi",
            )
        batch.append({"gpu_id": gpu_ids[key], "ts": ts, "lost": False, **values})
        if len(batch) >= CHUNK_ROWS:
            flush()
    flush()
    result.gpus = sorted(set(gpu_ids.values()))
    if not result.samples:
        why = f"; line {result.warnings[0][0]}: {result.warnings[0][1]}" if result.warnings else ""
        raise GpuCsvError(f"{p}: no GPU sample could be read{why}")
    db.update_rollups()
    return result


def _safe_int(raw: str | None) -> int | None:
    if raw is None:
        return None
    try:
        return int(raw)
    except ValueError:
        return None


def _fact(raw: str | None) -> str | None:
    return None if raw is None or raw.lower() in MISSING else raw
