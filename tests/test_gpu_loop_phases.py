"""benchmarks/gpu/loop_phases.py: each policy run's share of the scheduler loop, from the cumulative loop
blocks saved after every run, on the H100 replay of 2026-12-05 (data/gpu-runs/)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "benchmarks" / "gpu"))
import loop_phases

RUN = REPO_ROOT / "data/gpu-runs/h100-8b-pair-triton-replay-2026-12-05c/1-policies"
NAMES = ("off", "threshold-47", "learn", "learn-2")  # the order they ran in


def saved() -> dict[str, list[loop_phases.LoopReport]]:
    # given out of order on purpose: the counts alone say the order
    return {name: loop_phases.read_ranks(RUN / f"stalls-{name}.json") for name in sorted(NAMES)}


def test_the_runs_are_put_in_the_order_they_ran_and_only_the_first_holds_the_launch() -> None:
    rows = loop_phases.per_run(saved())
    assert [row.run for row in rows] == list(NAMES)
    assert [row.since_launch for row in rows] == [True, False, False, False]


def test_each_run_is_the_difference_from_the_one_before_and_input_tripled_after_always_off() -> None:
    rows = {row.run: row for row in loop_phases.per_run(saved())}
    assert rows["off"].seconds["input"] == pytest.approx(4.502, abs=0.01)  # since the launch
    assert rows["threshold-47"].seconds["input"] == pytest.approx(19.042 - 4.502, abs=0.01)
    assert rows["learn-2"].calls["run"] == 51198 - 38295  # batches of the last run alone
    for later in NAMES[1:]:  # the finding the script exists to print for every launch
        assert rows[later].seconds["input"] > 3 * rows["off"].seconds["input"]
        assert rows[later].per_call_ms("input") > 3 * rows["off"].per_call_ms("input")


def test_a_restarted_server_counting_from_zero_again_is_one_line_not_a_negative_run(tmp_path: Path) -> None:
    doc = json.loads((RUN / "stalls-off.json").read_text())
    for phase in doc[0]["phases"].values():
        phase["calls"] *= 10  # a second launch's: off sorts last, yet its seconds are fewer than learn-2's
    restarted = saved() | {"off": [loop_phases.loop_report(doc[0])]}
    with pytest.raises(ValueError, match="not one launch"):
        loop_phases.per_run(restarted)  # type: ignore[arg-type]


def test_a_file_without_loop_blocks_is_one_line_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "stalls-old.json"
    bad.write_text("[null]")
    assert loop_phases.main([str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "stalls-old.json" in err and "loop block" in err


def test_the_table_and_its_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "loop.json"
    files = [str(RUN / f"stalls-{name}.json") for name in NAMES]
    assert loop_phases.main([*files, "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "off *" in text and "everything since the launch" in text
    rows = json.loads(out.read_text())
    assert [row["run"] for row in rows] == list(NAMES)
    assert rows[1]["calls"]["input"] == 291557 - 168735


def test_a_loop_that_counts_only_results_is_ordered_by_them_as_the_simulator_reports_it() -> None:
    def block(results: int) -> loop_phases.LoopReport:
        report = loop_phases.loop_report({"phases": {
            "input": {"calls": 0, "seconds": 0.0}, "schedule": {"calls": 0, "seconds": 0.0},
            "run": {"calls": 0, "seconds": 0.0}, "result": {"calls": results, "seconds": results / 200},
        }})  # fmt: skip
        assert report is not None
        return report

    rows = loop_phases.per_run({"late": [block(3000)], "early": [block(1000)], "middle": [block(2000)]})
    assert [row.run for row in rows] == ["early", "middle", "late"]
    assert [row.calls["result"] for row in rows] == [1000, 1000, 1000]


def _with_kinds(turns: int, kinds: dict[str, tuple[int, float, int]]) -> loop_phases.LoopReport:
    """A loop block of plugin 0.4.11: its phases and its input by kind, cumulative since the launch."""
    report = loop_phases.loop_report({
        "phases": {p: {"calls": turns, "seconds": turns / 1000} for p in loop_phases.PHASES},
        "input_kinds": {k: {"calls": c, "seconds": s, "requests": n, "longest_s": s} for k, (c, s, n)
                        in kinds.items()},
    })  # fmt: skip
    assert report is not None
    return report


def test_each_runs_input_by_kind_is_its_difference_from_the_run_before(
    capsys: pytest.CaptureFixture[str],
) -> None:
    first = _with_kinds(1000, {"none": (900, 0.5, 0), "GenerateReqInput": (100, 1.0, 200)})
    second = _with_kinds(2000, {"none": (1800, 1.5, 0), "GenerateReqInput": (180, 2.0, 400),
                                "GetInternalStateReq": (20, 0.8, 20)})  # fmt: skip
    rows = loop_phases.per_run({"learn": [second], "off": [first]})
    assert rows[0].input_kinds["none"] == (900, 0.5, 0)
    assert rows[1].input_kinds["none"] == (900, pytest.approx(1.0), 0)
    assert rows[1].input_kinds["GenerateReqInput"] == (80, pytest.approx(1.0), 200)
    assert rows[1].input_kinds["GetInternalStateReq"] == (20, pytest.approx(0.8), 20)  # new in this run
    loop_phases.print_rows(rows)
    text = capsys.readouterr().out
    assert "taking in requests by what came in" in text
    line = next(line for line in text.splitlines() if line.strip().startswith("learn") and "rank 0:" in line)
    # the largest first: a control read at 40 ms a call after the turns with nothing received
    assert line.index("none 900, 1.00 s") < line.index("GetInternalStateReq 20, 0.80 s (40.000 ms; 20)")
    assert loop_phases.as_json(rows)[1]["input_kinds"]["GetInternalStateReq"]["calls"] == 20


def test_blocks_before_plugin_0_4_11_print_no_input_kinds(capsys: pytest.CaptureFixture[str]) -> None:
    loop_phases.print_rows(loop_phases.per_run(saved()))
    assert "by what came in" not in capsys.readouterr().out


def test_each_runs_batches_by_forward_mode_are_its_difference_from_the_run_before(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Plugin 0.4.11: the prefills' GPU time (EXTEND's result seconds) per run, apart from the decodes."""
    def block(turns: int, modes: dict[str, tuple[int, float, int, float, int]]) -> loop_phases.LoopReport:
        report = loop_phases.loop_report({
            "phases": {p: {"calls": turns, "seconds": turns / 1000} for p in loop_phases.PHASES},
            "batch_modes": {m: {"runs": n, "run_s": rs, "results": k, "result_s": ts, "tokens": t}
                            for m, (n, rs, k, ts, t) in modes.items()},
        })  # fmt: skip
        assert report is not None
        return report

    first = block(1000, {"DECODE": (900, 3.0, 900, 7.0, 0), "EXTEND": (100, 0.5, 100, 20.0, 110_000)})
    second = block(2000, {"DECODE": (1800, 6.0, 1800, 14.5, 0), "EXTEND": (200, 1.0, 200, 39.0, 220_000)})
    rows = loop_phases.per_run({"off": [first], "learn": [second]})
    assert rows[1].batch_modes["EXTEND"] == (100, pytest.approx(0.5), 100, pytest.approx(19.0), 110_000)
    loop_phases.print_rows(rows)
    text = capsys.readouterr().out
    line = next(line for line in text.splitlines() if line.strip().startswith("learn") and "EXTEND" in line)
    assert "EXTEND 100, 0.5 + 19.0 s (195.00 ms; 110000)" in line
    assert loop_phases.as_json(rows)[1]["batch_modes"]["DECODE"]["result_s"] == pytest.approx(7.5)


RUN_D = REPO_ROOT / "data/gpu-runs/h100-8b-pair-triton-replay-2026-12-05d/1-policies"


def test_the_policys_lag_was_its_server_info_reads_each_holding_the_scheduler() -> None:
    """The H100 replay of 2026-12-05d (plugin 0.4.11's breakdown): every GetInternalStateReq took the
    scheduler 70-100 ms after /freeze_gc (the plugin's gc.get_freeze_count() walked the frozen objects), and
    the runs under a policy, which reads /server_info every 2 s, made about three times as many as always
    off's."""
    names = ("off", "learn", "learn-2", "off-2")
    rows = {row.run: row for row in loop_phases.per_run(
        {name: loop_phases.read_ranks(RUN_D / f"stalls-{name}.json") for name in names})}  # fmt: skip
    reads = {name: rows[name].input_kinds["GetInternalStateReq"] for name in names}
    for name, (calls, seconds, _) in reads.items():
        assert 0.060 < seconds / calls < 0.110, name  # each read held the loop 60-110 ms
    assert reads["learn"][0] > 2 * reads["off-2"][0] and reads["learn-2"][0] > 2 * reads["off-2"][0]
    for policy in ("learn", "learn-2"):
        extra = rows[policy].seconds["input"] - rows["off-2"].seconds["input"]
        assert extra > 6.0  # seconds of a 150-s run in which no batch was launched
    # the prefills (EXTEND: run + result per batch) took alike under both: not where the lag was
    per_batch = {name: (rows[name].batch_modes["EXTEND"][1] + rows[name].batch_modes["EXTEND"][3])
                 / rows[name].batch_modes["EXTEND"][0] for name in names}  # fmt: skip
    assert max(per_batch.values()) < 1.06 * min(per_batch.values())


RUN_E = REPO_ROOT / "data/gpu-runs/h100-8b-pair-triton-replay-2026-12-05e/1-policies"


def test_plugin_0_4_11s_reads_cost_a_millisecond_and_the_policies_input_is_always_offs() -> None:
    """The H100 replay of 2026-12-05e (plugin 0.4.11, the frozen objects counted once per freeze): every
    GetInternalStateReq after the launch's run took the scheduler 1-2 ms, the policies still read three times
    as often, and their whole input took within 0.2 s of each always-off run's (against 6-9 s more under
    0.4.10, above)."""
    names = ("off", "learn", "threshold-16", "off-2", "learn-2")
    rows = {row.run: row for row in loop_phases.per_run(
        {name: loop_phases.read_ranks(RUN_E / f"stalls-{name}.json") for name in names})}  # fmt: skip
    reads = {name: rows[name].input_kinds["GetInternalStateReq"] for name in names[1:]}
    for name, (calls, seconds, _) in reads.items():
        assert 0.0005 < seconds / calls < 0.002, name
    assert min(reads[p][0] for p in ("learn", "threshold-16", "learn-2")) > 3 * reads["off-2"][0]
    for policy in ("learn", "threshold-16", "learn-2"):
        for off in ("off", "off-2"):
            assert abs(rows[policy].seconds["input"] - rows[off].seconds["input"]) < 0.2, (policy, off)


def test_a_loop_reporting_only_results_prints_its_batches_by_mode(capsys: pytest.CaptureFixture[str]) -> None:
    """The simulator's ranks feed the recorder results alone: their batches by mode still print."""
    report = loop_phases.loop_report({
        "phases": {p: {"calls": 0 if p != "result" else 100, "seconds": 0.0} for p in loop_phases.PHASES},
        "batch_modes": {"DECODE": {"runs": 0, "run_s": 0.0, "results": 100, "result_s": 0.5, "tokens": 0}},
    })  # fmt: skip
    assert report is not None
    loop_phases.print_rows(loop_phases.per_run({"off": [report]}))
    assert "DECODE 100, 0.0 + 0.5 s (5.00 ms; 0)" in capsys.readouterr().out
