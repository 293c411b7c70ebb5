"""control/policy/learn.py replayed on the counters real GPUs gave it with its thin share on (data/gpu-runs/,
2026-12-07): the live runs of control/policy/learn_share.py's thin share.

Each run: an SGLang 0.5.17 + EAGLE-3 server with spectower's plugin 0.4.16 under a closed-loop load held at
one level (mixed output lengths), a fresh server (no stored intervals of the load), ``spectower control auto
--policy learn`` from ceiling 24. It asked for an exploration share of 0.2 once three kept samples held the
load in a bin the ceiling gates with no interval there, and moved up when that bin had its intervals, the
share back to 0.02 in the same decision: on the H200 (fourteenth session) under 32, 24 -> 32 112 s after the
ask; on an H100 (fifteenth session) under 48, 24 -> 48 64 s after it (within twice the ceiling, where the
thin share asks since that session). The policy persisted the snapshots it kept (one per ``sample_s``);
fed back one at a time they are what it saw: the replay asks and moves where the run did. (A replay cannot
show what the share bought: the recorded windows came as the run's share brought them.)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from spectower.control.policy import Decision
from spectower.control.policy.learn_share import DEFAULT_THIN_SHARE
from spectower.plugin.knob_contract import DEFAULT_EXPLORE_SHARE

from tests.learn_replay import recorded_run
from tests.learn_replay import replay as replay_run

RUNS = Path(__file__).resolve().parents[1] / "data" / "gpu-runs"
SERVER = "http://127.0.0.1:30000"
# run folder, the ceiling learn moved to, the explore asks it made (the H100's run quieted after the move)
RUNS_RECORDED = {
    "h200-at-32": ("h200-8b-pair-triton-learn-thin-share-2026-12-07", 32, 2),
    "h100-at-48": ("h100-8b-pair-triton-learn-thin-share-48-2026-12-07", 48, 3),
}


@pytest.fixture(scope="module", params=sorted(RUNS_RECORDED))
def recorded(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    folder, target, n_asks = RUNS_RECORDED[request.param]
    run = recorded_run(RUNS / folder / "runs" / "policy.db", SERVER, tmp_path_factory.mktemp("thin"),
                       ("set", "explore"))  # fmt: skip
    sets, asks = run.events["set"], run.events["explore"]
    assert len(sets) == 1 and len(asks) == n_asks
    return {"snapshots": run.snapshots, "set": sets[0], "asks": sorted(a.ts for a in asks), "target": target}


def replay(snapshots: list[tuple[float, dict[str, Any]]]) -> list[tuple[float, Decision]]:
    """(unix time, decision) per kept snapshot; the knob and the share follow the decisions."""
    return [(ts, d) for ts, _, d in replay_run(snapshots, knob=24, follow_share=True)]


def test_the_replay_asks_for_the_thin_share_and_moves_where_the_run_did(recorded: dict[str, Any]) -> None:
    decisions = replay(recorded["snapshots"])
    asks = [(ts, d.explore_share) for ts, d in decisions if d.explore_share is not None]
    moves = [(ts, d.max_bs) for ts, d in decisions if d.max_bs is not None]
    assert [share for _, share in asks[:2]] == [DEFAULT_THIN_SHARE, DEFAULT_EXPLORE_SHARE], asks
    assert moves and moves[0][1] == recorded["target"], moves
    sample_s = 15.0  # the replay decides only at kept snapshots; the run every 2 s
    assert abs(asks[0][0] - recorded["asks"][0]) <= sample_s, (asks, recorded["asks"])
    assert abs(moves[0][0] - recorded["set"].ts) <= sample_s and asks[1][0] == moves[0][0]
    said = next(d.reason for ts, d in decisions if ts == asks[0][0])
    assert "a bin the ceiling gates: its windows more often" in said, said
