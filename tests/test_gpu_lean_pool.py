"""benchmarks/gpu/lean_pool.py: explored against steady rates pooled over launches (issue #32, item 2), on
explore_lean.py's own --json of the H200's steady levels (data/gpu-runs/) and on launches made to order."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "benchmarks" / "gpu"))
import explore_lean
import lean_pool
from spectower.storage.database import recorded_copy

LEVELS = REPO_ROOT / "data/gpu-runs/h200-8b-pair-triton-steady-levels-2026-12-06/1-levels-48-16/policy.db"


@pytest.fixture(scope="module")
def h200_launch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("levels")
    db = recorded_copy(LEVELS, work)  # opening migrates in place: never the committed file
    out = work / "lean.json"
    assert explore_lean.main(["--db", str(db), "--runs-from-db", "--json", str(out)]) == 0
    return out


def launch_file(path: Path, rows: list[dict[str, object]]) -> Path:
    path.write_text(json.dumps({"lean": rows, "served": [], "cost": []}))
    return path


def row(b: int, mode: str, explored: list[list[float]], steady: list[list[float]], scale: float = 1.0,
        run: str = "threshold-24") -> dict[str, object]:  # fmt: skip
    return {"bin": b, "run": run, "mode": mode, "ratio": 1.0, "scale": scale, "explored_cells": explored,
            "steady_cells": steady}  # fmt: skip


def test_one_launch_pools_to_its_own_corrected_ratio_and_interval(h200_launch: Path) -> None:
    rows = json.loads(h200_launch.read_text())["lean"]
    mine = {(r["bin"], r["mode"]): r for r in lean_pool.pool([lean_pool.read_launch(h200_launch)], 0.03)}
    theirs = [r for r in rows if "explored_cells" in r]
    assert {(r["bin"], r["mode"]) for r in theirs} == set(mine) == {
        (16, "drafted"), (16, "gated"), (48, "drafted"), (48, "gated")}  # fmt: skip
    for r in theirs:
        pooled = mine[r["bin"], r["mode"]]
        assert pooled["ratio"] == pytest.approx(r["corrected"])
        assert (pooled["low"], pooled["high"]) == pytest.approx((r["low"], r["high"]))
        assert pooled["verdict"] == "open"  # 2-4 windows a level: 4-8 % wide, wider than the band


def test_a_second_launch_like_the_first_keeps_the_point_and_narrows_the_interval(h200_launch: Path) -> None:
    once = {(r["bin"], r["mode"]): r for r in lean_pool.pool([lean_pool.read_launch(h200_launch)], 0.03)}
    twice = lean_pool.pool([lean_pool.read_launch(h200_launch)] * 2, 0.03)
    for r in twice:
        before = once[r["bin"], r["mode"]]
        assert r["ratio"] == pytest.approx(before["ratio"]) and r["cells"] == 2
        assert r["high"] - r["low"] < before["high"] - before["low"]


def test_launches_count_by_their_explored_seconds_each_against_its_own_steady_rate_and_tax(
    tmp_path: Path,
) -> None:
    steady_a = [[100.0, 1_000.0, 1.0]] * 4  # 1 000 tok/s
    steady_b = [[100.0, 2_000.0, 1.0]] * 4  # another card: 2 000 tok/s
    a = launch_file(tmp_path / "a.json", [row(48, "gated", [[10.0, 550.0, 0.5]] * 2, steady_a, scale=1.1)])
    b = launch_file(tmp_path / "b.json", [row(48, "gated", [[10.0, 1_800.0, 1.0]] * 3, steady_b)])
    (pooled,) = lean_pool.pool([lean_pool.read_launch(a), lean_pool.read_launch(b)], 0.03)
    # a: 1 100 tok/s x 1.1 / 1 000 = 1.21 over 1 s; b: 1 800 / 2 000 = 0.9 over 3 s
    assert pooled["ratio"] == pytest.approx((1_100 * 1.1 * 1 + 1_800 * 3) / (1_000 * 1 + 2_000 * 3))
    assert pooled["launches"] == 2 and pooled["steps"] == 50 and pooled["intervals"] == 5
    assert pooled["by_launch"] == pytest.approx([1.21, 0.9])  # each launch's own, in the order given
    assert pooled["low"] == pooled["high"] == pytest.approx(pooled["ratio"])  # identical intervals: no spread


def test_the_verdict_reads_the_interval_against_the_band() -> None:
    assert lean_pool.verdict((0.98, 1.02), 0.03) == "within"
    assert lean_pool.verdict((0.95, 0.96), 0.03) == "outside"
    assert lean_pool.verdict((1.04, 1.10), 0.03) == "outside"
    assert lean_pool.verdict((0.96, 1.01), 0.03) == "open"
    assert lean_pool.verdict(None, 0.03) == "open"


def test_the_cli_prints_the_pooled_table_and_saves_it(
    h200_launch: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "pooled.json"
    assert lean_pool.main([str(h200_launch), str(h200_launch), "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "pooled over 2 launch(es)" in text and " 48 drafted" in text
    assert [r["bin"] for r in json.loads(out.read_text())] == [16, 16, 48, 48]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("not json", "not an explore_lean.py --json file"),
        ('{"served": []}', "no 'lean' list"),
        (
            json.dumps({"lean": [row(48, "gated", [[1.0, -5.0, 1.0]], [[1.0, 1.0, 1.0]])]}),
            "lean[0].explored_cells: expected a list of [steps, tokens, seconds], each a number >= 0",
        ),
        (
            json.dumps({"lean": [row(0, "gated", [[1.0, 5.0, 1.0]], [[1.0, 1.0, 1.0]])]}),
            "lean[0].bin: expected",
        ),
        (
            json.dumps({"lean": [row(48, "mixed", [[1.0, 5.0, 1.0]], [[1.0, 1.0, 1.0]])]}),
            "lean[0].mode: expected",
        ),
        (
            json.dumps({"lean": [row(48, "gated", [[1.0, 5.0, 1.0]], [[1.0, 1.0, 1.0]], scale=0.0)]}),
            "lean[0].scale: expected a number > 0",
        ),
    ],
)
def test_bad_input_is_one_line_naming_the_file_and_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, message: str
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    out = tmp_path / "pooled.json"
    assert lean_pool.main([str(bad), "--json", str(out)]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and not out.exists()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(str(bad)) and message in lines[0]


def test_a_bound_outside_0_to_1_is_refused(h200_launch: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert lean_pool.main([str(h200_launch), "--bound", "1.5"]) == 2
    assert capsys.readouterr().err.strip() == "--bound: expected a number between 0 and 1, got 1.5"
