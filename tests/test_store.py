"""`spectower import bench-serving` / `spectower export ...` through the real command line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from spectower.console.cli import app
from spectower.storage import SCHEMA_VERSION, open_database
from typer.testing import CliRunner

from tests.test_storage_schema import stamped

runner = CliRunner()
BENCH = "bench_serving"


def run(*args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    result = runner.invoke(app, list(args), env=env)
    return result.exit_code, result.output  # click >= 8.2: stdout and stderr interleaved


def test_import_then_export_all_formats(tmp_path: Path, real_data: Path) -> None:
    db = str(tmp_path / "cli.db")
    files = sorted(str(p) for p in (real_data / BENCH).glob("*.jsonl"))
    code, out = run("import", "bench-serving", *files, "--db", db)
    assert code == 0, out
    assert "run 1, 1 point(s)" in out and "run 3, 7 point(s)" in out
    code, out = run("import", "bench-serving", files[0], "--db", db)
    assert code == 0 and "already imported as run 1" in out
    for fmt in ("csv", "jsonl", "parquet"):
        dest = tmp_path / f"runs.{fmt}"
        code, out = run("export", "bench", "1", "2", "3", "--out", str(dest), "--db", db)
        assert code == 0, out
        assert dest.stat().st_size > 0
    lines = (tmp_path / "runs.jsonl").read_text().splitlines()
    assert len(lines) == 9 and json.loads(lines[1])["tag"] == "agg_n100_in512_out128_c8"
    code, out = run("export", "samples", "--kind", "gpu", "--start", "-1h", "--end", "now",
                    "--format", "csv", "--out", str(tmp_path / "g.csv"), "--db", db)  # fmt: skip
    assert code == 0, out
    assert (tmp_path / "g.csv").read_text().startswith("host,gpu_index,uuid,")


def test_db_from_environment(tmp_path: Path, real_data: Path) -> None:
    db = tmp_path / "env.db"
    f = str(real_data / BENCH / "TonyLi15__sglang-benchmark__agg_n100_in512_out128_c8.jsonl")
    code, out = run("import", "bench-serving", f, env={"SPECTOWER_DB": str(db)})
    assert code == 0, out
    assert db.exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["export", "bench", "abc", "--out", "{tmp}/x.csv"], "run id: 'abc' is not a whole number"),
        (["export", "bench", "7", "--out", "{tmp}/x.csv"], "run id: no benchmark run 7"),
        (["export", "bench", "1", "--format", "xls", "--out", "{tmp}/x.csv"], "--format: 'xls'"),
        (["export", "bench", "1", "--out", "{tmp}/x.txt"], "--format: not given"),
        (["export", "samples", "--kind", "disk", "--out", "{tmp}/x.csv"], "--kind: 'disk'"),
        (
            ["export", "samples", "--kind", "gpu", "--start", "last tuesday", "--out", "{tmp}/x.csv"],
            "--start",
        ),
        (["export", "samples", "--kind", "engine", "--end", "-1x", "--out", "{tmp}/x.csv"], "--end"),
        (["export", "bench", "1", "--out", "{tmp}/no/such/dir/x.csv"], "--out"),
        (["import", "bench-serving", "{tmp}/missing.jsonl"], "cannot read"),
    ],
)
def test_errors_are_one_line_naming_the_field(tmp_path: Path, args: list[str], message: str) -> None:
    open_database(tmp_path / "e.db").close()  # the exports read a database that is there
    argv = [a.replace("{tmp}", str(tmp_path)) for a in args] + ["--db", str(tmp_path / "e.db")]
    code, out = run(*argv)
    assert code == 2, out
    assert message in out
    assert "Traceback" not in out


def test_installed_command_shows_no_traceback(tmp_path: Path) -> None:
    # the real console script path (spectower.console.cli:main), not only the typer app
    open_database(tmp_path / "c.db").close()
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "from spectower.console.cli import main; main()",
            "export",
            "bench",
            "5",
            "--out",
            str(tmp_path / "x.jsonl"),
            "--db",
            str(tmp_path / "c.db"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert "error: run id: no benchmark run 5" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "x.jsonl").exists()


def test_newer_schema_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "n.db"
    stamped(path, SCHEMA_VERSION + 1)
    code, out = run("export", "bench", "1", "--out", str(tmp_path / "x.csv"), "--db", str(path))
    assert code == 2 and "newer than this spectower" in out and "Traceback" not in out
