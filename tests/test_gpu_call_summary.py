"""benchmarks/gpu/call_summary.py: the lines each measure_off.sh call ends with, from a /server_info document
whose plugin block is built by the plugin's own objects (its gate, the gated-decode tracker, the counters,
the garbage-collection timer), as the knob plugin's get_internal_state publishes them."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from spectower.plugin.draft_holes import ExtendSkip
from spectower.plugin.engine_counters import EngineCounters
from spectower.plugin.gate import Gate
from spectower.plugin.gc_pauses import GcPauses
from spectower.plugin.loop_stalls import LoopStalls

from tests.conftest import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "benchmarks" / "gpu"))
import call_summary


def _document(extend: bool = True) -> dict[str, Any]:
    gate = Gate(min_dwell=0)
    gate.set_ceiling(16)
    for batch in (8, 8, 40, 40):
        gated = gate.decide(batch)
        gate.count(gated, 3)
    gate.mark_gated(40)
    skip = ExtendSkip(allowed=lambda: True, enabled=True)
    counters = EngineCounters(64)
    for _ in range(100):
        counters.record(48, False, 48, 0.010, extend_kept=False if extend else None)
        counters.record(48, False, 48, 0.0112, extend_kept=True if extend else None)
    counters.end(8, [2] * 8)  # a verify result whose launch was never seen
    block = {**gate.report(64), "gated_decode": skip.report(), "counters": counters.snapshot(),
             "gc": GcPauses().report(), "hooks": {"calls": 200, "seconds": 0.004}, "loop": _stalled(),
             "admin_key": "must-not-print"}  # fmt: skip
    return {"internal_states": [{"dp_rank": 0, "spectower": block}]}


def _stalled() -> dict[str, Any]:
    """A loop block with one stall: a 1.1-s wait for an extend's result, 09:30:29 UTC."""
    from tests.test_engine_counters import FakeClock as Clock

    clock = Clock()
    stalls = LoopStalls(clock=clock, wall=lambda: 1_796_463_029.5)
    for mode, requests, tokens, waited in (("DECODE", 8, None, 0.01), ("EXTEND", 5, 12_000, 1.1),
                                           ("DECODE", 13, None, 0.01)):  # fmt: skip
        started = clock.now
        stalls.run_started(started)
        clock.now += waited
        if mode == "EXTEND":  # what the watch thread hands over mid-stall (plugin/stall_watch.py)
            serial, _elapsed, _phase = stalls.gap_now(clock.now) or (0, 0.0, None)
            stalls.add_sample(serial, {"after_s": 0.5, "phase": "result",
                                       "stack": ["sglang/srt/managers/scheduler.py:2104 process_batch_result",
                                                 "torch/cuda/streams.py:224 synchronize"]})  # fmt: skip
        stalls.result_done(started, {"mode": mode, "requests": requests, "tokens": tokens})
    return stalls.report()


def test_the_summary_of_a_plugin_0_4_6_rank() -> None:
    lines = call_summary.summary(_document())
    by_start = {line.split(":")[0]: line for line in lines}
    assert by_start["plugin hooks"].startswith("plugin hooks: 200 calls, 20.0 us each;")
    gate = by_start["gate, rank 0"]
    assert "2 batches drafted, 2 gated; 1 switches, 0 changes of SGLang's own steps" in gate
    assert "extend skipped in 0 batches, 0 drained; the draft's prefill skipped in 0 batches" in gate
    measured = "kept extend: 10.7 % measured (bin 48, 100 steps with the extend)"
    assert by_start["kept extend"].startswith(measured)
    assert "48: 10.7 % (100/99)" in by_start["kept extend"]  # the first gated step followed none
    assert by_start["scheduler gc, rank 0"].startswith("scheduler gc, rank 0: 0 collections")
    assert by_start["scheduler stalls, rank 0"].startswith(
        "scheduler stalls, rank 0: 1 gap between results >= 0.25 s of 3, 1.10 s in all, the longest 1.10 s; "
        "the loop's calls: input 0.0 s, schedule 0.0 s, run 0.0 s, result 1.1 s")
    assert "  stall (UTC): 1.10 s to 09:30:29.5: waiting for a batch's result 1.10 s (EXTEND, 5 requests, " \
           "12 000 new tokens); at torch/cuda/streams.py:224 synchronize" in lines
    assert ("    after 0.50 s, in result: sglang/srt/managers/scheduler.py:2104 process_batch_result > "
            "torch/cuda/streams.py:224 synchronize") in lines
    assert not any("must-not-print" in line for line in lines)
    # the steps the counters set apart from the bins: the 200 recorded, one verify with no launch
    assert by_start["counters, rank 0"] == (
        "counters, rank 0: 200 steps in bins (2.1 s); settling 0 steps (0.0 s); 1 verifies unmatched, "
        "0 launches dropped")


def test_a_rank_without_the_extend_block_says_so_and_the_script_reads_stdin() -> None:
    done = subprocess.run([sys.executable, "-P", str(REPO_ROOT / "benchmarks/gpu/call_summary.py")],
                          input=json.dumps(_document(extend=False)), capture_output=True, text=True,
                          timeout=60, check=True)  # fmt: skip
    assert "kept extend: not measured (a plugin before 0.4.6" in done.stdout


def test_the_launchers_collections_are_listed_once_with_their_utc_times() -> None:
    """Plugin 0.4.8: each call's summary says what the launcher's collections took and what is frozen (the
    read-back of POLICIES' freeze-gc), once for every rank, each long collection with its UTC time."""
    from tests.test_collectors_launcher import _block

    doc = _document()
    doc["internal_states"].append({"dp_rank": 1, "spectower": dict(doc["internal_states"][0]["spectower"])})
    for state in doc["internal_states"]:
        state["spectower"]["launcher"] = _block()
    lines = call_summary.summary(doc)
    launcher = [line for line in lines if line.startswith("launcher (")]
    assert launcher == [
        "launcher (pid 637, HTTP server and tokenizer manager): 3 collections, 2 >= 0.05 s, the longest "
        "0.44 s (the newest at 01:57:55.3 UTC); its Python held >= 0.25 s 1 times, the newest 0.34 s at "
        "01:57:55.3 UTC; nothing frozen"]  # fmt: skip
    assert lines[lines.index(launcher[0]) + 1:][:2] == ["  long collection (UTC): 0.330 s to 01:57:55.3",
                                                        "  long collection (UTC): 0.440 s to 01:57:55.3"]
    assert not any(line.startswith("launcher (") for line in call_summary.summary(_document()))
    doc["internal_states"][0]["spectower"]["gc"] = {**GcPauses().report(), "frozen": 788_583}
    (scheduler,) = [line for line in call_summary.summary(doc) if line.startswith("scheduler gc, rank 0:")]
    assert scheduler.endswith("; 788583 objects frozen")  # the scheduler's side of freeze-gc
