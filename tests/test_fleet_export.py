"""`spectower export samples|bench --fleet NAME` (and repeated `--server`) through the real command line on a
real SQLite database: three replicas collected (a, b and c, on hosts host-a, host-b, host-c), the fleet
``prod`` = [a, b, d] where d was never collected. Every row names the replica it came from, only the
fleet's replicas are exported, and the one with nothing stored is named."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest
from spectower.collectors.bench.persist import to_models
from spectower.collectors.bench.sweep import PointResult, SweepConfig, SweepResult
from spectower.console.cli import app
from spectower.storage import open_database
from spectower.storage.models import ControlEvent, EngineSample, GpuSample
from typer.testing import CliRunner

A, B, C, D = (f"http://host-{name}:30000" for name in "abcd")


def _run(url: str) -> Any:
    """One saved sweep run of ``url`` (one point), as bench sweep --save stores it."""
    config = SweepConfig(server=url, concurrency=(4,), modes=("on",), tag=f"run of {url}")
    result = SweepResult(config=config, server_info={"version": "0.5.17"}, max_running_requests=16,
                         started_at=1.0e9)  # fmt: skip
    figures = {"steady_output_throughput": 100.0, "steady_windows": [99.0, 101.0], "completed": 8}
    point = PointResult(concurrency=4, mode="on", knob_value=16, figures=figures, accept_length=None,
                        accept_length_source="none", started_at=1.0e9)  # fmt: skip
    result.points.append(point)
    return to_models(result)


@pytest.fixture
def stored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Engine samples of a, b, c (10 each), 2 GPUs per host, an audit row each for a and c, a run each for
    a, b, c; the fleet in ./spectower.toml beside the database."""
    path = tmp_path / "fleet.db"
    with open_database(f"sqlite:///{path}") as db:
        writer = db.writer(maintenance=None)
        for n, url in enumerate((A, B, C)):
            server = db.server_id(url)
            writer.put(
                *[EngineSample(server_id=server, ts=100.0 + i, num_running_reqs=float(n)) for i in range(10)]
            )
            host = url.split("//")[1].split(":")[0]
            for index in range(2):
                gpu = db.gpu_id(host, index, f"GPU-{host}-{index}")
                writer.put(*[GpuSample(gpu_id=gpu, ts=100.0 + i, gpu_util_pct=50.0) for i in range(3)])
        for url in (A, C):
            writer.put(ControlEvent(ts=105.0, actor="operator:x", server_url=url, action="set", reason="r"))
        assert writer.flush(30)
        runs = {url: db.save_bench_run(*_run(url)) for url in (A, B, C)}
    (tmp_path / "spectower.toml").write_text(
        f'db = "fleet.db"\n\n[fleets.prod]\nservers = ["{A}", "{B}", "{D}"]\n'
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv("SPECTOWER_DB", raising=False)
    return {"runs": runs, "tmp": tmp_path}


def _export(*args: str) -> Any:
    return CliRunner().invoke(app, ["export", *args])


def test_engine_samples_of_the_fleet_each_row_naming_its_replica(stored: dict[str, Any]) -> None:
    out = stored["tmp"] / "engine.csv"
    result = _export("samples", "--kind", "engine", "--fleet", "prod", "--out", str(out))
    assert result.exit_code == 0, result.output
    rows = list(csv.DictReader(out.open(newline="")))
    assert [(r["server_url"], r["num_running_reqs"]) for r in rows] == [(A, "0.0")] * 10 + [(B, "1.0")] * 10
    assert f"{A}: 10 row(s)" in result.stderr and f"{B}: 10 row(s)" in result.stderr
    assert f"{D}: nothing stored" in result.stderr and C not in result.stderr
    assert "wrote 20 engine row(s) of 3 replica(s)" in result.stderr


def test_control_rows_and_gpu_rows_by_replica_host(stored: dict[str, Any]) -> None:
    out = stored["tmp"] / "control.jsonl"
    result = _export("samples", "--kind", "control", "--server", A, "--server", B, "--out", str(out))
    assert result.exit_code == 0, result.output
    assert [json.loads(line)["server_url"] for line in out.read_text().splitlines()] == [A]
    assert f"{B}: nothing stored" in result.stderr
    out = stored["tmp"] / "gpu.csv"
    result = _export("samples", "--kind", "gpu", "--fleet", "prod", "--out", str(out))
    assert result.exit_code == 0, result.output
    hosts = [r["host"] for r in csv.DictReader(out.open(newline=""))]
    assert hosts == ["host-a"] * 6 + ["host-b"] * 6  # host-c is no replica's of the fleet
    assert f"{A}: 6 of host host-a" in result.stderr and f"{D}: no GPU row of host host-d" in result.stderr


def test_bench_runs_of_the_fleet_every_line_naming_its_replica(stored: dict[str, Any]) -> None:
    out = stored["tmp"] / "runs.jsonl"
    result = _export("bench", "--fleet", "prod", "--out", str(out))
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [line["spectower_run"]["server_url"] for line in lines] == [A, B]
    assert [line["spectower_run"]["id"] for line in lines] == [stored["runs"][A], stored["runs"][B]]
    assert f"{D}: no run stored" in result.stderr and f"{A}: run(s) {stored['runs'][A]}" in result.stderr
    out = stored["tmp"] / "one.csv"  # one replica, one run: still named on every row
    result = _export("bench", "--server", B, "--out", str(out))
    assert result.exit_code == 0, result.output
    assert [r["server_url"] for r in csv.DictReader(out.open(newline=""))] == [B]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["bench", "1", "--fleet", "prod", "--out", "x.csv"], "RUN_ID: give run ids or --fleet / --server"),
        (["bench", "--out", "x.csv"], "RUN_ID: give at least one benchmark run id"),
        (["bench", "--server", D, "--out", "x.csv"], "no benchmark run is stored for any replica of"),
        (["samples", "--kind", "engine", "--server", D, "--server", "http://e:1", "--out", "x.csv"],
         "no engine row is stored for any replica"),
        (["samples", "--kind", "gpu", "--fleet", "prod", "--host", "h", "--out", "x.csv"],
         "--host: not with"),
        (["samples", "--kind", "engine", "--fleet", "nope", "--out", "x.csv"],
         "--fleet nope: no [fleets.nope]"),
    ],
)  # fmt: skip
def test_bad_input_is_one_line_and_writes_nothing(
    stored: dict[str, Any], args: list[str], message: str
) -> None:
    result = _export(*args)
    assert result.exit_code == 2, result.output
    assert (message in result.stderr and result.exception is None) or isinstance(result.exception, SystemExit)
    assert not (stored["tmp"] / "x.csv").exists()
