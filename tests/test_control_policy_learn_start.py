"""control/policy/learn_start.py: what the warm start hands learn, checked; which stored intervals open its
window. Learn's behaviour with them: tests/test_control_policy_learn.py, test_learn_h100_history_replay.py."""

from __future__ import annotations

from typing import Any

import pytest
from spectower.control.policy import PolicyError
from spectower.control.policy.learn_start import checked_costs, checked_history, in_window


def interval(ts: float, res_s: int = 0) -> dict[str, Any]:
    cells = {"steps": [1], "tokens": [10], "time_s": [0.01]}
    return {"ts": ts, "res_s": res_s, "bins": [1], "drafted": cells, "gated": cells, "learn_ceiling": 64}


def test_an_interval_counts_only_within_the_window_and_before_the_policys_first_snapshot() -> None:
    """Raw intervals end at their ``ts``; a rollup bucket's ``ts`` is its start, so one that began before
    the policy's first snapshot but ends after it would overlap the policy's own first interval."""
    history = checked_history([interval(500.0), interval(100.0), interval(990.0), interval(960.0, res_s=60)])
    assert [h["ts"] for h in history] == [100.0, 500.0, 960.0, 990.0]  # oldest first
    kept = in_window(history, start=200.0, first=1000.0)
    assert [(h["ts"], h["res_s"]) for h in kept] == [(500.0, 0), (990.0, 0)]
    assert in_window(history, start=200.0, first=400.0) == []  # a history from after the policy's start


def test_costs_must_be_a_modes_finite_seconds() -> None:
    assert checked_costs({"drafted": 2e-5}) == {"drafted": 2e-5}
    with pytest.raises(PolicyError, match="'prefill_costs': 'verify' must be a mode of"):
        checked_costs({"verify": 1.0})
    with pytest.raises(PolicyError, match="finite cost >= 0, got nan"):
        checked_costs({"gated": float("nan")})
