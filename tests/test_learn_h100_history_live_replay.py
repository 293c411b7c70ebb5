"""control/policy/learn.py replayed on the counters an H100 gave it when its warm start handed over the stored
minute of always on (data/gpu-runs/h100-8b-pair-triton-learn-history-2026-12-08, eighteenth session).

The run: SGLang 0.5.17 + EAGLE-3 (the fixed-share 0.5 pair, triton) with plugin 0.4.16 on a fresh launch,
a closed-loop load held at 48 (`bench load --pattern steps:48`, mixed output lengths), a minute of always on
under an operator's lock, then ``spectower control auto --policy learn --dwell 60s`` from ceiling 24 with
nothing known for the stack. The warm start found the collector's 11 intervals of that minute and handed
them over (``warm_start.learn_history``): learn's window began with 48 drafted, so at its first decision it
asked for its thin share (bin 48 busy and gated, no interval yet), and once its own gated intervals were three
it moved 24 -> 48, 48 s after it started. tests/test_learn_h100_history_replay.py predicted this from the
thirteenth session's run (48 s, where that run, without the history, waited 432 s); this is the same path
live. Fed back one at a time, the snapshots it kept are what it saw.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from spectower.control.policy.learn_share import DEFAULT_THIN_SHARE

from tests.learn_replay import MRR, recorded_run, replay, warm_start_at

RUNS = Path(__file__).resolve().parents[1] / "data" / "gpu-runs"
RUN = RUNS / "h100-8b-pair-triton-learn-history-2026-12-08"
SERVER = "http://127.0.0.1:30000"
START_KNOB = 24
SAMPLE_S = 15.0  # the replay decides only at kept snapshots; the run every 2 s


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The snapshots learn kept, its recorded start, set and asks, and what the warm start found then."""
    run = recorded_run(RUN / "runs" / "policy.db", SERVER, tmp_path_factory.mktemp("h100-history-live"),
                       ("auto-start", "set", "explore"))  # fmt: skip
    started, sets = run.events["auto-start"], run.events["set"]
    assert len(started) == 1 and len(sets) == 1
    warm = warm_start_at(run, SERVER, "NVIDIA H100 80GB HBM3", started[0].ts, START_KNOB)
    assert len(run.snapshots) == 27 and run.snapshots[-1][0] - run.snapshots[0][0] > 400  # the whole run
    asks = sorted(e.ts for e in run.events["explore"])
    return {"snapshots": run.snapshots, "start": started[0].ts, "set": sets[0].ts, "asks": asks, "warm": warm}


def decisions(recorded: dict[str, Any], with_history: bool) -> list[tuple[float, int, Any]]:
    """(seconds since learn started, the knob, the decision) per kept snapshot, the knob and the share
    following the decisions, with the warm start's prefill cost and, where asked, its history."""
    warm = recorded["warm"]
    options: dict[str, Any] = {"prefill_costs": warm.prefill_costs}
    if with_history:
        options["history"] = warm.history
    decided = replay(recorded["snapshots"], knob=START_KNOB, follow_share=True, **options)
    return [(ts - recorded["start"], knob, d) for ts, knob, d in decided]


def test_the_warm_start_hands_over_always_ons_minute(recorded: dict[str, Any]) -> None:
    """What the run's line said (runs/auto-learn.log): nothing known for the stack, the drafted prefill cost
    and the minute's 11 intervals, each at the knob the collector stored beside it (64: every bin drafted)."""
    warm = recorded["warm"]
    assert warm.ceiling is None and warm.line.startswith("warm start: nothing known for this stack")
    assert "prefills a token as this server's stored counters measured them: drafted 0.0199 ms" in warm.line
    assert len(warm.history) == 11 and {h["learn_ceiling"] for h in warm.history} == {MRR}
    assert warm.line.endswith("learn's window starts with the 11 stored intervals of 01:38:00-01:38:57 UTC")


def test_with_the_minute_learn_asks_at_once_and_moves_where_the_run_did(recorded: dict[str, Any]) -> None:
    """The minute shows bin 48 busy for more than three kept samples, so the thin share is asked at the first
    decision (the run: 01:39:02, its first); the move 24 -> 48 comes as the run's did, 48 s in, reading
    drafting at 48 1.08x with the tax this server's gated bin measured."""
    decided = decisions(recorded, with_history=True)
    asks = [(t, d.explore_share) for t, _, d in decided if d.explore_share is not None]
    assert asks[0][1] == DEFAULT_THIN_SHARE and asks[0][0] < 1, asks
    assert abs(recorded["asks"][0] - recorded["start"]) < 1
    t, knob, move = next((t, knob, d) for t, knob, d in decided if d.max_bs is not None)
    assert (knob, move.max_bs) == (START_KNOB, 48), (t, knob, move)
    assert abs(recorded["start"] + t - recorded["set"]) <= SAMPLE_S and t <= 64, t
    assert move.reason.startswith("explore share 0.2 -> 0.02: a move 24 -> 48 is wanted; move the ceiling "
                                  "24 -> 48: crossover > 48 (pays at every load seen), speedup per bin 48: "
                                  "1.08x; kept extend 7.9 % measured (bin 48"), move.reason  # fmt: skip


def test_without_the_minute_the_thin_share_waits_for_three_own_samples(recorded: dict[str, Any]) -> None:
    """Whether a bin is busy is the load's, not the policy's, so this part of the counterfactual holds on the
    recorded counters: without the history learn first sees bin 48 busy in three kept samples of its own and
    asks 48 s in, where with it it asked at once."""
    decided = decisions(recorded, with_history=False)
    first_ask = next(t for t, _, d in decided if d.explore_share is not None)
    assert first_ask == pytest.approx(3 * SAMPLE_S, abs=SAMPLE_S / 2), first_ask
    holds = [d.reason for t, _, d in decided if t < first_ask]
    assert holds and all(r.startswith("hold: counters too thin") for r in holds), holds
