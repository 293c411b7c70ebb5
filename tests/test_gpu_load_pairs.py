"""benchmarks/gpu/load_pairs.py: alternated runs of two policies paired by order, on load logs in bench load's
own status-line format."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "benchmarks" / "gpu"))
import load_pairs

SCRIPT = REPO_ROOT / "benchmarks/gpu/load_pairs.py"


def _log(folder: Path, label: str, rates: list[float]) -> None:
    lines = ["bench load on http://127.0.0.1:30000: pattern steps:16, period 60 s, up to 16 clients"]
    lines += [f"t={5 * (i + 1):6.0f}s  target C=16  in flight 16  tok/s {r:8.1f}  done {10 * i}  errors 0"
              for i, r in enumerate(rates)]  # fmt: skip
    (folder / f"load-{label}.log").write_text("\n".join(lines) + "\n")


def test_runs_pair_by_order_each_run_skips_its_ramp_and_the_pairs_give_one_interval(tmp_path: Path) -> None:
    # the server drifts between pairs (4 000, then 3 800, then 4 100 tok/s), the second policy about 3 %
    # below the first in each: the pairs see 0.97 whatever the drift; the first line of each run is its ramp
    for n, (level, factor) in enumerate(((4000.0, 0.97), (3800.0, 0.965), (4100.0, 0.975)), start=1):
        suffix = "" if n == 1 else f"-{n}"
        _log(tmp_path, f"on{suffix}", [100.0, level, level + 10, level - 10])
        second = factor * level
        _log(tmp_path, f"threshold-64{suffix}", [50.0, second, second + 10, second - 10])
    found = load_pairs.pairs(tmp_path, "on", "threshold:64", skip_s=5)
    assert [(r["first"], r["second"]) for r in found["pairs"]] == [
        ("load-on.log", "load-threshold-64.log"), ("load-on-2.log", "load-threshold-64-2.log"),
        ("load-on-3.log", "load-threshold-64-3.log")]  # fmt: skip
    assert all(r["lines"] == [3, 3] for r in found["pairs"])
    assert found["ratio"] == pytest.approx(0.97, abs=0.001)
    assert found["low"] < found["ratio"] < found["high"] and found["high"] - found["low"] < 0.03
    out = tmp_path / "pairs.json"
    proc = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path), "--first", "on", "--second",
                           "threshold:64", "--skip-s", "5", "--json", str(out)],
                          capture_output=True, text=True, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "paired over 3 pairs: 0.970" in proc.stdout
    assert json.loads(out.read_text())["ratio"] == pytest.approx(found["ratio"])


@pytest.mark.parametrize(
    ("logs", "names"),
    [({"on": [1.0, 2.0]}, "no load-threshold-64.log"),
     ({"on": [1.0, 2.0], "on-2": [1.0, 2.0], "threshold-64": [1.0, 2.0]}, "2 runs of on against 1"),
     ({"on": [1.0], "threshold-64": [1.0]}, "no status line after 10 s")],
)  # fmt: skip
def test_bad_input_is_one_line_naming_what_is_wrong(tmp_path: Path, logs: dict[str, list[float]],
                                                    names: str) -> None:  # fmt: skip
    for label, rates in logs.items():
        _log(tmp_path, label, rates)
    proc = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path), "--first", "on", "--second",
                           "threshold:64"], capture_output=True, text=True, check=False)  # fmt: skip
    assert proc.returncode == 2
    assert names in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_a_log_that_cannot_be_read_is_one_line_naming_it_here_and_in_the_policy_table(tmp_path: Path) -> None:
    # the one status-line reader (policy_table.read_status) reads capped and names the file
    _log(tmp_path, "on", [1.0, 2.0, 3.0])
    (tmp_path / "load-threshold-64.log").mkdir()
    proc = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path), "--first", "on", "--second",
                           "threshold:64"], capture_output=True, text=True, check=False)  # fmt: skip
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().startswith("load-threshold-64.log: cannot read")
    sweep = tmp_path / "sweep.json"
    sweep.write_text(json.dumps({"points": [{"mode": m, "concurrency": 16, "output_throughput": 1000.0}
                                            for m in ("on", "off")]}))  # fmt: skip
    logs = [str(tmp_path / "load-on.log"), str(tmp_path / "load-threshold-64.log")]
    table = subprocess.run([sys.executable, str(REPO_ROOT / "benchmarks/gpu/policy_table.py"), "--sweep",
                            str(sweep), *logs], capture_output=True, text=True, check=False)  # fmt: skip
    assert table.returncode == 2 and "Traceback" not in table.stderr
    assert len(table.stderr.strip().splitlines()) == 1
    assert table.stderr.startswith("load-threshold-64.log: cannot read")


def test_a_runs_repeats_are_read_by_the_rule_the_policy_table_spells_them_with() -> None:
    """One rule for the ``-2``, ``-3`` labels of a repeated run (``policy_table.repeat_label`` and its
    inverse): the pairs' repeats and the policy table's are the same runs, and what measure_off.sh never
    labels (``-1``, ``-02``) is no repeat, where a pattern of any digits took them."""
    from benchmarks.gpu import policy_table

    names = ["off", "on", "off-2", "off-1", "off-02", "on-2", "off-3", "offload-2"]
    assert load_pairs.repeats_of("off", names) == ["off", "off-2", "off-3"]
    assert [policy_table.repeat_label("off", k) for k in (1, 2, 3)] == ["off", "off-2", "off-3"]
    assert [policy_table.repeat_index("off", n) for n in names] == [1, None, 2, None, None, None, 3, None]
    runs = dict.fromkeys(names)
    assert policy_table.repeats("on", "off", runs) == [("on", "off"), ("on-2", "off-2")]
