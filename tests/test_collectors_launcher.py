"""collectors/sglang/launcher.py: the plugin's ``launcher`` block read into types and said in one line, with
the advice where the launcher's collections ran long and nothing is frozen."""

from __future__ import annotations

import time
from typing import Any

import pytest
from spectower.collectors.sglang.launcher import FREEZE_ADVICE, Pause, launcher_report
from spectower.plugin import gc_pauses, stall_watch

from tests.test_engine_counters import FakeClock as Clock

AT = 1_796_435_875.3  # 2026-12-05 01:57:55.3 UTC


def _block(frozen: int = 0, long_s: tuple[float, ...] = (0.33, 0.44)) -> dict[str, Any]:
    """A launcher block made by the plugin's own timer and watch (plugin/gc_pauses.py, stall_watch.py)."""
    clock = Clock()
    pauses = gc_pauses.GcPauses(threshold_s=0.05, clock=clock, wall=lambda: AT)
    for took in (0.001, *long_s):
        pauses.callback("start", {"generation": 2})
        clock.now += took
        pauses.callback("stop", {"generation": 2})
    watch = stall_watch.StallWatch(None, 0, wall=lambda: AT)
    for late in (0.12, 0.34):  # the first is late, not held long enough for the log
        watch.watch_once(0.0, late_s=late)
    gc_block = pauses.report() | {"frozen": frozen}
    return {"pid": 637, "gc": gc_block, "watch": watch.report()}


def test_long_collections_and_held_python_are_said_with_what_stops_them() -> None:
    report = launcher_report(_block())
    assert report is not None
    assert (report.pid, report.collections, report.long, report.frozen, report.held) == (637, 3, 2, 0, 1)
    assert report.recent_long == (Pause(AT, 0.33, 2), Pause(AT, 0.44, 2))
    text = report.summary(utc=True)
    assert text == ("launcher (pid 637, HTTP server and tokenizer manager): 3 collections, 2 >= 0.05 s, the "
                    "longest 0.44 s (the newest at 01:57:55.3 UTC); its Python held >= 0.25 s 1 times, the "
                    "newest 0.34 s at 01:57:55.3 UTC; nothing frozen")  # fmt: skip
    assert report.advice == FREEZE_ADVICE and "/freeze_gc" in FREEZE_ADVICE
    local = time.strftime("%H:%M:%S", time.localtime(AT))
    assert f"the newest at {local}.3)" in report.summary()


def test_a_frozen_launcher_or_one_without_long_collections_gets_no_advice() -> None:
    frozen = launcher_report(_block(frozen=788_583))
    assert frozen is not None and frozen.advice is None
    assert frozen.summary().endswith("788 583 objects frozen")
    quiet = launcher_report(_block(long_s=()))
    assert quiet is not None and quiet.advice is None
    assert "1 collections, none >= 0.05 s" in quiet.summary()


@pytest.mark.parametrize("block", [None, "x", 3, []])
def test_no_block_reads_as_none(block: Any) -> None:
    assert launcher_report(block) is None


def test_a_malformed_block_reads_what_it_can() -> None:
    report = launcher_report({"pid": True, "gc": {"recent_long": [{"at": "x"}, 5]}, "watch": "no"})
    assert report is not None
    assert (report.pid, report.collections, report.frozen, report.held, report.recent_long) == (
        None, None, None, None, ())  # fmt: skip
    assert report.summary() == "launcher (pid ?, HTTP server and tokenizer manager): ? collections"
