"""benchmarks/tax_by_batch_whatif.py: learn under a draft-extend cost that follows the batch, against the
profile's uniform one, in the simulator."""

from __future__ import annotations

import math
import sys

import pytest

from tests.conftest import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
import tax_by_batch_whatif as whatif
from spectower.simulator.profile import load_profile

EARLY = str(REPO_ROOT / "data/profiles/h200-8b-early-pair-triton.json")


def test_the_shortfall_runs_linear_in_log_batch_between_its_points_and_flat_outside() -> None:
    points = whatif.parse_shortfall("48=0.057,16=0.13")  # any order
    assert points == [(16.0, 0.13), (48.0, 0.057)]
    assert whatif.shortfall_at(points, 16) == pytest.approx(0.13)
    assert whatif.shortfall_at(points, 48) == pytest.approx(0.057)
    assert whatif.shortfall_at(points, math.sqrt(16 * 48)) == pytest.approx((0.13 + 0.057) / 2)
    assert whatif.shortfall_at(points, 1) == pytest.approx(0.13) and whatif.shortfall_at(points, 64) == 0.057


def test_the_profile_by_batch_keeps_every_curve_but_the_gated_one_with_the_extend() -> None:
    profile = load_profile(EARLY)
    changed = whatif.by_batch(profile, whatif.parse_shortfall("16=0.13,48=0.057"))
    assert changed.spec_off_tok_s == profile.spec_off_tok_s and changed.spec_on_tok_s == profile.spec_on_tok_s
    at = dict(zip(profile.concurrency, profile.spec_off_tok_s, strict=True))
    warm = dict(zip(profile.concurrency, changed.spec_off_warm_curve, strict=True))
    assert warm[16] == pytest.approx(at[16] * 0.87) and warm[64] == pytest.approx(at[64] * (1 - 0.057))
    assert profile.spec_off_warm_curve != changed.spec_off_warm_curve  # the uniform share before


def test_learn_reads_both_extends_alike_on_the_early_pair(monkeypatch: pytest.MonkeyPatch) -> None:
    """2026-12-06's measured shortfall (13 % at 16, 5.7 % at 48): learn, warm from the crossover, serves
    within half a percent of what it serves under the uniform share, and holds the same ceiling."""
    monkeypatch.chdir(REPO_ROOT)
    rows = whatif.run(EARLY, whatif.parse_shortfall(whatif.DEFAULT_SHORTFALL), [1], 90.0, 60.0)
    uniform, batch = (next(r for r in rows if r["extend"] == name) for name in ("uniform", "by batch"))
    assert 0.9 < uniform["efficiency_vs_best"] <= 1.0
    assert batch["efficiency_vs_best"] == pytest.approx(uniform["efficiency_vs_best"], abs=0.005)
    assert batch["final_max_bs"] == uniform["final_max_bs"]


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (["--shortfall", "16=x"], "--shortfall: expected CONCURRENCY=SHARE[,...], got '16=x'"),
        (["--shortfall", "16=0.6"], "--shortfall: a concurrency >= 1 and a share in [0, 0.5), got '16=0.6'"),
        (["--shortfall", "16=0.1,16=0.2"], "--shortfall: each concurrency once, got '16=0.1,16=0.2'"),
        (["--seeds", "a"], "--seeds: expected whole numbers separated by commas, got 'a'"),
        (["--duration", "1"], "--duration / --dwell: seconds in 10-86400 / 10-3600"),
    ],
)
def test_bad_input_is_one_line_naming_the_option(
    argv: list[str], line: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert whatif.main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.strip().splitlines() == [line]


def test_an_unreadable_profile_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert whatif.main(["--profile", "/nonexistent/profile.json"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("--profile: ")
