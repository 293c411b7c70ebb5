"""collectors/sglang/stalls.py: the plugin's ``loop`` block (built by plugin/loop_stalls.py's own recorder,
driven through its hooks as SGLang's overlap loop calls them) read into types, and each stall said in one line
with what took its time."""

from __future__ import annotations

import time
from typing import Any

import pytest
from spectower.collectors.sglang.stalls import loop_report
from spectower.plugin import loop_stalls

from tests.test_loop_stalls import WALL, Loop, batch
from tests.test_loop_stalls import loop as loop  # the fixture: the recorder behind the hooks


def _steady(loop: Loop, n: int = 3) -> None:
    for _ in range(n):
        loop.iteration(batch("DECODE", 30))


def test_a_long_prefill_reads_as_waiting_for_its_result(loop: Loop) -> None:
    _steady(loop)
    loop.iteration(batch("EXTEND", 9, 31_004), result_s=0.008)
    loop.last = (loop.last[0], 1.2) if loop.last else None
    _steady(loop)
    report = loop_report(loop.recorder.report())
    assert report is not None and report.stalls == 1 and report.gaps == 6
    (stall,) = report.recent
    assert stall.cause() == "waiting for a batch's result 1.20 s (EXTEND, 9 requests, 31 004 new tokens)"
    when = time.strftime("%H:%M:%S", time.gmtime(WALL)) + ".2"
    assert stall.text() == f"1.20 s to {when}: " + stall.cause()
    assert stall.started == pytest.approx(WALL - stall.seconds)
    assert report.summary() == "1 gap between results >= 0.25 s of 6, 1.20 s in all, the longest 1.20 s"


def test_a_collection_that_is_half_the_stall_or_more_is_named_first(loop: Loop) -> None:
    gc_total = [0.0]
    loop.recorder._gc_seconds = lambda: gc_total[0]
    _steady(loop)

    def collecting(*_args: Any, **_kwargs: Any) -> None:
        loop.clock.now += 0.6
        gc_total[0] += 0.6

    loop_stalls.hook_process_input_requests(collecting, loop.scheduler, [])
    _steady(loop, 1)
    (stall,) = loop_report(loop.recorder.report()).recent  # type: ignore[union-attr]
    assert stall.cause() == "garbage collection 0.60 s"


def test_requests_waiting_with_nothing_run_and_a_flood_of_input(loop: Loop) -> None:
    _steady(loop, 2)
    for _ in range(30):
        loop.clock.now += 0.01
        loop.iteration(None, waiting=7)
    loop.iteration(batch("EXTEND", 7, 900))
    loop.iteration(batch("DECODE", 37))
    loop_stalls.hook_process_input_requests(loop._taking(0.4), loop.scheduler, [object()] * 250)
    _steady(loop, 2)
    first, second = loop_report(loop.recorder.report()).recent  # type: ignore[union-attr]
    # the first 10 ms passed before the last result
    assert first.cause() == "nothing ran with 7 requests waiting 0.29 s"
    assert second.cause() == "taking in new requests 0.40 s (250 requests)"


def test_a_block_missing_or_malformed_reads_safely() -> None:
    assert loop_report(None) is None and loop_report("x") is None
    report = loop_report({"threshold_s": 0.25, "gaps": "many", "recent": [{"seconds": 0.5, "phases": None,
                          "batches": [{"mode": None, "tokens": True}, "x"]}, 7]})  # fmt: skip
    assert report is not None and report.gaps == 0 and report.summary().startswith("no gap")
    (stall,) = report.recent
    assert stall.batches[0].mode == "?" and stall.batches[0].tokens is None
    assert stall.cause() == "no breakdown reported" and stall.seconds == 0.5
