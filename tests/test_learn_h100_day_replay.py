"""control/policy/learn.py replayed on the counters an H100 gave it under the 270-s day, and restored from
them (data/gpu-runs/h100-8b-pair-triton-learn-day-2026-12-07, seventeenth session).

The run: SGLang 0.5.17 + EAGLE-3 (the fixed-share 0.5 pair, triton) with plugin 0.4.16 on a fresh server,
``spectower control auto --policy learn --dwell 60s`` from ceiling 24 with nothing known for the stack,
under the 270-s day (closed loop, mixed output lengths, 2 to 64 clients). It held 24 while the load sat at
38 (bin 48, gated), asked for its thin share (0.2) at 21:32:25 UTC once three kept samples held the load
there, and moved 24 -> 48 at 21:33:13. Six minutes later, after always on's runs, a second ``control auto``
from 24 restored that state: its own counters of the last window decided at its first decision (24 -> 48
at 21:41:04, 8 s after it started), where the warm start from the stored counters said 64. Fed back one
at a time, the snapshots it kept are what it saw: the replay asks and moves where the run did, and a
policy restored from the first run's state moves at the second run's first snapshot."""

from __future__ import annotations

import calendar
import time
from pathlib import Path
from typing import Any

import pytest
from spectower.control.policy import Observation, make_policy
from spectower.control.policy.learn_share import DEFAULT_THIN_SHARE

from tests.learn_replay import MRR, recorded_run
from tests.learn_replay import replay as replay_run

RUN = Path(__file__).resolve().parents[1] / "data" / "gpu-runs" / "h100-8b-pair-triton-learn-day-2026-12-07"
SERVER = "http://127.0.0.1:30000"
SAMPLE_S = 15.0  # the replay decides only at kept snapshots; the run every 2 s


def utc(clock: str) -> float:
    return float(calendar.timegm(time.strptime(f"2026-12-07 {clock}", "%Y-%m-%d %H:%M:%S")))


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Each learn run's snapshots (the second one's state held both, its window being 30 min) and its
    recorded sets."""
    run = recorded_run(RUN / "runs" / "policy.db", SERVER, tmp_path_factory.mktemp("day"), ("set", "explore"))
    gap = utc("21:38:00")  # between the two learn runs: always on's locked runs
    first = [(ts, snap) for ts, snap in run.snapshots if ts < gap]
    second = [(ts, snap) for ts, snap in run.snapshots if ts >= gap]
    sets = sorted(e.ts for e in run.events["set"])
    asks = sorted(e.ts for e in run.events["explore"])
    assert len(first) == 18 and len(second) == 27 and len(sets) == 2, (len(first), len(second), sets)
    return {"first": first, "second": second, "sets": sets, "asks": asks}


def test_the_day_replay_asks_for_the_thin_share_and_moves_where_the_run_did(runs: dict[str, Any]) -> None:
    decisions = replay_run(runs["first"], knob=24, follow_share=True)
    asks = [(ts, d.explore_share) for ts, _, d in decisions if d.explore_share is not None]
    moves = [(ts, d.max_bs) for ts, _, d in decisions if d.max_bs is not None]
    assert asks and asks[0][1] == DEFAULT_THIN_SHARE, asks
    assert abs(asks[0][0] - runs["asks"][0]) <= SAMPLE_S and abs(runs["asks"][0] - utc("21:32:25")) < 1
    assert moves and moves[0][1] == 48, moves
    assert abs(moves[0][0] - runs["sets"][0]) <= SAMPLE_S and abs(runs["sets"][0] - utc("21:33:13")) < 1
    # nothing moved while the load sat at 2-6 clients: every bin seen paid, none above the ceiling measured
    assert all(ts >= runs["asks"][0] - SAMPLE_S for ts, _ in moves)


def test_a_policy_restored_from_the_first_run_decides_at_the_seconds_first_snapshot(
    runs: dict[str, Any],
) -> None:
    first = make_policy("learn", MRR)
    knob = 24
    for ts, counters in runs["first"]:
        decision = first.decide(observation(ts, counters, knob))
        knob = decision.max_bs if decision.max_bs is not None else knob
    restored = make_policy("learn", MRR, initial_ceiling=64)  # the warm start's 64 (the stored counters)
    restored.load_state(first.state())
    ts, counters = runs["second"][0]
    assert restored.own_window(ts) is not None  # type: ignore[attr-defined]
    decision = restored.decide(observation(ts, counters, 24))  # the operator's 24 before the second run
    assert decision.max_bs == 48, decision  # twice the ceiling, not the warm start's 64
    assert decision.reason.endswith("warm start not used: counters of its own from the last window were "
                                    "restored"), decision.reason  # fmt: skip
    assert abs(ts - runs["sets"][1]) <= SAMPLE_S and abs(runs["sets"][1] - utc("21:41:04")) < 1


def observation(ts: float, counters: dict[str, Any], knob: int) -> Observation:
    return Observation(ts=ts, num_running_reqs=0.0, num_queue_reqs=0.0, output_tok_s=None,
                       accept_length=None, spec_max_bs=knob, max_running_requests=MRR, stale=False,
                       counters=counters)  # fmt: skip
