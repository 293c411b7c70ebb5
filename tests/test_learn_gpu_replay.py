"""control/policy/learn.py replayed on the counters a real H200 gave it (data/gpu-runs/, 2026-12-01).

``spectower control auto --policy learn`` ran for 10 minutes under a day-shaped load (``bench load
--pattern day --period 600s --max-concurrency 64``) on an SGLang 0.5.17 + EAGLE-3 server with spectower's
plugin, starting with the ceiling at 0. It moved 0 -> 2 after 48 s and then held 2 for nine minutes: every
move up waited for a thin bin (3, 4, 6, ... measured in both modes, but in fewer than MIN_INTERVALS
intervals) that a load passing through it quickly never gave its intervals, while every bin measured, 1 to
64, paid 1.1-2.2x. It served 0.766 of the best fixed choice per load level.

The policy persisted the counters snapshots it kept (one per ``sample_s``, the whole run: the window is 30
minutes) in the run's database (``policy_state``): fed back one at a time, they are exactly what it saw (the
policy before the fix repeats the run's log line for line; the replay's first set is checked against the
recorded one).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from spectower.control.policy import Decision

from tests.learn_replay import recorded_run
from tests.learn_replay import replay as replay_run

RUN = Path(__file__).resolve().parents[1] / "data" / "gpu-runs" / "h200x2-8b-pair-triton-policies-2026-12-01"
SERVER = "http://127.0.0.1:30010"


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[tuple[float, dict[str, Any]]], float]:
    """The snapshots the policy kept, oldest first, and when its one recorded set (0 -> 2) happened."""
    run = recorded_run(RUN / "b-off-learn" / "policy.db", SERVER, tmp_path_factory.mktemp("learn-replay"),
                       ("set",))  # fmt: skip
    sets = run.events["set"]
    assert len(sets) == 1 and (sets[0].old_max_bs, sets[0].new_max_bs) == (0, 2)
    snapshots = run.snapshots
    assert len(snapshots) == 38 and snapshots[-1][0] - snapshots[0][0] > 580  # the ten minutes
    return snapshots, sets[0].ts


def replay(
    snapshots: list[tuple[float, dict[str, Any]]], **options: Any
) -> list[tuple[float, int, Decision]]:
    """(seconds into the run, the knob it decided on, the decision) per kept snapshot; the knob follows the
    decisions, as the runner's read-back did (the counters stay the recorded ones: ceiling 2 after 48 s)."""
    t0 = snapshots[0][0]
    return [(ts - t0, knob, d) for ts, knob, d in replay_run(snapshots, knob=0, **options)]


def test_learn_moves_past_ceiling_2_once_its_dwell_allows(recorded: tuple[list[Any], float]) -> None:
    """The recorded run held ceiling 2 from 48 s to the end, each hold saying a thin bin had no interval
    yet. Replayed: from 3.5 minutes in it wants every bin up to 32, then 48, drafted, the dwell after its
    first move (300 s) is all that holds it, and it sets 48 at the first sample past that dwell (5:52)."""
    snapshots, set_ts = recorded
    decisions = replay(snapshots)
    moves = [(t, knob, d.max_bs) for t, knob, d in decisions if d.max_bs is not None]
    # the replay is the run: its first move is the recorded one (02:25:40, 48 s in)
    assert moves[0][1:] == (0, 2) and abs(snapshots[0][0] + moves[0][0] - set_ts) < 2, moves
    thin = [(t, d.reason) for t, _, d in decisions if "no interval yet" in d.reason]
    assert thin == []
    assert [m[1:] for m in moves[:2]] == [(0, 2), (2, 48)], moves
    first, second = moves[0][0], moves[1][0]
    assert second <= 360 and second - first < 300 + 16  # 16 s: the samples the policy kept
    wants = [(t, d.reason) for t, _, d in decisions if "would move the ceiling 2 ->" in d.reason]
    assert wants and wants[0][0] <= 210 and all("change limit" in r for _, r in wants), wants


def test_without_the_dwell_learn_drafts_up_to_32_at_three_and_a_half_minutes(
    recorded: tuple[list[Any], float],
) -> None:
    """The thin-bin rule alone (no change limit): 0 -> 2 at 48 s, 2 -> 32 at 3:28 (bin 32 measured: 1.58x;
    the thin bins 3-24 below it go with it), 32 -> 48 at 3:44. What the replay decides after that is not
    what a server at 48 would have shown it: the counters stay those recorded under ceiling 2, and learn
    reads a bin its ceiling drafts by all its steps there, drafted and gated (``as_choices``), so the
    recorded gated steps of bins 3-48 read as what drafting them served (it moves 48 -> 24 at 5:52)."""
    snapshots, _ = recorded
    moves = [
        (round(t), knob, d.max_bs) for t, knob, d in replay(snapshots, min_dwell_s=0) if d.max_bs is not None
    ]
    assert [m[1:] for m in moves[:3]] == [(0, 2), (2, 32), (32, 48)], moves
    assert moves[1][0] <= 210, moves
