"""`spectower bench sweep` end to end against the simulator (a real subprocess), on short levels.

What is checked is the sweep's behaviour, not how close its figures come to the profile on this machine
(``python benchmarks/sweep_fidelity.py`` prints those): the run is saved with its audit rows, the knob comes
back to its value before the sweep, the modes alternate within each level, the ratios and the crossover are
computed from the points it stored, and the profile written with --profile-out replays in `spectower sim
serve`.

The test profile's on/off ratios are 3.0, 2.4 and 0.33 (levels 1, 2, 8): only a machine that slowed one mode
by 2.4x against the other, within one level's alternating slices, could move the crossover out of [2, 8].
Rates stay low (at most 480 SSE chunks/s) so a shared 2-core box streams them easily.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest
from spectower.collectors.bench.ratio import RatioPoint, best_knob, find_crossover
from spectower.simulator.profile import load_profile
from spectower.storage import open_database
from spectower.storage.models import BenchPoint, BenchRun, ControlEvent
from sqlmodel import select

from benchmarks.simulator_process import (
    H100,
    SimulatorFactory,
    SimulatorProcess,
    curve_profile,
    write_profile,
)
from tests.conftest import REPO_ROOT, SPECTOWER_CLI

LEVELS = (1, 2, 8)
MAX_RUNNING = 16  # the knob's "on" value; not a level, so a move to it is told apart from one to a level
# whole tokens per drafted step (accept length 2): the accept length read from the counters is exact
SWEEP_SHAPE = curve_profile(
    "sweep-shape", LEVELS, {"spec_on": [150.0, 240.0, 160.0], "spec_off": [50.0, 100.0, 480.0]},
    max_running_requests=MAX_RUNNING, gpus={**H100, "count": 2}, served_model_name="sweep-shaped",
    description="test profile: speculation pays at 1 and 2, loses at 8",
    prefill_tok_s=10000.0,  # the probe's 2048-token prompts take 0.2 s: far above a loaded box's jitter
)  # fmt: skip
ADMIN_KEY = "bench-admin-key"
START_KNOB = 7  # neither "on" nor "off": proves the sweep restores what was there
ROUNDS = 2


def _sweep(sim: SimulatorProcess, tmp_path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, SPECTOWER_ADMIN_KEY=ADMIN_KEY)
    # 16-token requests and half-second slices: every slice finishes its requests in about a second
    argv = [
        *SPECTOWER_CLI, "bench", "sweep", "--server", sim.base_url,
        "--concurrency", ",".join(map(str, LEVELS)), "--modes", "on,off",
        "--duration-per-level", "1", "--rounds", str(ROUNDS),
        "--input-len", "8", "--output-len", "16", "--warmup", "1",
        "--db", str(tmp_path / "spectower.db"), "--as", "tester", "--json", *extra,
    ]  # fmt: skip
    return subprocess.run(argv, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=240)


def _set_knob(sim: SimulatorProcess, value: int) -> None:
    r = httpx.post(
        f"{sim.base_url}/set_internal_state",
        json={"server_args": {"spectower_spec_max_bs": value}},
        headers=sim.admin_headers,
    )
    assert r.json() == [True]


def _knob(sim: SimulatorProcess) -> int:
    state = httpx.get(f"{sim.base_url}/server_info").json()["internal_states"][0]
    return int(state["spectower"]["spec_max_bs"])


def _check_ratios_follow_points(out: dict[str, Any]) -> None:
    """Each reported ratio is mean(on windows) / mean(off windows) of the points reported beside it, and the
    crossover and best knob are the ones those ratios give."""
    points = {(p["concurrency"], p["mode"]): p for p in out["points"]}
    ratios = {r["concurrency"]: r for r in out["ratios"]}
    assert set(ratios) == set(LEVELS)
    for c in LEVELS:
        on, off = points[c, "on"], points[c, "off"]
        assert len(on["steady_windows"]) == len(off["steady_windows"]) == ROUNDS * out["params"]["windows"]
        assert on["steady_output_throughput"] == pytest.approx(statistics.fmean(on["steady_windows"]))
        want = on["steady_output_throughput"] / off["steady_output_throughput"]
        assert ratios[c]["ratio"] == pytest.approx(want, rel=1e-9)
        assert 0 < ratios[c]["lo"] <= ratios[c]["ratio"] <= ratios[c]["hi"]
    fitted = find_crossover(
        [RatioPoint(r["concurrency"], r["ratio"], r["lo"], r["hi"]) for r in out["ratios"]]
    )
    cross = out["crossover"]
    assert cross["status"] == fitted.status and cross["value"] == pytest.approx(fitted.value)
    assert out["best_max_bs"] == best_knob(fitted, MAX_RUNNING)


@pytest.mark.slow
@pytest.mark.integration
def test_sweep_saves_restores_interleaves_and_replays(
    simulator_factory: SimulatorFactory, tmp_path: Path
) -> None:
    profile = write_profile(SWEEP_SHAPE, tmp_path)
    sim = simulator_factory(profile=profile, admin_key=ADMIN_KEY, decode_log_interval=1)
    _set_knob(sim, START_KNOB)
    profile_out = tmp_path / "measured.json"
    proc = _sweep(sim, tmp_path, "--save", "--tag", "shape", "--profile-out", str(profile_out),
                  "--gpu-metrics", sim.gpu_metrics_url)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)

    assert [(p["concurrency"], p["mode"]) for p in out["points"]] == [
        (c, m) for c in LEVELS for m in ("on", "off")
    ]
    assert all(p["failed"] == 0 and p["completed"] > 0 for p in out["points"])
    assert all(p["knob_value"] == (MAX_RUNNING if p["mode"] == "on" else 0) for p in out["points"])
    # the modes alternate within each level, slice by slice (on, off, on, off), before the next level starts
    assert [m["value"] for m in out["knob_moves"]] == [MAX_RUNNING, 0] * ROUNDS * len(LEVELS)
    # whole tokens per drafted step: 2 per verify, less the last step of each request (capped at 16 tokens)
    on_accept = [p["accept_length"] for p in out["points"] if p["mode"] == "on"]
    assert all(1.5 <= a <= 2.0 for a in on_accept), on_accept

    _check_ratios_follow_points(out)
    # the prefill probe (a lone short and a lone long prompt, three each) reads the profile's prefill rate:
    # the short prompts' time to first token, mostly fixed cost, cancels out (collectors/bench/prefill.py)
    probe = out["prefill"]
    assert (probe["short_len"], probe["long_len"]) == (8, 2048)
    assert 0.6 < probe["tok_s"] / SWEEP_SHAPE["prefill_tok_s"] < 1.6, probe
    # the profile the sweep writes carries it (it once carried prompt tokens / TTFT at C=1: mostly overhead)
    written = json.loads(profile_out.read_text())
    assert written["prefill_tok_s"] == pytest.approx(probe["tok_s"], rel=1e-3)
    # and says so, with what a lone short prompt's TTFT spent beyond its prefill (the open loop adds it)
    assert written["prefill_source"] == "probe"
    beyond = probe["short_ttft_s"] - probe["short_len"] / probe["tok_s"]
    assert written["first_token_latency_s"] == pytest.approx(max(0.0, beyond), abs=1e-5)
    # the profile's ratios (3.0, 2.4, 0.33) place the crossover between 2 and 8 with a wide margin
    cross = out["crossover"]
    assert cross["status"] == "found" and cross["bracket"] == [2, 8], out["ratios"]
    assert cross["lo"] <= cross["value"] <= cross["hi"] and 2 <= cross["value"] <= 8
    assert out["best_max_bs"] == math.floor(cross["value"])

    # the knob is back where it was; the audit has one row for the borrow and one for the give-back, the
    # per-slice moves are in the run's own record
    assert out["knob_restored"] and _knob(sim) == START_KNOB
    db = open_database(f"sqlite:///{tmp_path / 'spectower.db'}")
    with db.session() as s:
        events = s.exec(select(ControlEvent)).all()
        runs = s.exec(select(BenchRun)).all()
        points = s.exec(select(BenchPoint)).all()
    db.close()
    assert [e.action for e in events] == ["sweep-start", "sweep-end"]
    assert {e.actor for e in events} == {"operator:tester"}
    assert all(e.confirmed and e.reason.startswith("bench sweep") for e in events)
    assert events[-1].new_max_bs == START_KNOB
    assert len(runs) == 1 and runs[0].id == out["run_id"] and runs[0].tag == "shape"
    run = runs[0]
    assert (
        run.sglang_version and json.loads(run.server_info_json or "{}")["served_model_name"] == "sweep-shaped"
    )
    gpus = json.loads(run.gpu_inventory_json or "[]")
    assert [g["index"] for g in gpus] == [0, 1] and {g["source"] for g in gpus} == {"dcgm"}
    assert all(g["uuid"] and g["name"] and g["memory_total_mib"] > 0 and "power_usage_w" in g for g in gpus)
    assert all(g.get("driver_version") for g in gpus)  # the exporter's DCGM_FI_DRIVER_VERSION label
    assert run.crossover == pytest.approx(cross["value"]) and run.best_max_bs == out["best_max_bs"]
    assert json.loads(run.params_json or "{}")["knob_moves"] == out["knob_moves"]
    # the stored rows hold what was reported: throughput, windows, ratio and its interval per level
    assert len(points) == 2 * len(LEVELS)
    ratios = {r["concurrency"]: r for r in out["ratios"]}
    reported = {(p["concurrency"], p["mode"]): p for p in out["points"]}
    for row in points:
        extra = json.loads(row.extra_json or "{}")
        c = int(row.concurrency or 0)
        assert row.spec_on == (extra["mode"] == "on")
        assert extra["steady_windows"] == reported[c, extra["mode"]]["steady_windows"]
        assert extra["ratio"] == pytest.approx(ratios[c]["ratio"])
        assert (row.ratio_ci_lo, row.ratio_ci_hi) == pytest.approx((ratios[c]["lo"], ratios[c]["hi"]))

    # the written profile is the measured curves, and `spectower sim serve` replays it
    measured = load_profile(profile_out)
    assert list(measured.concurrency) == list(LEVELS)
    for c in LEVELS:
        assert measured.output_tok_s(c, True) == pytest.approx(
            reported[c, "on"]["steady_output_throughput"], abs=1e-3
        )
        assert measured.output_tok_s(c, False) == pytest.approx(
            reported[c, "off"]["steady_output_throughput"], abs=1e-3
        )
    assert measured.crossover() is not None and 2 <= (measured.crossover() or 0) <= 8
    replay = simulator_factory(profile=str(profile_out))
    info = httpx.get(f"{replay.base_url}/server_info").json()
    assert info["served_model_name"] == "sweep-shaped"
    assert info["max_running_requests"] == MAX_RUNNING
    replayed = httpx.post(
        f"{replay.base_url}/generate",
        json={"input_ids": [11, 12], "sampling_params": {"max_new_tokens": 4, "ignore_eos": True}},
        timeout=30,
    ).json()
    assert replayed["meta_info"]["completion_tokens"] == 4

    # where speculation pays at every level measured (1 and 2 here, over /generate): no crossover in range,
    # the best knob is max_running_requests, and the knob is given back again
    # with mixed output lengths (--output-len LOW-HIGH, each request's length by its index): requests of
    # one length finish in waves, which a window's count reads as steps (issue #32)
    proc = _sweep(
        sim, tmp_path, "--api", "generate", "--concurrency", "1,2", "--rounds", "1", "--output-len", "8-24"
    )
    assert proc.returncode == 0, proc.stderr
    low = json.loads(proc.stdout)
    assert low["params"]["api"] == "generate" and low["run_id"] is None
    assert (low["params"]["output_len"], low["params"]["output_len_low"]) == (24, 8)
    per_request = {p["total_output_tokens"] / p["completed"] for p in low["points"] if p["completed"]}
    assert all(8 <= n <= 24 for n in per_request) and per_request != {16.0}, per_request
    assert low["crossover"]["status"] == "none_in_range", low["ratios"]
    assert low["best_max_bs"] == MAX_RUNNING
    assert low["knob_restored"] and _knob(sim) == START_KNOB
