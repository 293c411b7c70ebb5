"""`spectower bench sweep` end to end against the simulator (a real subprocess) with each shipped profile.

The measured curve must match the profile within 5% at every level, the crossover must land in the right
interval, the knob must come back to its value before the sweep, the run is saved (with its audit rows),
and the profile written with --profile-out replays in `spectower sim serve`.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import httpx
import pytest
from spectower.simulator.profile import load_profile
from spectower.storage import open_database
from spectower.storage.models import BenchPoint, BenchRun, ControlEvent
from sqlmodel import select

from tests.conftest import REPO_ROOT, SPECTOWER_CLI

# throughput against the wall clock: tests/run runs these alone, after the parallel part
pytestmark = pytest.mark.timing

LEVELS = (1, 2, 4, 8, 16, 32, 64)
TOLERANCE = 0.05
# The shipped profiles' curves, replayed at full speed (llama asks for ~5,400 SSE chunks/s at C=64 spec off)
# without per-step noise: glm5's ratio at 16 is 0.995, and only a noise-free run places its crossover (~15)
# inside [8, 16] every time. 256-token requests keep the closed loop's own losses small: the round trip
# between one request and the next, and the last speculative step, capped at max_tokens, which costs a full
# step for ~1 token (with 128 tokens, spec on measured 2-3% under its profile for those reasons alone).
# Unloaded 2-core VM, 2026-11-30: worst level -2.2% (llama C=1 spec on), glm5 crossover 8-16.
# On a box whose CPU is shared the simulator falls behind at the highest chunk rates (seen: half the profile
# with 8 engineers on 2 cores); SPECTOWER_BENCH_MAX_CHUNKS_S / _MAX_REQUEST_TOK_S then slow each level's on
# and off figures by the same factor, so every on/off ratio, the crossover and the best knob stay the
# shipped profile's (800 and 32 are what that box sustained).
MAX_CHUNKS_S = float(os.environ.get("SPECTOWER_BENCH_MAX_CHUNKS_S", "inf"))
MAX_REQUEST_TOK_S = float(os.environ.get("SPECTOWER_BENCH_MAX_REQUEST_TOK_S", "inf"))


def _test_profile(name: str, tmp_path: Path) -> Path:
    shipped = load_profile(name)
    data = shipped.to_json()
    scaled_on, scaled_off = [], []
    for c, on, off, accept in zip(shipped.concurrency, shipped.spec_on_tok_s, shipped.spec_off_tok_s,
                                  shipped.accept_length, strict=True):  # fmt: skip
        chunks_s = max(on / accept, off)  # one SSE chunk per request per decode step
        factor = min(1.0, MAX_CHUNKS_S / chunks_s, MAX_REQUEST_TOK_S * c / max(on, off))
        scaled_on.append(on * factor)
        scaled_off.append(off * factor)
    data["output_tok_s"] = {"spec_on": scaled_on, "spec_off": scaled_off}
    data["noise_cv"] = 0.0
    data["name"] = f"{name}-replay"
    path = tmp_path / f"{data['name']}.json"
    path.write_text(json.dumps(data))
    return path


ADMIN_KEY = "bench-admin-key"
START_KNOB = 7  # neither "on" nor "off": proves the sweep restores what was there


def _sweep(sim, tmp_path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, SPECTOWER_ADMIN_KEY=ADMIN_KEY)
    argv = [
        *SPECTOWER_CLI, "bench", "sweep", "--server", sim.base_url,
        "--concurrency", ",".join(map(str, LEVELS)), "--modes", "on,off",
        "--duration-per-level", "3", "--rounds", "1",
        "--input-len", "8", "--output-len", "256", "--warmup", "1",
        "--db", str(tmp_path / "spectower.db"), "--as", "tester", "--json", *extra,
    ]  # fmt: skip
    return subprocess.run(argv, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=240)


def _set_knob(sim, value: int) -> None:
    r = httpx.post(
        f"{sim.base_url}/set_internal_state",
        json={"server_args": {"spectower_spec_max_bs": value}},
        headers=sim.admin_headers,
    )
    assert r.json() == [True]


def _knob(sim) -> int:
    return httpx.get(f"{sim.base_url}/server_info").json()["internal_states"][0]["spectower"]["spec_max_bs"]


def _check_curve(out: dict, profile_path: Path) -> list[str]:
    """Every level within 5% of the profile, unless the simulator itself fell short there.

    On a box shared by 8 engineers the simulator process is sometimes starved and produces less than its
    profile; its own decode counter (``sglang:realtime_tokens_total{mode="decode"}``, refreshed every step
    with ``--decode-log-interval 1``) shows it. Such a level passes only if the client measured what the
    server produced (within 5%), i.e. the client is not the bottleneck; it is printed as a simulator
    shortfall. Anything else (a client that miscounts or lags) fails."""
    profile = load_profile(profile_path)
    misses = []
    for p in out["points"]:
        expected = profile.output_tok_s(p["concurrency"], p["mode"] == "on")
        got = p["steady_output_throughput"]
        server = p.get("server_decode_tok_s")
        line = (
            f"C={p['concurrency']} spec {p['mode']}: {got:.1f} vs profile {expected:.1f} "
            f"({got / expected - 1:+.1%}); simulator's own decode counter {server or 0:.1f}"
        )
        if abs(got / expected - 1) <= TOLERANCE:
            print(line)
        elif server and server / expected < 1 - TOLERANCE and abs(got / server - 1) <= TOLERANCE:
            print(line + "  <- simulator shortfall (the client got what the server produced)")
        else:
            print(line + "  <- MISS")
            misses.append(line)
    return misses


@pytest.mark.slow
@pytest.mark.integration
def test_glm5_curve_crossover_save_and_replay(simulator_factory, tmp_path: Path) -> None:
    name = "glm5-nvfp4-8x-rtx-pro-6000"
    path = _test_profile(name, tmp_path)
    sim = simulator_factory(profile=str(path), admin_key=ADMIN_KEY, decode_log_interval=1)
    _set_knob(sim, START_KNOB)
    profile_out = tmp_path / "measured.json"
    proc = _sweep(
        sim,
        tmp_path,
        "--save",
        "--tag",
        "glm5",
        "--profile-out",
        str(profile_out),
        "--gpu-metrics",
        sim.gpu_metrics_url,
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)

    assert len(out["points"]) == 2 * len(LEVELS)
    assert all(p["failed"] == 0 and p["completed"] > 0 for p in out["points"])
    misses = _check_curve(out, path)  # asserted last: every other behaviour is checked first

    cross = out["crossover"]
    print(f"crossover {cross} (profile's own: {load_profile(name).crossover():.1f})")
    assert cross["status"] == "found"
    assert cross["bracket"] == [8, 16] and 8 <= cross["value"] <= 16
    assert cross["lo"] <= cross["value"] <= cross["hi"]
    assert 8 <= out["best_max_bs"] <= 16
    on_accept = [p["accept_length"] for p in out["points"] if p["mode"] == "on"]
    assert all(2.3 <= a <= 2.8 for a in on_accept), on_accept  # the profile's 2.45-2.6, per point

    # the knob is back where it was; the audit has one row for the borrow and one for the give-back, the
    # per-slice moves are in the run's own record
    assert out["knob_restored"] and _knob(sim) == START_KNOB
    assert [m["value"] for m in out["knob_moves"]] == [64, 0] * len(LEVELS)
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
    assert len(runs) == 1 and runs[0].id == out["run_id"] and runs[0].tag == "glm5"
    assert (
        runs[0].sglang_version and json.loads(runs[0].server_info_json)["served_model_name"] == "glm-5-nvfp4"
    )
    assert len(json.loads(runs[0].gpu_inventory_json)) == 8
    assert runs[0].crossover == pytest.approx(cross["value"])
    assert len(points) == 2 * len(LEVELS)
    assert all(p.ratio_ci_lo is not None and p.ratio_ci_lo <= p.ratio_ci_hi for p in points)

    # the written profile loads, and `spectower sim serve` replays it
    measured = load_profile(profile_out)
    assert list(measured.concurrency) == list(LEVELS)
    assert measured.crossover() is not None and 8 <= measured.crossover() <= 16
    assert measured.output_tok_s(1, True) == pytest.approx(load_profile(path).output_tok_s(1, True), rel=0.05)
    replay = simulator_factory(profile=str(profile_out))
    info = httpx.get(f"{replay.base_url}/server_info").json()
    assert info["served_model_name"] == "glm-5-nvfp4"
    assert info["max_running_requests"] == 64
    replayed = httpx.post(
        f"{replay.base_url}/generate",
        json={"input_ids": [11, 12], "sampling_params": {"max_new_tokens": 4, "ignore_eos": True}},
        timeout=30,
    ).json()
    assert replayed["meta_info"]["completion_tokens"] == 4
    assert not misses, "measured curve off the profile by more than 5%:\n" + "\n".join(misses)


@pytest.mark.slow
@pytest.mark.integration
def test_llama_curve_and_no_crossover(simulator_factory, tmp_path: Path) -> None:
    name = "llama31-8b-1x-h100"
    path = _test_profile(name, tmp_path)
    sim = simulator_factory(profile=str(path), admin_key=ADMIN_KEY, decode_log_interval=1)
    proc = _sweep(sim, tmp_path, "--api", "generate")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    misses = _check_curve(out, path)
    assert out["crossover"]["status"] == "none_in_range"
    assert out["best_max_bs"] == 64
    assert out["knob_restored"] and _knob(sim) == 64
    assert all(r["ratio"] > 1.2 for r in out["ratios"])
    assert not misses, "measured curve off the profile by more than 5%:\n" + "\n".join(misses)
