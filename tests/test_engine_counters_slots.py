"""The counters' slots and mix blocks (plugin 0.4.15, plugin/engine_counters.py): the batch sizes of the
counted steps per mode and bin (through record and through begin/end, settling steps left out, the bins
grown), the exploring parts' request mix published beside them, both summed over ranks, and their readers'
tolerance of a snapshot without them or with a malformed one."""

from __future__ import annotations

import json
from typing import Any

import pytest
from spectower.plugin import engine_counters as ec

from tests.test_engine_counters import BINS_48, counters
from tests.test_part_mix import Req


def test_slots_sum_the_batch_sizes_of_the_counted_steps() -> None:
    """``slots / steps`` is a cell's mean batch, ``tokens / slots`` its tokens per request: a bin of 33-48
    tells 40 requests at 3 tokens from 48 at 2.5 (the same 120 tokens a step). Settling steps are in no
    bin."""
    c, clock = counters(48)
    c.record(40, True, 120, 0.02)
    c.record(48, True, 120, 0.02)
    c.record(48, True, 96, 0.02, settling=True)
    c.begin(16, False)
    clock.now += 0.01
    c.end(16, [0] * 16)
    snap = c.snapshot()
    i, j = snap["bins"].index(48), snap["bins"].index(16)
    assert snap["slots"]["drafted"][i] == 88 and snap["drafted"]["steps"][i] == 2
    assert snap["slots"]["gated"][j] == 16 and sum(snap["slots"]["gated"]) == 16
    assert ec.validate(snap) is None and ec.slots_block(snap) == {
        mode: [float(v) for v in snap["slots"][mode]] for mode in ec.MODES}  # fmt: skip
    json.dumps(snap)


def test_the_slots_block_grows_with_the_bins_and_the_mix_block_bins_a_part_by_its_first_batch() -> None:
    c, _ = counters(None)
    c.record(5, False, 5, 0.01)
    assert c.snapshot()["slots"]["gated"] == [0, 0, 0, 0, 5]
    c.ensure(48)
    assert all(len(values) == len(BINS_48) for values in c.slots.values())
    reqs = [Req(4.0) for _ in range(40)]
    c.part_mix.batch(True, True, 40, lambda: reqs)
    for req in reqs:
        req.verify()
    c.part_mix.batch(False, False, 40, lambda: reqs)
    snap = c.snapshot()
    i = snap["bins"].index(48)
    mix = ec.mix_block(snap)
    assert mix is not None and mix["parts"][i] == 1 and mix["requests"][i] == 40
    assert mix["accept_sum"][i] == 160 and mix["inverse_sum"][i] == pytest.approx(10)
    assert sum(snap["mix"]["parts"]) == 1 and isinstance(snap["mix"]["requests"][i], int)


def test_the_launches_pending_are_those_without_a_verify_yet() -> None:
    c, _ = counters(48)
    assert c.launches_pending() == 0
    c.begin(16, True)
    c.begin(16, True)  # the overlap loop: the next one launched before the first one's result
    assert c.launches_pending() == 2
    c.end(16, [1] * 16)
    assert c.launches_pending() == 1


def test_sum_ranks_sums_both_blocks_on_the_union_of_the_bins_and_a_rank_without_them_adds_nothing() -> None:
    first, _ = counters(8)
    first.record(8, True, 24, 0.01)
    first.part_mix.sums = {8: [1, 6, 18.0, 2.0]}
    other, _ = counters(16)
    other.record(16, True, 30, 0.01)
    other.part_mix.sums = {7: [2, 10, 25.0, 4.5]}
    older = {key: value for key, value in first.snapshot().items() if key not in ("slots", "mix")}
    total = ec.sum_ranks([first.snapshot(), other.snapshot(), older])
    assert total["bins"] == [1, 2, 3, 4, 6, 8, 12, 16]
    assert total["slots"]["drafted"] == [0, 0, 0, 0, 0, 8, 0, 16]
    assert total["mix"]["parts"] == [0, 0, 0, 0, 0, 3, 0, 0]
    assert total["mix"]["accept_sum"] == [0, 0, 0, 0, 0, 43.0, 0, 0]
    assert "slots" not in ec.sum_ranks([older]) and "mix" not in ec.sum_ranks([older])


BAD_LISTS: list[Any] = [None, [0], [0, 0, -1], [0, 0, float("inf")], [0, True, 0], [0, "1", 0], "000"]


@pytest.mark.parametrize("bad", BAD_LISTS)
def test_a_malformed_or_missing_block_reads_as_none_and_the_counts_beside_it_stand(bad: Any) -> None:
    c, _ = counters(3)
    c.record(3, True, 9, 0.01)
    snap = json.loads(json.dumps(c.snapshot()))
    assert ec.slots_block(snap) is not None and ec.mix_block(snap) is not None
    for name, key, reader in (("slots", "gated", ec.slots_block), ("mix", "inverse_sum", ec.mix_block)):
        broken = json.loads(json.dumps(snap))
        broken[name][key] = bad
        assert reader(broken) is None and ec.validate(broken) is None
        assert reader({**snap, name: [1, 2, 3]}) is None
        assert reader({key: value for key, value in snap.items() if key != name}) is None
        assert ec.sum_ranks([broken])["drafted"]["steps"] == [0, 0, 1]
    assert ec.slots_block(None) is None and ec.mix_block(None) is None
