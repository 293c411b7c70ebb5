"""control/explore.py: exploration in runs, and the engine counters' settling steps. The plugin's gate
(pure logic here; against SGLang's own classes in tests/test_sglang_plugin.py) and the simulator
(tests/test_sim_explore.py) use the same schedule."""

from __future__ import annotations

import json

import pytest
from spectower.control import engine_counters as ec
from spectower.control import speedup
from spectower.control.explore import RUN_LENGTH, ExploreSchedule
from spectower.control.sglang_plugin import Gate


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
    total = speedup.sum_ranks([a.snapshot(), b.snapshot()])
    assert total["settling"] == {"steps": 2, "tokens": 16, "time_s": pytest.approx(0.3)}
    assert speedup.sum_ranks([a.snapshot(), older])["settling"]["tokens"] == 10
    broken = a.snapshot()
    broken["settling"] = "n/a"
    assert speedup.sum_ranks([broken])["settling"] == {"steps": 0, "tokens": 0, "time_s": 0}


def test_the_gate_explores_in_runs_without_moving_the_hysteresis() -> None:
    gate = Gate(min_dwell=16, explore_share=0.02)
    assert gate.explore_period == 50
    gate.set_ceiling(8)
    below = []
    for _ in range(449):
        gated = gate.decide(4)
        gate.count(gated, 3, gate.explored_now)
        below.append((gated, gate.settling_now))
    runs = [*range(50, 54), *range(250, 254)]
    assert [i for i, (gated, _) in enumerate(below, 1) if gated] == runs
    assert [i for i, (_, settling) in enumerate(below, 1) if settling] == [50, 54, 250, 254]
    assert gate.switches == 0 and not gate.closed  # explored batches are no gate switch
    assert gate.batches_explored == 8
    # a run is two step changes (3 -> 0 and 0 -> 3), not two per explored batch
    assert gate.explore_changes == gate.step_changes == 4
    above = [gate.decide(16) for _ in range(449)]  # closes at once; bin 16 counts on its own
    assert [i for i, gated in enumerate(above, 1) if not gated] == runs
    assert gate.switches == 1 and gate.closed
    # the dwell counts the gate's own batches after the one that closed it, none of the explored ones
    assert gate.closed_batches == 449 - 8 - 1
    # paused (a lock holds the knob): nothing explores
    assert not any(gate.decide(16, may_explore=False) is False for _ in range(500))
    assert gate.explore_report(active=True) == {
        "share": 0.02, "period": 50, "run": 4, "batches": 8, "active": True
    }  # fmt: skip


def test_the_gate_explores_nothing_at_share_zero_or_while_not_allowed() -> None:
    gate = Gate(explore_share=0.0)
    gate.set_ceiling(8)
    assert not any(gate.decide(4) for _ in range(500))
    gate = Gate(explore_share=0.1)  # period 10: runs of 4 from a bin's 10th batch, every 40
    gate.set_ceiling(0)
    assert all(gate.decide(4, may_explore=False) for _ in range(500))  # a manual off: off means off
    drafted = [i for i in range(1, 101) if not gate.decide(4)]  # allowed again: counted from here on
    assert drafted == [*range(10, 14), *range(50, 54), *range(90, 94)]


def test_the_gate_counts_explored_batches_and_their_step_changes() -> None:
    gate = Gate(explore_share=0.2)  # period 5: runs of 4 from a bin's 5th batch, every 20
    gate.set_ceiling(8)
    for _ in range(8):  # the run: batches 5-8
        gated = gate.decide(4)
        gate.count(gated, 3, gate.explored_now)
    assert (gate.batches_explored, gate.batches_gated, gate.batches_drafted) == (4, 4, 4)
    assert gate.step_changes == gate.explore_changes == 1 and gate.switches == 0  # 3 -> 0 at the 5th
    gated = gate.decide(4)
    gate.count(gated, 3, gate.explored_now)
    assert not gated and gate.settling_now and gate.step_changes == gate.explore_changes == 2
    gate.set_ceiling(0)
    for _ in range(20):  # bin 2's run: explored to draft, but the bands say 0: nothing explored
        gated = gate.decide(2)
        gate.count(gated, 0, gate.explored_now)
    assert gate.batches_explored == 4
    assert Gate().explore_report(active=True)["active"] is False  # share 0: nothing to explore
