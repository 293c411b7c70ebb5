"""benchmarks/gpu/steps_table.py: whether a middle step count beats both ends, per level, from a real
three-curve sweep of the H200 (data/gpu-runs/) and knob_max_ab.py outputs written here from known windows. The
expected figures are worked out below from the same inputs: the sweep's points and the windows' ratio
interval."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from spectower.collectors.bench.ratio import ratio_interval

from tests.conftest import REPO_ROOT

SCRIPT = REPO_ROOT / "benchmarks" / "gpu" / "steps_table.py"
SWEEP = REPO_ROOT / "data/gpu-runs/h200-8b-pair-triton-plugin-skip-2026-11-30/3-sweep-repeat/sweep.json"
LAUNCH_WINDOWS = [1000.0, 1012.0, 991.0, 1004.0, 996.0, 1008.0, 989.0, 1001.0]  # 2 rounds x 4 windows


def _served(mode: str, c: int) -> float:
    """The sweep's output tok/s for one mode and level (its steady figure, as the sweep reports it)."""
    sweep = json.loads(SWEEP.read_text())
    tok = [
        p["steady_output_throughput"] for p in sweep["points"] if p["mode"] == mode and p["concurrency"] == c
    ]
    return statistics.fmean(tok)


def _over_plain(c: int) -> tuple[float, float]:
    """(knob on / plain, knob at 0 / plain) at level c."""
    plain = _served("plain", c)
    return _served("on", c) / plain, _served("off", c) / plain


def _ab(path: Path, speedups: dict[int, float], noise: float = 0.0) -> dict[int, tuple[float, float, float]]:
    """Write knob_max_ab.py's --out for a K-step server `speedups[c]` times the launch's tok/s at each level
    (each window moved by +-noise in turn); return K-step / launch per level as (ratio, lo, hi)."""
    levels, expected = [], {}
    for c, speedup in speedups.items():
        gated = [w * c for w in LAUNCH_WINDOWS]
        ungated = [w * c * speedup * (1 + (noise if i % 2 else -noise)) for i, w in enumerate(LAUNCH_WINDOWS)]
        ratio, lo, hi = ratio_interval(gated, ungated)  # what knob_max_ab.py writes: gated / un-gated
        levels.append({"concurrency": c, "ratio": ratio, "lo": lo, "hi": hi, "gated_tok_s": gated,
                       "ungated_tok_s": ungated})  # fmt: skip
        expected[c] = (1 / ratio, 1 / hi, 1 / lo)
    path.write_text(json.dumps({"gated": "g", "ungated": "u", "rounds": 2, "seconds": 8.0, "levels": levels}))
    return expected


def _run(*args: str | Path) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, str(SCRIPT), *map(str, args)]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)


def _table(tmp_path: Path, *args: str | Path) -> dict[str, Any]:
    out = tmp_path / "table.json"
    done = _run("--sweep", SWEEP, *args, "--json", out)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    table: dict[str, Any] = json.loads(out.read_text())
    table["stdout"] = done.stdout
    return table


def test_a_faster_middle_count_wins_only_where_it_beats_both_ends_beyond_its_interval(tmp_path: Path) -> None:
    # two steps: 10 % faster than the launch at C=64 and at C=16, 10 % slower at C=1 (C=8: not measured)
    expected = _ab(tmp_path / "steps-2.json", {1: 0.9, 16: 1.1, 64: 1.1})
    table = _table(tmp_path, "--steps", f"2={tmp_path / 'steps-2.json'}")
    assert table["launch_steps"] == 3  # the sweep does not say: the default
    rows = {row["concurrency"]: row for row in table["levels"]}
    assert sorted(rows) == [1, 16, 64]
    wins = []
    for c, (speedup, lo, hi) in expected.items():
        on, off = _over_plain(c)
        best_end = max(on, off)
        row = rows[c]
        assert row["serve_over_plain"]["0"] == pytest.approx(off)
        assert row["serve_over_plain"]["3"] == pytest.approx(on)
        assert row["serve_over_plain"]["2"] == pytest.approx(on * speedup)
        assert row["middle_interval"]["2"] == pytest.approx([on * lo, on * hi])
        assert row["best_end"] == pytest.approx(best_end)
        assert row["best_end_k"] == (3 if on >= off else 0)
        assert row["gain"] == pytest.approx(on * speedup / best_end)
        assert [row["gain_lo"], row["gain_hi"]] == pytest.approx([on * lo / best_end, on * hi / best_end])
        assert row["best_k"] == max((0, off), (3, on), (2, on * speedup), key=lambda kv: kv[1])[0]
        assert row["middle_wins"] == (on * lo > best_end)
        if on * lo > best_end:
            wins.append(c)
    # on this H200 pair knob-on leads at 16 (1.10 x it beats it), the knob at 0 at 64 (0.91 vs 0.93 of plain)
    assert wins == [16, 64] == table["middle_wins_at"]
    summary = table["stdout"].strip().splitlines()[-1]
    assert summary.startswith("a middle step count beats both ends beyond its interval at: C=16 (k=2")
    assert "C=64 (k=2" in summary and "C=1 " not in summary
    assert len(table["stdout"].strip().splitlines()) == 2 + 3 + 1  # title, header, a row per level, summary


def test_a_slower_middle_count_shows_no_level_and_two_files_share_one_table(tmp_path: Path) -> None:
    _ab(tmp_path / "steps-1.json", {1: 0.8, 64: 0.8})
    expected_2 = _ab(tmp_path / "steps-2.json", {64: 0.95})
    table = _table(
        tmp_path, "--steps", f"1={tmp_path / 'steps-1.json'}", "--steps", f"2={tmp_path / 'steps-2.json'}"
    )
    assert table["middle_wins_at"] == []
    assert table["stdout"].strip().splitlines()[-1].endswith("at: no level")
    rows = {row["concurrency"]: row for row in table["levels"]}
    assert set(rows[1]["serve_over_plain"]) == {"0", "1", "3"}  # K=2 was not measured at C=1
    on, off = _over_plain(64)
    assert rows[64]["best_middle_k"] == 2  # 0.95 of the launch beats 0.8 of it
    assert rows[64]["gain"] == pytest.approx(on * expected_2[64][0] / max(on, off))
    assert rows[64]["best_k"] == (0 if off > on else 3)


def test_a_point_above_the_best_end_is_no_win_when_its_interval_reaches_below(tmp_path: Path) -> None:
    on, off = _over_plain(64)
    speedup = (max(on, off) / on) * 1.02  # 2 % above the best end at C=64, in windows noisy by +-20 %
    expected = _ab(tmp_path / "steps-1.json", {64: speedup}, noise=0.2)
    _, lo, _ = expected[64]
    assert on * lo < max(on, off) < on * expected[64][0]  # the case this test is about
    table = _table(tmp_path, "--steps", f"1={tmp_path / 'steps-1.json'}")
    row = table["levels"][0]
    assert row["gain"] > 1.0 and row["gain_lo"] < 1.0 and not row["middle_wins"]
    assert table["stdout"].strip().splitlines()[-1].endswith("at: no level")


def test_the_launch_steps_come_from_the_sweep_or_the_profile_beside_it(tmp_path: Path) -> None:
    _ab(tmp_path / "ab.json", {64: 1.1})
    sweep = json.loads(SWEEP.read_text())
    four = tmp_path / "four" / "sweep.json"
    four.parent.mkdir()
    four.write_text(json.dumps({**sweep, "speculative_num_steps": 4}))
    done = _run("--sweep", four, "--steps", f"3={tmp_path / 'ab.json'}")
    assert done.returncode == 0, done.stderr
    assert "the launch runs 4 steps (the sweep)" in done.stdout and "k=4 (launch)" in done.stdout
    done = _run("--sweep", four, "--steps", f"1={tmp_path / 'ab.json'}", "--launch-steps", "3")
    assert (done.returncode, done.stderr.strip()) == (2, "--launch-steps: 3, but the sweep says 4")
    # bench sweep --profile-out: the profile (it carries speculative_num_steps) lies beside the sweep
    two = tmp_path / "two" / "sweep.json"
    two.parent.mkdir()
    two.write_text(json.dumps({**sweep, "profile_out": "/root/out/profile.json"}))
    (two.parent / "profile.json").write_text(json.dumps({"speculative_num_steps": 2}))
    assert _run("--sweep", two, "--steps", f"1={tmp_path / 'ab.json'}").returncode == 0
    done = _run("--sweep", two, "--steps", f"2={tmp_path / 'ab.json'}")
    assert done.returncode == 2
    assert done.stderr.strip() == f"--steps 2={tmp_path / 'ab.json'}: K must be 1..1 (the launch runs 2)"


def _no_plain(tmp_path: Path) -> Path:
    sweep = json.loads(SWEEP.read_text())
    path = tmp_path / "no-plain.json"
    path.write_text(json.dumps({**sweep, "points": [p for p in sweep["points"] if p["mode"] != "plain"]}))
    return path


@pytest.mark.parametrize(
    ("case", "want"),
    [
        ("sweep missing", "--sweep: {tmp}/absent.json: cannot read (No such file or directory)"),
        ("sweep not JSON", "--sweep: {tmp}/garbage.txt: not valid JSON"),
        ("sweep without plain", "--sweep: no plain points"),
        ("steps not K=path", "--steps 'steps-2.json': expected K=path (e.g. 1=steps-1.json)"),
        ("K not a number", "--steps 'two={tmp}/ab.json': expected K=path"),
        ("K at the launch", "--steps 3={tmp}/ab.json: K must be 1..2 (the launch runs 3)"),
        ("K zero", "--steps 0={tmp}/ab.json: K must be 1..2 (the launch runs 3)"),
        ("AB missing", "--steps 1={tmp}/absent.json: cannot read (No such file"),
        ("AB not JSON", "--steps 1={tmp}/garbage.txt: not valid JSON"),
        ("AB without levels", "--steps 1={tmp}/empty.json: no levels"),
        ("AB level without interval", "--steps 1={tmp}/bare.json: level C=64 has no ratio with its interval"),
        ("no common level", "--steps: no level of the AB files ([3]) is in the sweep"),
    ],
)
def test_bad_input_gets_one_line_naming_the_argument(tmp_path: Path, case: str, want: str) -> None:
    tmp = tmp_path
    _ab(tmp / "ab.json", {64: 1.1})
    _ab(tmp / "level3.json", {3: 1.1})
    (tmp / "garbage.txt").write_text("not json {")
    (tmp / "empty.json").write_text(json.dumps({"levels": []}))
    (tmp / "bare.json").write_text(json.dumps({"levels": [{"concurrency": 64, "gated_tok_s": [1.0]}]}))
    sweep: str | Path = SWEEP
    steps = f"1={tmp / 'ab.json'}"
    match case:
        case "sweep missing":
            sweep = tmp / "absent.json"
        case "sweep not JSON":
            sweep = tmp / "garbage.txt"
        case "sweep without plain":
            sweep = _no_plain(tmp)
        case "steps not K=path":
            steps = "steps-2.json"
        case "K not a number":
            steps = f"two={tmp / 'ab.json'}"
        case "K at the launch":
            steps = f"3={tmp / 'ab.json'}"
        case "K zero":
            steps = f"0={tmp / 'ab.json'}"
        case "AB missing":
            steps = f"1={tmp / 'absent.json'}"
        case "AB not JSON":
            steps = f"1={tmp / 'garbage.txt'}"
        case "AB without levels":
            steps = f"1={tmp / 'empty.json'}"
        case "AB level without interval":
            steps = f"1={tmp / 'bare.json'}"
        case "no common level":
            steps = f"1={tmp / 'level3.json'}"
    out = tmp / "table.json"
    done = _run("--sweep", sweep, "--steps", steps, "--json", out)
    assert done.returncode == 2
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(want.format(tmp=tmp)), done.stderr
    assert done.stdout == "" and not out.exists()
