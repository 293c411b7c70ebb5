"""The simulators publish the engine counters' ``extend`` block (plugin 0.4.6: steady gated steps by whether
the draft model's KV extend ran, plugin/engine_counters.py), and the tax measured from it
(control/kept_extend.py) is the profile's own: ``1 - spec_off_warm / spec_off``, here 13 %, not the 7 %
learn assumed before (explore.DEFAULT_KEPT_EXTEND_TAX).

Three models, their real code paths: the wire simulator's ranks (simulator/engine.py, in virtual time, read
through /server_info's counters), the open-loop fluid model (simulator/open_loop.py) and the closed-loop
harness (simulator/harness.py), each under a policy's ceiling that gates the load with exploration windows:
a window's cold part skips the extend, its warm part (and its exploring part's batches above the stream's
limit) keep it, so the bins the ceiling gates hold both kinds.
"""

from __future__ import annotations

from typing import Any

import pytest
from spectower.control import kept_extend
from spectower.control.policy import Decision, Observation
from spectower.control.speedup import intervals_from_snapshots
from spectower.plugin import engine_counters, knob_contract
from spectower.plugin.explore import DEFAULT_KEPT_EXTEND_TAX, WINDOW_CYCLE_BATCHES, WINDOW_WARM_MAX_BATCHES
from spectower.simulator.config import SimConfig
from spectower.simulator.engine import Engine
from spectower.simulator.harness import HarnessConfig, simulate
from spectower.simulator.open_loop import simulate_open_loop
from spectower.simulator.profile import Profile, parse_profile
from spectower.simulator.server_info import ServerInfo
from spectower.simulator.traces import parse_trace
from spectower.storage.request_traces import Arrival

from benchmarks.simulator_process import curve_profile
from tests.test_sim_explore import _decode as decode_steps
from tests.test_sim_explore import virtual_time  # noqa: F401 (autouse: the step clock's sleep patched out)

GAP = 0.13  # the profile's extend tax: its warm gated curve is 0.87 of spec_off at every level
LEVELS = [1, 4, 16]
SPEC_OFF = [84.0, 240.0, 650.0]
MRR = 16  # every fluid batch the load saturates is 16: one bin, one curve point
NOISE_CV = 0.05  # per-step time noise, as a real profile has (the counters carry it)


def _profile() -> Profile:
    curves: dict[str, Any] = {
        "spec_on": [190.0, 430.0, 750.0],
        "spec_off": SPEC_OFF,
        "spec_off_warm": [(1.0 - GAP) * v for v in SPEC_OFF],
        "plain": [100.0, 380.0, 1200.0],
    }
    data = curve_profile("kept-tax", LEVELS, curves, max_running_requests=MRR, noise_cv=NOISE_CV)
    return parse_profile(data, source="kept-tax")


def _profile_gap(profile: Profile, batch: int) -> float:
    return 1.0 - profile.output_tok_s(batch, False, draft_warm=True) / profile.output_tok_s(batch, False)


def _extend_steps(counters: dict[str, Any], batch: int) -> tuple[int, int]:
    """(kept, skipped) steady gated steps the counters' extend block holds in ``batch``'s bin."""
    block = engine_counters.extend_block(counters)
    assert block is not None, "the counters carry no extend block"
    i = counters["bins"].index(engine_counters.bin_of(batch))
    return int(block["kept"]["steps"][i]), int(block["skipped"]["steps"][i])


class _Recorder:
    """A policy that holds the knob where the server launched it and keeps every counters snapshot it saw,
    as a runner stores them for learn."""

    name = "recorder"

    def __init__(self) -> None:
        self.snapshots: list[tuple[float, dict[str, Any]]] = []

    def decide(self, obs: Observation) -> Decision:
        if obs.counters is not None:
            self.snapshots.append((obs.ts, obs.counters))
        return Decision(None, "hold")

    def state(self) -> dict[str, Any]:
        return {}

    def load_state(self, state: dict[str, Any]) -> None:
        return None


def _reads_the_gap(snapshots: list[tuple[float, dict[str, Any]]], model: str) -> kept_extend.KeptExtendTax:
    """The tax over these snapshots' intervals: measured in bin 16 alone, the profile's gap within 2 %."""
    tax = kept_extend.from_intervals(intervals_from_snapshots(snapshots))
    assert tax is not None, "no bin with enough kept and skipped steps"
    assert [b.batch_size for b in tax.bins] == [16]
    assert tax.tax == pytest.approx(GAP, abs=0.02)
    print(f"{model}: measured tax {tax.tax:.4f} ({tax.label()})")
    return tax


def test_the_wire_simulator_reads_its_profiles_tax_in_the_bin_the_ceiling_gates() -> None:
    """16 running under a policy's ceiling of 8 (no lock: exploring, in windows): the cold part skips the
    extend, the warm part (its requests never finish: cut at its cap) keeps it; /server_info's counters
    carry both in bin 16 and nowhere else, and their tax is the profile's 13 %."""
    profile = _profile()
    assert _profile_gap(profile, 16) == pytest.approx(GAP, rel=1e-9)
    config = SimConfig(profile=profile, explore_share=knob_contract.DEFAULT_EXPLORE_SHARE)
    engine = Engine(config)
    engine.set_spec_max_bs(8)
    info = ServerInfo(config, engine)
    try:

        def counters() -> dict[str, Any]:
            return info.server_info()["internal_states"][0]["spectower"]["counters"]

        decode_steps(engine, 16, 500)  # cold: skipped only
        first = counters()
        assert _extend_steps(first, 16) == (0, 500 - 1)  # the first step follows none: not steady
        decode_steps(engine, 16, WINDOW_CYCLE_BATCHES + WINDOW_WARM_MAX_BATCHES)
        second = counters()
    finally:
        info.close()
    window = engine.ranks[0].explorer.windows
    assert window is not None and window.windows == 1 and window.warm_cut == 1
    kept, skipped = _extend_steps(second, 16)
    assert kept == WINDOW_WARM_MAX_BATCHES and skipped > 7000  # the warm part's batches, the cold parts'
    extend = engine_counters.extend_block(second)
    assert extend is not None
    others = [i for i, b in enumerate(second["bins"]) if b != 16]
    assert not any(extend[kind]["steps"][i] for kind in engine_counters.EXTEND_KINDS for i in others)
    tax = _reads_the_gap([(0.0, first), (1.0, second)], "wire simulator")
    assert abs(tax.tax - DEFAULT_KEPT_EXTEND_TAX) > 0.04


def test_a_drafting_bins_explored_gated_steps_keep_the_extend_on_the_wire() -> None:
    """A bin the ceiling drafts explores in runs of gated batches that keep the extend: kept only (what the
    tax corrects); a profile without speculation counts none."""
    engine = Engine(SimConfig(profile=_profile(), explore_share=knob_contract.DEFAULT_EXPLORE_SHARE))
    engine.set_spec_max_bs(16)
    rank = decode_steps(engine, 16, 1000)
    kept, skipped = _extend_steps(rank.counters.snapshot(), 16)
    assert skipped == 0 and kept == pytest.approx(rank.batches_explored * 3 / 4, abs=4)  # runs of 4, less a
    # switch each (not steady)
    plain = decode_steps(Engine(SimConfig(profile=_profile().without_speculation())), 16, 200)
    assert _extend_steps(plain.counters.snapshot(), 16) == (0, 0)


def _saturating_arrivals(requests: int, rate_per_s: float, output_tokens: int) -> list[Arrival]:
    """More requests than the profile's 16 can serve (its gated 650 tok/s is 3.25 of these a second): the
    queue holds the batch at 16 throughout."""
    return [Arrival(i / rate_per_s, 64, output_tokens, i) for i in range(requests)]


def test_the_open_loop_model_reads_its_profiles_tax() -> None:
    """A policy's 0 (no lock, exploring in windows) under a queue: the cold parts skip the extend, the warm
    parts (until the holed requests finish) and the exploring part above the stream's limit keep it; the
    counters the policy sees carry both in bin 16, and the tax over their intervals is the profile's."""
    profile = _profile()
    recorder = _Recorder()
    config = HarnessConfig(initial_max_bs=0)  # the default share: windows
    result = simulate_open_loop(profile, _saturating_arrivals(2400, 5.0, 200), recorder, trace_name="queue",
                                config=config)  # fmt: skip
    assert result.undrained == 0 and len(recorder.snapshots) > 50
    kept, skipped = _extend_steps(result.counters, 16)
    assert kept >= 2 * kept_extend.MIN_STEPS and skipped > 10 * kept
    _reads_the_gap(recorder.snapshots, "open loop")


def test_the_open_loops_drafting_bins_keep_the_extend_only() -> None:
    """A ceiling above the load: nothing gated by the ceiling, the explored gated steps keep the extend."""
    profile = _profile()
    config = HarnessConfig(initial_max_bs=MRR)
    result = simulate_open_loop(profile, _saturating_arrivals(400, 5.0, 200), _Recorder(), trace_name="queue",
                                config=config)  # fmt: skip
    kept, skipped = _extend_steps(result.counters, 16)
    assert kept > 0 and skipped == 0


def test_the_closed_loop_harness_reads_its_profiles_tax() -> None:
    """16 running at a policy's 0, exploring: the harness's windowed gated table mixes steps that keep the
    extend (the warm part, the exploring part above the stream's limit) with cold ones; the extend block
    counts each kind at its own curve, so the tax over the intervals the policy saw is the profile's."""
    profile = _profile()
    recorder = _Recorder()
    trace = parse_trace([[0, 16], [900, 16]], source="constant")
    simulate(profile, trace, recorder, 900, config=HarnessConfig(initial_max_bs=0))
    last = recorder.snapshots[-1][1]
    kept, skipped = _extend_steps(last, 16)
    assert kept >= 2 * kept_extend.MIN_STEPS and skipped > 10 * kept
    gated = last["gated"]["steps"][last["bins"].index(16)]
    assert kept + skipped == pytest.approx(gated, abs=2)  # every gated step of the bin, by its kind
    _reads_the_gap(recorder.snapshots, "closed loop")


def test_the_closed_loops_drafting_bin_keeps_the_extend_and_plain_counts_none() -> None:
    profile = _profile()
    trace = parse_trace([[0, 16], [120, 16]], source="constant")
    recorder = _Recorder()
    simulate(profile, trace, recorder, 120, config=HarnessConfig())  # the launch's ceiling: drafting 16
    kept, skipped = _extend_steps(recorder.snapshots[-1][1], 16)
    assert kept > 0 and skipped == 0
    recorder = _Recorder()
    simulate(profile, trace, recorder, 120, config=HarnessConfig(initial_max_bs=0, explore_share=0.0))
    kept, skipped = _extend_steps(recorder.snapshots[-1][1], 16)
    assert kept == 0 and skipped > 0  # nothing explores: every gated step skips the extend
