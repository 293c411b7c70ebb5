"""The counters' prefilled block (plugin 0.4.14, plugin/engine_counters.py): the decode steps that carried a
prefill's time, per mode and bin, through note_prefill/begin/end (with and without overlap scheduling, an idle
turn, a settling step), the pure step time a reader takes from it, keep_tokens, rates(), sum_ranks(), the
growth of the bins, and a reader's tolerance of a snapshot without it or with a bad one."""

from __future__ import annotations

import json

import pytest
from spectower.plugin import engine_counters as ec

from tests.test_engine_counters import BINS_48, FakeClock, counters, nonzero


def prefilled_at(snap: dict, mode: str, b: int) -> dict[str, float]:
    """A snapshot's ``prefilled`` counts of ``mode`` in bin ``b``."""
    i = snap["bins"].index(b)
    return {field: snap["prefilled"][mode][field][i] for field in ec.FIELDS}


def prefilled_step(c: ec.EngineCounters, clock: FakeClock, batch: int, drafted: bool, accepted: int,
                   span_s: float) -> None:  # fmt: skip
    """A prefill noted, then a decode step of ``span_s`` launched a millisecond after it, which carries it
    (``accepted`` draft tokens per request)."""
    c.note_prefill()
    clock.now += 0.001
    c.begin(batch, drafted)
    clock.now += span_s
    c.end(batch, [accepted] * batch)


def test_a_prefill_noted_while_a_step_is_in_flight_marks_the_next_step_not_that_one() -> None:
    """Plugin 0.4.14, the overlap loop: the prefill chosen while D1 is in flight runs on the GPU before D2, so
    D2 (launched after the note) is the prefilled step, D1 is not; several prefills before one step make
    one prefilled step, and the note goes once a step took it."""
    c, clock = counters(48)
    c.begin(16, True)  # D1
    clock.now += 0.002
    c.note_prefill()  # chosen while D1 is in flight
    clock.now += 0.001
    c.note_prefill()  # a second prefill before any step took the first
    c.end(16, [2] * 16)  # D1's result: launched before the prefill
    assert prefilled_at(c.snapshot(), "drafted", 16)["steps"] == 0
    c.begin(16, True)  # D2
    clock.now += 0.015  # its span holds the prefills' GPU time
    c.end(16, [2] * 16)
    c.begin(16, True)  # D3: no prefill since D2 took the note
    clock.now += 0.010
    c.end(16, [2] * 16)
    snap = c.snapshot()
    assert prefilled_at(snap, "drafted", 16) == {"steps": 1, "tokens": 48, "time_s": pytest.approx(0.015)}
    assert nonzero(snap, "drafted", "steps") == {16: 3}
    assert prefilled_at(snap, "gated", 16)["steps"] == 0


def test_without_overlap_the_prefilled_steps_time_holds_its_gap_and_an_idle_turn_drops_the_note() -> None:
    """Without overlap the prefill runs in the gap before the next step (``outside``): the prefilled block's
    time is the step's span and gap together. A prefill noted before an idle turn ran out before it: the
    step after the idle carries nothing. A settling step takes the note but is in no bin, nor here."""
    c, clock = counters(48)
    c.begin(8, False)
    clock.now += 0.005
    c.end(8, [0] * 8)
    c.note_prefill()
    clock.now += 0.020  # the prefill, between two steps
    c.begin(8, False)
    clock.now += 0.005
    c.end(8, [0] * 8)
    c.note_prefill()
    clock.now += 0.020
    c.note_idle()  # the prefill's requests finished with it: nothing running, nothing waiting
    clock.now += 3.0
    c.begin(8, False)
    clock.now += 0.005
    c.end(8, [0] * 8)
    c.note_prefill()
    c.begin(8, True, settling=True)  # the first step of an exploration run takes the note
    clock.now += 0.007
    c.end(8, [1] * 8)
    c.begin(8, True)
    clock.now += 0.006
    c.end(8, [1] * 8)
    snap = c.snapshot()
    assert prefilled_at(snap, "gated", 8) == {"steps": 1, "tokens": 8, "time_s": pytest.approx(0.025)}
    assert snap["outside"]["gated"][snap["bins"].index(8)] == pytest.approx(0.020)
    assert prefilled_at(snap, "drafted", 8)["steps"] == 0 and snap["settling"]["steps"] == 1


def test_no_prefill_no_prefilled_steps() -> None:
    c, clock = counters(48)
    for drafted in (True, False) * 20:
        c.begin(12, drafted)
        clock.now += 0.004
        c.end(12, [1] * 12 if drafted else [0] * 12)
        clock.now += 0.001
    snap = c.snapshot()
    zeros = {field: [0] * len(BINS_48) for field in ec.FIELDS}
    assert snap["prefilled"] == {mode: zeros for mode in ec.MODES}
    assert nonzero(snap, "drafted", "steps") == {12: 20} and nonzero(snap, "gated", "steps") == {12: 20}


def test_the_pure_step_time_is_read_back_from_a_stream_with_prefills() -> None:
    """A drafted stream at 16 under overlap (10-ms steps, result to result; every 3rd prefill, chosen while a
    step is in flight, puts 12 ms in the next step's span) and a gated stream at 32 without overlap (6-ms
    steps 1 ms apart; every 4th prefill puts 9 ms more in the gap before the next step): ``(time_s + outside
    - prefilled.time_s) / (steps - prefilled steps)`` gives each steady step time back, over the snapshot and
    over ``with_outside``'s interval, where the plain mean reads the prefills as decode time."""
    c, clock = counters(48)
    start = c.snapshot()
    carries = False
    c.begin(16, True)
    for n in range(60):  # overlap: the next step launches before this one's result
        clock.now += 0.0005
        prefill = n % 3 == 0
        if prefill:
            c.note_prefill()  # while this step is in flight
        c.begin(16, True)
        clock.now += 0.0095 + (0.012 if carries else 0.0)  # this step's span: a prefill noted before it
        c.end(16, [2] * 16)
        carries = prefill
    for n in range(40):  # no overlap: each step launches after the last result
        if n % 4 == 0:
            c.note_prefill()
            clock.now += 0.009  # the prefill runs here
        clock.now += 0.001
        c.begin(32, False)
        clock.now += 0.006
        c.end(32, [0] * 32)
    snap = c.snapshot()

    def pure(time_s: float, outside_s: float, steps: int, prefilled: dict[str, float]) -> float:
        return (time_s + outside_s - prefilled["time_s"]) / (steps - prefilled["steps"])

    for mode, b, steady, prefilled_steps in (("drafted", 16, 0.010, 20), ("gated", 32, 0.007, 10)):
        i = snap["bins"].index(b)
        block = prefilled_at(snap, mode, b)
        assert block["steps"] == prefilled_steps
        time_s, outside_s, steps = snap[mode]["time_s"][i], snap["outside"][mode][i], snap[mode]["steps"][i]
        assert pure(time_s, outside_s, steps, block) == pytest.approx(steady)
        assert (time_s + outside_s) / steps > steady * 1.05  # the plain mean: prefills read as decode time
        interval = ec.with_outside(ec.rates(start, snap))
        delta = {field: interval["prefilled"][mode][field][i] for field in ec.FIELDS}
        folded_s, steps = interval[mode]["time_s"][i], interval[mode]["steps"][i]
        assert pure(folded_s, 0.0, steps, delta) == pytest.approx(steady)


def test_snapshot_rates_and_sum_ranks_carry_the_prefilled_block_and_take_snapshots_without_it() -> None:
    """The block is published, its deltas come with ``rates`` (from zero after a restart), ranks sum on the
    union of their bins, and an older plugin's snapshot (no block) or a malformed one is read without it."""
    c, clock = counters(8)
    prefilled_step(c, clock, 4, True, 1, 0.010)
    first = c.snapshot()
    assert ec.validate(first) is None
    assert ec.prefilled_block(first) == first["prefilled"]
    assert prefilled_at(first, "drafted", 4) == {"steps": 1, "tokens": 8, "time_s": pytest.approx(0.010)}
    json.dumps(first)
    for _ in range(2):
        prefilled_step(c, clock, 8, False, 0, 0.004)
    second = c.snapshot()
    delta = ec.rates(first, second)
    assert delta["prefilled"]["drafted"]["steps"] == [0] * 6
    gated = delta["prefilled"]["gated"]
    assert gated["steps"] == [0] * 5 + [2] and gated["tokens"] == [0] * 5 + [16]
    assert gated["time_s"] == pytest.approx([0.0] * 5 + [0.01])
    assert ec.rates(None, second)["prefilled"]["drafted"]["steps"][3] == 1
    # another rank whose bins grew: summed on the union, a rank without the block adds nothing
    other = ec.EngineCounters(8, clock=clock, wall=lambda: 1234.5)
    other.record(16, True, 40, 0.02, prefilled=True)
    older = {key: value for key, value in second.items() if key != "prefilled"}
    total = ec.sum_ranks([second, other.snapshot(), older])
    assert total["bins"] == [1, 2, 3, 4, 6, 8, 12, 16]
    assert total["prefilled"]["drafted"]["steps"] == [0, 0, 0, 1, 0, 0, 0, 1]
    assert total["prefilled"]["gated"]["tokens"] == [0] * 5 + [16, 0, 0]
    assert "prefilled" not in ec.sum_ranks([older])
    # an older plugin's snapshot: valid, no block, no deltas of it; a malformed block is left out
    assert ec.validate(older) is None and ec.prefilled_block(older) is None
    assert "prefilled" not in ec.rates(None, older) and "prefilled" not in ec.rates(first, older)
    broken = json.loads(json.dumps(second))
    broken["prefilled"]["gated"]["steps"] = [0]
    assert ec.prefilled_block(broken) is None and ec.validate(broken) is None
    broken["prefilled"] = {"drafted": second["prefilled"]["drafted"]}
    assert ec.prefilled_block(broken) is None
    broken["prefilled"] = {mode: {**second["prefilled"][mode], "time_s": [-1.0] * 6} for mode in ec.MODES}
    assert ec.prefilled_block(broken) is None
    assert ec.rates(first, broken)["gated"]["steps"][5] == 2  # the counts beside it read as they are
    # and a restart: the later snapshot's block counts from zero
    fresh = ec.EngineCounters(8, wall=lambda: 9999.0)
    fresh.record(2, False, 2, 0.01, prefilled=True)
    restarted = ec.rates(second, fresh.snapshot())
    assert restarted["restarted"] and restarted["prefilled"]["gated"]["steps"] == [0, 1, 0, 0, 0, 0]


def test_keep_tokens_cuts_a_prefilled_steps_tokens_too() -> None:
    c, clock = counters(48)
    prefilled_step(c, clock, 16, True, 2, 0.01)  # 48 tokens, prefilled
    c.keep_tokens(40)
    i = c.bins.index(16)
    assert c.tokens["drafted"][i] == 40 and c.prefilled["drafted"]["tokens"][i] == 40
    c.record(16, True, 48, 0.01)  # not prefilled: its cut leaves the block alone
    c.keep_tokens(44)
    assert c.tokens["drafted"][i] == 84 and c.prefilled["drafted"]["tokens"][i] == 40
    assert c.snapshot()["prefilled"]["drafted"]["tokens"][i] == 40 and c.tokens_not_kept == 12


def test_the_prefilled_block_grows_with_the_bins() -> None:
    c, _ = counters(None)
    c.record(5, False, 5, 0.01, prefilled=True)
    assert c.bins == [1, 2, 3, 4, 6]
    snap = c.snapshot()
    assert snap["prefilled"]["gated"]["steps"] == [0, 0, 0, 0, 1]
    c.ensure(48)
    assert all(len(values) == len(BINS_48) for block in c.prefilled.values() for values in block.values())
    c.record(48, True, 100, 0.02, outside_s=0.005, prefilled=True)
    snap = c.snapshot()
    assert ec.validate(snap) is None and ec.prefilled_block(snap) is not None
    assert prefilled_at(snap, "drafted", 48) == {"steps": 1, "tokens": 100, "time_s": pytest.approx(0.025)}
