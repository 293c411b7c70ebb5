"""Issue #34 item 4: nvidia-smi logs whose header names no index, uuid or pci.bus_id are imported, each GPU
known by its position within a tick (the lines of one timestamp, in order); a single-GPU log is GPU 0.

The logs are tests/fixtures/nvidia-smi/ (built in nvidia-smi's exact CSV style: see its README)."""

from __future__ import annotations

from pathlib import Path

import pytest
from spectower.console.cli import app
from spectower.storage import open_database, queries
from spectower.storage.gpu_csv import gpu_positions, import_gpu_csv, read_gpu_csv
from typer.testing import CliRunner

from tests.conftest import FIXTURES, db_rows

LOGS = FIXTURES / "nvidia-smi"


def _memory_by_gpu(db_path: Path) -> dict[int, list[float]]:
    sql = 'select g."index", s.memory_used_mib from gpu_sample s join gpu g on g.id = gpu_id order by 1, ts'
    rows = db_rows(db_path, sql)
    out: dict[int, list[float]] = {}
    for index, used in rows:
        out.setdefault(index, []).append(used)
    return out


def test_a_single_gpu_log_is_gpu_0(tmp_path: Path) -> None:
    db_path = tmp_path / "one.db"
    with open_database(db_path) as db:
        result = import_gpu_csv(db, LOGS / "single_gpu_no_index.csv", host="node1")
        assert (result.samples, result.warnings) == (10, [])
        (gpu,) = queries.gpus(db, host="node1")
        assert (gpu.index, gpu.uuid, gpu.name, gpu.driver_version) == (
            0, "index-0", "NVIDIA H100 80GB HBM3", "570.86.15")  # fmt: skip
    assert _memory_by_gpu(db_path)[0][:3] == [1.0, 1.0, 71240.0]
    # [N/A] stays empty
    assert db_rows(db_path, "select count(*) from gpu_sample where mem_util_pct is null") == [(1,)]


@pytest.mark.parametrize("name", ["four_gpu_no_index.csv", "four_gpu_no_index_ms_apart.csv"])
def test_a_four_gpu_log_names_each_gpu_by_its_position_in_the_tick(tmp_path: Path, name: str) -> None:
    db_path = tmp_path / "four.db"
    with open_database(db_path) as db:
        result = import_gpu_csv(db, LOGS / name, host="node4")
        assert result.warnings == [] and len(result.gpus) == 4
        assert [(g.index, g.uuid) for g in queries.gpus(db, host="node4")] == [
            (k, f"index-{k}") for k in range(4)]  # fmt: skip
    memory = _memory_by_gpu(db_path)
    ticks = 5 if name == "four_gpu_no_index.csv" else 3
    base = 40000 if name == "four_gpu_no_index.csv" else 4
    step = 1000 if name == "four_gpu_no_index.csv" else 100
    # every GPU's lines went to that GPU: GPU k's memory is base + step * k (+ the tick)
    assert memory == {k: [float(base + step * k + t) for t in range(ticks)] for k in range(4)}


def test_importing_again_adds_nothing(tmp_path: Path) -> None:
    with open_database(tmp_path / "again.db") as db:
        import_gpu_csv(db, LOGS / "four_gpu_no_index.csv", host="node4")
        again = import_gpu_csv(db, LOGS / "four_gpu_no_index.csv", host="node4")
    assert (again.samples, again.skipped) == (0, 20)


def test_a_tick_missing_a_gpu_line_is_skipped_not_shifted(tmp_path: Path) -> None:
    lines = (LOGS / "four_gpu_no_index.csv").read_text().splitlines(keepends=True)
    cut = tmp_path / "cut.csv"
    cut.write_text("".join(lines[:7] + lines[8:]))  # tick 2 lost GPU 1's line (file line 8)
    log = read_gpu_csv(cut)
    assert log.warnings == [(6, "a tick of 3 GPU line(s) where the log's ticks have 4; without an index "
                                "column its GPUs cannot be told apart (skipped)")]  # fmt: skip
    assert len(log.samples) == 16 and len(log.gpus) == 4


def test_positions_of_ticks() -> None:
    warnings: list[tuple[int, str]] = []
    same = [(2, 10.0), (3, 10.0), (4, 11.0), (5, 11.0)]
    assert gpu_positions(same, warnings) == [0, 1, 0, 1]
    apart = [(2, 10.0), (3, 10.011), (4, 10.022), (5, 11.0), (6, 11.011), (7, 11.022)]
    assert gpu_positions(apart, warnings) == [0, 1, 2, 0, 1, 2]
    assert gpu_positions([(2, 10.0), (3, 11.0), (4, 12.0)], warnings) == [0, 0, 0]
    assert warnings == []


def test_the_command_imports_them_and_its_help_says_how_a_gpu_is_named(tmp_path: Path) -> None:
    db = str(tmp_path / "cli.db")
    files = [str(LOGS / "single_gpu_no_index.csv"), str(LOGS / "four_gpu_no_index.csv")]
    res = CliRunner().invoke(app, ["import", "gpu-csv", *files, "--host", "node9", "--db", db])
    assert res.exit_code == 0, res.output
    assert "single_gpu_no_index.csv: 10 sample(s) of 1 GPU(s) on node9" in res.output
    assert "four_gpu_no_index.csv: 20 sample(s) of 4 GPU(s) on node9" in res.output
    helped = " ".join(CliRunner().invoke(app, ["import", "gpu-csv", "--help"]).output.split())
    assert "position within each tick" in helped and "a single-GPU log is GPU 0" in helped, helped
