"""The virtual-time harness: what a policy sees, how the knob, gauges, counters and exploration behave, and
the scores."""

from __future__ import annotations

import itertools
import math
import statistics
from typing import Any

import pytest
from spectower.control.policy import Decision, Observation, make_policy
from spectower.plugin import engine_counters
from spectower.simulator.harness import BASELINES, HarnessConfig, HarnessError, evaluate, simulate
from spectower.simulator.profile import builtin_profile_names, load_profile
from spectower.simulator.traces import BUILTIN_TRACES, load_trace, parse_trace

GLM = "glm5-nvfp4-8x-rtx-pro-6000"
LLAMA = "llama31-8b-1x-h100"
SEEDS = (0, 1, 2)
# One seed in the unit lane (./tests/run --fast), every seed in the whole suite: a policy run of an hour
# costs seconds of CPU, and the other seeds check the same behaviour under other noise.
SEEDS_FAST_FIRST = [SEEDS[0], *(pytest.param(seed, marks=pytest.mark.slow) for seed in SEEDS[1:])]
EXACT = HarnessConfig(noise_cv=0.0, explore_share=0.0)  # the profile's curves, nothing else


class Scripted:
    """A policy that records what it sees and answers from a script keyed by decision number."""

    name = "scripted"

    def __init__(self, script: dict[int, int] | None = None) -> None:
        self.script = script or {}
        self.seen: list[Observation] = []

    def decide(self, obs: Observation) -> Decision:
        self.seen.append(obs)
        value = self.script.get(len(self.seen))
        return Decision(value, "scripted" if value is not None else "hold")

    def state(self) -> dict[str, Any]:
        return {}

    def load_state(self, state: dict[str, Any]) -> None:
        return None


def constant(c: float, seconds: float = 600) -> Any:
    return parse_trace([[0, c], [seconds, c]], source="constant")


# --- the headline: learn on every shipped profile and built-in trace ------------------------------------

# Slow: an hour of virtual time per profile and trace, about 140 s of the unit lane's CPU together; the
# whole suite (CI) runs it, `./tests/run --fast` leaves it out (issue #34: the unit lane under 3 minutes).
@pytest.mark.slow
@pytest.mark.parametrize("trace_name", BUILTIN_TRACES)
@pytest.mark.parametrize("profile_name", builtin_profile_names())
def test_learn_reaches_98_percent_within_12_changes_an_hour(profile_name: str, trace_name: str) -> None:
    profile = load_profile(profile_name)
    mrr = profile.max_running_requests
    always_pays = profile.crossover() is None and profile.speedup(profile.concurrency[0]) >= 1.0
    learn, t30 = [], []
    for seed in SEEDS:
        trace = load_trace(trace_name, seed=seed, max_running_requests=mrr)
        result = simulate(profile, trace, make_policy("learn", mrr), seed=seed)
        assert result.efficiency >= 0.98, (seed, result.to_json())
        assert result.changes_per_hour <= 12, (seed, result.to_json())
        if always_pays:  # never below always-on where speculation always pays
            on = simulate(profile, trace, make_policy("always-on", mrr), seed=seed)
            assert result.tokens >= on.tokens * (1 - 1e-12), (seed, result.efficiency, on.efficiency)
        learn.append(result.efficiency)
        t30.append(simulate(profile, trace, make_policy("threshold:30", mrr), seed=seed).efficiency)
    crossover = profile.crossover()
    if crossover is None or abs(crossover - 30) > 5:  # the crossover is not near 30 on any shipped one
        assert statistics.fmean(learn) > statistics.fmean(t30), (learn, t30)


def test_oracle_is_the_upper_bound_and_the_baselines_sit_where_the_profiles_say() -> None:
    llama, glm = load_profile(LLAMA), load_profile(GLM)
    trace = load_trace("diurnal", seed=0)
    # speculation always pays on llama: always-on IS the oracle
    assert simulate(llama, trace, make_policy("always-on", 64)).efficiency == pytest.approx(1.0)
    assert simulate(llama, trace, make_policy("always-off", 64)).efficiency < 0.75
    # on glm each fixed choice loses somewhere
    for spec in ("always-on", "always-off", "threshold:30"):
        assert simulate(glm, trace, make_policy(spec, 64)).efficiency < 1.0


# --- what the policy sees --------------------------------------------------------------------------------

def test_policy_sees_server_signals_only_running_is_capped_and_the_rest_queues() -> None:
    profile = load_profile(GLM)
    policy = Scripted()
    simulate(profile, constant(90), policy, 60, config=EXACT)
    assert len(policy.seen) == 12  # one per 5 s decision interval
    for obs in policy.seen:
        assert isinstance(obs, Observation)
        assert obs.num_running_reqs == 64 and obs.num_queue_reqs == 26
        assert obs.max_running_requests == 64
        assert obs.spec_max_bs == 64 and not obs.stale
    # spec on at 64 running: the gauge reads the profile's rate once its first window has closed
    assert policy.seen[-1].output_tok_s == pytest.approx(profile.output_tok_s(64, True))
    assert policy.seen[-1].accept_length == pytest.approx(profile.accept_length_at(64))
    # ...and the engine counters, as the plugin publishes them: 60 s of drafted steps, all in bin 64
    counters = policy.seen[-1].counters
    assert counters is not None and engine_counters.validate(dict(counters)) is None
    assert counters["bins"] == [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64]
    step = 64 * profile.accept_length_at(64) / profile.output_tok_s(64, True)  # one decode step's time
    assert 60.0 - step <= counters["drafted"]["time_s"][-1] <= 60.0  # whole steps: the last one carries on
    assert sum(counters["gated"]["steps"]) == 0 and sum(counters["drafted"]["steps"][:-1]) == 0
    rate = counters["drafted"]["tokens"][-1] / counters["drafted"]["time_s"][-1]
    assert rate == pytest.approx(profile.output_tok_s(64, True), rel=1e-3)
    per_step = counters["drafted"]["tokens"][-1] / counters["drafted"]["steps"][-1]
    assert per_step == pytest.approx(64 * profile.accept_length_at(64), rel=1e-2)


def test_exploration_runs_its_share_of_steps_in_the_other_mode_in_every_bin() -> None:
    """The gate's 2 %: every 50th step of a bin runs the other mode, whichever the ceiling says; the
    counters see it, the tokens pay for it, and so does the oracle."""
    profile = load_profile(GLM)
    config = HarnessConfig(noise_cv=0.0)  # the default share, 0.02
    trace = parse_trace([[0, 4], [300, 4], [300, 40], [600, 40]], source="two-levels")
    policy = Scripted({1: 16})  # 4 drafts, 40 is gated
    result = simulate(profile, trace, policy, 600, config=config)
    counters = policy.seen[-1].counters
    assert counters is not None
    bins = counters["bins"]
    for b, majority, minority in ((bins.index(4), "drafted", "gated"), (bins.index(64), "gated", "drafted")):
        steps = counters[majority]["steps"][b] + counters[minority]["steps"][b]
        assert counters[minority]["steps"][b] == pytest.approx(steps / 50, abs=2), (b, counters)
    on, off = profile.output_tok_s(40, True), profile.output_tok_s(40, False)
    t_on, t_off = 40 * profile.accept_length_at(40) / on, 40 / off  # one step's time in each mode
    mixed = (0.98 * 40 + 0.02 * 40 * profile.accept_length_at(40)) / (0.98 * t_off + 0.02 * t_on)
    assert min(on, off) < mixed < max(on, off)
    assert result.explore_share == pytest.approx(0.02)
    assert 0 < result.explore_cost < 0.02
    assert result.oracle_tokens < result.pure_oracle_tokens
    exact = simulate(profile, trace, Scripted({1: 16}), 600, config=EXACT)
    assert exact.explore_cost == 0 and exact.oracle_tokens == pytest.approx(exact.pure_oracle_tokens)
    assert exact.tokens > result.tokens  # here the ceiling is right everywhere: exploring only costs

def test_throughput_noise_has_the_profiles_cv() -> None:
    profile = load_profile(LLAMA)
    policy = Scripted()
    simulate(profile, constant(16, 3600), policy, 3600, config=HarnessConfig(explore_share=0.0))
    rate = profile.output_tok_s(16, True)
    ratios = [o.output_tok_s / rate for o in policy.seen[2:] if o.output_tok_s]
    assert statistics.fmean(ratios) == pytest.approx(1.0, abs=0.01)
    assert 0.6 * profile.noise_cv < statistics.stdev(ratios) < 1.4 * profile.noise_cv


def test_the_knob_reads_back_and_applies_on_the_next_step_and_gauges_lag() -> None:
    profile = load_profile(GLM)
    policy = Scripted({4: 0})  # turn speculation off at the 4th decision (t = 20 s)
    result = simulate(profile, constant(64, 60), policy, 60, config=EXACT)
    on, off = profile.output_tok_s(64, True), profile.output_tok_s(64, False)
    seen = policy.seen
    assert [o.spec_max_bs for o in seen[:4]] == [64] * 4
    assert all(o.spec_max_bs == 0 for o in seen[4:])
    assert seen[3].output_tok_s == pytest.approx(on)
    # the first interval after the flip still shows part of the old window (40 decode steps ~ 1.4 s here)
    first = seen[4].output_tok_s
    assert first is not None and min(on, off) < first < max(on, off)
    assert seen[-1].output_tok_s == pytest.approx(off)
    assert seen[-1].accept_length == pytest.approx(1.0)  # nothing drafted
    assert result.flips == 1
    # tokens: 20.5 s drafting (the set lands on the next 0.5 s step), the rest not
    assert result.tokens == pytest.approx(on * 20.5 + off * 39.5)


def test_idle_server_reports_zero_throughput_after_30_s() -> None:
    policy = Scripted()
    trace = parse_trace([[0, 8], [30, 8], [30, 0], [120, 0]], source="idle")
    simulate(load_profile(GLM), trace, policy, 120, config=EXACT)
    assert policy.seen[3].output_tok_s and policy.seen[3].output_tok_s > 0
    assert policy.seen[-1].output_tok_s == 0.0
    assert policy.seen[-1].num_running_reqs == 0


def test_runs_are_deterministic_per_seed() -> None:
    profile = load_profile(GLM)
    trace = load_trace("bursty", seed=1)
    half = trace.duration_s / 2  # long enough for every part of a run to have played; each run costs CPU
    a = simulate(profile, trace, make_policy("learn", 64), half, seed=1, keep_timeline=True)
    b = simulate(profile, trace, make_policy("learn", 64), half, seed=1, keep_timeline=True)
    c = simulate(profile, trace, make_policy("learn", 64), half, seed=2, keep_timeline=True)
    assert a.to_json() == b.to_json() and a.timeline == b.timeline
    # the seed moves the measurement noise (what the policy reads), not the load or the curves
    assert [e["tok_s"] for e in a.timeline] != [e["tok_s"] for e in c.timeline]
    seen: list[Observation] = []
    for seed in (1, 2):
        scripted = Scripted()
        simulate(profile, trace, scripted, 600, seed=seed)
        seen.append(scripted.seen[-1])
    assert seen[0].counters != seen[1].counters  # the counters' step times carry the seed's noise


# --- evaluate() and errors -------------------------------------------------------------------------------

def test_evaluate_reports_the_policy_and_every_baseline() -> None:
    profile = load_profile(GLM)
    out = evaluate(profile, load_trace("step", seed=0), "learn", seed=0)
    for key in ("efficiency", "tokens", "oracle_tokens", "flips", "changes_per_hour", "baselines",
                "crossover", "explore_share", "explore_cost"):
        assert key in out
    assert set(out["baselines"]) == set(BASELINES)
    assert out["efficiency"] == pytest.approx(out["tokens"] / out["oracle_tokens"], rel=1e-5)
    assert out["crossover"] == pytest.approx(profile.crossover())
    assert out["baselines"]["always-on"]["flips"] == 0


@pytest.mark.parametrize("config, field", [
    (HarnessConfig(decision_interval_s=0), "decision_interval_s"),
    (HarnessConfig(tick_s=-1), "tick_s"),
    (HarnessConfig(knob_delay_s=-1), "knob_delay_s"),
    (HarnessConfig(noise_cv=0.9), "noise_cv"),
    (HarnessConfig(gauge_log_interval_steps=0), "gauge_log_interval_steps"),
    (HarnessConfig(explore_share=0.5), "explore_share"),
    (HarnessConfig(explore_share=math.nan), "explore_share"),
])
def test_bad_config_is_refused(config: HarnessConfig, field: str) -> None:
    with pytest.raises(HarnessError, match=field):
        simulate(load_profile(GLM), constant(4), Scripted(), 60, config=config)


def test_bad_duration_and_bad_decisions_are_refused() -> None:
    with pytest.raises(HarnessError, match="duration"):
        simulate(load_profile(GLM), constant(4), Scripted(), 0)
    with pytest.raises(HarnessError, match="negative ceiling"):
        simulate(load_profile(GLM), constant(4), Scripted({1: -3}), 60)


@pytest.mark.parametrize("seed", SEEDS_FAST_FIRST)
def test_learn_ends_a_step_trace_with_the_ceiling_at_the_crossover(seed: int) -> None:
    glm, llama = load_profile(GLM), load_profile(LLAMA)
    crossover = glm.crossover()
    assert crossover is not None
    trace = load_trace("step", seed=seed)
    final = simulate(glm, trace, make_policy("learn", 64), seed=seed).final_max_bs
    assert final in (12, 16), final  # the counters' bin edge either side of ~15 (ceilings move bin to bin)
    # spec always pays on llama: the ceiling stays at the top
    assert simulate(llama, trace, make_policy("learn", 64), seed=seed).final_max_bs == 64


def test_stale_intervals_reach_the_policy_marked_and_learn_copes() -> None:
    profile = load_profile(GLM)
    policy = Scripted()
    config = HarnessConfig(stale_probability=0.2)
    simulate(profile, constant(20, 600), policy, 600, config=config)
    stale = [o for o in policy.seen if o.stale]
    assert 10 <= len(stale) <= 40
    assert all(o.output_tok_s is None and o.accept_length is None for o in stale)
    result = simulate(profile, load_trace("bursty", seed=0), make_policy("learn", 64), config=config)
    assert result.efficiency >= 0.97


def test_gated_ticks_pay_the_kept_extend_only_in_exploration_windows() -> None:
    """The h200 profile's spec_off_warm curve (gated steps while the draft's extend runs, measured on the
    H200, 0.90 of spec_off at 64): a ceiling of 0 with exploration on keeps the extend only in its windows
    (plugin/explore.py, about 9 % of the gated steps), so it serves within 2 % of the knob at 0 with the
    share at 0 (spec_off, what a sweep's locked off measures), where keeping it throughout cost 10 %. The
    exploring oracle pays the same."""
    profile = load_profile("h200-8b-pair-triton")
    assert profile.spec_off_warm_tok_s is not None
    off, warm = profile.output_tok_s(64, False), profile.output_tok_s(64, False, draft_warm=True)
    assert warm < 0.95 * off
    trace = constant(64, 120)
    at_0 = {"noise_cv": 0.0, "initial_max_bs": 0}
    exploring = simulate(profile, trace, Scripted(), 120, config=HarnessConfig(**at_0))
    quiet = simulate(profile, trace, Scripted(), 120, config=HarnessConfig(**at_0, explore_share=0.0))
    assert quiet.tokens / 120 == pytest.approx(off, rel=0.01)
    assert 0.98 * quiet.tokens < exploring.tokens < quiet.tokens  # the windows' kept extend and 2 % explored
    assert exploring.tokens > 1.05 * warm * 120  # far above the extend kept throughout
    assert exploring.oracle_tokens > 0.98 * exploring.pure_oracle_tokens


def test_a_gated_bins_explored_drafting_reaches_the_counters_once_a_window() -> None:
    """A bin the ceiling gates drafts only in the plugin's exploring windows, whose exploring part ends each
    window: its counters show that drafting once a window, so a policy's estimate gets one interval of it per
    window, not one per sample (the fluid model drafts a share every tick; it holds that back until the
    window closes). The gated steps count every sample."""
    profile = load_profile("h200-8b-pair-triton")
    policy = Scripted()
    simulate(profile, constant(32, 900), policy, 900, config=HarnessConfig(noise_cv=0.0, initial_max_bs=0))
    snapshots = [o.counters for o in policy.seen if o.counters is not None]
    i = snapshots[0]["bins"].index(32)

    def rises(mode: str) -> int:
        steps = [s[mode]["steps"][i] for s in snapshots]
        return sum(1 for a, b in itertools.pairwise(steps) if b > a)

    assert rises("gated") >= len(snapshots) - 2
    # about one window a minute at 32 on this profile (15 in 900 s); counted every tick, 161 rises
    assert 2 <= rises("drafted") <= len(snapshots) // 6, rises("drafted")
