"""benchmarks/gpu/policy_table.py: tokens served under one load per policy against the best fixed choice per
level, read from `bench load` status lines and a real three-curve sweep of the H200 (data/gpu-runs/)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from spectower.collectors.bench.walk import WalkStats, status_line

from tests.conftest import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "benchmarks" / "gpu"))
import policy_table

SWEEP = REPO_ROOT / "data/gpu-runs/h200-8b-pair-triton-off-fixes-2026-11-30/5-sweep-skip-extend/sweep.json"
LEVELS = (1, 4, 16, 48, 64)


def _curves() -> dict[str, dict[int, float]]:
    return policy_table.sweep_curves(json.loads(SWEEP.read_text()))


def _log(path: Path, tok_s: dict[int, float], seconds: float = 5.0) -> Path:
    lines = ["load: 64 clients at the peak"]
    for i, c in enumerate(LEVELS, start=1):
        # the line `bench load --status-every` prints, i * seconds into the load
        stats = WalkStats(started=time.monotonic() - i * seconds, target=c)
        lines.append(status_line(stats, tok_s[c]))
    path.write_text("\n".join(lines) + "\n")
    return path


def test_the_best_fixed_choice_scores_one_and_a_fixed_mode_scores_its_share(tmp_path: Path) -> None:
    curves = _curves()
    best = {c: max(policy_table.at(curves["on"], c), policy_table.at(curves["off"], c)) for c in LEVELS}
    on = {c: policy_table.at(curves["on"], c) for c in LEVELS}
    perfect = policy_table.score(policy_table.read_status(_log(tmp_path / "best.log", best)), curves)
    assert perfect["ratio"] == pytest.approx(1.0, abs=1e-3)
    scored = policy_table.score(policy_table.read_status(_log(tmp_path / "on.log", on)), curves)
    # on this H200 pair the knob at 0 serves more than knob-on only at 64: always-on loses only there
    assert scored["ratio"] == pytest.approx(sum(on.values()) / sum(best.values()), rel=1e-3)
    assert scored["bands"]["C 1-8"] == pytest.approx(1.0, abs=1e-3)
    assert scored["bands"]["C 33-max"] < 1.0
    # never drafting is the sweep's knob-off curve, never above the best fixed choice
    off = {c: policy_table.at(curves["off"], c) for c in LEVELS}
    never = policy_table.score(policy_table.read_status(_log(tmp_path / "off.log", off)), curves)
    assert never["ratio_vs_never_draft"] == pytest.approx(1.0, abs=1e-3)
    assert never["never_draft_tokens"] <= never["best_fixed_tokens"]
    assert scored["ratio_vs_never_draft"] == pytest.approx(sum(on.values()) / sum(off.values()), rel=1e-3)


def test_interpolates_in_log_concurrency_between_levels() -> None:
    curve = {16: 1000.0, 64: 3000.0}
    assert policy_table.at(curve, 32) == pytest.approx(2000.0)
    assert policy_table.at(curve, 8) == pytest.approx(500.0)  # below the first level: proportional
    assert policy_table.at(curve, 100) == 3000.0


def test_command_line_prints_the_table_and_refuses_a_sweep_without_both_modes(tmp_path: Path) -> None:
    curves = _curves()
    log = _log(tmp_path / "load-learn.log", {c: policy_table.at(curves["off"], c) for c in LEVELS})
    out = tmp_path / "table.json"
    script = str(REPO_ROOT / "benchmarks/gpu/policy_table.py")
    proc = subprocess.run([sys.executable, script, "--sweep", str(SWEEP), str(log), "--json", str(out)],
                          capture_output=True, text=True, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "learn" in proc.stdout
    assert "never drafts: the sweep's knob-off curve" in proc.stdout
    assert "best fixed: per window" in proc.stdout
    assert 0.4 < json.loads(out.read_text())["learn"]["ratio"] < 1.0
    bad = tmp_path / "sweep.json"
    bad.write_text(json.dumps({"points": [{"mode": "on", "concurrency": 1, "output_throughput": 1.0}]}))
    proc = subprocess.run([sys.executable, script, "--sweep", str(bad), str(log)],
                          capture_output=True, text=True, check=False)  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.strip() == "--sweep: needs knob-on and knob-off points"


def test_an_unreadable_or_oversized_sweep_is_one_line_naming_it(tmp_path: Path) -> None:
    # spectower's one capped reader: a sweep is under 100 kB, so a 16 MiB file is not one (read whole before)
    log = _log(tmp_path / "load-on.log", dict.fromkeys(LEVELS, 1.0))
    script = str(REPO_ROOT / "benchmarks/gpu/policy_table.py")
    huge = tmp_path / "huge.json"
    huge.write_bytes(b" " * (16 * 1024 * 1024 + 1))
    for sweep, why in ((tmp_path / "absent.json", "cannot read (No such file or directory)"),
                       (huge, f"more than {16 * 1024 * 1024} bytes")):  # fmt: skip
        proc = subprocess.run([sys.executable, script, "--sweep", str(sweep), str(log)],
                              capture_output=True, text=True, check=False)  # fmt: skip
        assert proc.returncode == 2
        assert proc.stderr.strip() == f"--sweep: {sweep}: {why}"


def _day_rows(tok_s: list[float], seconds: float = 5.0) -> list[tuple[float, int, float]]:
    return [((i + 1) * seconds, 8, v) for i, v in enumerate(tok_s)]


def test_against_pairs_whole_30_s_blocks_of_the_same_load() -> None:
    # two runs of one day: the other serves 0.9 of the base in every window but one dip; 13 windows of 5 s
    # are two whole 30 s blocks (the last, partial one dropped)
    base = _day_rows([1000.0] * 13)
    other = _day_rows([900.0] * 6 + [450.0] + [900.0] * 6)
    assert policy_table.block_tokens(base) == [30000.0, 30000.0]
    vs = policy_table.paired(other, base)
    assert vs["blocks"] == 2
    first, second = 900 * 30 / 30000, (900 * 25 + 450 * 5) / 30000
    assert vs["total"] == pytest.approx((first + second) / 2)
    assert vs["ratio"] == pytest.approx((first * second) ** 0.5)
    assert vs["lo"] < vs["ratio"] < vs["hi"]
    same = policy_table.paired(base, base)
    assert (same["ratio"], same["lo"], same["hi"], same["total"]) == (1.0, 1.0, 1.0, 1.0)


def test_against_an_absent_run_is_one_line_naming_it(tmp_path: Path) -> None:
    log = _log(tmp_path / "load-on.log", dict.fromkeys(LEVELS, 1.0))
    script = str(REPO_ROOT / "benchmarks/gpu/policy_table.py")
    proc = subprocess.run([sys.executable, script, "--sweep", str(SWEEP), str(log), "--against", "learn"],
                          capture_output=True, text=True, check=False)  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.strip() == "--against: no status lines of 'learn' among the logs (on)"


def test_pairs_pool_the_blocks_of_alternated_runs() -> None:
    # learn twice against threshold twice: 0.9 of it in the first pair's two blocks, 1.1 in the second's;
    # pooled, four blocks whose geometric mean is sqrt(0.9 x 1.1) = 0.995, whose tokens are the base's, and
    # whose interval holds both pairs' spread, where either pair alone has none
    base = _day_rows([1000.0] * 13)
    first, second = _day_rows([900.0] * 13), _day_rows([1100.0] * 13)
    together = policy_table.pooled(
        [policy_table.block_pairs(first, base), policy_table.block_pairs(second, base)]
    )
    assert together["blocks"] == 4
    assert together["ratio"] == pytest.approx((0.9 * 1.1) ** 0.5)
    assert together["total"] == pytest.approx(1.0)
    alone = policy_table.paired(first, base)
    assert alone["lo"] == alone["hi"] == pytest.approx(0.9)
    assert together["lo"] < 0.9 < 1.1 < together["hi"]


def test_a_pair_that_is_not_run_eq_base_or_names_an_absent_run_is_one_line(tmp_path: Path) -> None:
    log = _log(tmp_path / "load-on.log", dict.fromkeys(LEVELS, 1.0))
    script = str(REPO_ROOT / "benchmarks/gpu/policy_table.py")
    for pair, line in (
        ("on", "--pair: 'on': expected RUN=BASE, e.g. learn-2=threshold-16-2"),
        ("on=learn", "--pair: no status lines of 'learn' among the logs (on)"),
    ):
        proc = subprocess.run([sys.executable, script, "--sweep", str(SWEEP), str(log), "--pair", pair],
                              capture_output=True, text=True, check=False)  # fmt: skip
        assert proc.returncode == 2
        assert proc.stderr.strip() == line


def test_pairs_pair_every_repeat_of_a_policy_with_the_same_repeat_of_its_base(tmp_path: Path) -> None:
    # measure_off.sh names a policy run again <name>-2, -3: learn, threshold-16, learn-2, threshold-16-2 and a
    # third learn without its threshold; the pairs are the first two repeats, pooled as --pair pools them
    for name, tok_s in (("learn", 900.0), ("threshold-16", 1000.0), ("learn-2", 1100.0),
                        ("threshold-16-2", 1000.0), ("learn-3", 500.0)):  # fmt: skip
        _log(tmp_path / f"load-{name}.log", dict.fromkeys(LEVELS, tok_s), seconds=15.0)  # 2 whole blocks
    runs = {p.stem.removeprefix("load-"): policy_table.read_status(p) for p in tmp_path.glob("load-*.log")}
    assert policy_table.repeats("learn", "threshold-16", runs) == [
        ("learn", "threshold-16"), ("learn-2", "threshold-16-2")]
    assert policy_table.repeats("learn", "threshold-24", runs) == []
    script = str(REPO_ROOT / "benchmarks/gpu/policy_table.py")
    logs = sorted(str(p) for p in tmp_path.glob("load-*.log"))

    def table(*extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, script, "--sweep", str(SWEEP), *logs, *extra],
                              capture_output=True, text=True, check=False)  # fmt: skip

    both = table("--pairs", "learn=threshold-16")
    assert both.returncode == 0, both.stderr
    spelled = table("--pair", "learn=threshold-16", "--pair", "learn-2=threshold-16-2")
    last = both.stdout.strip().splitlines()[-1]
    assert last == spelled.stdout.strip().splitlines()[-1]
    assert last.startswith("pooled over 2 pairs (learn=threshold-16, learn-2=threshold-16-2)")
    absent = table("--pairs", "learn=threshold-24")
    assert absent.returncode == 2
    assert absent.stderr.startswith("--pairs: no run of both 'learn' and 'threshold-24' among the logs (")


def test_pairs_without_a_whole_block_say_so(tmp_path: Path) -> None:
    # 25 s of status lines: no whole 30 s block, so no ratio, and the table says why rather than nothing
    for name in ("learn", "threshold-16"):
        _log(tmp_path / f"load-{name}.log", dict.fromkeys(LEVELS, 1000.0))
    script = str(REPO_ROOT / "benchmarks/gpu/policy_table.py")
    logs = sorted(str(p) for p in tmp_path.glob("load-*.log"))
    command = [sys.executable, script, "--sweep", str(SWEEP), *logs, "--pairs", "learn=threshold-16"]
    proc = subprocess.run(command, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == (
        "pooled over 1 pairs (learn=threshold-16): no whole 30 s block that both runs of a pair served in")
