"""A gated batch pays the draft model's KV extend unless the plugin would skip it: the profile's optional
``output_tok_s.spec_off_warm`` curve, served by the simulator's gated batches that keep the extend (gated by
exploration inside a drafting bin, or in an exploration window's warm and exploring parts), and ``spec_off``
(measured with the extend skipped) for a batch the knob gates while nothing explores or in a window's cold
part, the SGLang plugin's rule (``knob_contract.extend_skippable``). A profile without the curve serves
``spec_off`` as before.

Virtual time: the rank's sleep returns at once and the profile has no noise, so a step's duration is what
the scheduler computed and the rates are exact.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from spectower.plugin import knob_contract
from spectower.plugin.explore import (
    DEFAULT_KEPT_EXTEND_TAX,
    WINDOW_CYCLE_BATCHES,
    WINDOW_EXPLORE_BATCHES,
    WINDOW_EXPLORE_MAX_S,
    WINDOW_WARM_MAX_BATCHES,
)
from spectower.simulator import knob_state
from spectower.simulator.config import SimConfig
from spectower.simulator.engine import Engine, RankScheduler
from spectower.simulator.profile import Profile, ProfileError, load_profile, parse_profile

from benchmarks.simulator_process import curve_profile
from tests.test_sim_explore import _decode as decode_steps
from tests.test_sim_explore import virtual_time  # noqa: F401 (autouse: the step clock's sleep patched out)

BATCH = 16  # a profile point: the curves there are the profile's numbers
SPEC_OFF, WARM, SPEC_ON = 650.0, 560.0, 750.0  # at 16

CURVES: dict[str, Any] = {
    "spec_on": [190.0, 430.0, SPEC_ON],
    "spec_off": [84.0, 240.0, SPEC_OFF],
    "plain": [100.0, 380.0, 1200.0],
    "spec_off_warm": [80.0, 220.0, WARM],
}


def _data(**curves: Any) -> dict[str, Any]:
    """The test profile with ``curves`` replacing its own (None: without that curve)."""
    chosen = {mode: rates for mode, rates in (CURVES | curves).items() if rates is not None}
    return curve_profile("warm-gated", [1, 4, 16], chosen, max_running_requests=64,
                         served_model_name="eight-b-shaped")  # fmt: skip


def _profile(**curves: Any) -> Profile:
    return parse_profile(_data(**curves), source="warm-gated")


def _without_warm() -> Profile:
    return _profile(spec_off_warm=None)


def _lock(engine: Engine, value: int) -> None:
    """An operator's set (writer 1): it takes the lock, which pauses exploration."""
    request = knob_contract.parse_request({"spectower_writer": 1, "spectower_spec_max_bs": value})
    assert request is not None
    knob_state.apply(engine, request)
    engine.owner.commit(request, previous=engine.ranks[0].spec_max_bs)


def _gated_rate(
    profile: Profile, knob: int, share: float = knob_contract.DEFAULT_EXPLORE_SHARE, locked: bool = False,
    steps: int = 400,
) -> tuple[float, RankScheduler]:  # fmt: skip
    """Output tokens/s of the gated steps over ``BATCH`` running requests (the engine counters' bin, so
    settling steps apart)."""

    engine = Engine(SimConfig(profile=profile, explore_share=share))
    if locked:
        _lock(engine, knob)
    else:
        engine.set_spec_max_bs(knob)
    rank = decode_steps(engine, BATCH, steps)
    counters = rank.counters
    i = counters.bin_index(BATCH)
    assert counters.steps["gated"][i] > 0
    return counters.tokens["gated"][i] / counters.time_s["gated"][i], rank


def test_a_policys_ceiling_gates_cold_and_explores_in_windows_with_the_draft_warm() -> None:
    """Issue #32: under a policy's ceiling (exploring on, no lock) the extend is skipped outside exploration
    windows; a window's warm part waits for the holed requests (these never finish: cut at its cap) and its
    gated batches, extend kept, are counted apart, so the counters' gated rate is the cold stream's. (A
    ceiling of 8: 16 running is within the stream's limit, explore.stream_limit.)"""
    steps = WINDOW_CYCLE_BATCHES + WINDOW_WARM_MAX_BATCHES + 100
    rate, rank = _gated_rate(_profile(), knob=8, steps=steps)
    assert rate == pytest.approx(SPEC_OFF, rel=1e-9)
    assert rank.batches_explored > 0 and rank.batches_drafted > 0  # the window's explored runs drafted
    window = rank.explorer.windows
    assert window.windows == 1 and window.warm_cut == 1 and window.batches["warm"] == WINDOW_WARM_MAX_BATCHES
    assert rank.extend_skipped() and rank.explorer.phase_now == "cold"  # back to cold after the window
    settling = rank.counters.settling
    assert settling["steps"] >= window.batches["warm"]  # the warm part's gated batches are kept apart
    assert settling["tokens"] / settling["time_s"] < SPEC_OFF  # ...and ran slower: the extend ran there


def test_at_a_policys_zero_a_window_drafts_nothing_above_the_streams_limit() -> None:
    """Plugin 0.4.2: at a policy's 0 the stream drafts batches of at most 8 (explore.stream_limit); 16 running
    stay gated through the exploring part, the extend kept (its phase is not cold), and settling. Its batches
    of about 29 ms end it at its time cap (plugin 0.4.4: explore.WINDOW_EXPLORE_MAX_S), short of its 328."""
    steps = WINDOW_CYCLE_BATCHES + WINDOW_WARM_MAX_BATCHES + 100
    rate, rank = _gated_rate(_profile(), knob=0, steps=steps)
    assert rate == pytest.approx(SPEC_OFF, rel=1e-9) and rank.batches_drafted == 0
    window = rank.explorer.windows
    assert window.windows == 1 and window.batches["explore"] == window.over_limit
    assert window.timed_out == 1 and window.batches["explore"] < window.explore_length(50)
    assert window.last_explore_s == pytest.approx(WINDOW_EXPLORE_MAX_S, abs=0.05)
    settling = rank.counters.settling
    assert settling["steps"] >= window.batches["warm"] + window.batches["explore"]
    assert settling["tokens"] / settling["time_s"] == pytest.approx(WARM, rel=1e-9)  # all with the extend
    # plugin 0.4.3: the part ran above its limit, so the next part's limit doubles (16 running would draft)
    report = rank.explorer.window_report()
    assert (report["doublings"], report["limit"]) == (1, 16)


def test_during_a_windows_warm_part_a_gated_batch_pays_the_extend() -> None:
    engine = Engine(SimConfig(profile=_profile(), explore_share=knob_contract.DEFAULT_EXPLORE_SHARE))
    engine.set_spec_max_bs(0)
    rank = decode_steps(engine, BATCH, WINDOW_CYCLE_BATCHES - WINDOW_EXPLORE_BATCHES + 1)
    assert rank.explorer.phase_now == "warm" and not rank.extend_skipped()
    assert rank.holes.holed  # the cold part's skipped extends left every running request holed


@pytest.mark.parametrize("share, locked", [(0.0, False), (knob_contract.DEFAULT_EXPLORE_SHARE, True)])
def test_knob_at_zero_without_exploration_skips_the_extend_spec_off(share: float, locked: bool) -> None:
    rate, rank = _gated_rate(_profile(), knob=0, share=share, locked=locked)
    assert rate == pytest.approx(SPEC_OFF, rel=1e-9)
    assert rank.batches_explored == 0 and rank.batches_drafted == 0
    assert rank.extend_skipped()


@pytest.mark.parametrize("share, locked", [(0.0, False), (knob_contract.DEFAULT_EXPLORE_SHARE, True)])
def test_a_ceiling_above_zero_gates_cold_too_when_nothing_explores(share: float, locked: bool) -> None:
    """Gated by a partial ceiling, a batch skips the extend as at 0 (the drain covers the way back)."""
    rate, rank = _gated_rate(_profile(), knob=BATCH - 1, share=share, locked=locked)
    assert rate == pytest.approx(SPEC_OFF, rel=1e-9)
    assert rank.batches_drafted == 0 and rank.extend_skipped()


def test_a_drafting_bins_explored_gated_runs_keep_the_extend() -> None:
    """Gated by exploration inside a bin the knob drafts: its requests go on drafting, the extend runs."""
    rate, rank = _gated_rate(_profile(), knob=BATCH, steps=400)
    assert rate == pytest.approx(WARM, rel=1e-9)
    assert rank.batches_explored > 0 and not rank.holes.holed


@pytest.mark.parametrize(
    "knob, share, locked", [(0, 0.02, False), (0, 0.0, False), (0, 0.02, True), (BATCH - 1, 0.0, False)]
)
def test_a_profile_without_the_curve_gates_at_spec_off(knob: int, share: float, locked: bool) -> None:
    """Without a measured warm curve the extend's usual cost is charged where it runs (the H200's 7 %), and
    a batch the knob gates still serves spec_off (the extend skipped)."""
    profile = _without_warm()
    assert profile.spec_off_warm_tok_s is None
    charged = tuple(v * (1 - DEFAULT_KEPT_EXTEND_TAX) for v in profile.spec_off_tok_s)
    assert profile.spec_off_warm_curve == charged
    rate, _ = _gated_rate(profile, knob=knob, share=share, locked=locked)
    assert rate == pytest.approx(SPEC_OFF, rel=1e-9)


def test_the_warm_curve_interpolates_like_the_others_and_round_trips() -> None:
    profile, old = _profile(), _without_warm()
    for c in (0.5, 1, 2, 3, 4, 9, 16, 40):
        assert profile.output_tok_s(c, False) == old.output_tok_s(c, False)  # spec_off untouched
        assert profile.output_tok_s(c, True, draft_warm=True) == profile.output_tok_s(c, True)
        warm = profile.output_tok_s(c, False, draft_warm=True)
        assert warm == old._at(profile.spec_off_warm_curve, c)  # the profile's one interpolation
        assert old.output_tok_s(c, False, draft_warm=True) == pytest.approx(
            old.output_tok_s(c, False) * (1 - DEFAULT_KEPT_EXTEND_TAX), rel=1e-12
        )
    assert profile.output_tok_s(4, False, draft_warm=True) == 220.0
    assert profile.output_tok_s(16, False, draft_warm=True) == WARM
    again = parse_profile(profile.to_json(), source="again")
    assert again.spec_off_warm_tok_s == (80.0, 220.0, WARM)
    assert "spec_off_warm" not in old.to_json()["output_tok_s"]
    # a server without speculation has neither knob nor extend: its plain curve
    assert profile.without_speculation().output_tok_s(16, False, draft_warm=True) == 1200.0


@pytest.mark.parametrize(
    "value, message",
    [
        ([80.0, 220.0], "'output_tok_s.spec_off_warm' has 2 values but 'concurrency' has 3"),
        ([80.0, 0.0, 560.0], "'output_tok_s.spec_off_warm' values must be > 0"),
        ([80.0, -1.0, 560.0], "'output_tok_s.spec_off_warm[1]' must not be negative"),
        ([80.0, "fast", 560.0], "'output_tok_s.spec_off_warm[1]' must be a finite number"),
        ([80.0, float("nan"), 560.0], "'output_tok_s.spec_off_warm[1]' must be a finite number"),
        ([80.0, 1e12, 560.0], "'output_tok_s.spec_off_warm[1]' must be <= 1e+08"),
        ({"16": 560.0}, "'output_tok_s.spec_off_warm' must be a non-empty list of numbers"),
        ([], "'output_tok_s.spec_off_warm' must be a non-empty list of numbers"),
    ],
)
def test_a_bad_warm_curve_is_one_line_naming_it(value: Any, message: str) -> None:
    with pytest.raises(ProfileError) as exc:
        parse_profile(_data(spec_off_warm=value), source="warm-gated")
    text = str(exc.value)
    assert "\n" not in text and text.startswith("warm-gated: ") and message in text


def test_the_shipped_h200_profile_carries_the_measured_warm_curve() -> None:
    profile = load_profile("h200-8b-pair-triton")
    assert profile.spec_off_warm_tok_s is not None
    ratios = [w / o for w, o in zip(profile.spec_off_warm_tok_s, profile.spec_off_tok_s, strict=True)]
    assert all(0.85 < r < 0.98 for r in ratios), ratios  # 0.88-0.97 measured
    assert "h200x2-8b-pair-triton-policies-2026-12-01" in profile.raw["description"]


def _decode_full(engine: Engine, steps: int, waiting: int) -> RankScheduler:
    """``steps`` decode steps over ``BATCH`` running requests with ``waiting`` more queued, never admitted
    (driven step by step: the rank's own loop would prefill them first when it had room)."""

    async def run() -> RankScheduler:
        rank = engine.ranks[0]
        for _ in range(BATCH):
            rank.submit(engine.new_request(8, 10**9, streaming=False))
        deadline = await rank._prefill(engine.max_running_requests, 0.0)
        for _ in range(waiting):
            rank.submit(engine.new_request(8, 10**9, streaming=False))
        for _ in range(steps):
            deadline = await rank._decode(deadline)
        return rank

    return asyncio.run(run())


def test_a_window_waits_while_requests_queue_in_the_simulator_as_in_the_plugin() -> None:
    """Plugin 0.4.12 (plugin/explore.py, WINDOW_WAIT_MAX_CYCLES): ``sim serve``'s rank decodes with requests
    waiting only when it cannot admit them, and its window waits as the plugin's does; with the queue empty
    the same steps reach a window (its warm part waits out its cap: these requests never finish)."""
    steps = WINDOW_CYCLE_BATCHES + WINDOW_WARM_MAX_BATCHES + 100
    engine = Engine(SimConfig(profile=_profile(), explore_share=knob_contract.DEFAULT_EXPLORE_SHARE))
    engine.set_spec_max_bs(8)
    rank = _decode_full(engine, steps, waiting=3)
    report = rank.explorer.window_report()
    assert report["windows"] == 0 and report["full_waited"] > 0 and rank.batches_drafted == 0
    roomy = Engine(SimConfig(profile=_profile(), explore_share=knob_contract.DEFAULT_EXPLORE_SHARE))
    roomy.set_spec_max_bs(8)
    rank = _decode_full(roomy, steps, waiting=0)
    assert rank.explorer.window_report()["windows"] == 1 and rank.batches_drafted > 0
