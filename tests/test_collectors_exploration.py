"""collectors/sglang/exploration.py: a rank's exploration said in one line, from the plugin's own report
(plugin/gate.py ``explore_report``) and from blocks an older plugin or a bad row carries."""

from __future__ import annotations

from typing import Any

import pytest
from spectower.collectors.sglang.exploration import summary, window_counts
from spectower.plugin.gate import Gate


def test_the_plugins_report_is_said_with_its_windows_and_what_a_full_server_held_back() -> None:
    gate = Gate(explore_share=0.2, explore_cycle=64)
    gate.set_ceiling(8)
    for waiting in [0] * 6 + [3] * 5 + [0] * 16:  # 6 cold (a share of 0.2), 5 full, 15 for room
        gate.waiting = waiting
        gate.decide(16)
    assert summary(gate.explore_report(active=True)) == (
        "20.0% of each bin's batches, on; windows among gated batches: 1 exploring part, 0 ended by their "
        "time cap, now explore; a full server held back 20 batches, cut 0 parts short, 0 windows ran full")
    paused = summary(gate.explore_report(active=False))
    assert paused is not None and paused.startswith(
        "20.0% of each bin's batches, paused (a lock holds the knob); windows among gated batches: 1 ")


def test_a_plugin_before_0_4_12_or_without_windows_says_what_it_has() -> None:
    older = {"share": 0.02, "active": True, "window": {"cycle": 8192, "windows": 3, "timed_out": 1,
                                                        "phase": "cold"}}  # fmt: skip
    assert summary(older) == ("2.0% of each bin's batches, on; windows among gated batches: 3 exploring "
                              "parts, 1 ended by their time cap, now cold")  # fmt: skip
    no_windows = {"share": 0.02, "active": True, "window": {"cycle": 0}}
    assert summary(no_windows) == "2.0% of each bin's batches, on"


@pytest.mark.parametrize("block", [None, {}])
def test_no_block_reads_as_none(block: Any) -> None:
    assert summary(block) is None


@pytest.mark.parametrize("share", [0, 0.0, None, "2%", True])
def test_a_share_of_zero_or_one_not_a_number_reads_as_off(share: Any) -> None:
    assert summary({"share": share, "active": True}) == "off (share 0)"


def test_a_malformed_window_is_left_out() -> None:
    assert summary({"share": 0.02, "active": True, "window": "cold"}) == "2.0% of each bin's batches, on"


def test_a_window_not_yet_run_and_nothing_held_back_is_said_in_few_words() -> None:
    """The Control page of a young server read "0 exploring parts, 0 ended by their time cap; a full server
    held back 0 batches, cut 0 parts short, 0 windows ran full": every count 0, said in full."""
    counts = {"cycle": 8192, "windows": 0, "timed_out": 0, "full_waited": 0, "yielded": 0, "forced": 0}
    young = {"share": 0.02, "active": True, "window": counts}
    assert summary(young) == "2.0% of each bin's batches, on; no exploring window among gated batches yet"
    one_each = {"share": 0.02, "active": True,
                "window": {**counts, "windows": 2, "full_waited": 1, "yielded": 1, "forced": 1}}
    assert summary(one_each) == (
        "2.0% of each bin's batches, on; windows among gated batches: 2 exploring parts, 0 ended by their "
        "time cap; a full server held back 1 batch, cut 1 part short, 1 window ran full")


def test_window_counts_sum_the_ranks_windows_and_count_a_bad_field_as_nothing() -> None:
    gate = Gate(explore_share=0.2, explore_cycle=64)
    gate.set_ceiling(8)
    for _ in range(10):  # 6 cold (a share of 0.2), then an exploring part of 4
        gate.decide(16)
    report = gate.explore_report(active=True)
    bad = {**report, "window": {**report["window"], "windows": "three", "batches": {"cold": -1, "warm": 2}}}
    doc = {"internal_states": [{"spectower": {"explore": report}}, {"spectower": {"explore": bad}},
                               {"spectower": {}}, "not a rank"]}  # fmt: skip
    counts = window_counts(doc)
    assert counts is not None and counts["windows"] == report["window"]["windows"] == 1
    assert counts["cold"] == report["window"]["batches"]["cold"] == 6
    assert counts["warm"] == report["window"]["batches"]["warm"] + 2
    assert counts["explore"] == report["window"]["batches"]["explore"] > 0
    assert window_counts({"internal_states": [{"spectower": {"explore": {"share": 0.02}}}]}) is None
    assert window_counts(None) is None and window_counts({"internal_states": "x"}) is None
