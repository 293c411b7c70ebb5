"""benchmarks/gpu/profile_table.py: GPU time per step, and how much of the wall time the GPU sat idle, from
SGLang's traces."""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "benchmarks" / "gpu"))
import profile_table


def kernel(ts: float, dur: float, name: str = "nvjet_gemm") -> dict[str, object]:
    return {"ph": "X", "cat": "kernel", "name": name, "ts": ts, "dur": dur}


def python_call(ts: float, dur: float, name: str) -> dict[str, object]:
    return {"ph": "X", "cat": "python_function", "name": name, "ts": ts, "dur": dur}


def write_trace(folder: Path, events: list[dict[str, object]]) -> Path:
    folder.mkdir(parents=True)
    with gzip.open(folder / "step.trace.json.gz", "wt") as handle:
        json.dump({"traceEvents": events}, handle)
    return folder


# Two steps of 1 ms of kernels each. The fed server launches its next step as the last ends; the host-bound
# one leaves the GPU waiting 1 ms before each step's kernels (and 10 us between two kernels: not a gap).
FED = [kernel(0, 500), kernel(500, 500, "BatchPrefillWithPagedKVCacheKernel"), kernel(1000, 1000)]
HOST_BOUND = [kernel(0, 490), kernel(500, 500, "BatchPrefillWithPagedKVCacheKernel"), kernel(2000, 1000)]


def test_a_gpu_only_trace_says_how_long_the_gpu_waited_per_step() -> None:
    fed = profile_table.summarise(FED, steps=2)
    starved = profile_table.summarise(HOST_BOUND, steps=2)
    assert fed["gpu_ms_per_step"] == pytest.approx(1.0)
    assert fed["wall_ms_per_step"] == pytest.approx(1.0) and fed["idle_share"] == 0.0
    assert starved["gpu_ms_per_step"] == pytest.approx(0.995)
    assert starved["wall_ms_per_step"] == pytest.approx(1.5)
    assert starved["idle_ms_per_step"] == pytest.approx(0.5)  # the 10 us between kernels is no gap
    assert starved["idle_share"] == pytest.approx(1 / 3)


def test_the_table_prints_the_idle_share_of_a_gpu_only_trace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fed = write_trace(tmp_path / "plain", FED)
    starved = write_trace(tmp_path / "gated", HOST_BOUND)
    out = tmp_path / "kernels.json"
    profile_table.main(["--steps", "2", "--json", str(out), f"plain@C64={fed}", f"knob-off@C64={starved}"])
    rows = json.loads(out.read_text())
    assert rows["knob-off@C64"]["idle_share"] == pytest.approx(1 / 3)
    assert rows["plain@C64"]["idle_share"] == 0.0
    table = capsys.readouterr().out
    gated_line = next(line for line in table.splitlines() if line.startswith("knob-off@C64"))
    assert "1.50" in gated_line and "33%" in gated_line


def test_the_timeline_names_what_the_host_ran_while_the_gpu_waited(tmp_path: Path) -> None:
    events = [
        *HOST_BOUND,
        python_call(900, 1100, "sglang/srt/managers/scheduler.py(1): process_batch_result"),
        python_call(0, 400, "sglang/srt/managers/scheduler.py(2): run_batch"),  # while the GPU was busy
    ]
    line = profile_table.timeline(events, steps=2)
    assert line["wall_ms_per_step"] == pytest.approx(1.5) and line["idle_share"] == pytest.approx(1 / 3)
    assert line["gaps_per_step"] == 0.5
    names = {item["name"]: item["ms_per_step"] for item in line["python_in_gaps"]}
    assert names == {"managers/scheduler.py: process_batch_result": pytest.approx(0.5)}


def test_a_folder_with_two_traces_is_refused_by_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A second profile into the same folder must not be read as the first (2026-12-02 on the H200)."""
    folder = write_trace(tmp_path / "off-c64", FED)
    with gzip.open(folder / "later.trace.json.gz", "wt") as handle:
        json.dump({"traceEvents": HOST_BOUND}, handle)
    out = tmp_path / "kernels.json"
    profile_table.main(["--steps", "2", "--json", str(out), f"knob-off@C64={folder}"])
    assert json.loads(out.read_text()) == {}
    assert f"{folder}: 2 trace files, one expected" in capsys.readouterr().err
