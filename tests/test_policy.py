"""The policies: specs, the fixed ones, SGLang's default bands, and the learning policy's behaviour.

The learning policy is driven in a closed loop against a small synthetic server (known on/off curves,
noise, one interval of gauge lag), so these tests need neither the profile module nor the harness.
"""

from __future__ import annotations

import itertools
import json
import math
import random
from collections.abc import Callable, Sequence

import pytest
from spectower.control.policy import Decision, Observation, Policy, PolicyError, make_policy
from spectower.control.policy.learn import PENDING_WAITS, LearnPolicy
from spectower.control.policy.static import sglang_default_ceiling

MRR = 64


def obs(ts: float = 0.0, running: float = 10.0, tok_s: float | None = 1000.0, accept: float | None = 2.5,
        knob: int | None = MRR, stale: bool = False, queued: float = 0.0) -> Observation:
    return Observation(ts=ts, num_running_reqs=running, num_queue_reqs=queued, output_tok_s=tok_s,
                       accept_length=accept, spec_max_bs=knob, max_running_requests=MRR, stale=stale)


# --- specs -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("spec", ["learn", "threshold:30", "threshold:0", "always-on", "always-off",
                                  "sglang-default"])
def test_every_spec_builds_a_policy(spec: str) -> None:
    policy = make_policy(spec, MRR)
    assert isinstance(policy, Policy)
    json.dumps(policy.state())  # JSON-serialisable


@pytest.mark.parametrize("spec", ["", "learning", "threshold", "threshold:", "threshold:-1", "threshold:3.5",
                                  "threshold:abc", "always_on"])
def test_bad_spec_is_a_value_error_naming_it(spec: str) -> None:
    with pytest.raises(ValueError, match=repr(spec).replace("(", r"\(").replace(")", r"\)")
                       .replace("[", r"\[").replace(".", r"\.").replace("$", r"\$")):
        make_policy(spec, MRR)


def test_bad_options_and_max_running_requests() -> None:
    with pytest.raises(PolicyError, match="bogus"):
        make_policy("learn", MRR, bogus=1)
    with pytest.raises(PolicyError, match="min_dwell_s"):
        make_policy("learn", MRR, min_dwell_s=-1)
    with pytest.raises(PolicyError, match="takes no options"):
        make_policy("always-on", MRR, min_dwell_s=3)
    with pytest.raises(PolicyError, match="max_running_requests"):
        make_policy("learn", 0)


# --- fixed policies ----------------------------------------------------------------------------------

def test_threshold_sets_then_holds_and_holds_when_stale() -> None:
    policy = make_policy("threshold:30", MRR)
    assert policy.decide(obs(knob=64)).max_bs == 30
    assert policy.decide(obs(knob=30)).max_bs is None
    stale = policy.decide(obs(knob=64, stale=True))
    assert stale.max_bs is None and "stale" in stale.reason


def test_always_on_and_off() -> None:
    assert make_policy("always-on", MRR).decide(obs(knob=0)).max_bs == MRR
    assert make_policy("always-off", MRR).decide(obs(knob=MRR)).max_bs == 0
    assert make_policy("always-off", MRR).decide(obs(knob=0)).max_bs is None


def test_sglang_default_ceiling_follows_cuda_graph_padding() -> None:
    # spec-decoding CUDA-graph sizes ... 56, 60, 64: 61..64 pad to 64 -> band 64 -> 0 steps
    assert sglang_default_ceiling(64) == 60
    assert sglang_default_ceiling(48) == 48  # never reaches band 64
    assert sglang_default_ceiling(200) == 60


def test_sglang_default_drops_to_band_one_when_acceptance_is_poor() -> None:
    policy = make_policy("sglang-default", MRR)
    assert policy.decide(obs(knob=MRR, running=10, accept=2.5)).max_bs == 60
    decision = Decision(None, "")
    for i in range(40):  # drafts accepted ~0.2 per step: the bands' EMA falls under 0.5
        decision = policy.decide(obs(ts=5.0 * i, knob=60, running=10, accept=1.2))
        if decision.max_bs is not None:
            break
    assert decision.max_bs == 7, decision


# --- the learning policy, in a closed loop -------------------------------------------------------------

class SyntheticServer:
    """Aggregate tok/s off = 100 * c**0.8; on = off * exp(g(c)); g falls with load, zero at ``crossover``.

    The gauge lags one interval after a knob change (the first reading mixes both modes).
    """

    def __init__(self, crossover: float | None, noise_cv: float = 0.03, seed: int = 0, knob: int = MRR,
                 benefit_at_1: float = 0.15) -> None:
        self.crossover = crossover
        self.noise_cv = noise_cv
        self.rng = random.Random(seed)
        self.knob = knob
        self.prev_knob = knob
        self.benefit_at_1 = benefit_at_1

    def g(self, c: float) -> float:
        if self.crossover is None:
            return self.benefit_at_1
        return self.benefit_at_1 * (1 - math.log(c) / math.log(self.crossover))

    def rate(self, c: float, knob: int) -> float:
        off = 100.0 * c**0.8
        return off * math.exp(self.g(c)) if c <= knob else off

    def observe(self, ts: float, c: float) -> Observation:
        rate = self.rate(c, self.knob)
        if self.prev_knob != self.knob:  # the gauge still shows part of the old setting
            rate = 0.5 * rate + 0.5 * self.rate(c, self.prev_knob)
        self.prev_knob = self.knob
        noisy = rate * (1 + self.noise_cv * self.rng.gauss(0, 1))
        accept = 2.5 if c <= self.knob else 1.0
        return obs(ts=ts, running=c, tok_s=noisy, accept=accept, knob=self.knob)

    def apply(self, decision: Decision) -> None:
        if decision.max_bs is not None:
            self.knob = decision.max_bs


def drive(policy: Policy, server: SyntheticServer, load: Callable[[float], float], seconds: float,
          start: float = 0.0, interval: float = 5.0) -> list[tuple[float, int]]:
    """Run the loop; return (ts, new knob) for every change."""
    changes: list[tuple[float, int]] = []
    t = start
    while t < start + seconds:
        t += interval
        decision = policy.decide(server.observe(t, load(t)))
        if decision.max_bs is not None and decision.max_bs != server.knob:
            changes.append((t, decision.max_bs))
        server.apply(decision)
    return changes


def staircase(levels: Sequence[float], hold: float) -> Callable[[float], float]:
    return lambda t: levels[min(int(t // hold), len(levels) - 1)]


STEP_LEVELS = [1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 32, 16, 8, 4, 2, 1, 24, 48, 12]


def test_learn_converges_to_the_crossover_on_a_step_trace() -> None:
    for seed in range(3):
        policy = make_policy("learn", MRR)
        server = SyntheticServer(crossover=24.0, seed=seed)
        drive(policy, server, staircase(STEP_LEVELS, 300), 300 * len(STEP_LEVELS))
        # the ceiling lands within one bin (a factor sqrt(2)) of the true crossover
        assert 24 / math.sqrt(2) - 1 <= server.knob <= 24 * math.sqrt(2) + 1, (seed, server.knob)


def test_learn_keeps_speculation_on_where_it_always_pays() -> None:
    policy = make_policy("learn", MRR)
    server = SyntheticServer(crossover=None, benefit_at_1=0.4)
    changes = drive(policy, server, staircase(STEP_LEVELS, 300), 300 * len(STEP_LEVELS))
    assert server.knob == MRR
    assert len(changes) <= 10  # a few bounded explorations, not a flip per bin


def test_learn_switches_off_where_speculation_never_pays() -> None:
    policy = make_policy("learn", MRR)
    server = SyntheticServer(crossover=0.5, benefit_at_1=-0.1)  # g < 0 everywhere
    drive(policy, server, staircase(STEP_LEVELS, 300), 300 * len(STEP_LEVELS))
    assert server.knob <= 1


def test_learn_holds_on_stale_observations_and_learns_nothing_from_them() -> None:
    policy = make_policy("learn", MRR)
    before = json.dumps(policy.state(), sort_keys=True)
    for i in range(50):
        decision = policy.decide(obs(ts=5.0 * i, running=40, tok_s=10.0, knob=MRR, stale=True))
        assert decision.max_bs is None
        assert "stale" in decision.reason
    assert json.dumps(policy.state(), sort_keys=True) == before


def test_learn_respects_min_dwell_and_the_flip_rate() -> None:
    # a load that hovers across the crossover keeps the policy busy; the limits must hold anyway
    rng = random.Random(7)
    levels = [rng.choice([6, 10, 14, 20, 28, 40]) for _ in range(400)]
    for dwell, per_hour in ((15.0, 60), (60.0, 10)):
        policy = make_policy("learn", MRR, min_dwell_s=dwell, max_flips_per_hour=per_hour)
        server = SyntheticServer(crossover=16.0, noise_cv=0.06, seed=3)
        changes = drive(policy, server, staircase(levels, 20), 20 * len(levels))
        times = [t for t, _ in changes]
        assert times, "the policy never moved the knob"
        assert all(b - a >= dwell for a, b in itertools.pairwise(times))
        for i, t in enumerate(times):
            assert sum(1 for u in times[i:] if u < t + 3600) <= per_hour


def test_learn_state_round_trips_through_json() -> None:
    policy = make_policy("learn", MRR)
    server = SyntheticServer(crossover=24.0)
    drive(policy, server, staircase(STEP_LEVELS, 200), 200 * len(STEP_LEVELS))
    saved = json.loads(json.dumps(policy.state()))
    restored = make_policy("learn", MRR)
    restored.load_state(saved)
    assert restored.state() == saved
    # the restored policy knows the crossover without exploring again: same next decisions
    t0 = 200 * len(STEP_LEVELS)
    for k, c in enumerate([4.0, 4.0, 40.0, 40.0, 40.0]):
        probe = obs(ts=t0 + 5 * (k + 1), running=c, tok_s=100 * c**0.8, knob=server.knob)
        assert restored.decide(probe).max_bs == policy.decide(probe).max_bs


def test_learned_state_spares_a_restart_the_exploration() -> None:
    fresh = make_policy("learn", MRR)
    server = SyntheticServer(crossover=24.0, seed=1)
    first = drive(fresh, server, staircase(STEP_LEVELS, 300), 300 * len(STEP_LEVELS))
    restarted = make_policy("learn", MRR)
    restarted.load_state(json.loads(json.dumps(fresh.state())))
    again = drive(restarted, SyntheticServer(crossover=24.0, seed=2, knob=server.knob),
                  staircase(STEP_LEVELS, 300), 300 * len(STEP_LEVELS), start=300 * len(STEP_LEVELS))
    assert len(again) < len(first)


@pytest.mark.parametrize("state, field", [
    ({"policy": "threshold:3"}, "version"),
    ({"policy": "learn", "version": 1, "bin_ratio": 2.0}, "bin_ratio"),
    ({"policy": "learn", "version": 1, "bin_ratio": math.sqrt(2), "cells": {"x:on": [0] * 8}}, "x:on"),
    ({"policy": "learn", "version": 1, "bin_ratio": math.sqrt(2), "cells": {"3:on": [0, 1]}}, "3:on"),
    ({"policy": "learn", "version": 1, "bin_ratio": math.sqrt(2), "flip_times": "no"}, "flip_times"),
])
def test_learn_rejects_a_bad_state_naming_the_field(state: dict, field: str) -> None:
    policy = make_policy("learn", MRR)
    before = policy.state()
    with pytest.raises(ValueError, match=field):
        policy.load_state(state)
    assert policy.state() == before  # nothing half-loaded


def test_learn_gives_up_on_a_set_that_never_reads_back() -> None:
    policy = make_policy("learn", MRR)
    assert isinstance(policy, LearnPolicy)
    first = Decision(None, "")
    k = 0
    while first.max_bs is None and k < 10:  # nothing known about the other mode yet: it explores soon
        k += 1
        first = policy.decide(obs(ts=5 * k, running=4, knob=MRR))
    assert first.max_bs is not None and first.reason.startswith("explore")
    # the runner refused (rate limit) or the set failed: the read-back stays at MRR for good
    reasons = [policy.decide(obs(ts=5 * j, running=4, knob=MRR)).reason for j in range(k + 1, k + 30)]
    waits = [r.startswith("hold: waiting") for r in reasons]
    longest = max(len(run) for run in "".join("w" if w else "." for w in waits).split("."))
    assert longest <= PENDING_WAITS, reasons  # it believes the server again, and does not wait forever
    assert not all(waits)


def test_learn_holds_when_the_read_back_is_unknown() -> None:
    policy = make_policy("learn", MRR)
    decision = policy.decide(obs(knob=None))
    assert decision.max_bs is None and "read-back" in decision.reason
