"""control/policy/learn.py replayed on the counters a real H100 gave it (data/gpu-runs/, 2026-12-07), with
and without the stored history its warm start hands over (control/warm_start.py, ``learn_history``).

The run: an SGLang 0.5.17 + EAGLE-3 server with spectower's plugin under a closed-loop load held at 48
(`bench load --pattern steps:48`, mixed output lengths); a minute of always on under an operator's lock, then
``spectower control auto --policy learn`` from ceiling 24 for 480 s, the collector storing the counters every
5 s. Drafting served 1.11x gating at 48 there (always on 6 062 tok/s of step time, learn's gated 5 448). Learn
held at 24 for 432 s, "counters too thin", until the third exploring part had drafted bin 48 (the parts come
about three minutes apart), then moved 24 -> 48. The minute of always on before it was in the same database.

The policy persisted the snapshots it kept (one per ``sample_s``); fed back one at a time, they are what it
saw. The knob follows the replay's decisions; the counters stay the recorded ones, so only the first move is
the run's to compare (after it the recorded gated steps read as what a ceiling of 48 served).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from spectower.control.policy import Decision
from spectower.plugin.knob_contract import DEFAULT_EXPLORE_SHARE

from tests.learn_replay import MRR, recorded_run, warm_start_at
from tests.learn_replay import replay as replay_run

RUNS = Path(__file__).resolve().parents[1] / "data" / "gpu-runs"
RUN = RUNS / "h100-8b-pair-triton-learn-kept-cost-2026-12-07"
SERVER = "http://127.0.0.1:30000"
START_KNOB = 24


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The snapshots learn kept, its recorded set, and what the warm start finds at learn's start."""
    run = recorded_run(RUN / "runs" / "policy.db", SERVER, tmp_path_factory.mktemp("h100-history"),
                       ("auto-start", "set"))  # fmt: skip
    started, sets = run.events["auto-start"], run.events["set"]
    assert len(started) == 1 and len(sets) == 1
    warm = warm_start_at(run, SERVER, "NVIDIA H100 80GB HBM3", started[0].ts, START_KNOB)
    snapshots = run.snapshots
    assert len(snapshots) == 31 and snapshots[-1][0] - snapshots[0][0] > 470  # the whole run
    return {"snapshots": snapshots, "set": sets[0], "warm": warm}


def replay(
    snapshots: list[tuple[float, dict[str, Any]]], **options: Any
) -> list[tuple[float, int, Decision]]:
    """(seconds into the run, the knob, the decision) per kept snapshot; the knob follows the decisions.
    Without the thin share (control/policy/learn_share.py): the run's learn had none, and recorded counters
    cannot answer the windows it would ask for."""
    t0 = snapshots[0][0]
    decided = replay_run(snapshots, knob=START_KNOB, thin_share=DEFAULT_EXPLORE_SHARE, **options)
    return [(ts - t0, knob, d) for ts, knob, d in decided]


def first_move(decisions: list[tuple[float, int, Decision]]) -> tuple[float, int, int]:
    return next((t, knob, d.max_bs) for t, knob, d in decisions if d.max_bs is not None)


def test_the_warm_start_finds_always_ons_minute_and_hands_it_over(recorded: dict[str, Any]) -> None:
    """At learn's start the database held the locked minute of always on: no bin in both modes, so no
    ceiling from it, but its prefill cost (what the run's line said) and now its intervals, at the knob
    the collector stored beside them (64: every bin drafted)."""
    warm = recorded["warm"]
    assert warm.ceiling is None and warm.line.startswith("warm start: nothing known for this stack")
    assert "prefills a token as this server's stored counters measured them: drafted 0.0211 ms" in warm.line
    assert len(warm.history) == 12 and {h["learn_ceiling"] for h in warm.history} == {MRR}
    assert "; learn's window starts with the 12 stored intervals of 09:17:" in warm.line


def test_as_run_learn_waits_seven_minutes_for_three_exploring_parts(recorded: dict[str, Any]) -> None:
    """Without the history the replay is the run: it holds at 24 until 432 s, then moves 24 -> 48 at the
    recorded time, every hold before saying how far bin 48 is from an interval."""
    snapshots, recorded_set = recorded["snapshots"], recorded["set"]
    decisions = replay(snapshots, prefill_costs=recorded["warm"].prefill_costs)
    t, knob, to = first_move(decisions)
    assert (knob, to) == (START_KNOB, 48) and abs(snapshots[0][0] + t - recorded_set.ts) < 2, (t, knob, to)
    assert 420 <= t <= 440
    holds = [d.reason for s, _, d in decisions if 0 < s < t]
    assert holds and all(r.startswith("hold: counters too thin") for r in holds)
    assert "(bin 48: drafted in 2 intervals, gated in " in holds[-1], holds[-1]


def test_with_the_stored_minute_learn_drafts_48_within_a_minute(recorded: dict[str, Any]) -> None:
    """With the warm start's history (the minute of always on before it) the gated intervals it measures
    itself decide bin 48 as soon as they are three: it moves 24 -> 48 after 48 s, not 432 s, reading the
    same 1.1x drafting served there."""
    warm = recorded["warm"]
    decisions = replay(recorded["snapshots"], prefill_costs=warm.prefill_costs, history=warm.history)
    t, knob, to = first_move(decisions)
    assert (knob, to) == (START_KNOB, 48) and t <= 64, (t, knob, to)
    reason = next(d.reason for s, _, d in decisions if s == t)
    assert reason.startswith("move the ceiling 24 -> 48: crossover > 48 (pays at every load seen)")
    assert "speedup per bin 48: 1.1" in reason
