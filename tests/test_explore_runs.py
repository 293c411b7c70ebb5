"""plugin/explore.py: exploration in runs, and the engine counters' settling steps. The plugin's gate
(pure logic here; against SGLang's own classes in tests/test_sglang_plugin.py) and the simulator
(tests/test_sim_explore.py) use the same schedule."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from spectower.plugin import engine_counters as ec
from spectower.plugin import knob_contract as kc
from spectower.plugin.explore import (
    RUN_LENGTH,
    WINDOW_CYCLE_BATCHES,
    WINDOW_EXPLORE_BATCHES,
    WINDOW_EXPLORE_MAX_S,
    WINDOW_MAX_BATCH_GAP_S,
    WINDOW_WARM_MAX_BATCHES,
    Explorer,
    ExploreSchedule,
    ExploreWindows,
    cycle_of,
    kept_extend_share,
)
from spectower.plugin.gate import Gate

WORKER = object()


def _walk(schedule: ExploreSchedule, sizes: list[int], period: int) -> tuple[list[int], list[int]]:
    """(1-based positions explored, positions settling) over ``sizes``."""
    explored, settling = [], []
    for i, size in enumerate(sizes, 1):
        e, s = schedule.next(size, period)
        if e:
            explored.append(i)
        if s:
            settling.append(i)
    return explored, settling


def test_runs_of_four_start_at_a_bins_period_th_batch_then_every_period_times_four() -> None:
    assert RUN_LENGTH == 4
    explored, settling = _walk(ExploreSchedule(), [4] * 1000, period=50)
    starts = [50, 250, 450, 650, 850]
    assert explored == [i + k for i in starts for k in range(4)]  # 20 of 1000: the 2 % share, in runs
    assert settling == [i + k for i in starts for k in (0, 4)]  # into each run, and the first batch after it


def test_each_bin_counts_its_own_batches_and_a_run_may_cross_bins() -> None:
    schedule = ExploreSchedule()
    explored, _ = _walk(schedule, [4] * 49 + [16] * 10, period=50)
    assert explored == []  # bin 4 is at 49, bin 16 at 10
    explored, _ = _walk(schedule, [4, 16, 16, 4, 4], period=50)
    assert explored == [1, 2, 3, 4]  # bin 4's 50th starts the run; the run goes on whatever the size


def test_period_zero_explores_nothing_ends_a_run_and_counts_nothing() -> None:
    schedule = ExploreSchedule()
    explored, settling = _walk(schedule, [4] * 372, period=10)  # runs at 10, 50, 90, ..., 370
    assert explored[-3:] == [370, 371, 372]  # one batch of this run still to go
    explored, settling = _walk(schedule, [4] * 100, period=0)  # a lock: paused
    assert explored == [] and settling == [1]  # the run ends at once; that batch switches back
    explored, _ = _walk(schedule, [4] * 40, period=10)  # counting resumes where it stopped (372)
    assert explored == [38, 39, 40]  # bin 4's 410th batch (372 + 38) starts the next run


def test_settling_steps_are_counted_apart_from_the_bins() -> None:
    c = ec.EngineCounters(8, clock=lambda: 0.0, wall=lambda: 1.0)
    c.record(4, True, 12, 0.01)
    c.record(4, False, 4, 0.05, settling=True)  # a switch's first step: slow, kept apart
    c.record(4, False, 4, 0.01)
    snap = c.snapshot()
    i = snap["bins"].index(4)
    assert snap["drafted"]["steps"][i] == 1 and snap["gated"]["steps"][i] == 1
    assert snap["gated"]["time_s"][i] == pytest.approx(0.01)
    assert snap["settling"] == {"steps": 1, "tokens": 4, "time_s": 0.05}
    assert ec.validate(snap) is None
    json.dumps(snap)
    # begin/end carry the mark through a launch and a relabel
    c.begin(4, True, settling=True)
    c.relabel_latest(4, False)
    c.end(4, [0, 0, 0, 0])
    assert c.settling["steps"] == 2 and c.steps["gated"][i] == 1


def test_ranks_sum_their_settling_and_an_older_plugin_has_none() -> None:
    a = ec.EngineCounters(8, wall=lambda: 1.0)
    b = ec.EngineCounters(8, wall=lambda: 1.0)
    a.record(4, True, 10, 0.1, settling=True)
    b.record(4, True, 6, 0.2, settling=True)
    older = b.snapshot()
    del older["settling"]
    total = ec.sum_ranks([a.snapshot(), b.snapshot()])
    assert total["settling"] == {"steps": 2, "tokens": 16, "time_s": pytest.approx(0.3)}
    assert ec.sum_ranks([a.snapshot(), older])["settling"]["tokens"] == 10
    broken = a.snapshot()
    broken["settling"] = "n/a"
    assert ec.sum_ranks([broken])["settling"] == {"steps": 0, "tokens": 0, "time_s": 0}


def test_the_gate_explores_in_runs_without_moving_the_hysteresis() -> None:
    gate = Gate(min_dwell=16, explore_share=0.02, explore_cycle=160)  # windows: 150 cold, 10 exploring
    assert gate.explore_period == 50
    gate.set_ceiling(8)
    below = []
    for _ in range(449):
        gated = gate.decide(4)
        gate.count(gated, 3, gate.plan.explore)
        below.append((gated, gate.plan.settling))
    runs = [*range(50, 54), *range(250, 254)]
    assert [i for i, (gated, _) in enumerate(below, 1) if gated] == runs
    assert [i for i, (_, settling) in enumerate(below, 1) if settling] == [50, 54, 250, 254]
    assert gate.switches == 0 and not gate.closed  # explored batches are no gate switch
    assert gate.batches_explored == 8
    # a run is two step changes (3 -> 0 and 0 -> 3), not two per explored batch
    assert gate.explore_changes == gate.step_changes == 4
    # closes at once; gated by the ceiling, bin 16 explores in windows only: each exploring part is a drafting
    # stream of twice the cycle's usual explored batches (160 / 50 -> 3), the first half its turnover
    above = []
    for _ in range(480):
        above.append((gate.decide(16), gate.explorer.phase_now))
    drafted = [i for i, (gated, _) in enumerate(above, 1) if not gated]
    assert drafted and all(above[i - 1][1] == "explore" for i in drafted)
    assert [p for _, p in above].count("explore") == 3 * 6 and len(drafted) == 3 * 6  # three windows
    assert gate.switches == 1 and gate.closed
    # the dwell counts the gate's own batches after the one that closed it, none of the explored ones
    assert gate.closed_batches == 480 - len(drafted) - 1
    # paused (a lock holds the knob): nothing explores
    assert not any(gate.decide(16, may_explore=False) is False for _ in range(500))
    report = gate.explore_report(active=True)
    assert report.pop("window")["windows"] == 3
    assert report == {"share": 0.02, "period": 50, "run": 4, "batches": 8, "active": True}  # count()ed


def test_the_gate_explores_nothing_at_share_zero_or_while_not_allowed() -> None:
    gate = Gate(explore_share=0.0)
    gate.set_ceiling(8)
    assert not any(gate.decide(4) for _ in range(500))
    gate = Gate(explore_share=0.1)  # period 10: runs of 4 from a bin's 10th batch, every 40
    gate.set_ceiling(8)
    assert not any(gate.decide(4, may_explore=False) for _ in range(500))  # a lock: nothing explores
    gated = [i for i in range(1, 101) if gate.decide(4)]  # allowed again: counted from here on
    assert gated == [*range(10, 14), *range(50, 54), *range(90, 94)]
    gate = Gate(explore_share=0.1)
    gate.set_ceiling(0)
    assert all(gate.decide(4, may_explore=False) for _ in range(500))  # a manual off: off means off
    assert gate.explorer.phase_now is None  # locked: no window either


def test_the_gate_counts_explored_batches_and_their_step_changes() -> None:
    gate = Gate(explore_share=0.2)  # period 5: runs of 4 from a bin's 5th batch, every 20
    gate.set_ceiling(8)
    for _ in range(8):  # the run: batches 5-8
        gated = gate.decide(4)
        gate.count(gated, 3, gate.plan.explore)
    assert (gate.batches_explored, gate.batches_gated, gate.batches_drafted) == (4, 4, 4)
    assert gate.step_changes == gate.explore_changes == 1 and gate.switches == 0  # 3 -> 0 at the 5th
    gated = gate.decide(4)
    gate.count(gated, 3, gate.plan.explore)
    assert not gated and gate.plan.settling and gate.step_changes == gate.explore_changes == 2
    gate.set_ceiling(0)
    for _ in range(20):  # bin 2's run: explored to draft, but the bands say 0: nothing explored
        gated = gate.decide(2)
        gate.count(gated, 0, gate.plan.explore)
    assert gate.batches_explored == 4
    assert Gate().explore_report(active=True)["active"] is False  # share 0: nothing to explore


# ---- windows at a policy's 0 (issue #32) -----------------------------------------------------------------


def _phases(windows: ExploreWindows, n: int, pending: list[bool]) -> list[str]:
    """``n`` batches; ``pending`` answers holes_pending() in turn (then False)."""
    answers = iter(pending)
    return [windows.step(lambda: next(answers, False)) for _ in range(n)]


def test_a_window_is_cold_then_warm_until_no_holes_then_explores() -> None:
    windows = ExploreWindows(cycle=160)  # a 16th explores (10 batches), the warm part's cap an 8th (20)
    assert (windows.explore_batches, windows.warm_max) == (10, 20)
    phases = _phases(windows, 170, [True, True, True])
    assert phases == ["cold"] * 150 + ["warm"] * 3 + ["explore"] * 10 + ["cold"] * 7
    assert (windows.windows, windows.warm_cut) == (1, 0)
    assert windows.batches == {"cold": 157, "warm": 3, "explore": 10}


def test_a_warm_part_that_runs_out_is_cut_and_the_holes_forgotten() -> None:
    windows = ExploreWindows(cycle=160)
    phases = _phases(windows, 150, [])
    assert set(phases) == {"cold"}
    cut_at = []
    for i in range(30):
        phase = windows.step(lambda: True)  # a request that never finishes
        if windows.cut_now:
            cut_at.append(i)
            assert phase == "explore"
    assert cut_at == [20] and windows.warm_cut == 1  # 20 warm batches, then the window explores anyway
    assert _phases(windows, 20, []) == ["cold"] * 20  # the exploring part's ten batches ran: cold again


def test_above_zero_the_explorer_is_the_schedule_alone() -> None:
    explorer, schedule = Explorer(), ExploreSchedule()
    sizes = [4, 16, 4, 64] * 500
    plans = [explorer.next(b, False, 50, ceiling=64) for b in sizes]
    assert [(p.explore, p.settling) for p in plans] == [schedule.next(b, 50) for b in sizes]
    assert {p.phase for p in plans} == {None} and explorer.phase_now is None


def test_among_gated_batches_exploring_packs_into_windows_and_the_rest_is_cold() -> None:
    explorer = Explorer()
    cycle = WINDOW_CYCLE_BATCHES + 1  # the warm part takes one batch: no holes here
    plans = [explorer.next(64, True, 50, ceiling=32) for _ in range(2 * cycle)]
    explored = [i for i, p in enumerate(plans) if p.explore]
    assert all(plans[i].phase == "explore" for i in explored)
    # the share's number of explored batches counted per cycle, all in the window's few hundred batches,
    # after as many again that turn the batch over (settling: counted apart)
    counted = [i for i in explored if not plans[i].settling]
    assert abs(len(counted) / 2 - cycle / 50) <= 2 and len(explored) == 2 * len(counted)
    first = explored[: len(explored) // 2]
    assert all(plans[i].settling for i in first[: len(first) // 2])
    cold = sum(p.phase == "cold" for p in plans)
    assert cold / len(plans) > 1 - 2 * WINDOW_EXPLORE_BATCHES / WINDOW_CYCLE_BATCHES
    # a gated batch outside the cold part keeps the extend: counted apart (settling), never as the off rate
    assert all(p.settling for p in plans if p.phase != "cold" and not p.explore)
    assert not any(p.settling for p in plans if p.phase == "cold")
    assert explorer.windows is not None
    assert explorer.windows.explore_length(50) == 2 * round(WINDOW_CYCLE_BATCHES / 50)
    assert explorer.windows.explore_length(0) == 0
    assert explorer.windows.explore_length(2) == WINDOW_EXPLORE_BATCHES


def _timed_windows(explore_step_s: float, cold_step_s: float, batches: int) -> tuple[list[str], float, float]:
    """Walk ``batches`` gated batches through windows on an injected clock, each batch taking the step time of
    its phase; (the phases, seconds spent exploring, seconds in all)."""
    explorer, now, phases = Explorer(), 0.0, []
    explored_s = total_s = 0.0
    for _ in range(batches):
        plan = explorer.next(64, True, 50, now=now, ceiling=32)
        step = explore_step_s if plan.explore else cold_step_s
        now += step
        total_s += step
        explored_s += step if plan.explore else 0.0
        phases.append(plan.phase or "")
    return phases, explored_s, total_s


def test_windows_keep_exploring_to_its_share_of_the_time_when_a_drafted_step_costs_more() -> None:
    """Drafted batches cost 2-5x a gated step with long contexts (the H200 under Azure's replay): counted in
    batches only, the exploring part took 12 % of the step time where the share meant a few %. With the clock,
    the cold part after a window lasts as long per batch as the window did."""
    cycle_batches = 6 * WINDOW_CYCLE_BATCHES
    equal, equal_explored, equal_total = _timed_windows(0.008, 0.008, cycle_batches)
    dear, dear_explored, dear_total = _timed_windows(0.032, 0.008, cycle_batches)
    batch_share = equal.count("explore") / len(equal)
    assert abs(equal_explored / equal_total - batch_share) < 0.002  # same cost: time share = batch share
    # 4x dearer drafting: fewer windows in as many batches, and the time share stays near the batch share
    assert dear.count("explore") < equal.count("explore") / 2
    assert dear_explored / dear_total < 1.3 * batch_share
    # without the clock (None) the same walk spends ~4x the share of the time exploring
    explorer = Explorer()
    steps = [0.032 if explorer.next(64, True, 50, ceiling=32).explore else 0.008
             for _ in range(cycle_batches)]  # fmt: skip
    assert sum(s for s in steps if s > 0.008) / sum(steps) > 3 * batch_share


def test_an_idle_server_does_not_stretch_the_next_cold_part() -> None:
    windows = ExploreWindows()
    now = 0.0
    while windows.step(period=50, now=now) != "explore":
        now += 0.008
    for _ in range(windows.explore_length(50)):  # the window, idle for an hour in its middle
        now += 3600.0 if windows.in_phase == 10 else 0.008
        windows.step(period=50, now=now)
    assert windows.phase == "cold" and windows.last_explore_s is not None
    assert windows.last_explore_s <= windows.explore_length(50) * 0.008 + WINDOW_MAX_BATCH_GAP_S + 1e-9
    assert windows.report(True)["cold_min_s"] == round(windows.cold_min_s, 3) > 0


def test_cycle_zero_turns_windows_off_and_a_bad_cycle_is_one_line() -> None:
    explorer = Explorer(cycle_of("0"))
    # exploring throughout, as before windows
    plans = [explorer.next(64, True, 50, ceiling=32) for _ in range(500)]
    assert {p.phase for p in plans} == {None} and sum(p.explore for p in plans) == 12
    assert explorer.window_report() == {"active": False, "phase": None, "cycle": 0}
    assert cycle_of(None) == cycle_of(" ") == WINDOW_CYCLE_BATCHES and cycle_of("64") == 64
    for raw in ("x", "1", "-3", str(1 << 21)):
        with pytest.raises(ValueError, match="SPECTOWER_EXPLORE_CYCLE"):
            cycle_of(raw)
    assert kept_extend_share(0) == 1.0 and 0.03 < kept_extend_share() < 0.06


def test_the_extend_is_skipped_in_a_windows_cold_part_only() -> None:
    period = 50
    assert kc.extend_skippable(True, period, kc.OWNER_FREE, "cold")
    assert not kc.extend_skippable(True, period, kc.OWNER_FREE, "warm")
    assert not kc.extend_skippable(True, period, kc.OWNER_FREE, "explore")
    assert not kc.extend_skippable(True, period, kc.OWNER_FREE, None)  # windows off: exploring keeps it
    assert not kc.extend_skippable(False, period, kc.OWNER_FREE, "cold")  # gated by exploration: kept


def test_the_plugin_skips_cold_waits_for_holes_and_forgets_them_when_warm_runs_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The knob plugin's gate and the gated-decode plugin's tracker together, as inside SGLang: a policy's
    0 skips the extend in the cold part; the warm part runs the extend until the holed requests finish."""
    from spectower.plugin import draft_holes
    from spectower.plugin import gated_decode as gd
    from spectower.plugin import knob_gate as plugin

    monkeypatch.setattr(plugin, "_STATE", None)
    monkeypatch.setattr(gd, "_HOOKED", True)
    tracker = draft_holes.ExtendSkip(allowed=plugin.extend_skip_allowed, enabled=True, drain_max_steps=4096)
    monkeypatch.setattr(draft_holes, "_SKIP", tracker)
    gate = plugin.gate_state()
    gate.set_explore_share(0.02)
    gate.set_ceiling(0)  # a policy's 0: no lock

    def batch(rids: list[str]) -> tuple[str | None, bool, bool]:
        tracker.begin_batch(WORKER, [SimpleNamespace(rid=rid) for rid in rids])
        wanted = 0 if gate.decide(len(rids), holes_pending=plugin._holes_pending) else 3
        if gate.plan.forget_holes:
            tracker.forget_holes()
        steps = tracker.steps_for(wanted)
        tracker.mark(steps)
        ran = (gate.explorer.phase_now, tracker.skip_now, steps > 0)
        tracker.end_batch()
        return ran

    cold = [batch(["long", "short"]) for _ in range(WINDOW_CYCLE_BATCHES - WINDOW_EXPLORE_BATCHES)]
    assert cold[0] == ("cold", True, False) and all(c == cold[0] for c in cold)
    assert tracker.holed == {"long", "short"}
    assert batch(["long", "short"]) == ("warm", False, False)  # the extend runs again, nothing explores
    # "short" finished; "long" still holed: warm until the cap, then forgotten and explored anyway
    warm = [batch(["long", "new"]) for _ in range(WINDOW_WARM_MAX_BATCHES - 1)]
    assert all(w == ("warm", False, False) for w in warm)
    phase, skipped, _ = batch(["long", "new"])
    assert (phase, skipped) == ("explore", False) and tracker.holed == set()
    assert tracker.drains_cut_short == 1 and gate.explorer.windows.warm_cut == 1
    length = gate.explorer.windows.explore_length(gate.explore_period)
    window = [batch(["long", "new"]) for _ in range(length - 1)]
    assert all(drafted for _, _, drafted in window) and not any(s for _, s, _ in window)  # a drafting stream
    assert batch(["long", "new"]) == ("cold", True, False)
    report = gate.explore_report(active=True)["window"]
    assert report["active"] and report["phase"] == "cold" and report["windows"] == 1


def _explore_part(step_s: float, period: int = 50) -> tuple[ExploreWindows, list[bool]]:
    """Walk one window to its exploring part and through it, every batch ``step_s`` apart; whether each
    drafted batch of the part counted (``stream``)."""
    windows = ExploreWindows()
    now = 0.0
    while windows.step(period=period, now=now) != "explore":
        now += 0.008
    counted = []
    while windows.phase == "explore":
        counted.append(windows.stream(windows.drafts(16, 8), period))
        now += step_s
        windows.step(period=period, now=now)
    return windows, counted


def test_an_exploring_part_of_dear_steps_ends_at_its_time_cap_and_counts_its_second_half_in_time() -> None:
    """Plugin 0.4.4: drafted steps of 50 ms (a burst near capacity with long prompts) would make the default
    part of 328 batches 16 s of half-speed service; it ends after WINDOW_EXPLORE_MAX_S of busy time instead,
    and counts the batches of its second half in time, as a full part counts its second half in batches."""
    windows, counted = _explore_part(0.050)
    batches = round(WINDOW_EXPLORE_MAX_S / 0.050)
    assert len(counted) == batches + 1  # the batch that crossed the cap ran in the part
    assert windows.report(True)["timed_out"] == 1 and windows.last_explore_s == pytest.approx(
        WINDOW_EXPLORE_MAX_S, abs=0.05
    )
    first_counted = counted.index(True)
    assert first_counted == pytest.approx(batches / 2, abs=1) and all(counted[first_counted:])
    # the next cold part still keeps exploring at its share of the time: per batch as long as this part
    assert windows.cold_min_s == pytest.approx(
        windows.last_explore_s * (windows.cycle - windows.explore_batches) / len(counted), rel=0.01
    )


def test_an_exploring_part_of_cheap_steps_runs_its_length_in_batches() -> None:
    windows, counted = _explore_part(0.005)  # 328 batches in 1.6 s: within the cap
    assert len(counted) == windows.explore_length(50) and windows.report(True)["timed_out"] == 0
    assert counted.index(True) == windows.turnover(50)
    # without a clock nothing is timed: the part is its batches whatever they cost
    windows = ExploreWindows()
    while windows.step(period=50) != "explore":
        pass
    parts = 1
    while windows.step(period=50) == "explore":
        parts += 1
    assert parts == windows.explore_length(50)


def test_a_share_above_the_default_brings_windows_more_often_and_leaves_their_parts_as_long() -> None:
    """Plugin 0.4.16: from about the default share up the exploring part is at its cap, so a larger share
    shortens the cold part in proportion (the learn policy's thin share: three windows in minutes, not three
    cycles); the default share and a smaller one keep the whole cycle."""

    def walked(period: int) -> tuple[int, int]:
        """Exploring parts begun in 60 000 gated batches, and the first part's length."""
        windows, phases = ExploreWindows(), []
        for _ in range(60_000):
            phases.append(windows.step(period=period))
        first = phases.index("explore")
        return windows.windows, phases[first:].index("cold")

    (base, base_part), (quiet, _), (thin, thin_part) = walked(50), walked(200), walked(10)
    assert base_part == 328 and thin_part == WINDOW_EXPLORE_BATCHES  # the cap: parts no shorter
    cold = WINDOW_CYCLE_BATCHES - WINDOW_EXPLORE_BATCHES
    assert ExploreWindows().cold_batches(10) == round(cold / 5) and ExploreWindows().cold_batches(200) == cold
    assert quiet == base == 60_000 // (cold + 328) and thin >= 4 * base
