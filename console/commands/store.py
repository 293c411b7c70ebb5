"""`spectower export ...` and `spectower import ...`: benchmark runs and samples in and out."""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.markup import escape

from ..errors import fail, stderr
from .control_fleet import FLEET_HELP, is_fleet
from .control_fleet import resolve as resolve_fleet
from .options import (
    DB_HELP,
    INT64_MAX,
    chosen_database,
    say_database,
    whole_number,
)

if TYPE_CHECKING:
    from ...storage import Database

export_app = typer.Typer(no_args_is_help=True, help="Export benchmark runs and samples.")
import_app = typer.Typer(no_args_is_help=True, help="Import benchmark histories and GPU logs.")

FORMAT_HELP = "csv, jsonl or parquet (default: from the --out file name)."
_SUFFIX_FORMATS = {
    ".csv": "csv",
    ".jsonl": "jsonl",
    ".json": "jsonl",
    ".ndjson": "jsonl",
    ".parquet": "parquet",
}


@contextmanager
def _database(db_url: str | None, existing: bool = False) -> Iterator[Database]:
    """The database (``existing``: one that is there, for the exports, which only read it). An import
    says which database it wrote to and why once it has (an import refused wrote nothing: one line)."""
    from sqlalchemy.exc import SQLAlchemyError

    from ...storage import open_database
    from ...storage.dialect import error_line

    url, why = chosen_database(db_url)
    try:
        db = open_database(url, existing=existing)
    except ValueError as exc:
        fail(str(exc))
    except SQLAlchemyError as exc:
        fail(f"--db: cannot open {db_url or url}: {error_line(exc)}")
    done = False
    try:
        yield db
        done = True
        if not existing:
            say_database(url, why)
    except (ValueError, LookupError) as exc:
        fail(str(exc))
    except SQLAlchemyError as exc:  # a write the database refused (disk full, lock held): rolled back
        fail(f"--db: {error_line(exc)}")
    finally:
        if done:
            db.close()
        else:  # refused (its one line), or Ctrl-C: closed, and an empty database it made is not left behind
            db.discard_if_unused()


def _warn_lines(path: Path, lines: list[tuple[int, str]], note: str = "") -> None:
    """One ``warning:`` line per (line number, why) of an imported file."""
    for line_no, why in lines:
        stderr.print(
            f"[yellow]warning:[/] {escape(str(path))}: line {line_no}: {escape(why)}{note}", soft_wrap=True
        )


def _format(fmt: str | None, out: Path) -> str:
    if fmt is None:
        guessed = _SUFFIX_FORMATS.get(out.suffix.lower())
        if guessed is None:
            fail(f"--format: not given and {out.name!r} has no .csv/.jsonl/.parquet suffix to tell")
        return guessed
    from ...storage.export import check_format

    try:
        return check_format(fmt.lower())
    except ValueError as exc:
        fail(str(exc))


@export_app.command("bench")
def export_bench(
    run_ids: list[str] | None = typer.Argument(
        None, metavar="RUN_ID", help="Benchmark run ids (or --fleet / --server instead)."
    ),
    servers: list[str] = typer.Option(
        [], "--server", help="Every run stored for this server (repeatable), instead of run ids."
    ),
    fleet: str | None = typer.Option(None, "--fleet", help="Every run of each replica of " + FLEET_HELP),
    fmt: str | None = typer.Option(None, "--format", "-f", help=FORMAT_HELP),
    out: Path = typer.Option(..., "--out", "-o", help="Output file."),
    db: str | None = typer.Option(None, "--db", help=DB_HELP),
) -> None:
    """Export benchmark runs (JSONL uses SGLang bench_serving's key names). With --fleet or --server:
    every run stored for each replica, each row naming its server (JSONL: spectower_run.server_url)."""
    if servers or fleet is not None:
        if run_ids:
            fail("RUN_ID: give run ids or --fleet / --server, not both")
        from .store_fleet import export_runs

        group, chosen = resolve_fleet(servers, fleet), _format(fmt, out)
        with _database(db, existing=True) as database:
            export_runs(database, group, chosen, out)
        return
    if not run_ids:
        fail("RUN_ID: give at least one benchmark run id, or --fleet NAME / --server URL")
    ids = list(dict.fromkeys(whole_number(raw, "run id", 1, INT64_MAX) for raw in run_ids))  # each once
    chosen = _format(fmt, out)
    from ...storage.export import export_bench as do_export

    with _database(db, existing=True) as database:
        n = do_export(database, ids, chosen, out)
    stderr.print(
        f"wrote {n} point(s) of run(s) {', '.join(map(str, ids))} to {out} ({chosen})", soft_wrap=True
    )


@export_app.command("samples")
def export_samples(
    kind: str = typer.Option(..., "--kind", "-k", help="engine, gpu or control."),
    servers: list[str] = typer.Option(
        [], "--server", help="Only this server URL (repeatable; gpu: the GPUs of its host)."
    ),
    fleet: str | None = typer.Option(
        None, "--fleet", help="Only this fleet's replicas (gpu: their hosts' GPUs): " + FLEET_HELP
    ),
    host: str | None = typer.Option(None, "--host", help="Only the GPUs of this host (gpu)."),
    start: str | None = typer.Option(None, "--start", help="ISO 8601, Unix seconds, or relative (-1h)."),
    end: str | None = typer.Option(None, "--end", help="ISO 8601, Unix seconds, 'now', or relative."),
    fmt: str | None = typer.Option(None, "--format", "-f", help=FORMAT_HELP),
    out: Path = typer.Option(..., "--out", "-o", help="Output file."),
    db: str | None = typer.Option(None, "--db", help=DB_HELP),
) -> None:
    """Export engine samples, GPU samples or control events over a time range. With --fleet or several
    --server: every replica's rows in one file, each naming its server (gpu: its host), and a count per
    replica."""
    from ...storage.export import SAMPLE_KINDS
    from ...storage.export import export_samples as do_export
    from ...storage.timeparse import parse_time

    if kind not in SAMPLE_KINDS:
        fail(f"--kind: {kind!r} is not one of {', '.join(SAMPLE_KINDS)}")
    try:
        t0 = parse_time(start, "--start") if start is not None else None
        t1 = parse_time(end, "--end") if end is not None else None
    except ValueError as exc:
        fail(str(exc))
    chosen = _format(fmt, out)
    if is_fleet(servers, fleet) or (servers and kind == "gpu"):
        from .store_fleet import export_replica_samples

        if host is not None:
            fail("--host: not with --server / --fleet, which choose the hosts (their replicas')")
        group = resolve_fleet(servers, fleet)
        with _database(db, existing=True) as database:
            export_replica_samples(database, group, kind, chosen, out, start=t0, end=t1)
        return
    server = servers[0] if servers else None
    with _database(db, existing=True) as database:
        n = do_export(database, kind, chosen, out, server=server, host=host, start=t0, end=t1)
    stderr.print(f"wrote {n} {kind} row(s) to {out} ({chosen})", soft_wrap=True)


@import_app.command("bench-serving")
def import_bench_serving(
    files: list[Path] = typer.Argument(..., metavar="FILE", help="bench_serving JSONL result files."),
    db: str | None = typer.Option(None, "--db", help=DB_HELP),
    allow_duplicate: bool = typer.Option(
        False, "--allow-duplicate", help="Import a file again even if the same bytes were imported before."
    ),
) -> None:
    """Import SGLang bench_serving result files (every key-set version); one run per file. All files
    or none: one that cannot be imported (unreadable, a NaN or infinite figure) leaves nothing written."""
    from ...storage.bench_serving import BenchImportError, import_files

    with _database(db) as database:
        try:
            results = import_files(database, files, allow_duplicate=allow_duplicate)
        except BenchImportError as exc:
            fail(f"{exc}; nothing imported")
    for path, result in zip(files, results, strict=True):
        _warn_lines(path, result.line_errors, " (skipped)")
        _warn_lines(path, result.warnings)
        if result.duplicate_of is not None:
            stderr.print(
                f"{escape(str(path))}: already imported as run {result.duplicate_of} "
                "(skipped; --allow-duplicate imports it again)",
                soft_wrap=True,
            )
        elif len(result.run_ids) > 1:
            ids = ", ".join(map(str, result.run_ids))
            typer.echo(f"{path}: runs {ids}, {result.points} point(s)")
        else:
            typer.echo(f"{path}: run {result.run_id}, {result.points} point(s)")


@import_app.command("gpu-csv")
def import_gpu_csv(
    files: list[Path] = typer.Argument(
        ..., metavar="FILE", help="nvidia-smi --query-gpu ... --format=csv logs."
    ),
    host: str = typer.Option(..., "--host", help="The host the log was written on (GPUs are per host)."),
    utc_offset: float = typer.Option(
        0.0,
        "--utc-offset",
        help="Hours the log's local timestamps are ahead of UTC (nvidia-smi writes no zone).",
    ),
    db: str | None = typer.Option(None, "--db", help=DB_HELP),
) -> None:
    """Import nvidia-smi CSV logs into GPU history ([N/A] fields stay empty). All files or none; samples
    already stored (same host, GPU and time) are skipped.

    A GPU is the one the log names: its uuid, else its pci.bus_id, else its index. A log that names none of
    them (--query-gpu=timestamp,name,utilization.gpu,...) names each GPU by its position within each tick:
    nvidia-smi writes every GPU once per tick, in index order, with one timestamp (or a few ms apart), so the
    k-th line of a tick is GPU index k, and a single-GPU log is GPU 0. A tick with fewer or more lines than
    the others is skipped with a warning."""
    from ...storage.gpu_csv import MAX_UTC_OFFSET_H, GpuCsvError, import_gpu_csvs

    if not (math.isfinite(utc_offset) and abs(utc_offset) <= MAX_UTC_OFFSET_H):
        bound = f"{MAX_UTC_OFFSET_H:g}"
        fail(f"--utc-offset: hours between -{bound} and {bound}, got {utc_offset:g}")
    with _database(db) as database:
        try:
            results = import_gpu_csvs(database, files, host=host, utc_offset_h=utc_offset)
        except GpuCsvError as exc:
            fail(f"{exc}; nothing imported")
    for path, result in zip(files, results, strict=True):
        _warn_lines(path, result.warnings)
        skipped = f" ({result.skipped} already stored, skipped)" if result.skipped else ""
        typer.echo(f"{path}: {result.samples} sample(s) of {len(result.gpus)} GPU(s) on {host}{skipped}")
