"""benchmarks/gpu/off_path_runs.py: each policy run's off path (skipped extends and prefills, drains) from the
gated_decode blocks measure_off.sh saves after every run, here the plugin's own tracker's reports."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from spectower.plugin.draft_holes import ExtendSkip

from tests.conftest import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "benchmarks" / "gpu"))
import off_path_runs

WORKER = object()


def _batch(skip: ExtendSkip, rids: list[str], wanted: int) -> None:
    skip.begin_batch(WORKER, [SimpleNamespace(rid=rid) for rid in rids])
    skip.mark(skip.steps_for(wanted))
    skip.end_batch()


def _prefill(skip: ExtendSkip, rids: list[str]) -> None:
    skip.prefill_worker, skip.running_beside_prefill = WORKER, 0
    if skip.may_skip_prefill(len(rids)):
        skip.prefill_skipped([SimpleNamespace(rid=rid) for rid in rids])
    skip.prefill_worker = None


def _save(tmp_path: Path, run: str, skip: ExtendSkip) -> Path:
    path = tmp_path / f"offpath-{run}.json"
    path.write_text(json.dumps([skip.report()]))
    return path


def test_each_run_is_its_difference_from_the_run_before_in_the_order_they_ran(tmp_path: Path) -> None:
    """Always off (the knob at 0: every extend and prefill skipped), then a policy whose ceiling lets the
    batch draft again: its prompts keep the draft's pass, and the requests the off run left holed drain."""
    gate = {"off": True}
    skip = ExtendSkip(allowed=lambda: gate["off"], enabled=True, drain_max_steps=100,
                      prefill_allowed=lambda size: gate["off"])  # fmt: skip
    skip.prefill_enabled = True
    _prefill(skip, ["a", "b"])
    for _ in range(3):
        _batch(skip, ["a", "b"], 0)
    off = _save(tmp_path, "off", skip)
    gate["off"] = False
    _prefill(skip, ["c"])
    _batch(skip, ["a", "b", "c"], 3)  # drained: a and b are holed
    _batch(skip, ["b", "c"], 3)
    _batch(skip, ["c"], 3)  # drafts
    learn = _save(tmp_path, "learn", skip)
    saved = {off_path_runs.run_name(p): off_path_runs.read_ranks(p) for p in (learn, off)}
    rows = off_path_runs.per_run(saved)
    assert [(r.run, r.since_launch) for r in rows] == [("off", True), ("learn", False)]
    assert rows[0].counts == {"batches_skipped": 3, "batches_drained": 0, "drains_cut_short": 0,
                              "prefills_skipped": 1}  # fmt: skip
    assert rows[1].counts == {"batches_skipped": 0, "batches_drained": 2, "drains_cut_short": 0,
                              "prefills_skipped": 0}  # fmt: skip
    assert (rows[0].holed_at_end, rows[1].holed_at_end) == (2, 0)


def test_files_of_another_launch_or_without_the_block_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    later = ExtendSkip(allowed=lambda: True, enabled=True, drain_max_steps=100)
    _batch(later, ["a"], 0)
    _batch(later, ["a"], 0)
    restarted = ExtendSkip(allowed=lambda: True, enabled=True, drain_max_steps=100)
    _batch(restarted, ["a"], 0)
    first = _save(tmp_path, "off", later)
    second = tmp_path / "offpath-learn.json"
    second.write_text(json.dumps([{**restarted.report(), "batches_skipped": 0, "prefills_skipped": 5}]))
    assert off_path_runs.main([str(first), str(second)]) == 2
    fell = "error: learn: rank 0's counts fall from the run before: not one launch"
    assert capsys.readouterr().err.strip() == f"{fell} (a restarted server counts from 0 again)"
    missing = tmp_path / "offpath-sim.json"
    missing.write_text("[null]")
    assert off_path_runs.main([str(missing)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: {missing}: rank 0 has no gated_decode block (the skip hooks not loaded?)"]


def test_a_run_that_skipped_nothing_is_ordered_by_the_loop_block_saved_beside_it(tmp_path: Path) -> None:
    """Always off, then always on (it drafts every batch: no count moves), named so that alphabetical order
    would put on first: the stalls-<run>.json saved from the same read orders them."""
    skip = ExtendSkip(allowed=lambda: True, enabled=True, drain_max_steps=100,
                      prefill_allowed=lambda size: True)  # fmt: skip
    for _ in range(3):
        _batch(skip, ["a"], 0)
    paths = {}
    for run, calls in (("off", 1000), ("a-on", 2000)):  # "a-on" sorts before "off" by name
        paths[run] = _save(tmp_path, run, skip)
        phases = ("input", "schedule", "run", "result")
        loop = {"phases": {p: {"calls": calls, "seconds": calls / 1000} for p in phases}}
        (tmp_path / f"stalls-{run}.json").write_text(json.dumps([loop]))
    saved = {off_path_runs.run_name(p): off_path_runs.read_ranks(p) for p in sorted(paths.values())}
    rows = off_path_runs.per_run(saved)
    assert [(r.run, r.since_launch) for r in rows] == [("off", True), ("a-on", False)]
    assert rows[1].counts["batches_skipped"] == 0
