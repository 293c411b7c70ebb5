"""learn quiets exploration while its estimate is decisive where the load is (control/policy/learn.py,
item 6), and asks for its normal share again as soon as a busy bin is undecided; the harness charges it
what it explores.

Driven by the constructed counters stream of tests/test_control_policy_learn.py, with a server whose
exploration share follows what the policy asks (and reads back), and by the virtual-time harness.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from spectower.control.policy import Decision, Observation, PolicyError, make_policy
from spectower.control.policy.learn import PENDING_WAITS
from spectower.plugin.knob_contract import DEFAULT_EXPLORE_SHARE
from spectower.simulator.harness import HarnessConfig, simulate
from spectower.simulator.open_loop import simulate_open_loop
from spectower.simulator.profile import load_profile
from spectower.simulator.traces import load_trace
from spectower.storage.request_traces import Arrival

from tests.test_control_policy_learn import BINS, INTERVAL_S, MRR, CounterStream
from tests.test_open_loop import _profile

# quieting alone: a thin share equal to the default is none (the thin share: tests/test_learn_thin_share.py)
QUIET_ONLY = {"thin_share": DEFAULT_EXPLORE_SHARE}
# bin 12 breaks even (its interval straddles 1 for ever); 2 clearly pays, 32 clearly loses
SPEEDUPS = {**dict.fromkeys(BINS, 1.0), 1: 1.4, 2: 1.3, 32: 0.8, 64: 0.7}
DECISIVE = {2: 0.5, 32: 0.5}
WITH_UNDECIDED = {2: 0.4, 12: 0.2, 32: 0.4}


class Server:
    """The knob and the exploration share a server applies (the share only when ``applies``), read back."""

    def __init__(self, stream: CounterStream, knob: int = 12, applies: bool = True) -> None:
        self.stream, self.knob, self.applies, self.t = stream, knob, applies, 0.0
        self.asks: list[tuple[float, Decision]] = []

    def run(self, policy: Any, seconds: float, weights: dict[int, float]) -> list[Decision]:
        self.stream.weights = weights
        decisions = []
        end = self.t + seconds
        while self.t < end:
            self.t += INTERVAL_S
            counters = self.stream.advance(INTERVAL_S, self.knob)
            obs = Observation(ts=self.t, num_running_reqs=10.0, num_queue_reqs=0.0, output_tok_s=1000.0,
                              accept_length=2.5, spec_max_bs=self.knob, max_running_requests=MRR, stale=False,
                              counters=counters, explore_share=self.stream.share)  # fmt: skip
            decision = policy.decide(obs)
            decisions.append(decision)
            if decision.max_bs is not None:
                self.knob = decision.max_bs
            if decision.explore_share is not None:
                self.asks.append((self.t, decision))
                if self.applies:
                    self.stream.share = decision.explore_share
        return decisions


def test_quiets_after_decisive_holds_and_wakes_when_a_busy_bin_turns_undecided() -> None:
    policy = make_policy("learn", MRR, **QUIET_ONLY)
    server = Server(CounterStream(SPEEDUPS, weights=WITH_UNDECIDED))
    server.run(policy, 900, WITH_UNDECIDED)  # bin 12 busy and undecided: exploring stays at its default
    assert server.asks == [] and server.stream.share == DEFAULT_EXPLORE_SHARE
    assert "within what the crossover allows" in policy.last_reason  # type: ignore[attr-defined]

    left_12 = server.t
    server.run(policy, 600, DECISIVE)  # only bins 2 and 32 busy: both decided
    ((t, quiet),) = server.asks  # asked once, and only on the change
    assert quiet.explore_share == 0.005 and quiet.max_bs is None
    assert t - left_12 >= 120  # quiet_after_s of decisive holds first
    assert quiet.reason.startswith("explore share 0.02 -> 0.005: bins 2-32 decided for 1")
    assert "hold: ceiling" in quiet.reason and server.stream.share == 0.005

    back_to_12 = server.t
    server.run(policy, 300, WITH_UNDECIDED)  # the load is back in bin 12: undecided again
    (t, wake) = server.asks[1]
    assert len(server.asks) == 2 and wake.explore_share == DEFAULT_EXPLORE_SHARE
    assert t - back_to_12 <= 15 + INTERVAL_S  # at the next kept sample
    assert wake.reason.startswith("explore share 0.005 -> 0.02: bin 12 undecided (")
    assert server.stream.share == DEFAULT_EXPLORE_SHARE


def test_options_set_the_shares_and_the_wait_and_equal_shares_never_quiet() -> None:
    policy = make_policy("learn", MRR, quiet_share=0.001, quiet_after_s=300, explore_share=0.05,
                         thin_share=0.05)  # fmt: skip
    server = Server(CounterStream(SPEEDUPS, weights=DECISIVE, share=0.05))
    server.run(policy, 1200, DECISIVE)
    ((t, quiet),) = server.asks
    assert quiet.explore_share == 0.001 and t >= 300
    assert quiet.reason.startswith("explore share 0.05 -> 0.001")

    never = make_policy("learn", MRR, quiet_share=DEFAULT_EXPLORE_SHARE, **QUIET_ONLY)
    server = Server(CounterStream(SPEEDUPS, weights=DECISIVE))
    server.run(never, 1200, DECISIVE)
    assert server.asks == []


def test_a_share_that_never_reads_back_is_asked_again_not_every_decision() -> None:
    policy = make_policy("learn", MRR, **QUIET_ONLY)
    server = Server(CounterStream(SPEEDUPS, weights=DECISIVE), applies=False)
    decisions = server.run(policy, 900, DECISIVE)
    first = server.asks[0][0]
    times = [t for t, _ in server.asks]
    assert len(times) >= 2
    assert all(b - a >= (PENDING_WAITS + 1) * INTERVAL_S for a, b in itertools.pairwise(times))
    assert all(d.explore_share in (None, 0.005) for d in decisions) and first >= 120


def test_what_was_asked_persists_so_a_restart_does_not_ask_again() -> None:
    policy = make_policy("learn", MRR, **QUIET_ONLY)
    server = Server(CounterStream(SPEEDUPS, weights=DECISIVE))
    server.run(policy, 600, DECISIVE)
    assert [d.explore_share for _, d in server.asks] == [0.005]
    saved = json.loads(json.dumps(policy.state()))
    assert (saved["explore_share_asked"], saved["explore_share_confirmed"]) == (0.005, True)
    restored = make_policy("learn", MRR, **QUIET_ONLY)
    restored.load_state(saved)
    assert restored.state() == saved
    server.run(restored, 300, DECISIVE)
    assert len(server.asks) == 1  # quiet already, and the server says so


@pytest.mark.parametrize(
    "options, field",
    [
        ({"quiet_share": 0.3}, "'quiet_share' must be a number in 0..0.2"),
        ({"explore_share": -0.1}, "'explore_share' must be a non-negative number"),
        ({"quiet_share": 0.05}, "'quiet_share' must be at most 'explore_share'"),
        ({"quiet_after_s": "soon"}, "'quiet_after_s' must be a non-negative number"),
    ],
)
def test_bad_quieting_options_are_refused_naming_them(options: dict[str, Any], field: str) -> None:
    with pytest.raises(PolicyError, match=field):
        make_policy("learn", MRR, **options)


def test_a_bad_saved_share_is_refused_naming_it() -> None:
    policy = make_policy("learn", MRR, **QUIET_ONLY)
    with pytest.raises(PolicyError, match="explore_share_asked"):
        policy.load_state({"policy": "learn", "version": 2, "explore_share_asked": 0.9})


def test_in_the_harness_quieting_spends_less_on_exploring_on_a_shipped_profile() -> None:
    """An hour of the day trace on the H200 triton profile: learn quiets where its estimate is decisive and
    its server spends less on exploring than learn that never quiets (the same ceilings otherwise)."""
    profile = load_profile("h200-8b-pair-triton")
    trace = load_trace("day", duration_s=3600, seed=0, max_running_requests=profile.max_running_requests)
    mrr = profile.max_running_requests
    loud = simulate(profile, trace, make_policy("learn", mrr, quiet_share=DEFAULT_EXPLORE_SHARE), seed=0)
    quiet = simulate(profile, trace, make_policy("learn", mrr), seed=0, keep_timeline=True)
    assert any(row["share"] == 0.005 for row in quiet.timeline)
    assert quiet.policy_explore_cost < 0.8 * loud.policy_explore_cost, (quiet.policy_explore_cost,
                                                                         loud.policy_explore_cost)
    assert quiet.efficiency_vs_best >= loud.efficiency_vs_best - 0.002
    assert quiet.oracle_tokens == pytest.approx(loud.oracle_tokens)  # the oracle keeps the configured share


class SharePolicy:
    """Holds the ceiling where the launch put it and asks for ``share`` at its first decision."""

    name = "share"

    def __init__(self, share: float | None) -> None:
        self.share = share
        self.seen: list[float | None] = []

    def decide(self, obs: Observation) -> Decision:
        self.seen.append(obs.explore_share)
        return Decision(None, "hold", explore_share=self.share if len(self.seen) == 1 else None)

    def state(self) -> dict[str, Any]:
        return {}

    def load_state(self, state: dict[str, Any]) -> None:
        pass


def test_the_open_loop_evaluator_applies_and_reads_back_a_policys_share() -> None:
    """Drafting pays at 1-2 running: a server told to explore 20 % (gating a fifth of those batches) serves
    its requests later than one that explores nothing, and the policy reads the share back."""
    profile = _profile()
    arrivals = [Arrival(0.5 * i, 100, 200, i) for i in range(40)]  # about one running at a time
    config = HarnessConfig(explore_share=0.0)
    runs = {}
    for share in (None, 0.2):
        policy = SharePolicy(share)
        runs[share] = simulate_open_loop(profile, arrivals, policy, trace_name="t", config=config)
        assert policy.seen[0] == 0.0 and policy.seen[-1] == (share or 0.0)
    quiet, loud = (sum(o.e2e_s or 0.0 for o in runs[s].outcomes) for s in (None, 0.2))
    assert loud > 1.02 * quiet, (quiet, loud)
