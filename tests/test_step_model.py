"""The simulator's step model: step counts between 0 and the launch's, from a profile's two measured ends."""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from spectower.plugin.engine_counters import counter_bins
from spectower.simulator import step_model
from spectower.simulator.profile import Profile, builtin_profile_names, load_profile, parse_profile
from spectower.simulator.traces import load_trace

from benchmarks.simulator_process import curve_profile
from tests.conftest import REPO_ROOT, cli_in_process

# 64 is where on and off cross: 5000 tok/s either way
CROSSING = curve_profile("crossing", [1, 64], {"spec_on": [200.0, 5000.0], "spec_off": [100.0, 5000.0]},
                         max_running_requests=64, accept_length=2.5, served_model_name="test")  # fmt: skip


def _profile(**changes: Any) -> Profile:
    return parse_profile(CROSSING | changes, source="crossing")


@pytest.mark.parametrize("name", builtin_profile_names())
def test_the_ends_are_the_profiles_own_curves(name: str) -> None:
    profile = load_profile(name)
    rows = step_model.step_table(profile)
    assert [r.batch_size for r in rows] == [b for b in counter_bins(profile.max_running_requests)
                                            if b <= profile.max_running_requests]  # fmt: skip
    for row in rows:
        assert len(row.tok_s) == profile.speculative_num_steps + 1
        assert row.tok_s[0] == pytest.approx(profile.output_tok_s(row.batch_size, spec_on=False), rel=1e-9)
        assert row.tok_s[-1] == pytest.approx(profile.output_tok_s(row.batch_size, spec_on=True), rel=1e-9)


@given(alpha=st.floats(0.0, 0.999), steps=st.integers(1, 8))
def test_the_fitted_acceptance_gives_back_the_accept_length(alpha: float, steps: int) -> None:
    accept = step_model.accept_length(alpha, steps)
    fitted = step_model.fit_alpha(accept, steps)
    assert step_model.accept_length(fitted, steps) == pytest.approx(accept, rel=1e-9)


def test_accept_lengths_outside_the_chain_clamp() -> None:
    assert step_model.fit_alpha(1.0, 3) == 0.0 and step_model.fit_alpha(0.5, 3) == 0.0
    assert step_model.fit_alpha(4.0, 3) == 1.0 and step_model.fit_alpha(9.0, 3) == 1.0


def test_where_on_and_off_cross_the_linear_model_has_every_middle_count_beat_both_ends() -> None:
    # Without a fixed share, with equal ends, serve(k)/serve(0) = AL_k / (1 + k (AL_K - 1) / K): the accept
    # length's gain per step falls with k (geometric) while the cost per step is constant, so every k
    # strictly inside wins.
    row = step_model.step_row(_profile(), 64, fixed_share=0.0)
    assert row.tok_s[0] == pytest.approx(row.tok_s[3], rel=1e-9)
    assert all(row.tok_s[k] > row.best_end for k in (1, 2))
    assert row.middle_pays and row.best_middle == row.best_steps
    assert "a middle count beats both ends at B = " in step_model.summary(_profile(), fixed_share=0.0)


@given(share=st.floats(0.0, 1.0), batch=st.sampled_from([1, 8, 64]))
def test_a_larger_fixed_share_never_helps_a_middle_count(share: float, batch: int) -> None:
    # the ends stay the profile's curves; a middle count only pays more of the launch's extra time
    linear = step_model.step_row(_profile(), batch, fixed_share=0.0)
    fixed = step_model.step_row(_profile(), batch, fixed_share=share)
    assert fixed.tok_s[0] == pytest.approx(linear.tok_s[0]) and fixed.tok_s[3] == pytest.approx(
        linear.tok_s[3]
    )
    assert all(fixed.tok_s[k] <= linear.tok_s[k] * (1 + 1e-12) for k in (1, 2))
    # all of it fixed: a middle count costs the launch's time for fewer tokens
    if share == 1.0:
        assert all(fixed.tok_s[k] < fixed.tok_s[3] for k in (1, 2))


MEASURED = REPO_ROOT / "data" / "gpu-runs" / "h200-8b-pair-triton-steps-explore-2026-12-01"


def _measured_middles() -> dict[int, dict[int, float]]:
    """What 1- and 2-step servers served over the 3-step launch on the H200, per level (steps_table.json)."""
    table = json.loads((MEASURED / "3-steps-2" / "steps_table.json").read_text())
    out: dict[int, dict[int, float]] = {}
    for level in table["levels"]:
        serve = level["serve_over_plain"]
        out[int(level["concurrency"])] = {k: serve[str(k)] / serve["3"] for k in (1, 2)}
    return out


def test_the_fixed_share_is_the_one_the_gpu_measured_and_the_model_then_gives_it_back() -> None:
    profile = load_profile(str(MEASURED / "1-sweep" / "profile.json"))  # the same launch's sweep
    measured = _measured_middles()
    assert set(measured) == {4, 16, 32, 48, 64}
    assert step_model.fit_fixed_share(profile, measured) == pytest.approx(
        step_model.DRAFT_FIXED_SHARE, abs=0.02
    )
    for batch, ratios in measured.items():
        row = step_model.step_row(profile, batch)
        for k, ratio in ratios.items():
            assert row.tok_s[k] / row.tok_s[3] == pytest.approx(ratio, abs=0.1), (batch, k)
    # the linear model missed by up to 0.31 (1 step at 64 requests: 1.16 modelled, 0.85 measured)
    linear = step_model.step_row(profile, 64, fixed_share=0.0)
    assert linear.tok_s[1] / linear.tok_s[3] - measured[64][1] > 0.25
    with pytest.raises(ValueError, match="at least one"):
        step_model.fit_fixed_share(profile, {})


def test_free_drafting_makes_the_launch_count_best() -> None:
    # on = off x accept length: a drafted step costs what a gated one does, so each step only adds tokens
    profile = _profile(output_tok_s={"spec_on": [250.0, 12500.0], "spec_off": [100.0, 5000.0]})
    for row in step_model.step_table(profile):
        assert row.best_steps == 3 and list(row.tok_s) == sorted(row.tok_s)
        assert row.middle_gain < 0 and not row.middle_pays
    assert "no middle count beats both ends" in step_model.summary(profile)


def test_a_one_step_launch_has_no_middle_and_a_plain_server_no_rows() -> None:
    one = _profile(speculative_num_steps=1, accept_length=[1.6, 1.6])
    assert all(r.best_middle is None and r.middle_gain == 0.0 for r in step_model.step_table(one))
    assert "no count between 0 and 1" in step_model.summary(one)
    assert step_model.step_table(_profile().without_speculation()) == []


@pytest.fixture
def _wide(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "160")  # one table row per line


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    """``spectower sim steps ARGS`` in this process (a new interpreter each cost 0.5-1 CPU-s)."""
    return cli_in_process("sim", "steps", *args)


def test_sim_steps_prints_the_table_and_json_agrees_with_the_model(_wide: None) -> None:
    name = "h200-8b-pair-triton"
    table = _cli("--profile", name)
    assert table.returncode == 0, table.stderr
    assert "0..3 steps" in table.stdout and "0 off" in table.stdout and "3 on" in table.stdout
    assert step_model.summary(load_profile(name)).split(":")[0] in table.stdout
    out = json.loads(_cli("--profile", name, "--json").stdout)
    rows = step_model.step_table(load_profile(name))
    assert [b["batch_size"] for b in out["bins"]] == [r.batch_size for r in rows]
    assert [b["tok_s"] for b in out["bins"]] == [pytest.approx(list(r.tok_s)) for r in rows]


def test_sim_steps_unknown_profile_is_one_line(_wide: None) -> None:
    bad = _cli("--profile", "no-such-profile")
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert bad.stderr.strip().count("\n") == 0 and "no-such-profile" in bad.stderr


def test_the_best_count_per_batch_size_over_a_load() -> None:
    crossing = _profile()
    at_64 = step_model.step_row(crossing, 64, fixed_share=0.0)
    gain = step_model.best_count_gain(crossing, [64] * 10, fixed_share=0.0)
    assert gain == pytest.approx(max(at_64.tok_s) / at_64.best_end - 1.0, rel=1e-12) and gain > 0
    # a load split between two sizes weighs each by its time
    at_1 = step_model.step_row(crossing, 1, fixed_share=0.0)
    mixed = step_model.best_count_gain(crossing, [1, 64, 64, 0], fixed_share=0.0)
    want = (max(at_1.tok_s) + 2 * max(at_64.tok_s)) / (at_1.best_end + 2 * at_64.best_end) - 1.0
    assert mixed == pytest.approx(want, rel=1e-12)
    free = _profile(output_tok_s={"spec_on": [250.0, 12500.0], "spec_off": [100.0, 5000.0]})
    assert step_model.best_count_gain(free, [1, 8, 64]) == pytest.approx(0.0, abs=1e-12)
    assert step_model.best_count_gain(crossing, []) == 0.0
    assert step_model.best_count_gain(crossing, [0, 0]) == 0.0


def test_sim_steps_over_a_trace_reports_the_best_count_gain(_wide: None) -> None:
    name = "h200-8b-pair-triton"
    profile = load_profile(name)
    out = json.loads(_cli("--profile", name, "--trace", "day", "--json").stdout)
    trace = load_trace("day", max_running_requests=profile.max_running_requests)
    running = [min(round(trace.concurrency_at(float(t))), profile.max_running_requests)
               for t in range(int(trace.duration_s))]  # fmt: skip
    assert out["trace"] == "day"
    assert out["best_count_gain"] == pytest.approx(step_model.best_count_gain(profile, running), rel=1e-9)
    table = _cli("--profile", name, "--trace", "day")
    assert table.returncode == 0 and "Over the day load" in table.stdout, table.stderr
    bad = _cli("--profile", name, "--trace", "no-such-trace")
    assert bad.returncode == 2 and "Traceback" not in bad.stderr and "no-such-trace" in bad.stderr
