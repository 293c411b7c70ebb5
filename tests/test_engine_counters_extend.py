"""The counters' extend block (plugin 0.4.6, plugin/engine_counters.py): steady gated steps by whether the
draft extend ran, through begin/mark_extend/end, rates(), sum_ranks(), and a reader's tolerance of a bad
one."""

from __future__ import annotations

import json

import pytest
from spectower.plugin import engine_counters as ec

from tests.test_engine_counters import FakeClock, counters


def steps(snap: dict, kind: str) -> dict[int, int]:
    block = snap["extend"][kind]
    return {b: n for b, n in zip(snap["bins"], block["steps"], strict=True) if n}


def gated_step(c: ec.EngineCounters, clock: FakeClock, batch: int, kept: bool | None, ms: float) -> None:
    c.begin(batch, False)
    if kept is not None:
        c.mark_extend(batch, kept)
    clock.now += ms / 1000
    c.end(batch, [0] * batch)


def test_a_gated_step_after_a_gated_one_counts_by_whether_the_extend_ran() -> None:
    c, clock = counters(48)
    c.begin(8, True)
    clock.now += 0.01
    c.end(8, [1] * 8)
    gated_step(c, clock, 20, kept=False, ms=5)  # after a drafted step: it pays the switch, in neither kind
    gated_step(c, clock, 20, kept=False, ms=5)
    gated_step(c, clock, 20, kept=True, ms=6)
    gated_step(c, clock, 40, kept=None, ms=7)  # not told (no gated-decode plugin): in neither
    gated_step(c, clock, 40, kept=True, ms=7)
    snap = c.snapshot()
    assert steps(snap, "skipped") == {24: 1}
    assert steps(snap, "kept") == {24: 1, 48: 1}
    kept_time = dict(zip(snap["bins"], snap["extend"]["kept"]["time_s"], strict=True))
    assert kept_time[24] == pytest.approx(0.006) and kept_time[48] == pytest.approx(0.007)
    assert snap["extend"]["kept"]["tokens"][snap["bins"].index(24)] == 20
    # every gated step still counts where it always did: 5 in the gated bins
    assert sum(snap["gated"]["steps"]) == 5
    json.dumps(snap)


def test_a_settling_step_counts_in_the_extend_block_too_and_a_drain_relabel_keeps_the_mark() -> None:
    """A window's warm part is settling (in no bin) but a steady gated step with the extend: the block is
    where its cost shows. A drained batch (begun drafted, relabelled gated) keeps its extend mark."""
    c, clock = counters(48)
    gated_step(c, clock, 16, kept=False, ms=4)
    c.begin(16, False, settling=True)
    c.mark_extend(16, True)
    clock.now += 0.005
    c.end(16, [0] * 16)
    c.begin(16, True)
    c.relabel_latest(16, drafted=False)
    c.mark_extend(16, True)
    clock.now += 0.005
    c.end(16, [0] * 16)
    snap = c.snapshot()
    assert steps(snap, "kept") == {16: 2}
    assert snap["settling"]["steps"] == 1 and sum(snap["gated"]["steps"]) == 2


def test_the_extend_block_grows_with_the_bins_and_its_deltas_follow_rates() -> None:
    c, _ = counters(8)
    c.record(8, False, 8, 0.004)
    first = c.snapshot()
    for _ in range(3):
        c.record(8, False, 8, 0.004, extend_kept=False)
        c.record(8, False, 8, 0.005, extend_kept=True)
    c.record(100, False, 100, 0.02, extend_kept=True)  # grows the bins
    second = c.snapshot()
    assert all(len(second["extend"][k][f]) == len(second["bins"]) for k in ec.EXTEND_KINDS for f in ec.FIELDS)
    r = ec.rates(first, second)
    i = r["bins"].index(8)
    assert r["extend"]["skipped"]["steps"][i] == 3 and r["extend"]["kept"]["steps"][i] == 3
    assert r["extend"]["kept"]["time_s"][i] == pytest.approx(0.015)
    assert r["extend"]["kept"]["steps"][-1] == 1
    # a snapshot from a plugin before 0.4.6 has no block: rates() gives none either
    old = {k: v for k, v in second.items() if k != "extend"}
    assert "extend" not in ec.rates(first, old)


def test_sum_ranks_adds_the_extend_blocks_on_the_union_of_bins() -> None:
    a, _ = counters(8)
    b, _ = counters(48)
    a.record(8, False, 8, 0.004)
    a.record(8, False, 8, 0.005, extend_kept=True)
    b.record(32, False, 32, 0.01)
    b.record(32, False, 32, 0.01, extend_kept=False)
    b.record(8, False, 8, 0.004)
    b.record(8, False, 8, 0.006, extend_kept=True)
    total = ec.sum_ranks([a.snapshot(), b.snapshot()])
    assert steps(total, "kept") == {8: 2} and steps(total, "skipped") == {32: 1}
    assert total["extend"]["kept"]["time_s"][total["bins"].index(8)] == pytest.approx(0.011)


@pytest.mark.parametrize(
    "block",
    [
        "nope",
        {"kept": {"steps": [1], "tokens": [1], "time_s": [1.0]}},  # no skipped, lists too short
        {k: {"steps": [-1] * 6, "tokens": [0] * 6, "time_s": [0] * 6} for k in ec.EXTEND_KINDS},
    ],
)
def test_a_malformed_extend_block_is_ignored_and_the_counters_still_read(block: object) -> None:
    c, _ = counters(8)
    c.record(8, False, 8, 0.004)
    snap = {**c.snapshot(), "extend": block}
    assert ec.validate(snap) is None
    assert ec.extend_block(snap) is None
    assert "extend" not in ec.rates(None, snap)
    assert "extend" not in ec.sum_ranks([snap])
