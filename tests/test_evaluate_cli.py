"""`spectower sim evaluate`, run as the real command line (its console script's ``main``, in this process:
a subprocess each cost ~0.6 CPU-s of the unit lane; tests/test_sim_cli.py starts the real process)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT, cli_in_process

GLM = "glm5-nvfp4-8x-rtx-pro-6000"


def spectower(*args: str) -> subprocess.CompletedProcess[str]:
    return cli_in_process("sim", "evaluate", *args)


def test_json_prints_one_object_with_the_scores_and_baselines() -> None:
    run = spectower(
        "--profile",
        GLM,
        "--trace",
        "step",
        "--policy",
        "learn",
        "--duration",
        "1800",
        "--seed",
        "2",
        "--json",
    )
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)  # exactly one JSON document
    assert isinstance(out, dict)
    for key in ("efficiency", "tokens", "oracle_tokens", "flips", "baselines"):
        assert key in out
    # the best achievable: per interval the better of the (exploring) oracle and never drafting
    assert out["best_tokens"] >= max(out["oracle_tokens"], out["never_draft_tokens"])
    assert out["efficiency_vs_best"] == pytest.approx(out["tokens"] / out["best_tokens"], rel=1e-4)
    assert all("efficiency_vs_best" in base for base in out["baselines"].values())
    assert out["policy"] == "learn" and out["seed"] == 2 and out["duration_s"] == 1800
    assert set(out["baselines"]) == {"always-on", "always-off", "threshold:30", "sglang-default"}
    assert 0 < out["efficiency"] <= 1 and out["tokens"] <= out["oracle_tokens"]
    assert out["efficiency"] > out["baselines"]["always-on"]["efficiency"]


def test_table_output_names_policy_and_baselines() -> None:
    run = spectower(
        "--profile", "llama31-8b-1x-h100", "--trace", "ramp", "--policy", "threshold:30", "--duration", "600"
    )
    assert run.returncode == 0, run.stderr
    for word in (
        "threshold:30",
        "always-on",
        "always-off",
        "sglang-default",
        "vs best",
        "vs oracle",
        "flips",
        "never drafting (the knob at 0 locked",
        "best achievable",
    ):
        assert word in run.stdout


def test_a_trace_file_and_a_profile_path(tmp_path: Path) -> None:
    trace = tmp_path / "mine.json"
    trace.write_text(json.dumps([[0, 1], [300, 60], [600, 2]]))
    profile = REPO_ROOT / "simulator" / "profiles" / f"{GLM}.json"
    run = spectower("--profile", str(profile), "--trace", str(trace), "--policy", "always-off", "--json")
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    assert out["trace"] == "mine" and out["duration_s"] == 600 and out["flips"] == 1


@pytest.mark.parametrize(
    "args, message",
    [
        (["--profile", "nope", "--trace", "step"], "profile 'nope'"),
        (["--profile", GLM, "--trace", "weekly"], "trace 'weekly'"),
        (["--profile", GLM, "--trace", "step", "--policy", "threshold:x"], "threshold:x"),
        (["--profile", GLM, "--trace", "step", "--policy", "magic"], "unknown policy 'magic'"),
        (["--profile", GLM, "--trace", "step", "--duration", "5"], "--duration"),
        (["--profile", GLM, "--trace", "step", "--seed", "-1"], "--seed"),
    ],
)
def test_bad_inputs_give_one_clear_error(args: list[str], message: str) -> None:
    run = spectower(*args)
    assert run.returncode == 2
    assert "error:" in run.stderr and message in run.stderr
    assert "Traceback" not in run.stderr and run.stdout == ""


def test_bad_trace_file_names_the_point(tmp_path: Path) -> None:
    trace = tmp_path / "bad.json"
    trace.write_text(json.dumps([[0, 1], [10, 5], [5, 3]]))
    run = spectower("--profile", GLM, "--trace", str(trace))
    assert run.returncode == 2
    assert "point [2]" in run.stderr and "Traceback" not in run.stderr


def test_the_jump_trace_spans_the_profiles_max_running_requests_and_the_table_says_what_exploring_costs() -> (
    None
):
    run = spectower("--profile", GLM, "--trace", "jump", "--policy", "learn", "--duration", "600", "--json")
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    assert out["trace"] == "jump" and out["explore_share"] == 0.02 and 0 < out["explore_cost"] < 0.02
    assert out["changes_per_hour"] <= 12 and out["efficiency"] >= 0.95
    table = spectower("--profile", GLM, "--trace", "jump", "--policy", "learn", "--duration", "600")
    assert table.returncode == 0, table.stderr
    assert "ceiling changes per hour" in table.stdout and "exploration: 2.0%" in table.stdout


EARLY_PAIR = str(REPO_ROOT / "data/profiles/h200-8b-early-pair-triton.json")


def test_learn_warm_starts_at_the_profiles_crossover_as_control_auto_would() -> None:
    """`--warm-start`: learn starts where `control auto --warm-profile` starts it on the same profile (the
    crossover found as a sweep finds its own: 17.3 on the H200 early pair, so ceiling 16), and under the
    270-s day it serves what threshold:16 serves; from the launch's knob (always on) it serves far less."""
    args = ("--profile", EARLY_PAIR, "--trace", "day", "--duration", "270")
    warm = spectower(*args, "--policy", "learn", "--warm-start", "--dwell", "60s")
    assert warm.returncode == 0, warm.stderr
    said = f"warm start: profile {EARLY_PAIR}: crossover 17.3; learn starts at ceiling 16"
    assert said in " ".join(warm.stdout.split()), warm.stdout

    def tokens(*more: str) -> int:
        return int(json.loads(spectower(*args, *more, "--json").stdout)["tokens"])

    best = tokens("--policy", "threshold:16")
    assert tokens("--policy", "learn", "--warm-start") >= 0.98 * best
    assert tokens("--policy", "learn") < 0.95 * best  # cold: from the launch's knob, always on


def test_the_learn_options_are_refused_for_another_policy() -> None:
    run = spectower("--profile", EARLY_PAIR, "--trace", "day", "--policy", "threshold:16", "--dwell", "60s")
    assert run.returncode == 2
    assert run.stderr.strip() == ("error: --warm-start / --dwell: only --policy learn takes them (got "
                                  "--policy threshold:16)")
