"""Issue #15 item 5: destructive or unclear edges of `export` / `import` / `collect`: every mistake is one
line naming the input (no traceback), and an export never replaces something that is not a regular file."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from spectower.console.cli import app
from spectower.storage import open_database, queries
from spectower.storage.models import BenchPoint, BenchRun
from typer.testing import CliRunner

from tests.conftest import REPO_ROOT

runner = CliRunner()


def run(*args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    result = runner.invoke(app, list(args), env=env)
    return result.exit_code, result.output


def _one_line_error(code: int, out: str, *needles: str) -> None:
    assert code == 2, out
    assert "Traceback" not in out
    lines = [x for x in out.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), out
    for n in needles:
        assert n in out, (n, out)


@pytest.fixture
def db_with_run(tmp_path: Path) -> str:
    path = tmp_path / "runs.db"
    db = open_database(path)
    db.save_bench_run(BenchRun(created_at=1.0, source="sweep"), [BenchPoint(concurrency=1, spec_on=True)])
    db.close()
    return str(path)


def test_export_refuses_a_non_regular_file(db_with_run: str, tmp_path: Path) -> None:
    # a FIFO of our own stands in for a device: old code renamed its output over /dev/null itself
    fifo = tmp_path / "pipe.csv"
    os.mkfifo(fifo)
    code, out = run("export", "bench", "1", "--format", "csv", "--out", str(fifo), "--db", db_with_run)
    _one_line_error(code, out, str(fifo), "not a regular file")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_export_refuses_a_symlink_and_leaves_it(db_with_run: str, tmp_path: Path) -> None:
    target = tmp_path / "precious.txt"
    target.write_text("keep me\n")
    link = tmp_path / "out.csv"
    link.symlink_to(target)
    code, out = run("export", "bench", "1", "--out", str(link), "--db", db_with_run)
    _one_line_error(code, out, str(link), "symbolic link")
    assert link.is_symlink() and target.read_text() == "keep me\n"


def test_export_to_a_read_only_file_system_is_one_line(db_with_run: str) -> None:
    code, out = run("export", "bench", "1", "--out", "/sys/spectower-out.csv", "--db", db_with_run)
    _one_line_error(code, out, "--out", "/sys")


@pytest.mark.parametrize(
    ("value", "needle"),
    [
        ("", "--db: empty database URL"),
        ("sqlite://", "in-memory SQLite database"),
        ("sqlite:///:memory:", "in-memory SQLite database"),
        ("foo://host/db", "unknown database scheme 'foo'"),
    ],
)
def test_bad_db_values_are_one_line(value: str, needle: str) -> None:
    code, out = run("export", "samples", "--kind", "engine", "--out", "/tmp/x.csv", "--db", value)
    _one_line_error(code, out, needle)


def test_db_that_cannot_be_opened_is_one_line(tmp_path: Path) -> None:
    folder_as_file = tmp_path / "adir"
    folder_as_file.mkdir()
    code, out = run("export", "samples", "--kind", "engine", "--out", str(tmp_path / "x.csv"),
                    "--db", str(folder_as_file))  # fmt: skip
    _one_line_error(code, out, "--db: cannot open", "adir")


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", "from spectower.console.cli import main; main()", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
    )


def test_postgresql_url_without_psycopg_is_one_line(tmp_path: Path) -> None:
    # a psycopg that cannot be imported, as on a machine without the [postgres] extra
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    (shadow / "psycopg.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'psycopg'\", name='psycopg')\n"
    )
    env = {"PYTHONPATH": f"{shadow}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    for args in (
        ["export", "samples", "--kind", "engine", "--out", str(tmp_path / "x.csv")],
        ["collect", "--server", "http://127.0.0.1:9"],
    ):
        p = _cli(*args, "--db", "postgresql://spectower@127.0.0.1:9/spectower", env=env)
        out = p.stdout + p.stderr
        _one_line_error(p.returncode, out, "needs the psycopg driver", "spectower[postgres]")


@pytest.mark.parametrize("value", ["", "sqlite://", "nope://x"])
def test_collect_refuses_a_database_that_keeps_nothing(value: str) -> None:
    # in process: refused before anything starts (a subprocess each cost 4-12 s of the fast lane)
    code, out = run("collect", "--server", "http://127.0.0.1:9", "--duration", "30s", "--db", value)
    _one_line_error(code, out, "--db")


@pytest.mark.parametrize(
    ("args", "needle"),
    [(["export", "bench", "99999999999999999999", "--out", "x.csv"], "run id: must be between 1 and"),
     (["bench", "compare", "9223372036854775808", "1"], "run id: must be between 1 and 9223372036854775807"),
     (["bench", "compare", "x", "1"], "run id: 'x' is not a whole number"),
     (["control", "events", "--limit", "99999999999999999999"], "--limit: must be between 1 and"),
     (["control", "events", "--limit", "0"], "--limit: must be between 1 and")],
)  # fmt: skip
def test_ids_and_counts_no_database_can_hold_are_one_line(
    db_with_run: str, tmp_path: Path, args: list[str], needle: str
) -> None:
    # they reached SQLite and came back as "OverflowError: Python int too large to convert to SQLite INTEGER"
    code, out = run(*[str(tmp_path / a) if a == "x.csv" else a for a in args], "--db", db_with_run)
    _one_line_error(code, out, needle)


@pytest.mark.parametrize(
    "command",
    [["control", "events"], ["export", "bench", "1", "--out", "OUT"], ["bench", "compare", "1", "2"],
     ["export", "samples", "--kind", "gpu", "--out", "OUT"]],
)  # fmt: skip
def test_commands_that_only_read_never_make_a_database(tmp_path: Path, command: list[str]) -> None:
    """A mistyped --db was created empty, and any other file (an empty one) was made into a database."""
    args = [str(tmp_path / "out.csv") if a == "OUT" else a for a in command]
    missing = tmp_path / "mistyped.db"
    code, out = run(*args, "--db", str(missing))
    _one_line_error(code, out, f"no database at {missing}")
    assert not missing.exists()
    for content in (b"", b"not a database\n"):
        other = tmp_path / "notes.json"
        other.write_bytes(content)
        code, out = run(*args, "--db", str(other))
        _one_line_error(code, out, f"{other} is not a spectower database")
        assert other.read_bytes() == content


@pytest.mark.parametrize("offset", ["inf", "-inf", "nan", "99999999999999999999", "15"])
def test_a_utc_offset_no_clock_has_is_one_line(tmp_path: Path, offset: str) -> None:
    # inf overflowed the timedelta as a traceback; nan gave a message per line not naming the flag
    log = tmp_path / "gpu.csv"
    log.write_text("timestamp, index, utilization.gpu [%]\n2026/11/29 10:00:00.000, 0, 5 %\n")
    code, out = run("import", "gpu-csv", "--host", "h", "--utc-offset", offset, str(log),
                    "--db", str(tmp_path / "g.db"))  # fmt: skip
    _one_line_error(code, out, "--utc-offset: hours between -14 and 14")
    assert not (tmp_path / "g.db").exists()  # refused before the database is opened


GOOD_BENCH_LINE = '{"backend": "sglang", "max_concurrency": 4, "completed": 10, "output_throughput": 100.5}\n'


def _bench_runs(db: str) -> int:
    d = open_database(db)
    try:
        return len(queries.bench_runs(d))
    finally:
        d.close()


def test_a_nan_figure_is_one_line_and_imports_no_file(tmp_path: Path) -> None:
    good, bad, db = tmp_path / "good.jsonl", tmp_path / "bad.jsonl", str(tmp_path / "b.db")
    good.write_text(GOOD_BENCH_LINE)
    bad.write_text(GOOD_BENCH_LINE + GOOD_BENCH_LINE.replace("100.5", "NaN"))
    code, out = run("import", "bench-serving", str(good), str(bad), "--db", db)
    _one_line_error(code, out, f"error: {bad}: line 2: output_throughput: NaN is not a finite number")
    assert out.rstrip().endswith("; nothing imported")
    assert not Path(db).exists()  # the database its open made is not left behind empty
    open_database(db).close()  # one that was there stays, and holds nothing of the refused import
    code, out = run("import", "bench-serving", str(good), str(bad), "--db", db)
    assert code == 2 and Path(db).is_file()
    assert _bench_runs(db) == 0  # not even the good file before it (that was imported, a run of its own)


def test_a_file_name_that_looks_like_markup_is_shown_as_is(tmp_path: Path) -> None:
    # "[/x]" in a path was read as a rich closing tag: a MarkupError traceback instead of the error
    folder = tmp_path / "d["
    folder.mkdir()
    f = folder / "x].jsonl"
    f.write_text("nothing\n")
    code, out = run("import", "bench-serving", str(f), "--db", str(tmp_path / "b.db"))
    _one_line_error(code, out, f"{f}: no bench_serving result line could be read; line 1: not JSON")


def test_a_csv_quote_never_closed_is_one_line(tmp_path: Path) -> None:
    # csv.Error ("field larger than field limit") came through as a traceback
    log = tmp_path / "gpu.csv"
    log.write_text('timestamp, index, name\n2025/11/20 10:00:00.100, 0, "' + "x" * 200_000 + "\n")
    code, out = run("import", "gpu-csv", "--host", "h", str(log), "--db", str(tmp_path / "g.db"))
    _one_line_error(code, out, f"{log}: line 2: not CSV (field larger than field limit", "nothing imported")
    assert not (tmp_path / "g.db").exists()  # nor an empty database its open made


def test_a_value_postgresql_cannot_store_is_one_line(postgres_url: str, tmp_path: Path) -> None:
    # PostgreSQL text holds no NUL character; the DataError was a traceback after the transaction rolled back
    bench, log = tmp_path / "nul.jsonl", tmp_path / "nul.csv"
    bench.write_text('{"tag": "a\\u0000b", "completed": 3, "output_throughput": 1.0}\n')
    log.write_text("timestamp, index, name\n2025/11/20 10:00:00.100, 0, a\x00b\n")
    for args in (["bench-serving", str(bench)], ["gpu-csv", "--host", "h", str(log)]):
        code, out = run("import", *args, "--db", postgres_url)
        _one_line_error(code, out, "--db: PostgreSQL text fields cannot contain NUL (0x00) bytes")
    d = open_database(postgres_url)
    try:
        assert queries.bench_runs(d) == [] and queries.gpus(d) == []
    finally:
        d.close()
