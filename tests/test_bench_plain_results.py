"""A sweep with --plain-server: ratios against plain, both crossovers, the rows stored, the profile written
and two runs compared (real SQLite file; no server, no clock)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from spectower.collectors.bench.compare import compare_runs, load_run
from spectower.collectors.bench.errors import BenchError
from spectower.collectors.bench.persist import to_models
from spectower.collectors.bench.profile_out import build_profile, write_profile
from spectower.collectors.bench.sweep import PLAIN, PointResult, SweepConfig, SweepResult
from spectower.simulator.profile import load_profile
from spectower.storage import open_database

from tests.test_bench_results import GPUS

SPEC = "http://127.0.0.1:30000"
PLAIN_URL = "http://127.0.0.1:30001"
# issue #12's H200 measurement (server-side output tok/s): knob on, knob off, plain
ON = {1: 351.4, 16: 3606.6, 64: 6894.0}
OFF = {1: 159.7, 16: 2042.3, 64: 4087.4}
PLAIN_TOK = {1: 191.5, 16: 3063.9, 64: 6799.7}


def _result(plain: dict[int, float] | None = PLAIN_TOK) -> SweepResult:
    info = {
        "version": "0.5.23",
        "served_model_name": "m",
        "speculative_num_steps": 3,
        "speculative_algorithm": "EAGLE3",
        "max_running_requests": 64,
    }
    res = SweepResult(
        config=SweepConfig(server=SPEC, concurrency=tuple(ON), plain_server=PLAIN_URL),
        server_info=info,
        max_running_requests=64,
        started_at=1.0e9,
        knob_before=[64],
        knob_restored=True,
        gpu_inventory=GPUS,
        plain_server_info={"served_model_name": "m", "version": "0.5.23", "speculative_algorithm": None},
    )
    for c in ON:
        for mode, tok in (("on", ON[c]), ("off", OFF[c]), (PLAIN, (plain or {}).get(c))):
            if tok is None:
                continue
            figures = {
                "steady_output_throughput": tok,
                "steady_windows": [tok * f for f in (0.99, 1.0, 1.01, 1.0)],
                "output_throughput": tok,
                "completed": 10,
                "total_input_tokens": 1280,
                "total_output_tokens": 2560,
                "median_ttft_ms": 20.0,
            }
            res.points.append(
                PointResult(
                    concurrency=c,
                    mode=mode,  # type: ignore[arg-type]
                    knob_value={"on": 64, "off": 0}.get(mode),
                    figures=figures,
                    accept_length=2.0 if mode == "on" else None,
                    accept_length_source=None,
                    started_at=1.0e9 + c,
                )
            )
    return res


def test_config_measures_plain_last_in_every_round_and_checks_the_url() -> None:
    cfg = SweepConfig(server=SPEC, plain_server=PLAIN_URL).validate()
    assert cfg.measured_modes == ("on", "off", "plain")
    assert SweepConfig(server=SPEC).measured_modes == ("on", "off")
    assert cfg.params()["plain_server"] == PLAIN_URL
    with pytest.raises(BenchError, match=r"--plain-server must be an http\(s\) URL"):
        SweepConfig(server=SPEC, plain_server="localhost:1").validate()
    with pytest.raises(BenchError, match="--plain-server: the same URL as --server"):
        SweepConfig(server=SPEC, plain_server=SPEC + "/").validate()


def test_ratios_against_plain_and_both_crossovers() -> None:
    res = _result()
    off_plain = {r.concurrency: r.ratio for r in res.ratios("off", PLAIN)}
    assert off_plain == pytest.approx({1: 159.7 / 191.5, 16: 2042.3 / 3063.9, 64: 4087.4 / 6799.7}, rel=1e-9)
    assert all(0.5 < r < 0.85 for r in off_plain.values())
    # against knob-off speculation pays everywhere; against a plain server it stops paying near 64
    assert res.crossover() is not None and res.crossover().status == "none_in_range"  # type: ignore[union-attr]
    assert res.best_max_bs() == 64
    on_plain = {r.concurrency: r.ratio for r in res.ratios("on", PLAIN)}
    assert on_plain[64] == pytest.approx(6894.0 / 6799.7) and on_plain[64] > 1.0
    cross = res.crossover_vs_plain()
    assert cross is not None and cross.status == "none_in_range"
    # a plain server 10% faster at 64 moves the crossover vs plain into (16, 64)
    faster = _result({**PLAIN_TOK, 64: 6894.0 * 1.1})
    cross = faster.crossover_vs_plain()
    assert cross is not None and cross.status == "found" and cross.bracket == (16, 64)
    assert faster.crossover().status == "none_in_range"  # type: ignore[union-attr]
    assert _result(None).crossover_vs_plain() is None


def test_rows_store_plain_as_a_mode_with_ratios_and_the_run_knows_the_plain_server() -> None:
    run, points = to_models(_result())
    assert len(points) == 9
    plain_rows = [p for p in points if json.loads(p.extra_json or "{}")["mode"] == "plain"]
    assert len(plain_rows) == 3 and all(p.spec_on is None for p in plain_rows)
    assert all(json.loads(p.extra_json or "{}")["knob_value"] is None for p in plain_rows)
    assert [p.spec_on for p in points if p not in plain_rows].count(True) == 3
    for p in points:
        extra = json.loads(p.extra_json or "{}")
        c = int(p.concurrency or 0)
        assert extra["ratio_off_plain"] == pytest.approx(OFF[c] / PLAIN_TOK[c])
        assert extra["ratio_off_plain_lo"] <= extra["ratio_off_plain"] <= extra["ratio_off_plain_hi"]
        assert extra["ratio_on_plain"] == pytest.approx(ON[c] / PLAIN_TOK[c])
    params = json.loads(run.params_json or "{}")
    assert params["plain_server"] == PLAIN_URL
    assert params["plain_server_info"]["speculative_algorithm"] is None
    assert params["crossover_vs_plain"]["status"] == "none_in_range"
    assert run.crossover is None and run.best_max_bs == 64  # the knob's crossover (on vs knob-off)


def test_profile_out_writes_the_plain_curve_beside_on_and_off(tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    written = write_profile(_result(), path)
    assert written["output_tok_s"]["plain"] == [191.5, 3063.9, 6799.7]
    assert written["output_tok_s"]["spec_off"] == [159.7, 2042.3, 4087.4]
    prof = load_profile(path)
    assert prof.plain_tok_s == (191.5, 3063.9, 6799.7)
    assert prof.output_tok_s(16, False) == pytest.approx(2042.3)  # "off" is the knob at 0
    assert prof.plain_output_tok_s(16) == pytest.approx(3063.9)
    # a level without a plain point: no plain curve rather than a partial one
    partial = _result({1: 191.5, 16: 3063.9})
    assert "plain" not in build_profile(partial)["output_tok_s"]


def test_compare_shows_plain_and_off_over_plain(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    db = open_database(url)
    a = db.save_bench_run(*to_models(_result()))
    b = db.save_bench_run(*to_models(_result(None)))
    comp = compare_runs(load_run(db, a), load_run(db, b))
    db.close()
    row16 = next(r for r in comp.rows if r["concurrency"] == 16)
    assert row16["a"]["plain_tok_s"] == 3063.9 and row16["b"]["plain_tok_s"] is None
    assert row16["a"]["off_plain"] == pytest.approx(2042.3 / 3063.9)
    assert row16["a"]["on_plain"] == pytest.approx(3606.6 / 3063.9)
    assert row16["a"]["ratio"] == pytest.approx(3606.6 / 2042.3)  # on/off unchanged by the plain rows
    heads = comp.to_json()
    assert heads["a"]["crossover_vs_plain"]["status"] == "none_in_range"
    assert heads["b"]["crossover_vs_plain"] is None
