"""`sim evaluate` scores a policy on what the knob can do: "off" is the profile's knob-off curve (spec_off),
never a plain server's; the plain curve is reported beside the oracle; the oracle pays the gate's exploration
share like every policy. Virtual time: exact."""

from __future__ import annotations

import json
from typing import Any

import pytest
from spectower.control.policy import make_policy
from spectower.plugin.explore import DEFAULT_KEPT_EXTEND_TAX
from spectower.simulator.harness import HarnessConfig, evaluate, simulate
from spectower.simulator.profile import Profile, load_profile, parse_profile
from spectower.simulator.traces import parse_trace

from tests.test_bench_plain_sim import THREE_CURVES

SECONDS = 600.0
NO_EXPLORING = HarnessConfig(explore_share=0.0)


# at 16: knob on 750, knob off (measured) 650, a plain server 1200
CURVES = {"spec_on": [190.0, 430.0, 750.0], "spec_off": [84.0, 240.0, 650.0], "plain": [100.0, 380.0, 1200.0]}


def _profile(**changes: Any) -> Profile:
    data = json.loads(json.dumps(THREE_CURVES)) | {"output_tok_s": CURVES}
    return parse_profile(data | changes, source="three-curves")


def constant(c: float) -> Any:
    return parse_trace([[0, c], [SECONDS, c]], source="constant")


def test_always_off_earns_the_knob_off_curve_and_the_oracle_counts_it() -> None:
    profile = _profile()
    off = simulate(profile, constant(16), make_policy("always-off", 64), config=NO_EXPLORING)
    # one decision interval (5 s) runs with the launch knob (on) before always-off's ceiling applies
    assert off.tokens == pytest.approx(650.0 * (SECONDS - 5.5) + 750.0 * 5.5, rel=1e-9)
    # the oracle picks the better of on (750) and knob-off (650) at 16, not plain (1200)
    assert off.oracle_tokens == pytest.approx(750.0 * SECONDS, rel=1e-9)
    assert off.plain_tokens == pytest.approx(1200.0 * SECONDS, rel=1e-9)


def test_where_knob_off_beats_on_the_oracle_takes_knob_off_not_plain() -> None:
    # at 16: on 600 < knob-off 650 < plain 1200
    profile = _profile(output_tok_s={**CURVES, "spec_on": [190.0, 430.0, 600.0]})
    on = simulate(profile, constant(16), make_policy("always-on", 64), config=NO_EXPLORING)
    assert on.oracle_tokens == pytest.approx(650.0 * SECONDS, rel=1e-9)
    assert on.efficiency == pytest.approx(600.0 / 650.0, rel=1e-9)
    out = evaluate(profile, constant(16), "always-off", baselines=("always-on",), config=NO_EXPLORING)
    assert out["baselines"]["always-on"]["efficiency"] == pytest.approx(600.0 / 650.0, rel=1e-6)
    assert out["has_plain_curve"] is True
    assert out["plain_vs_oracle"] == pytest.approx(1200.0 / 650.0, rel=1e-6)  # no knob value reaches plain


def test_the_old_format_keeps_its_scores() -> None:
    old = _profile(output_tok_s={"spec_on": [190.0, 430.0, 750.0], "spec_off": [84.0, 240.0, 650.0]})
    run = simulate(old, constant(16), make_policy("always-off", 64), config=NO_EXPLORING)
    assert run.plain_tokens == pytest.approx(650.0 * SECONDS, rel=1e-9)  # spec_off stands for plain
    out = evaluate(old, constant(16), "always-on", baselines=(), config=NO_EXPLORING)
    assert out["has_plain_curve"] is False and out["efficiency"] == pytest.approx(1.0)


def test_the_oracle_pays_the_exploration_share_on_the_knob_off_curve() -> None:
    """With 2 % exploration the best a ceiling can do at 16 is 98 % of the steps on (750 tok/s) and 2 %
    knob-off (650 less the kept extend's cost, one token per request per step: the explored gated batches
    of a drafting bin keep the draft warm), never plain; always-on is that oracle exactly."""
    profile = _profile()
    on = simulate(profile, constant(16), make_policy("always-on", 64))
    accept = profile.accept_length_at(16)
    t_on, t_off = 16 * accept / 750.0, 16 / (650.0 * (1 - DEFAULT_KEPT_EXTEND_TAX))  # one step's time
    mixed = (0.98 * 16 * accept + 0.02 * 16) / (0.98 * t_on + 0.02 * t_off)
    assert on.oracle_tokens == pytest.approx(mixed * SECONDS, rel=1e-9)
    assert on.pure_oracle_tokens == pytest.approx(750.0 * SECONDS, rel=1e-9)
    assert on.efficiency == pytest.approx(1.0)
    assert on.explore_cost == pytest.approx(1 - mixed / 750.0, rel=1e-9)
    assert on.plain_tokens == pytest.approx(1200.0 * SECONDS, rel=1e-9)  # plain is reported, not reachable


def test_never_drafting_beats_the_exploring_oracle_on_an_early_crossover_and_scores_count_the_better() -> (
    None
):
    """GLM-5's profile drafts at a loss from ~15 requests on. At 48 the oracle (knob at 0, still exploring 2 %
    of the steps drafted, the draft's extend kept) serves less than a server whose knob is at 0 locked
    (extend skipped, nothing explored: spec_off as measured); the best achievable takes the better per tick,
    and efficiency_vs_best is against it."""
    profile = load_profile("glm5-nvfp4-8x-rtx-pro-6000")
    off = simulate(profile, constant(48), make_policy("always-off", 64))
    never = profile.output_tok_s(48, False) * SECONDS
    assert off.never_draft_tokens == pytest.approx(never, rel=1e-9)
    assert off.never_draft_tokens > off.oracle_tokens * 1.005  # never drafting beats the exploring oracle
    assert off.best_tokens == pytest.approx(never, rel=1e-9)  # the better of the two at every tick
    assert off.efficiency_vs_best == pytest.approx(off.tokens / never, rel=1e-9)
    assert off.efficiency_vs_best < off.efficiency  # scored against the oracle alone it reads higher
    # a load that passes the crossover both ways: per tick the better, so above either baseline
    swing = parse_trace([[0, 4], [300, 4], [301, 48], [SECONDS, 48]], source="swing")
    run = simulate(profile, swing, make_policy("always-off", 64))
    assert run.best_tokens > max(run.oracle_tokens, run.never_draft_tokens) * 1.001
    out = evaluate(profile, swing, "always-off", baselines=("always-on",))
    assert out["efficiency_vs_best"] == pytest.approx(run.tokens / run.best_tokens, rel=1e-5)
    assert out["never_draft_tokens"] == pytest.approx(run.never_draft_tokens, abs=0.1)
    assert out["baselines"]["always-on"]["efficiency_vs_best"] < out["baselines"]["always-on"]["efficiency"]


def test_without_exploration_the_best_achievable_is_the_oracle() -> None:
    profile = load_profile("glm5-nvfp4-8x-rtx-pro-6000")
    run = simulate(profile, constant(48), make_policy("always-off", 64), config=NO_EXPLORING)
    assert run.best_tokens == pytest.approx(run.oracle_tokens, rel=1e-12)
    assert run.efficiency_vs_best == pytest.approx(run.efficiency, rel=1e-12)
