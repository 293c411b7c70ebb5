"""benchmarks/replay_fidelity.py: the simulator's open loop against a measured replay, on the H200 Azure
replay of 2026-12-04 (data/gpu-runs/): its replay summaries and the counters its policy.db stored."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
import replay_fidelity

RUN_DIR = REPO_ROOT / "data/gpu-runs/h200-8b-early-pair-triton-replay-2026-12-04"


def test_the_replays_are_read_in_the_order_they_ran_with_their_policies() -> None:
    runs = replay_fidelity.measured_runs(RUN_DIR)
    assert [r.tag for r in runs] == ["off", "threshold-16", "learn", "threshold-16-2", "learn-2"]
    assert [r.policy for r in runs] == ["off", "threshold-16", "learn", "threshold-16", "learn"]
    bins = replay_fidelity.measured_bins(RUN_DIR, 64)
    assert set(bins) == {"off", "threshold-16", "learn"}
    # under an operator's lock nothing drafts; under threshold:16 both modes run
    assert not any(cell[0] for (_, mode), cell in bins["off"].items() if mode == "drafted")
    assert any(cell[0] for (_, mode), cell in bins["threshold-16"].items() if mode == "drafted")


def test_it_prints_every_run_simulated_beside_measured_and_writes_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "fidelity.json"
    assert replay_fidelity.main(["--window-starts", "0,4096", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    for tag in ("off", "threshold-16", "learn", "threshold-16-2", "learn-2"):
        assert any(line.startswith(tag + " ") for line in text.splitlines()), tag
    data = json.loads(out.read_text())
    rows = {r["tag"]: r for r in data["figures"]}
    for row in rows.values():
        assert row["measured"]["goodput_rps"] > 0 and row["simulated"]["goodput_rps"] > 0
        low, high = row["sim_range"]["e2e_p50_s"]
        assert low <= row["simulated"]["e2e_p50_s"] <= high
    # the repeats of one policy are one simulated run
    assert rows["learn"]["simulated"] == rows["learn-2"]["simulated"]
    assert {b["mode"] for b in data["bins"]} == {"drafted", "gated"}


def test_bad_input_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert replay_fidelity.main(["--run-dir", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip().startswith("--run-dir: no replay-<tag>.json")
    shutil.copy(RUN_DIR / "replay-off.json", tmp_path / "replay-off.json")
    # a run that kept no policy.db: its replays are compared, without bins
    assert replay_fidelity.main(["--run-dir", str(tmp_path), "--window-starts", "0"]) == 0
    printed = capsys.readouterr().out
    assert any(line.startswith("off ") for line in printed.splitlines())
    assert printed.rstrip().endswith("ratio")  # the per-bin table's header, and no row under it
    with pytest.raises(SystemExit):
        replay_fidelity.main(["--window-starts", "1,x"])


PAIR_RUN_DIR = REPO_ROOT / "data/gpu-runs/h200-8b-pair-triton-replay-2026-12-04"


def test_the_replays_own_speedups_put_the_pairs_crossover_far_below_its_sweeps(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Under Azure's prompts the fixed-share 0.5 pair's drafting loses from bin 32 on, with 95 % intervals
    below 1 (threshold:47's drafted steps against always off's gated ones, the H200 replay of 2026-12-04),
    where its sweep (64-token prompts) crossed at 47: the sweep's crossover is no warm start for this
    traffic. At 24 the interval holds 1; below it drafting read more than 1.2x, on too few counter
    intervals for a bound."""
    out = tmp_path / "speedups.json"
    recorded = (PAIR_RUN_DIR / "policy.db.xz").read_bytes()  # kept compressed (benchmarks/gpu/runs.py)
    assert replay_fidelity.main(["--run-dir", str(PAIR_RUN_DIR), "--speedups", "--json", str(out)]) == 0
    # read from a copy: a newer schema's migration never rewrites the archived run (nor leaves a backup)
    assert (PAIR_RUN_DIR / "policy.db.xz").read_bytes() == recorded
    assert [p.name for p in PAIR_RUN_DIR.glob("policy.db.*")] == ["policy.db.xz"]
    rows = {r["bin"]: r for r in json.loads(out.read_text())["speedups"]}
    assert all(r["policy"] == "threshold-47" for r in rows.values())
    assert [rows[b]["speedup"] for b in (24, 32, 48)] == pytest.approx([0.941, 0.841, 0.711], abs=0.001)
    assert rows[48]["hi"] < 1 and rows[32]["hi"] < 1 and rows[24]["lo"] < 1 < rows[24]["hi"]
    assert rows[32]["intervals"] == rows[48]["intervals"] == 18
    assert rows[12]["speedup"] > 1.2 and rows[12]["lo"] is None  # 2 intervals: no bound
    assert min(min(r["drafted_steps"], r["gated_steps"]) for r in rows.values()) >= replay_fidelity.MIN_STEPS
    assert "speedup" in capsys.readouterr().out
    # a run without a threshold run's counters has nothing to compare: one line, exit 2
    shutil.copy(PAIR_RUN_DIR / "replay-off.json", tmp_path / "replay-off.json")
    assert replay_fidelity.main(["--run-dir", str(tmp_path), "--speedups"]) == 2
    assert capsys.readouterr().err.strip().startswith("--speedups: the run needs")


def test_the_pairs_calibrated_profile_reproduces_its_replays_step_times_and_always_offs_latency(
    tmp_path: Path,
) -> None:
    """data/profiles/h200-8b-pair-triton.json: the pair's sweep curves with open-loop constants fitted to its
    own Azure replay (`--fit`). Simulated on the same arrivals, always off's median end-to-end latency reads
    within 15 % of the H200's (the guess it replaced read 0.71x) and the busy bins' step times (at least 500
    measured steps) within 15 %."""
    out = tmp_path / "fidelity.json"
    profile = str(REPO_ROOT / "data/profiles/h200-8b-pair-triton.json")
    argv = ["--run-dir", str(PAIR_RUN_DIR), "--profile", profile, "--learn-warm", "48",
            "--window-starts", "0"]  # fmt: skip
    assert replay_fidelity.main([*argv, "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    off = next(r for r in data["figures"] if r["tag"] == "off")
    assert off["simulated"]["e2e_p50_s"] / off["measured"]["e2e_p50_s"] == pytest.approx(1.0, abs=0.15)
    busy = [b for b in data["bins"] if b["steps"] >= 500]
    assert len(busy) >= 8
    assert all(b["sim_ms"] / b["measured_ms"] == pytest.approx(1.0, abs=0.15) for b in busy), busy
