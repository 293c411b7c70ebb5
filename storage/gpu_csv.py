"""``nvidia-smi --query-gpu=... --format=csv`` logs -> GPU history (``Gpu`` + ``GpuSample`` rows).

A log written with ``nvidia-smi --query-gpu=timestamp,index,uuid,name,utilization.gpu,memory.used,...
--format=csv -l 1 > gpu.csv`` holds a header line (field names, units in brackets: ``power.draw [W]``)
and one line per GPU per interval (``2024/05/01 12:00:00.123, 0, GPU-..., 35 %, 1234 MiB, ...``). Fields
a GPU does not support read ``[N/A]`` / ``[Not Supported]``: stored as empty, never as 0. Repeated header
lines (several logs concatenated) are skipped. A log whose header names no index, uuid or pci.bus_id
(``--query-gpu=timestamp,name,utilization.gpu,...``) names its GPUs by their position within each tick
(``gpu_positions``): a single-GPU log is GPU 0. ``timestamp`` is nvidia-smi's local time without a zone:
it is read as UTC plus ``utc_offset_h``. Units ``nounits`` logs leave out are the same ones.

An import is all or nothing: every log is read and checked first, then all are written in one
transaction, so a log that cannot be read leaves nothing written. A sample already stored (the same
host, GPU and timestamp: the same log imported again, or two logs that overlap) is skipped and counted.
"""

from __future__ import annotations

import csv
import io
import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy.exc import IntegrityError
from sqlmodel import SQLModel, col, select

from . import models, sealed
from .files import FileReadError, read_text_capped

if TYPE_CHECKING:
    from collections.abc import Sequence

    from sqlmodel import Session

    from .database import Database

# nvidia-smi field (unit dropped) -> GpuSample column
NVIDIA_SMI_COLUMNS: dict[str, str] = {
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
# The columns that name a GPU; a log without any of them names its GPUs by position (gpu_positions).
ID_COLUMNS = ("index", "uuid", "pci.bus_id")
# nvidia-smi writes all GPUs of one tick with one timestamp or a few ms apart; its -l loop is 1 s or more
# (a log from -lms under this needs an index column).
TICK_SPREAD_S = 0.25
# The uuid a GPU known only by its index or position is stored under (the host names the machine).
POSITION_UUID_PREFIX = "index-"
# About a month of 1 Hz samples of two GPUs; a longer log goes in as several FILEs (past this it would
# also not fit in memory, and a device such as /dev/zero would otherwise be read for ever).
MAX_GPU_CSV_BYTES = 1 << 30


class GpuCsvError(ValueError):
    """The file is not an nvidia-smi CSV log this importer can read (the message names file and line)."""


@dataclass
class GpuCsvResult:
    path: str
    samples: int = 0  # written
    skipped: int = 0  # already stored (same host, GPU and timestamp), or given twice: not written again
    gpus: list[int] = field(default_factory=list)  # Gpu ids written to
    warnings: list[tuple[int, str]] = field(default_factory=list)  # (line, why): value or line not taken


GpuKey = tuple[str, int]  # (uuid, index) as the log names a GPU


@dataclass
class GpuSeen:
    """A GPU as a log first shows it: what its Gpu row is created or updated with."""

    index: int
    uuid: str
    first_ts: float
    facts: dict[str, Any]  # Gpu columns (name, driver_version, memory_total_mib, power_limit_w)


@dataclass
class GpuCsvLog:
    """One log read and checked (``read_gpu_csv``); nothing written yet."""

    path: str
    gpus: dict[GpuKey, GpuSeen]  # in order of first appearance
    samples: list[tuple[GpuKey, float, dict[str, Any]]]  # (GPU, ts, GpuSample columns), in file order
    warnings: list[tuple[int, str]]


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
    if not math.isfinite(value):  # "nan", "inf", "1e400": no reading
        raise ValueError(f"{raw!r} is not a finite number")
    return value


# Clocks are set between UTC-12 and UTC+14; past these an offset is a typo (and inf overflowed the timedelta).
MAX_UTC_OFFSET_H = 14.0


def parse_timestamp(raw: str, utc_offset_h: float = 0.0) -> float:
    text = raw.strip()
    for fmt in ("%Y/%m/%d %H:%M:%S.%f", "%Y/%m/%d %H:%M:%S", "%Y-%m-%d %H:%M:%S.%f", "%Y-%m-%d %H:%M:%S"):
        try:
            dt = datetime.strptime(text, fmt).replace(tzinfo=UTC)
        except ValueError:
            continue
        try:
            return (dt - timedelta(hours=utc_offset_h)).timestamp()
        except OverflowError:  # year 1 or 9999 moved past the calendar's end by the offset
            raise ValueError(f"timestamp {text!r} with the UTC offset is outside the calendar") from None
    raise ValueError(f"timestamp {text!r} is not nvidia-smi's YYYY/MM/DD HH:MM:SS.mmm")


def import_gpu_csv(db: Database, path: str | Path, *, host: str, utc_offset_h: float = 0.0) -> GpuCsvResult:
    """Import one nvidia-smi CSV log for the GPUs of ``host``; see ``import_gpu_csvs``."""
    return import_gpu_csvs(db, [path], host=host, utc_offset_h=utc_offset_h)[0]


def import_gpu_csvs(
    db: Database, paths: Sequence[str | Path], *, host: str, utc_offset_h: float = 0.0
) -> list[GpuCsvResult]:
    """Import nvidia-smi CSV logs for the GPUs of ``host``, one result per path in order. Every log is read
    first: one that cannot be read (no header, no timestamp column, no sample) raises
    ``GpuCsvError`` and nothing is written; a bad line or value is a warning. Then all are written in one
    transaction, samples already stored for the same GPU and timestamp skipped (``skipped``)."""
    if not host.strip():
        raise GpuCsvError("--host: give the host the log was written on")
    logs = [read_gpu_csv(path, utc_offset_h=utc_offset_h) for path in paths]
    for attempt in range(2):
        try:
            with db.session(write=True) as s:
                results = _write_logs(db, s, logs, host)
            break
        except IntegrityError:  # PostgreSQL: another process created one of these GPUs meanwhile
            if attempt:
                raise
    db.update_rollups()
    return results


def read_gpu_csv(path: str | Path, *, utc_offset_h: float = 0.0) -> GpuCsvLog:
    """Read and check one log (no database). Raises ``GpuCsvError`` naming the file (and line) when
    nothing can be taken from it; a bad line or value is a warning. A log without an index, uuid or
    pci.bus_id column names its GPUs by their position within each tick (``gpu_positions``)."""
    p = Path(path)
    header, rows, first = _header_and_rows(p)
    col_of = {name: i for i, name in enumerate(header)}
    log = GpuCsvLog(path=str(p), gpus={}, samples=[], warnings=[])

    def cell(r: list[str], name: str) -> str | None:
        i = col_of.get(name)
        return r[i].strip() if i is not None and i < len(r) else None

    lines: list[tuple[int, float, list[str]]] = []  # (line number, ts, cells) of the lines taken
    for line_no, r in enumerate(rows[first + 1 :], start=first + 2):
        if not any(c.strip() for c in r):
            continue
        if [_field_name(c) for c in r] == header:
            continue  # a header again: logs concatenated
        if len(r) != len(header):
            log.warnings.append((line_no, f"{len(r)} fields, the header has {len(header)} (skipped)"))
            continue
        try:
            lines.append((line_no, parse_timestamp(cell(r, "timestamp") or "", utc_offset_h), r))
        except ValueError as exc:
            log.warnings.append((line_no, f"{exc} (skipped)"))
    if any(name in col_of for name in ID_COLUMNS):
        keys = [_named_gpu(cell, line_no, r, log.warnings) for line_no, _, r in lines]
    else:
        keys = [None if i is None else (f"{POSITION_UUID_PREFIX}{i}", i)
                for i in gpu_positions([(n, ts) for n, ts, _ in lines], log.warnings)]  # fmt: skip
    for (line_no, ts, r), key in zip(lines, keys, strict=True):
        if key is not None:
            _take_sample(log, cell, line_no, ts, r, key)
    log.warnings.sort(key=lambda warning: warning[0])  # in line order (stable: a line's own in its order)
    if not log.samples:
        why = f"; line {log.warnings[0][0]}: {log.warnings[0][1]}" if log.warnings else ""
        raise GpuCsvError(f"{p}: no GPU sample could be read{why}")
    return log


def _header_and_rows(p: Path) -> tuple[list[str], list[list[str]], int]:
    """The log's header (field names without units), its rows, and the header's row index."""
    try:
        text = read_text_capped(p, MAX_GPU_CSV_BYTES)
    except FileReadError as exc:
        raise GpuCsvError(f"{p}: {exc}") from None
    reader = csv.reader(io.StringIO(text), skipinitialspace=True)
    try:
        rows = list(reader)
    except csv.Error as exc:  # a quote never closed runs into the field size limit
        raise GpuCsvError(f"{p}: line {reader.line_num}: not CSV ({exc})") from None
    first = next((i for i, r in enumerate(rows) if any(c.strip() for c in r)), None)
    if first is None:
        raise GpuCsvError(f"{p}: the file is empty")
    header = [_field_name(h) for h in rows[first]]
    if "timestamp" not in header:
        raise GpuCsvError(
            f"{p}: line {first + 1}: no header with a timestamp column (log with "
            "--query-gpu=timestamp,index,uuid,... --format=csv, not noheader)"
        )
    return header, rows, first


Cell = Callable[[list[str], str], "str | None"]


def _named_gpu(cell: Cell, line_no: int, r: list[str], warnings: list[tuple[int, str]]) -> GpuKey | None:
    """The GPU a line names (uuid, else pci.bus_id, with its index); None: a bad index (warned)."""
    raw_index = cell(r, "index")
    index = models.int_or_none(_safe_int(raw_index), lo=0)
    if raw_index is not None and index is None:
        warnings.append((line_no, f"index {raw_index!r} is not a GPU index (skipped)"))
        return None
    uuid = cell(r, "uuid") or cell(r, "pci.bus_id") or f"{POSITION_UUID_PREFIX}{index}"
    if uuid.lower() in MISSING:
        uuid = f"{POSITION_UUID_PREFIX}{index}"
    return (uuid, index or 0)


def gpu_positions(lines: Sequence[tuple[int, float]], warnings: list[tuple[int, str]]) -> list[int | None]:
    """For a log that does not name its GPUs (no index, uuid or pci.bus_id column): each line's GPU as its
    position within its tick. nvidia-smi writes every GPU once per tick, in index order, all with one
    timestamp (or a few ms apart), so a tick is a run of lines within ``TICK_SPREAD_S`` of its first line,
    and position k is GPU index k; a single-GPU log is index 0 throughout. A tick with another number of
    lines than most ticks (a GPU dropped out, a line was cut) cannot say which GPU is which: its lines are
    skipped with a warning (None) rather than stored against the wrong GPU. ``lines``: (line number, ts)."""
    ticks: list[list[int]] = []  # indexes into ``lines``
    for i, (_, ts) in enumerate(lines):
        if ticks and 0.0 <= ts - lines[ticks[-1][0]][1] <= TICK_SPREAD_S:
            ticks[-1].append(i)
        else:
            ticks.append([i])
    sizes = Counter(len(tick) for tick in ticks)
    usual = max(sizes, key=lambda size: (sizes[size], -size)) if sizes else 0
    positions: list[int | None] = [None] * len(lines)
    for tick in ticks:
        if len(tick) != usual:
            why = (f"a tick of {len(tick)} GPU line(s) where the log's ticks have {usual}; without an index "
                   "column its GPUs cannot be told apart (skipped)")  # fmt: skip
            warnings.append((lines[tick[0]][0], why))
            continue
        for position, i in enumerate(tick):
            positions[i] = position
    return positions


def _take_sample(log: GpuCsvLog, cell: Cell, line_no: int, ts: float, r: list[str], key: GpuKey) -> None:
    """One line's sample (and its GPU's facts, at its first line) into ``log``."""
    values: dict[str, Any] = {}
    for name, column in NVIDIA_SMI_COLUMNS.items():
        raw = cell(r, name)
        if raw is None or column in values:
            continue
        try:
            v = _number(raw)
        except ValueError:
            log.warnings.append((line_no, f"{name}: {raw!r} is not a number (left empty)"))
            v = None
        if v is not None and column in INT_SAMPLE_COLUMNS:
            v = models.int_or_none(v, lo=0)
        values[column] = v
    if key not in log.gpus:
        facts = {
            "name": _fact(cell(r, "name")),
            "driver_version": _fact(cell(r, "driver_version")),
            "memory_total_mib": values.get("memory_total_mib"),
            "power_limit_w": values.get("power_limit_w"),
        }
        log.gpus[key] = GpuSeen(index=key[1], uuid=key[0], first_ts=ts, facts=facts)
    log.samples.append((key, ts, values))


def _write_logs(db: Database, s: Session, logs: list[GpuCsvLog], host: str) -> list[GpuCsvResult]:
    """Every log's GPUs and new samples, in the transaction of ``s``."""
    sample = models.GpuSample
    sample_table = SQLModel.metadata.tables["gpu_sample"]
    ids_per_log = [
        {
            key: db.gpu_id_in(s, host, g.index, g.uuid, ts=g.first_ts, source="nvidia-smi", **g.facts)
            for key, g in log.gpus.items()
        }
        for log in logs
    ]
    span: dict[int, tuple[float, float]] = {}  # per Gpu id: the earliest and latest ts imported
    for log, ids in zip(logs, ids_per_log, strict=True):
        for key, ts, _ in log.samples:
            lo, hi = span.get(ids[key], (ts, ts))
            span[ids[key]] = (min(lo, ts), max(hi, ts))
    # No unique constraint on (gpu_id, ts) (adding one is a migration, and old databases may hold
    # duplicates): what is stored in the imported time range is read in this transaction instead.
    stored: dict[int, set[float]] = {
        gpu_id: set(
            s.exec(
                select(sample.ts).where(sample.gpu_id == gpu_id, col(sample.ts) >= lo, col(sample.ts) <= hi)
            )
        )
        for gpu_id, (lo, hi) in span.items()
    }
    for gpu_id, (lo, hi) in span.items():  # and what is sealed (storage/sealed.py)
        for run in sealed.iter_runs(s.connection(), sealed.GPU, [gpu_id], lo, hi, ()):
            stored[gpu_id].update(run.ts.tolist())
    results: list[GpuCsvResult] = []
    for log, ids in zip(logs, ids_per_log, strict=True):
        result = GpuCsvResult(path=log.path, gpus=sorted(set(ids.values())), warnings=log.warnings)
        rows: list[dict[str, Any]] = []
        for key, ts, values in log.samples:
            seen = stored[ids[key]]
            if ts in seen:
                result.skipped += 1
                continue
            seen.add(ts)  # also a sample given twice in this import is written once
            rows.append({"gpu_id": ids[key], "ts": ts, "lost": False, **values})
        for start in range(0, len(rows), CHUNK_ROWS):  # a file's rows name the same columns
            s.connection().execute(sample_table.insert(), rows[start : start + CHUNK_ROWS])
        result.samples = len(rows)
        results.append(result)
    return results


def _safe_int(raw: str | None) -> int | None:
    if raw is None:
        return None
    try:
        return int(raw)
    except ValueError:
        return None


def _fact(raw: str | None) -> str | None:
    return None if raw is None or raw.lower() in MISSING else raw
