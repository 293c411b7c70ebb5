"""`spectower control get`'s off path: what the gated-decode plugin and flashinfer's seq-lens mirror did on
each rank, read from /server_info (a real 0.5.17 capture carrying the blocks the plugins' own ``report()``
methods publish), and a warning when the mirror turned itself off; each rank's exploration; and each rank's
scheduler garbage collections (plugin 0.4.5)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from spectower.console.commands import control as control_cli
from spectower.control.knob_state import knob_state
from spectower.plugin.draft_holes import ExtendSkip
from spectower.plugin.seq_lens_mirror import SeqLensMirror


def _doc(real_data: Path, skip: dict[str, Any] | None, mirror: dict[str, Any] | None) -> dict[str, Any]:
    capture = real_data / "sglang-0.5.17-h200" / "server_info_after.json"
    doc = json.loads(capture.read_text(encoding="utf-8"))
    block = doc["internal_states"][0]["spectower"]
    if skip is not None:
        block["gated_decode"] = skip
    if mirror is not None:
        block["seq_lens_mirror"] = mirror
    return doc


def _printed(doc: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> str:
    buffer = io.StringIO()
    monkeypatch.setattr(control_cli, "out", Console(file=buffer, width=400, highlight=False))
    control_cli._print_state(knob_state(doc, "http://127.0.0.1:30000"))
    return buffer.getvalue()


def _skip_report() -> dict[str, Any]:
    skip = ExtendSkip(allowed=lambda: True, enabled=True, drain_max_steps=10)
    skip.batches_skipped, skip.batches_drained = 812, 37
    return skip.report()


def test_the_off_path_is_shown_per_rank(real_data: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mirror = SeqLensMirror(enabled=True, verify_every=256)
    mirror.active, mirror.hits, mirror.syncs, mirror.verified, mirror.gated_syncs = True, 5120, 40, 21, 3
    text = _printed(_doc(real_data, _skip_report(), mirror.report()), monkeypatch)
    assert ("off path 0: draft extend skipped in 812 batches, 37 drained before drafting; "
            "seq-lens mirror on: 5120 resolves from it, 40 by SGLang (3 of them gated), 21 checked, "
            "0 differed") in text
    assert "turned itself off" not in text
    state = knob_state(_doc(real_data, _skip_report(), mirror.report()), "http://127.0.0.1:30000")
    assert state.to_dict()["ranks"][0]["seq_lens_mirror"]["resolved_from_mirror"] == 5120  # --json too


def test_a_mirror_turned_off_is_a_warning(real_data: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mirror = SeqLensMirror(enabled=True, verify_every=256)
    mirror.active = True
    mirror.check(["r1"], [10], [12])
    text = _printed(_doc(real_data, _skip_report(), mirror.report()), monkeypatch)
    assert "seq-lens mirror OFF" in text
    why = "request 'r1': remembered 10, SGLang 12"
    assert f"warning: dp_rank 0: the seq-lens mirror turned itself off ({why})" in text


def test_nothing_where_the_plugins_publish_nothing(real_data: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An older plugin, the simulator, or a triton server (its mirror never turns on): no off path line."""
    idle = SeqLensMirror(enabled=True, verify_every=256).report()
    assert "off path" not in _printed(_doc(real_data, None, None), monkeypatch)
    assert "seq-lens" not in _printed(_doc(real_data, None, idle), monkeypatch)


def test_json_carries_each_ranks_exploration_window(real_data: Path) -> None:
    """Issue #32: `control get --json` shows where each rank's exploration window is (the plugin's
    ``explore`` block, its ``window`` from plugin/explore.py)."""
    from spectower.plugin.gate import Gate

    gate = Gate(explore_share=0.02, explore_cycle=160)
    gate.set_ceiling(0)
    for _ in range(155):
        gate.decide(64)
    doc = _doc(real_data, None, None)
    doc["internal_states"][0]["spectower"]["explore"] = gate.explore_report(active=True)
    window = knob_state(doc, "http://127.0.0.1:30000").to_dict()["ranks"][0]["explore"]["window"]
    assert window["active"] and window["phase"] == "explore" and window["windows"] == 1
    assert window["batches"] == {"cold": 150, "warm": 0, "explore": 5}


def test_each_ranks_exploration_is_shown_with_what_a_full_server_held_back(
    real_data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`control get` says per rank whether exploring runs, its windows so far and, from plugin 0.4.12, what a
    full server held back (the plugin's own report: a gate whose due window waited on requests left waiting
    and then ran). A lock pauses it; a share of 0 is off; a plugin that publishes no block prints nothing."""
    from spectower.plugin.gate import Gate

    gate = Gate(explore_share=0.2, explore_cycle=64)
    gate.set_ceiling(8)
    for waiting in [0] * 6 + [3] * 5 + [0] * 16:  # a share of 0.2 shortens the cold part to 6
        gate.waiting = waiting
        gate.decide(16)
    doc = _doc(real_data, None, None)
    doc["internal_states"][0]["spectower"]["explore"] = gate.explore_report(active=True)
    text = _printed(doc, monkeypatch)
    assert ("explore 0: 20.0% of each bin's batches, on; windows among gated batches: 1 exploring part, "
            "0 ended by their time cap, now explore; a full server held back 20 batches, cut 0 parts short, "
            "0 windows ran full") in text  # fmt: skip
    doc["internal_states"][0]["spectower"]["explore"] = gate.explore_report(active=False)
    paused = "explore 0: 20.0% of each bin's batches, paused (a lock holds the knob)"
    assert paused in _printed(doc, monkeypatch)
    gate.set_explore_share(0.0)
    doc["internal_states"][0]["spectower"]["explore"] = gate.explore_report(active=True)
    assert "explore 0: off (share 0)" in _printed(doc, monkeypatch)
    assert "explore 0" not in _printed(_doc(real_data, None, None), monkeypatch)


def test_each_ranks_scheduler_garbage_collections_are_shown_with_the_newest_long_ones_time(
    real_data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Plugin 0.4.5 (plugin/gc_pauses.py): the operator who sees TTFT spike can set them against the
    scheduler's long collections, in `control get` and its --json; a plugin that publishes none shows none."""
    import time

    from spectower.plugin.gc_pauses import GcPauses

    from tests.test_engine_counters import FakeClock as Clock

    clock = Clock()
    pauses = GcPauses(threshold_s=0.05, clock=clock, wall=lambda: 1_796_417_829.0)
    for took in (0.001, 0.75, 0.002):
        pauses.callback("start", {"generation": 2})
        clock.now += took
        pauses.callback("stop", {"generation": 2})
    doc = _doc(real_data, None, None)
    # frozen as a server that never froze reports it (an in-process console test may have frozen this one)
    doc["internal_states"][0]["spectower"]["gc"] = {**pauses.report(), "frozen": 0}
    text = _printed(doc, monkeypatch)
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(1_796_417_829.0))
    expected = f"scheduler gc 0: 3 collections, 1 >= 0.05 s, the longest 0.750 s; the newest 0.75 s at {when}"
    assert expected in text
    state = knob_state(doc, "http://127.0.0.1:30000")
    assert state.to_dict()["ranks"][0]["gc"]["longest_s"] == 0.75  # --json too
    doc["internal_states"][0]["spectower"]["gc"] = {**GcPauses().report(), "frozen": 0}
    assert "scheduler gc 0: 0 collections, none >= 0.05 s" in _printed(doc, monkeypatch)
    assert "scheduler gc" not in _printed(_doc(real_data, None, None), monkeypatch)


def test_sglangs_own_band_changes_show_on_the_off_path(
    real_data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The gate's count of SGLang's own step changes (its acceptance EMA; before plugin 0.4.6 the drain fed
    it zeros and its band flipped 0 -> 3 -> 0): each one a runtime-state switch, a band at 0 keeping the
    batches the knob would draft gated. None: nothing said."""
    from spectower.plugin.gate import Gate

    doc = _doc(real_data, _skip_report(), None)
    gate = Gate(min_dwell=0)
    gate.band_changes = 214
    doc["internal_states"][0]["spectower"]["gate"] = gate.report(64)["gate"]
    assert ("off path 0: draft extend skipped in 812 batches, 37 drained before drafting; SGLang's own steps "
            "changed 214 times") in _printed(doc, monkeypatch)
    gate.band_changes = 0
    doc["internal_states"][0]["spectower"]["gate"] = gate.report(64)["gate"]
    assert "SGLang's own steps" not in _printed(doc, monkeypatch)


def test_each_ranks_output_stalls_are_shown_with_what_took_them(
    real_data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Plugin 0.4.7 (plugin/loop_stalls.py): `control get` says how often the scheduler's output stopped for
    a quarter second or more and, for the newest, what took the time; --json carries the block; a plugin that
    publishes none shows none."""
    import time

    from spectower.plugin import loop_stalls

    from tests.test_engine_counters import FakeClock as Clock
    from tests.test_loop_stalls import Loop, batch

    clock = Clock()
    recorder = loop_stalls.LoopStalls(threshold_s=0.25, clock=clock, wall=lambda: 1_796_417_829.0)
    monkeypatch.setattr(loop_stalls, "_STALLS", recorder)
    loop = Loop(recorder, clock)
    loop.iteration(batch("DECODE", 30))
    loop.iteration(batch("EXTEND", 12, 40_000), result_s=0.008)
    loop.iteration(batch("DECODE", 42), result_s=0.008)
    loop.last = (loop.last[0], 0.01) if loop.last else None
    loop.iteration(batch("DECODE", 42), result_s=0.9)  # the extend's result waited 0.008; this one 0.9
    loop.iteration(batch("DECODE", 42))
    doc = _doc(real_data, None, None)
    doc["internal_states"][0]["spectower"]["loop"] = recorder.report()
    text = _printed(doc, monkeypatch)
    assert "stalls 0: 1 gap between results >= 0.25 s of 4, 0.90 s in all, the longest 0.90 s" in text
    when = time.strftime("%H:%M:%S", time.localtime(1_796_417_829.0))
    assert f"0.90 s to {when}.0: waiting for a batch's result 0.90 s (DECODE, 42 requests)" in text
    state = knob_state(doc, "http://127.0.0.1:30000")
    assert state.to_dict()["ranks"][0]["loop"]["stalls"] == 1  # --json too
    assert "stalls 0" not in _printed(_doc(real_data, None, None), monkeypatch)


def test_the_launchers_long_collections_are_shown_once_with_what_stops_them(
    real_data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Plugin 0.4.8 (plugin/launcher_state.py): SGLang's launcher pauses every request's output in its long
    collections; `control get` says so once (every rank carries the block) and, where nothing is frozen, that
    SGLang's /freeze_gc stops them; once frozen the advice goes; --json carries the block."""
    from tests.test_collectors_launcher import _block

    doc = _doc(real_data, None, None)
    for state in doc["internal_states"]:
        state["spectower"]["launcher"] = _block()
    text = _printed(doc, monkeypatch)
    said = "launcher (pid 637, HTTP server and tokenizer manager): 3 collections, 2 >= 0.05 s"
    assert text.count(said) == 1
    assert "SGLang's /freeze_gc (after a few warm-up requests)" in text
    assert knob_state(doc, "http://127.0.0.1:30000").to_dict()["ranks"][0]["launcher"]["pid"] == 637
    doc["internal_states"][0]["spectower"]["launcher"] = _block(frozen=788_583)
    doc["internal_states"][0]["spectower"]["gc"] = _block(frozen=1_234)["gc"]  # the scheduler's, frozen too
    frozen = _printed(doc, monkeypatch)
    assert "788 583 objects frozen" in frozen and "/freeze_gc" not in frozen
    assert "scheduler gc 0 (1 234 objects frozen): 3 collections" in frozen
    assert "launcher (" not in _printed(_doc(real_data, None, None), monkeypatch)


def test_skipped_prefills_of_the_draft_are_shown_once_there_are_any(
    real_data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Plugin 0.4.9: under an operator's off the draft's prefill is skipped too; `control get` counts it."""
    report = {**_skip_report(), "prefills_skipped": 96}
    mirror = SeqLensMirror(enabled=True, verify_every=256).report()
    text = _printed(_doc(real_data, report, mirror), monkeypatch)
    assert "37 drained before drafting, the draft's prefill skipped in 96 batches" in text
