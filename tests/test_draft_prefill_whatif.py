"""benchmarks/draft_prefill_whatif.py: what skipping the draft's prefill is worth per plugin version, under
Azure's replayed arrivals in the simulator's open loop (its rule: tests/test_open_loop_draft_prefill.py)."""

from __future__ import annotations

import sys

import pytest

from tests.conftest import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
import draft_prefill_whatif as whatif


def test_a_lock_only_skip_handicaps_a_policy_against_always_off_and_the_gated_rule_lifts_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Near the pair's capacity (rate scale 1): under 0.4.9 always off (a lock) skips every draft prefill and
    threshold:16 none, so its TTFT tail reads longer than always off's; under 0.4.10 it skips where its
    batches are gated and its tail comes back toward always off's. 0.4.8 skips nothing."""
    monkeypatch.chdir(REPO_ROOT)
    profile = "data/profiles/h200-8b-pair-triton.json"
    rows = whatif.run(profile, ["always-off", "threshold:16"], [1.0], 3.0, 120.0)
    skipped = {(r.policy, r.version): r.prefills_skipped for r in rows}
    assert skipped[("always-off", "0.4.8")] == skipped[("threshold:16", "0.4.8")] == 0
    assert skipped[("always-off", "0.4.9")] == 1.0 and skipped[("threshold:16", "0.4.9")] == 0
    assert 0.5 < skipped[("threshold:16", "0.4.10")] < 1.0  # not where its next batch drafts
    ratios = whatif.against_always_off(rows)
    lock_only = ratios[(1.0, "threshold:16", "0.4.9")]["ttft_p99_s"]
    gated_too = ratios[(1.0, "threshold:16", "0.4.10")]["ttft_p99_s"]
    assert lock_only > 1.1 and gated_too < lock_only - 0.1


def test_bad_rate_scales_are_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        whatif.main(["--rate-scales", "0.75,fast"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].endswith("argument --rate-scales: expected numbers separated by commas, got '0.75,fast'")
