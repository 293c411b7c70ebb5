"""The decode counters (plugin/engine_counters.py): binning, drafted vs gated, step time with an injected
clock, snapshot deltas and rates; and the simulator publishing the same shape in /server_info."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import httpx
import pytest
from spectower.plugin import engine_counters as ec
from spectower.simulator.profile import load_profile

from benchmarks.sim_fidelity import TokenClock, stream_worker
from benchmarks.simulator_process import DEFAULT_PROFILE, SimulatorFactory


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def counters(max_running: int | None = 48) -> tuple[ec.EngineCounters, FakeClock]:
    clock = FakeClock()
    return ec.EngineCounters(max_running, clock=clock, wall=lambda: 1234.5), clock


BINS_48 = [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48]


def nonzero(snap: dict, mode: str, field: str) -> dict[int, float]:
    """A snapshot's ``mode.field`` list as {bin: value}, zeros left out."""
    return {b: v for b, v in zip(snap["bins"], snap[mode][field], strict=True) if v}


def test_bins_are_half_octaves_up_to_max_running_requests() -> None:
    assert ec.counter_bins(48) == BINS_48
    assert ec.counter_bins(64) == [*BINS_48, 64]
    assert ec.counter_bins(100) == [*BINS_48, 64, 96, 128]
    assert ec.counter_bins(1) == [1]
    assert ec.counter_bins(None) == [1]
    c, _ = counters(48)
    # A batch counts in the smallest bin >= its size (how a CUDA graph pads it).
    sizes = (1, 2, 3, 4, 5, 7, 8, 9, 13, 33, 48, 49)
    want = [1, 2, 3, 4, 6, 8, 8, 12, 16, 48, 48, 64]
    assert [ec.bin_of(b) for b in sizes] == want
    assert [c.bins[c.bin_index(b)] for b in sizes] == want  # 49 grows the bins to 64
    assert ec.bin_of(1 << 20) == ec.MAX_BIN


def test_bins_grow_for_a_larger_batch_and_stay_parallel() -> None:
    c, _ = counters(None)
    c.record(5, True, 10, 0.01)
    assert c.bins == [1, 2, 3, 4, 6]
    snap = c.snapshot()
    assert ec.validate(snap) is None
    assert snap["drafted"]["steps"] == [0, 0, 0, 0, 1] and snap["gated"]["steps"] == [0] * 5
    c.ensure(48)
    assert c.bins == BINS_48 and all(len(c.steps[m]) == len(BINS_48) for m in ec.MODES)
    c.record(1 << 20, False, 1, 0.1)  # beyond MAX_BIN: the last bin
    assert c.bins[-1] == ec.MAX_BIN and c.steps["gated"][-1] == 1


def test_begin_end_counts_drafted_and_gated_separately_with_step_time() -> None:
    c, clock = counters(48)
    c.begin(8, True)
    clock.now += 0.010
    c.end(8, [2, 3, 0, 1, 3, 3, 3, 3])  # tokens: sum(correct + 1) = 18 + 8
    clock.now += 1.0  # idle: never counted
    c.begin(20, False)
    clock.now += 0.004
    c.end(20, [0] * 20)
    snap = c.snapshot()
    assert snap["bins"] == BINS_48
    assert nonzero(snap, "drafted", "steps") == {8: 1}
    assert nonzero(snap, "drafted", "tokens") == {8: 26}
    assert nonzero(snap, "drafted", "time_s") == {8: 0.01}
    assert nonzero(snap, "gated", "steps") == {24: 1}  # 20 counts in bin 24
    assert nonzero(snap, "gated", "tokens") == {24: 20}
    assert nonzero(snap, "gated", "time_s")[24] == pytest.approx(0.004)
    assert snap["unmatched"] == 0 and snap["dropped"] == 0
    assert snap["started_at"] == 1234.5 and snap["clock"] == "perf_counter" and snap["version"] == 1
    json.dumps(snap)  # JSON-ready


def test_overlap_scheduling_counts_result_to_result() -> None:
    """Overlap: batch 2 launches before batch 1's result; batch 2's time starts at batch 1's result."""
    c, clock = counters(48)
    c.begin(4, True)  # t=100
    clock.now += 0.002
    c.begin(4, True)  # t=100.002, batch 1 still running
    clock.now += 0.005
    c.end(4, [1, 1, 1, 1])  # t=100.007: batch 1 took 7 ms from launch
    clock.now += 0.006
    c.end(4, [0, 0, 0, 0])  # t=100.013: batch 2 counted 6 ms (result to result), not 11 ms
    snap = c.snapshot()
    assert nonzero(snap, "drafted", "steps") == {4: 2} and nonzero(snap, "drafted", "tokens") == {4: 8 + 4}
    assert nonzero(snap, "drafted", "time_s")[4] == pytest.approx(0.013)


def test_the_gap_before_a_step_counts_outside_its_span_unless_the_scheduler_idled() -> None:
    """Plugin 0.4.13: a step launched after the previous step's result leaves the gap between them outside
    both spans; it counts in the ``outside`` block under the later step's bin and mode, not where an idle
    turn sat in it (that time no mode spent). Overlapped steps leave no gap."""
    c, clock = counters(48)
    c.begin(16, True)
    clock.now += 0.009
    c.end(16, [2] * 16)  # t=100.009
    clock.now += 0.003  # a prefill ran here
    c.begin(16, True)  # t=100.012: 3 ms after the result
    clock.now += 0.009
    c.end(16, [2] * 16)
    clock.now += 0.002
    c.begin(16, False)
    clock.now += 0.005
    c.end(16, [0] * 16)  # a gated step 2 ms after the last result
    clock.now += 5.0
    c.note_idle()  # nothing to run: the next gap holds idle time
    c.begin(16, False)
    clock.now += 0.005
    c.end(16, [0] * 16)
    c.begin(16, False)  # launched at the last result: no gap
    clock.now += 0.005
    c.end(16, [0] * 16)
    snap = c.snapshot()
    i = snap["bins"].index(16)
    assert snap["outside"]["drafted"][i] == pytest.approx(0.003)
    assert snap["outside"]["gated"][i] == pytest.approx(0.002)  # the idle 5 s left out
    assert nonzero(snap, "drafted", "time_s")[16] == pytest.approx(0.018)  # the spans are as before
    later = c.snapshot()
    c.begin(16, True)
    clock.now += 0.009
    c.end(16, [2] * 16)
    clock.now += 0.004
    c.begin(16, True)
    clock.now += 0.009
    c.end(16, [2] * 16)
    delta = ec.rates(later, c.snapshot())
    assert delta["drafted"]["outside_s"][i] == pytest.approx(0.004)
    assert delta["gated"]["outside_s"][i] == 0
    both = ec.sum_ranks([c.snapshot(), c.snapshot()])
    assert both["outside"]["drafted"][i] == pytest.approx(2 * 0.007)
    # an older plugin's snapshot has no block, and a malformed one is left out
    assert ec.outside_block({"bins": [1], "drafted": {}}) is None
    assert ec.outside_block({"bins": [1, 2], "outside": {"drafted": [0.1], "gated": [0, 0]}}) is None
    assert ec.outside_block({"bins": [1], "outside": {"drafted": [float("inf")], "gated": [0]}}) is None
    assert "outside_s" not in ec.rates(None, {**c.snapshot(), "outside": None})["drafted"]


def test_with_outside_folds_a_modes_gaps_into_its_step_time_once() -> None:
    """Every estimate reads a mode's time with its seconds outside the steps: the step time grows by them,
    the rates follow, ``outside_s`` goes so a second fold adds nothing, and an older plugin's interval (no
    ``outside_s``) is as it was."""
    c, clock = counters(48)
    before = c.snapshot()
    for gap in (0.0, 0.002, 0.002):
        clock.now += gap
        c.begin(16, True)
        clock.now += 0.010
        c.end(16, [2] * 16)  # 48 tokens in 10 ms
    interval = ec.rates(before, c.snapshot())
    i = interval["bins"].index(16)
    folded = ec.with_outside(interval)
    assert folded["drafted"]["time_s"][i] == pytest.approx(0.034)
    assert folded["drafted"]["tok_s"][i] == pytest.approx(144 / 0.034)
    assert folded["drafted"]["step_s"][i] == pytest.approx(0.034 / 3)
    assert interval["drafted"]["time_s"][i] == pytest.approx(0.030)  # the interval itself untouched
    assert "outside_s" not in folded["drafted"] and "outside_s" not in folded["gated"]
    assert ec.with_outside(folded) == folded
    older = ec.rates(None, {**c.snapshot(), "outside": None})
    assert ec.with_outside(older) == older


def test_keep_tokens_counts_the_last_step_at_what_its_requests_kept_once() -> None:
    """Plugin 0.4.13 (plugin/kept_tokens.py): the step just recorded loses the tokens its requests did not
    keep, in its bin, or among the settling steps, and in the extend block where it counted there too; a
    second call for the same step, or more kept than counted, changes nothing."""
    c, _ = counters(48)
    c.record(16, True, 48, 0.01)
    c.keep_tokens(40)
    c.keep_tokens(30)  # the same step again: nothing
    i = c.bins.index(16)
    assert c.tokens["drafted"][i] == 40 and c.tokens_not_kept == 8 and c.recorded == 1
    c.record(16, False, 16, 0.005, extend_kept=True)
    c.record(16, False, 16, 0.005, extend_kept=True)  # a steady gated step: in the extend block too
    c.keep_tokens(15)
    assert c.tokens["gated"][i] == 31 and c.extend["kept"]["tokens"][i] == 15
    c.record(16, True, 48, 0.01, settling=True)
    c.keep_tokens(50)  # kept more than counted (a prefill's token is not the step's): nothing taken
    c.keep_tokens(0)
    assert c.settling["tokens"] == 48 and c.tokens_not_kept == 9
    assert c.snapshot()["tokens_not_kept"] == 9


def test_verify_results_match_their_own_launch_and_strays_are_counted() -> None:
    c, clock = counters(48)
    c.begin(3, True)
    c.begin(12, False)
    clock.now += 0.01
    c.end(3, [1, 1, 1])
    c.end(12, [0] * 12)
    snap = c.snapshot()
    assert nonzero(snap, "drafted", "steps") == {3: 1}
    assert nonzero(snap, "gated", "steps") == {12: 1}
    # A launch that never got its verify is dropped when a later one is matched.
    c.begin(5, True)
    c.begin(6, True)
    c.end(6, [0] * 6)
    assert c.dropped == 1 and c.steps["drafted"][c.bins.index(6)] == 1
    # A verify with no launch is counted only as unmatched.
    c.end(7, [0] * 7)
    assert c.unmatched == 1 and sum(c.steps["drafted"]) == 2
    # The pending memory is bounded.
    for _ in range(ec.PENDING_MEMORY + 5):
        c.begin(2, True)
    assert len(c._pending) == ec.PENDING_MEMORY and c.dropped == 6


def test_rates_between_two_snapshots() -> None:
    c, _ = counters(8)
    c.record(4, True, 30, 0.01)
    first = c.snapshot()
    for _ in range(10):
        c.record(4, True, 30, 0.01)  # 3000 tok/s drafted at bin 4
        c.record(8, False, 8, 0.004)  # 2000 tok/s gated at bin 8
    second = c.snapshot()
    r = ec.rates(first, second)
    assert r["bins"] == [1, 2, 3, 4, 6, 8] and r["restarted"] is False
    assert r["drafted"]["steps"] == [0, 0, 0, 10, 0, 0]
    assert r["drafted"]["tokens"] == [0, 0, 0, 300, 0, 0]
    assert r["drafted"]["tok_s"][3] == pytest.approx(3000.0)
    assert r["drafted"]["step_s"][3] == pytest.approx(0.01)
    assert r["drafted"]["tok_s"][5] is None and r["gated"]["tok_s"][3] is None
    assert r["gated"]["tok_s"][5] == pytest.approx(2000.0)
    # Since start:
    assert ec.rates(None, second)["drafted"]["steps"][3] == 11


def test_rates_across_bin_growth_and_restart() -> None:
    c, _ = counters(4)
    c.record(2, True, 6, 0.01)
    before = c.snapshot()
    c.record(16, False, 16, 0.01)  # grows the bins to 16
    after = c.snapshot()
    r = ec.rates(before, after)
    assert r["bins"] == [1, 2, 3, 4, 6, 8, 12, 16] and not r["restarted"]
    assert r["gated"]["steps"] == [0] * 7 + [1] and r["drafted"]["steps"] == [0] * 8
    # A new process: another started_at; the later snapshot counts from zero.
    fresh = ec.EngineCounters(4, wall=lambda: 9999.0)
    fresh.record(1, True, 2, 0.01)
    r = ec.rates(after, fresh.snapshot())
    assert r["restarted"] and r["drafted"]["steps"] == [1, 0, 0, 0]
    # Counters that went down (same start stamp) are a restart too.
    shrunk = json.loads(json.dumps(after))
    shrunk["gated"]["steps"][-1] = 0
    assert ec.rates(after, shrunk)["restarted"]


@pytest.mark.parametrize(
    ("mutate", "problem"),
    [
        (lambda s: s.pop("bins"), "bins"),
        (lambda s: s.update(bins=[2, 1]), "ascending"),
        (lambda s: s["drafted"].update(steps=[0]), "as long as bins"),
        (lambda s: s["gated"]["time_s"].__setitem__(0, -1.0), "non-negative"),
        # /server_info's JSON reader takes Infinity: stored, it would read back as a rate of 0
        (lambda s: s["drafted"]["time_s"].__setitem__(0, json.loads("Infinity")), "finite non-negative"),
        (lambda s: s["gated"]["tokens"].__setitem__(0, float("nan")), "finite non-negative"),
        (lambda s: s.pop("gated"), "gated"),
    ],
)
def test_validate_names_what_is_wrong(mutate: Any, problem: str) -> None:
    snap = ec.EngineCounters(8).snapshot()
    assert ec.validate(snap) is None
    mutate(snap)
    why = ec.validate(snap)
    assert why is not None and problem in why


def test_simulator_publishes_the_same_counters(simulator_factory: SimulatorFactory) -> None:
    """Gated steps at batch 4 (ceiling 2), then drafted steps at batch 2: the counters move in those bins,
    with tokens and modelled step time on the profile's curves."""
    profile = load_profile(DEFAULT_PROFILE)
    sim = simulator_factory(decode_log_interval=5, explore_share=0)  # each phase in one mode only
    info = lambda: httpx.get(f"{sim.base_url}/server_info", timeout=10).json()["internal_states"][0]  # noqa: E731
    assert httpx.post(
        f"{sim.base_url}/set_internal_state", json={"server_args": {"spectower_spec_max_bs": 2}}, timeout=10
    ).json() == [True]

    async def load(c: int, seconds: float) -> None:
        async with httpx.AsyncClient(timeout=30) as client:
            clock = TokenClock()
            stop = time.monotonic() + seconds
            await asyncio.gather(
                *(stream_worker(client, sim.base_url, 2000, clock, stop, {}) for _ in range(c))
            )

    def load_until(c: int, since: dict[str, Any], mode: str, b: int) -> dict[str, Any]:
        """Load in 1-s rounds until bin ``b`` has more than 10 ``mode`` steps since ``since`` (a loaded box
        runs fewer steps a second: a fixed 2 s once gave 8), 60 s at most; the block then."""
        deadline = time.monotonic() + 60
        while True:
            asyncio.run(load(c, 1.0))
            now = info()["spectower"]
            moved = ec.rates(since["counters"], now["counters"])
            if moved[mode]["steps"][moved["bins"].index(b)] > 10 or time.monotonic() > deadline:
                return now

    start = info()["spectower"]
    assert ec.validate(start["counters"]) is None
    assert start["counters"]["bins"] == ec.counter_bins(info()["effective_max_running_requests_per_dp"])
    mid = load_until(4, start, "gated", 4)
    end = load_until(2, mid, "drafted", 2)
    assert ec.validate(end["counters"]) is None and end["counters"]["clock"] == "model"
    gated = ec.rates(start["counters"], mid["counters"])
    drafted = ec.rates(mid["counters"], end["counters"])
    bin4, bin2 = gated["bins"].index(4), drafted["bins"].index(2)
    assert gated["gated"]["steps"][bin4] > 10 and sum(gated["drafted"]["steps"][bin4:]) == 0
    assert drafted["drafted"]["steps"][bin2] > 10
    # Gated: one token per request; drafted: about the profile's accept length per request.
    assert gated["gated"]["tokens"][bin4] <= 4 * gated["gated"]["steps"][bin4]
    per_req = drafted["drafted"]["tokens"][bin2] / (2 * drafted["drafted"]["steps"][bin2])
    assert per_req == pytest.approx(profile.accept_length_at(2), rel=0.2)
    assert gated["gated"]["tok_s"][bin4] == pytest.approx(profile.output_tok_s(4, False), rel=0.25)
    assert drafted["drafted"]["tok_s"][bin2] == pytest.approx(profile.output_tok_s(2, True), rel=0.25)
    # Every counted step is one of the batches the block already reports.
    total = end["counters"]
    assert sum(total["drafted"]["steps"]) <= end["batches_drafted"]
    assert sum(total["gated"]["steps"]) <= end["batches_gated"]
