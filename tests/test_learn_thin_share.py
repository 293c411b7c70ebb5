"""learn's thin share (control/policy/learn_share.py): while the load sits in a bin the ceiling gates that has
no interval yet, learn asks for a larger exploration share, and the plugin's windows come more often
(plugin 0.4.16, plugin/explore.py ``WINDOW_BASE_PERIOD``).

Driven against the plugin's own gate (plugin/gate.py: its windows, with a clock) and counters
(plugin/engine_counters.py) in virtual time: a closed loop of 48 requests, a gated step of 20 ms, drafting
that serves 1.11x (what always on served at 48 on an H100, 2026-12-07), learn from a ceiling of 24. Without
the thin share bin 48 measures drafting only in the gate's windows, one interval per window, and learn
waits for three of them (432 s on that H100; 1 015 s here, where a drafted step costs 2.7 gated ones and the
cold part's clock stretches it to match); with it, the windows come ten times as often.
"""

from __future__ import annotations

from typing import Any

import pytest
from spectower.control.policy import Observation, PolicyError, make_policy
from spectower.control.policy.learn_share import DEFAULT_THIN_MAX_S, DEFAULT_THIN_SHARE
from spectower.plugin.engine_counters import EngineCounters
from spectower.plugin.gate import Gate
from spectower.plugin.knob_contract import DEFAULT_EXPLORE_SHARE

from tests.test_control_policy_learn import FALLING, INTERVAL_S, CounterStream, observe

MRR = 64
GATED_STEP_S = 0.02
ACCEPT = 3.0
SPEEDUP = 1.11
DECISION_S = 5.0


class VirtualServer:
    """One rank at a held batch: the plugin's gate decides each decode batch (runs, windows), its counters
    count it; a drafted step serves ``ACCEPT`` tokens a request in ``ACCEPT / speedup`` gated steps' time."""

    def __init__(self, ceiling: int, batch: int = 48, speedup: float = SPEEDUP) -> None:
        self.now = 0.0
        self.batch, self.speedup = batch, speedup
        self.gate = Gate(explore_share=DEFAULT_EXPLORE_SHARE, clock=lambda: self.now)
        self.gate.set_ceiling(ceiling)
        self.knob = ceiling
        self.counters = EngineCounters(MRR, clock=lambda: self.now, clock_name="model")
        self.moves: list[tuple[float, int]] = []
        self.shares: list[tuple[float, float]] = []

    def run(self, policy: Any, seconds: float) -> None:
        end, decide_at = self.now + seconds, self.now + DECISION_S
        while self.now < end:
            drafted = not self.gate.decide(self.batch)
            plan = self.gate.plan
            tokens = self.batch * (ACCEPT if drafted else 1)
            step = GATED_STEP_S * (ACCEPT / self.speedup if drafted else 1.0)
            kept = None if drafted else plan.phase != "cold"  # a window's warm and exploring parts keep it
            self.counters.record(self.batch, drafted, int(tokens), step, plan.settling, kept)
            self.now += step
            if self.now >= decide_at:
                decide_at += DECISION_S
                self._decide(policy)

    def _decide(self, policy: Any) -> None:
        obs = Observation(ts=self.now, num_running_reqs=float(self.batch), num_queue_reqs=0.0,
                          output_tok_s=1000.0, accept_length=ACCEPT, spec_max_bs=self.knob,
                          max_running_requests=MRR, stale=False, counters=self.counters.snapshot(),
                          explore_share=self.gate.explore_share)  # fmt: skip
        decision = policy.decide(obs)
        if decision.max_bs is not None and decision.max_bs != self.knob:
            self.gate.set_ceiling(decision.max_bs)
            self.knob = decision.max_bs
            self.moves.append((self.now, decision.max_bs))
        if decision.explore_share is not None:
            self.gate.set_explore_share(decision.explore_share)
            self.shares.append((self.now, decision.explore_share))


def _first_move(thin_share: float, seconds: float = 600.0) -> tuple[VirtualServer, Any]:
    policy = make_policy("learn", MRR, thin_share=thin_share)
    server = VirtualServer(ceiling=24)
    server.run(policy, seconds)
    return server, policy


def test_a_thin_gated_bin_brings_the_windows_and_learn_moves_within_minutes_not_a_quarter_hour() -> None:
    thin, _ = _first_move(DEFAULT_THIN_SHARE)
    plain, _ = _first_move(DEFAULT_EXPLORE_SHARE, seconds=1200)  # a thin share equal to the default: none
    # 24 -> 48: bin 48 pays (a move up goes at most to twice the ceiling)
    first = [m for _, m in thin.moves[:1]], [m for _, m in plain.moves[:1]]
    assert first == ([48], [48]), (thin.moves, plain.moves)
    assert thin.moves[0][0] <= 180 and plain.moves[0][0] >= 900, (thin.moves, plain.moves)
    # asked once three intervals (kept samples 15 s apart) show the load held in bin 48, thin, and the default
    # again once it moved
    assert thin.shares[0][1] == DEFAULT_THIN_SHARE and thin.shares[0][0] <= 65, thin.shares
    assert thin.shares[1][1] == DEFAULT_EXPLORE_SHARE and thin.shares[1][0] <= thin.moves[0][0] + DECISION_S
    assert plain.shares == [] or all(share <= DEFAULT_EXPLORE_SHARE for _, share in plain.shares)


def test_a_spell_ends_after_thin_max_s_where_the_windows_never_measure_the_load() -> None:
    """A bin whose drafting no window measures (the constructed stream explores none of bin 48, within
    the stream's limit of a ceiling of 24: as where every window yields to a full server): the larger share
    lasts ``thin_max_s`` and the default comes back; the spell starts again only after the bin was measured
    or left."""
    stream = CounterStream(FALLING, weights={48: 1.0})
    stream.shares[48] = 0.0
    policy = make_policy("learn", MRR, thin_max_s=60)
    asks = []
    for i in range(1, 40):
        decision = policy.decide(observe(i * INTERVAL_S, 24, stream.advance(INTERVAL_S, 24)))
        if decision.explore_share is not None:
            asks.append((i * INTERVAL_S, decision.explore_share, decision.reason))
    assert [share for _, share, _ in asks] == [DEFAULT_THIN_SHARE, DEFAULT_EXPLORE_SHARE], asks
    assert "a bin the ceiling gates: its windows more often" in asks[0][2], asks[0][2]
    assert 60 <= asks[1][0] - asks[0][0] <= 60 + INTERVAL_S, asks


def test_the_thin_share_must_be_at_least_the_default_and_a_share_the_contract_allows() -> None:
    with pytest.raises(PolicyError, match="'thin_share' must be at least 'explore_share'"):
        make_policy("learn", MRR, thin_share=0.01)
    with pytest.raises(PolicyError, match=r"'thin_share' must be a number in 0\.\.0\.2"):
        make_policy("learn", MRR, thin_share=0.5)
    with pytest.raises(PolicyError, match="'thin_max_s' must be a non-negative number"):
        make_policy("learn", MRR, thin_max_s="long")
    assert DEFAULT_THIN_MAX_S == 300


@pytest.mark.parametrize("speedup_16, asks", [(0.9, False), (1.2, True)])
def test_above_a_bin_where_drafting_loses_a_thin_bin_keeps_the_usual_pace(
    speedup_16: float, asks: bool
) -> None:
    """The load held in bins 16 and 24 under a ceiling of 12; bin 24's drafting is never measured (the
    stream explores none of it), bin 16's is. Where bin 16 loses, bin 24 (larger batches) most likely loses
    too: no thin share (under Azure's replay in the simulator hurrying such bins cost 5 % of the median
    end-to-end latency). Where bin 16 pays, a move up is possible and the thin share hurries bin 24."""
    stream = CounterStream({**FALLING, 16: speedup_16, 24: 1.1}, weights={16: 0.5, 24: 0.5})
    stream.shares[24] = 0.0
    policy = make_policy("learn", MRR)
    shares = []
    for i in range(1, 25):
        decision = policy.decide(observe(i * INTERVAL_S, 12, stream.advance(INTERVAL_S, 12)))
        if decision.explore_share is not None:
            shares.append(decision.explore_share)
    assert (DEFAULT_THIN_SHARE in shares) is asks, shares


def test_above_the_streams_limit_a_thin_bin_keeps_the_usual_pace() -> None:
    """The load held at 48 under a ceiling of 16: above the exploring stream's limit (twice the ceiling,
    plugin/explore.py ``stream_limit``), where a window's exploring part drafts nothing until a part met the
    load, and a move up goes at most to 32 whatever bin 48 reads. The thin share would buy windows at 0.2 of
    the batches for nothing a move could use: learn keeps the default (in the simulator it cost a warm start
    at 16 on the H200 early pair 2.2 % of threshold:16's tokens under the 270-s day)."""
    policy = make_policy("learn", MRR)
    server = VirtualServer(ceiling=16)
    server.run(policy, 300)
    assert all(share <= DEFAULT_EXPLORE_SHARE for _, share in server.shares), server.shares
