"""benchmarks/window_yield_whatif.py: an exploration window yielding to a full server (plugin 0.4.12), under
Azure's replayed arrivals in the simulator's open loop, pooled over window phases; its rule:
tests/test_explore_stream.py."""

from __future__ import annotations

import statistics
import sys

import pytest
from spectower.simulator.open_loop_cost import WindowStreams

from tests.conftest import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
import window_yield_whatif as whatif


def test_yielding_with_room_keeps_learns_ttft_tail_at_always_offs_near_capacity(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """At rate scale 1 on the 0.5 pair's fitted profile, 0.4.11's windows met bursts in some phases (learn's
    TTFT p99 up to 1.9x always off's); 0.4.12's (2048 batches of room) in none. Beginning at the first batch
    with room (room 0) is no better than not yielding: the moment a queue clears is the load's peak."""
    monkeypatch.chdir(REPO_ROOT)
    cells = whatif.run("data/profiles/h200-8b-pair-triton.json", ["learn"], [1.0], [0, 2048], [1, 2], 4)
    by = {c.variant: c for c in cells}
    assert set(by) == {whatif.NO_YIELD, "room 0", "room 2048"} and all(len(c.ttft_p99) == 8 for c in cells)
    assert max(by[whatif.NO_YIELD].ttft_p99) > 1.5 and statistics.mean(by[whatif.NO_YIELD].ttft_p99) > 1.1
    assert statistics.mean(by["room 0"].ttft_p99) > 1.1
    assert max(by["room 2048"].ttft_p99) < 1.02 and min(by["room 2048"].goodput) > 0.99
    # the switches are put back for whatever runs next
    assert WindowStreams.YIELD is True and WindowStreams.ROOM_BATCHES is None


def test_bad_lists_are_refused_naming_the_option(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as raised:
        whatif.main(["--rooms", "2048,x"])
    assert raised.value.code == 2
    err = capsys.readouterr().err
    assert "argument --rooms: expected whole numbers separated by commas, got '2048,x'" in err
