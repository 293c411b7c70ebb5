"""A finished sweep as a profile, as storage rows, and two saved runs compared (real SQLite file)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from spectower.collectors.bench.compare import compare_runs, load_run
from spectower.collectors.bench.errors import BenchError
from spectower.collectors.bench.persist import to_models
from spectower.collectors.bench.profile_out import build_profile, write_profile
from spectower.collectors.bench.sweep import PointResult, SweepConfig, SweepResult
from spectower.console.cli import app
from spectower.simulator.profile import load_profile
from spectower.storage import open_database
from typer.testing import CliRunner

GPUS = [
    {
        "index": i,
        "name": "NVIDIA H200",
        "memory_total_mib": 143771.0,
        "power_usage_w": 300.0 + i,
        "driver_version": "580.159",
        "uuid": f"GPU-{i}",
    }
    for i in range(2)
]


def _result(
    on: dict[int, float],
    off: dict[int, float],
    *,
    version: str = "0.5.23",
    cuda_graph_max_bs: int = 128,
    gpus: list | None = GPUS,
) -> SweepResult:
    info = {
        "version": version,
        "served_model_name": "m",
        "speculative_num_steps": 3,
        "speculative_algorithm": "EAGLE3",
        "cuda_graph_max_bs": cuda_graph_max_bs,
        "port": 1,
        "max_running_requests": 48,
        "internal_states": [{"spectower": {"spec_max_bs": 48}}],
    }
    res = SweepResult(
        config=SweepConfig(server="http://127.0.0.1:1", concurrency=tuple(sorted(on))),
        server_info=info,
        max_running_requests=48,
        started_at=1.0e9,
        knob_before=[48],
        knob_restored=True,
        gpu_inventory=gpus,
    )
    for c in sorted(on):
        for mode, tok in (("on", on[c]), ("off", off[c])):
            windows = [tok * f for f in (0.98, 1.0, 1.02, 0.99, 1.01)]
            figures = {
                "steady_output_throughput": tok,
                "steady_windows": windows,
                "output_throughput": tok * 0.97,
                "completed": 10,
                "total_input_tokens": 1280,
                "total_output_tokens": 2560,
                "median_ttft_ms": 50.0 * c,
                "median_itl_ms": 1000.0 * c / tok,
                "request_rate": float("inf"),
                "duration": 10.0,
                "p95_ttft_ms": 60.0,
            }
            res.points.append(
                PointResult(
                    concurrency=c,
                    mode=mode,
                    knob_value=48 if mode == "on" else 0,  # type: ignore[arg-type]
                    figures=figures,
                    accept_length=2.5 if mode == "on" else 1.0,
                    accept_length_source="metrics counters",
                    started_at=1.0e9 + c,
                )
            )
    return res


ON = {1: 96.0, 8: 610.0, 16: 975.0, 32: 1290.0}
OFF = {1: 89.5, 8: 590.0, 16: 980.0, 32: 1420.0}


def test_profile_out_is_accepted_by_the_simulator_loader(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "p.json"
    with pytest.raises(ValueError, match=r"^--profile-out: folder .*sub does not exist$"):
        write_profile(_result(ON, OFF), path, name="mine")  # as sglang-config and export: no folder made
    path.parent.mkdir()
    written = write_profile(_result(ON, OFF), path, name="mine")
    prof = load_profile(path)
    assert prof.name == "mine"
    assert list(prof.concurrency) == [1, 8, 16, 32]
    assert prof.output_tok_s(8, True) == pytest.approx(610.0)
    assert prof.output_tok_s(32, False) == pytest.approx(1420.0)
    assert prof.accept_length_at(1) == pytest.approx(2.5)
    assert prof.gpus.count == 2 and prof.gpus.name == "NVIDIA H200"
    assert written["gpus"]["power_limit_w_source"].startswith("max observed")
    assert 8 < (prof.crossover() or 0) < 16
    assert not list(tmp_path.glob("sub/.p.json.*"))  # no temp file left behind
    # without a prefill probe the prefill figure is TTFT at the lowest concurrency, and says so
    assert written["prefill_source"] == "ttft_floor" and prof.first_token_latency_s == 0.0


def test_profile_out_refuses_without_both_modes_or_gpus(tmp_path: Path) -> None:
    res = _result(ON, OFF)
    res.points = [p for p in res.points if p.mode == "on"]
    with pytest.raises(BenchError, match="--profile-out"):
        build_profile(res)
    with pytest.raises(BenchError, match="GPU inventory"):
        build_profile(_result(ON, OFF, gpus=None))


def test_rows_keep_sglang_names_and_the_extras() -> None:
    run, points = to_models(_result(ON, OFF))
    assert run.source == "sweep" and run.backend == "sglang-oai" and run.dataset_name == "random"
    assert (
        run.sglang_version == "0.5.23" and 8 < (run.crossover or 0) < 16 and run.best_max_bs in range(8, 17)
    )
    assert json.loads(run.params_json or "{}")["knob_before"] == [48]
    on8 = next(p for p in points if p.concurrency == 8 and p.spec_on)
    assert on8.output_throughput == pytest.approx(610.0 * 0.97)
    assert on8.median_ttft_ms == 400.0 and on8.accept_length == 2.5 and on8.request_rate is None
    assert on8.ratio_ci_lo is not None and on8.ratio_ci_lo < 610 / 590 < (on8.ratio_ci_hi or 0)
    extra = json.loads(on8.extra_json or "{}")
    assert (
        extra["steady_output_throughput"] == 610.0 and extra["p95_ttft_ms"] == 60.0 and extra["mode"] == "on"
    )


def _save_two(tmp_path: Path) -> tuple[str, int, int]:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    db = open_database(url)
    a = db.save_bench_run(*to_models(_result(ON, OFF)))
    newer_gpus = [dict(g, driver_version="590.10", cuda_version="13.1") for g in GPUS]
    on_b = {c: v * 1.1 for c, v in ON.items()}
    b = db.save_bench_run(
        *to_models(_result(on_b, OFF, version="0.5.24", cuda_graph_max_bs=512, gpus=newer_gpus))
    )
    db.close()
    return url, a, b


def test_compare_side_by_side_and_stack_difference(tmp_path: Path) -> None:
    url, a, b = _save_two(tmp_path)
    db = open_database(url)
    comp = compare_runs(load_run(db, a), load_run(db, b))
    db.close()
    assert [r["concurrency"] for r in comp.rows] == [1, 8, 16, 32]
    row8 = comp.rows[1]
    assert row8["a"]["on_tok_s"] == 610.0 and row8["b"]["on_tok_s"] == pytest.approx(671.0)
    assert row8["b"]["ratio"] == pytest.approx(671.0 / 590.0)
    what = {d["what"]: d for d in comp.stack}
    assert what["sglang version"]["a"] == "0.5.23" and what["sglang version"]["b"] == "0.5.24"
    assert what["launch flag cuda_graph_max_bs"]["b"] == 512
    assert what["gpu driver_version"]["b"] == "590.10"
    assert what["gpu cuda_version"]["a"] is None and what["gpu cuda_version"]["b"] == "13.1"
    assert "launch flag port" not in what and "launch flag internal_states" not in what


def test_compare_cli_json_and_table(tmp_path: Path) -> None:
    url, a, b = _save_two(tmp_path)
    runner = CliRunner()
    res = runner.invoke(app, ["bench", "compare", str(a), str(b), "--db", url, "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert data["a"]["id"] == a and data["b"]["sglang_version"] == "0.5.24"
    assert any(d["what"] == "launch flag cuda_graph_max_bs" for d in data["stack_differences"])
    res = runner.invoke(app, ["bench", "compare", str(a), str(b), "--db", url])
    assert res.exit_code == 0 and "cuda_graph_max_bs" in res.output and "0.5.24" in res.output


def test_compare_unknown_run_is_a_clear_error(tmp_path: Path) -> None:
    url, _, _ = _save_two(tmp_path)
    from spectower.console.cli import main  # noqa: F401  (the CLI's own error path is exercised in test_bench_cli)

    db = open_database(url)
    with pytest.raises(LookupError, match="RUN 999"):
        load_run(db, 999)
    db.close()


def test_compare_shows_request_rate_runs_and_both_sides_latencies(tmp_path: Path) -> None:
    # An old bench_serving request-rate sweep (no max_concurrency) beside one of ours: its levels are
    # request rates, labelled as such, and spec-off latencies show beside spec-on ones.
    from spectower.storage.bench_serving import import_file

    from tests.conftest import REAL_DATA

    url, a, _ = _save_two(tmp_path)
    db = open_database(url)
    name = "datacrunch-research__h200-benchmarks__llama_3_3_70b_online_output.jsonl"
    rate_run = import_file(db, REAL_DATA / "bench_serving" / name)
    comp = compare_runs(load_run(db, a), load_run(db, rate_run.run_id or 0))
    db.close()
    rates = [r for r in comp.rows if r["request_rate"] is not None]
    assert [r["level"] for r in rates][:3] == ["1 req/s", "2 req/s", "4 req/s"]
    assert all(r["concurrency"] is None and r["b"]["tok_s"] for r in rates)
    res = CliRunner().invoke(app, ["bench", "compare", str(a), str(rate_run.run_id), "--db", url])
    assert res.exit_code == 0, res.output
    assert "16 req/s" in res.output and "537.4?" in res.output
    row8 = next(r for r in comp.rows if r["concurrency"] == 8)
    on_ttft, off_ttft = row8["a"]["median_ttft_ms"]["on"], row8["a"]["median_ttft_ms"]["off"]
    assert f"{on_ttft:.1f}/{off_ttft:.1f}" in res.output
