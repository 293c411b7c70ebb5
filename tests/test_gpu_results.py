"""The real-GPU check's database (data/gpu-runs/): a real SGLang 0.5.17 + EAGLE-3 server with spectower's
plugin on two H200s, recorded by spectower's own collector, sweep and policy, read back here.

What it proves: the history a real server leaves is readable by storage and the console, with the real
values the run saw (data/gpu-runs/NOTEBOOK.md lists them).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from spectower.collectors.bench.compare import compare_runs, load_run
from spectower.storage import open_database, queries
from spectower.storage.database import recorded_copy
from spectower.storage.models import EngineSample, Gpu, GpuSample
from sqlmodel import select
from streamlit.testing.v1 import AppTest

RESULTS = Path(__file__).resolve().parents[1] / "data" / "gpu-runs"
SCRIPTS = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu"
APP = str(Path(__file__).resolve().parents[1] / "console" / "app.py")


@pytest.fixture
def tp2_db(tmp_path: Path) -> Path:
    # a copy: opening may migrate, the committed file (collect.db.xz) stays as recorded
    return recorded_copy(RESULTS / "h200-2gpu-tp2" / "collect.db", tmp_path)


def test_real_run_history_reads_back(tp2_db: Path) -> None:
    with open_database(tp2_db) as db:
        (server,) = queries.servers(db)
        assert server.sglang_version == "0.5.17" and server.speculative_algorithm == "EAGLE3"
        with db.session() as s:
            gpus = list(s.exec(select(Gpu)))
            engine = list(s.exec(select(EngineSample)))
            gpu_samples = list(s.exec(select(GpuSample)))
        assert [g.name for g in gpus] == ["NVIDIA H200", "NVIDIA H200"]
        assert len({g.uuid for g in gpus}) == 2 and all(g.uuid.startswith("GPU-") for g in gpus)
        assert len(engine) > 200 and len(gpu_samples) > 400
        # the knob moved during the run and the collector saw it
        assert {e.spec_max_bs for e in engine} >= {0, 48}
        assert max(e.num_running_reqs or 0 for e in engine) >= 16
        assert max(g.power_w or 0 for g in gpu_samples) > 100  # real NVML power under load
        (run,) = queries.bench_runs(db)
        points = queries.bench_points(db, run.id)
        assert sorted({p.concurrency for p in points}) == [1, 2, 4, 8, 16, 32]
        assert run.crossover is not None and 16 <= run.crossover <= 32
        assert "<redacted>" in (run.server_info_json or "")  # SGLang lists its admin key; we never keep it
        policy = queries.control_events(db, actor="policy")
        assert any(e.action == "set" and e.confirmed for e in policy)


def test_console_shows_the_real_run(tp2_db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECTOWER_DB", f"sqlite:///{tp2_db}")
    at = AppTest.from_file(APP, default_timeout=120)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    at.switch_page("pages/benchmarks.py")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert len(at.get("plotly_chart")) >= 1


def test_the_second_one_gpu_sweep_reads_back(tmp_path: Path) -> None:
    # 2026-11-30, one H200: the sweep counted with tokens interpolated between chunks (stats.tokens_by)
    copy = recorded_copy(RESULTS / "h200-1gpu-tp1-2026-11-30" / "collect.db", tmp_path)
    with open_database(copy) as db:
        (run,) = queries.bench_runs(db)
        points = queries.bench_points(db, run.id)
        assert sorted({p.concurrency for p in points}) == [1, 2, 4, 8, 16, 32]
        assert run.crossover is not None and 8 <= run.crossover <= 16
        assert "<redacted>" in (run.server_info_json or "")
        sets = [e for e in queries.control_events(db, actor="operator") if e.action == "set"]
        assert sets and all(e.confirmed for e in sets)


def _compare_saved_sweeps(tmp_path: Path, before: str, after: str) -> Any:
    """`bench compare` of two sweeps under data/gpu-runs/, each read back from a copy of its saved
    database."""
    runs = []
    for folder in (before, after):
        # opening may migrate: the committed file stays as recorded
        copy = recorded_copy(RESULTS / folder / "bench.db", tmp_path / str(len(runs)))
        with open_database(copy) as db:
            (run,) = queries.bench_runs(db)
            runs.append(load_run(db, run.id))
    return compare_runs(*runs)


def test_the_mirror_shows_in_a_compare_of_the_two_flashinfer_runs(tmp_path: Path) -> None:
    """`bench compare` over the two real flashinfer sweeps (2026-12-01, before the seq-lens mirror;
    2026-12-02, with it), each read back from the database its sweep saved: the knob at 0 against the plain
    server rose at every level, the stack is the same, and the stored ratios are the sweep's pooled ones."""
    mirror_run = "h200-8b-pair-flashinfer-mirror-2026-12-02/1-launch-sweep"
    comp = _compare_saved_sweeps(tmp_path, "h200-8b-pair-flashinfer-2026-12-01/2-sweep", mirror_run)
    levels = [row["concurrency"] for row in comp.rows]
    assert levels == [1, 2, 4, 8, 16, 32, 64]
    for row in comp.rows:
        before, after = row["a"]["off_plain"], row["b"]["off_plain"]
        assert after > before + 0.05, row  # 0.75-0.84 before, 0.95-0.99 with the mirror
    assert comp.stack == []  # the same SGLang, launch flags, model and GPU: only the plugin's mirror differs
    # the stored points carry the three curves the profile was written from
    profile = json.loads((RESULTS / mirror_run / "profile.json").read_text())
    for i, row in enumerate(comp.rows):
        assert row["b"]["off_plain"] == pytest.approx(
            profile["output_tok_s"]["spec_off"][i] / profile["output_tok_s"]["plain"][i], rel=1e-3
        )


def test_a_profile_shows_in_a_compare_of_one_launch_before_and_after_it(tmp_path: Path) -> None:
    """`bench compare` over the two C=64 sweeps of one flashinfer launch (2026-12-02, later), the first
    before two profiles of the same servers and the second after them, each read back from the database its
    sweep saved: only the knob at 0 lost (CUPTI left on by the profiler costs a host-paced gated step most;
    data/gpu-runs/NOTEBOOK.md, "A profile leaves its mark"), the plain server and the knob on held."""
    launch = "h200-8b-pair-flashinfer-2026-12-02b"
    comp = _compare_saved_sweeps(
        tmp_path, f"{launch}/2-launch-sweep-48-64-profile-64", f"{launch}/3-profile-64-sweep-64"
    )
    (row,) = [row for row in comp.rows if row["concurrency"] == 64]
    before, after = row["a"], row["b"]
    assert before["off_plain"] == pytest.approx(0.924, abs=0.002)
    assert after["off_plain"] == pytest.approx(0.823, abs=0.002)
    assert after["on_plain"] == pytest.approx(before["on_plain"], abs=0.02)  # 1.249 and 1.260
    assert comp.stack == []  # the same servers: nothing but the profile between the two


def test_two_sweeps_of_one_fresh_flashinfer_launch_compare_as_the_readme_says(tmp_path: Path) -> None:
    """`bench compare` over the two 5-round C=32/48/64 sweeps of one unprofiled flashinfer launch
    (2026-12-02, stop 28), each read back from the database its sweep saved: the same stack, the knob at 0
    against the plain server as each sweep printed it (the README of
    data/gpu-runs/h200-8b-pair-flashinfer-2026-12-02c), and drafting still above the plain server at every
    level (no crossover within 64)."""
    launch = "h200-8b-pair-flashinfer-2026-12-02c"
    comp = _compare_saved_sweeps(tmp_path, f"{launch}/2-sweep-32-48-64-a", f"{launch}/2-sweep-32-48-64-b")
    assert [row["concurrency"] for row in comp.rows] == [32, 48, 64]
    printed = {32: (0.980, 0.984), 48: (0.928, 0.968), 64: (0.955, 1.000)}  # measure.log's pooled lines
    for row in comp.rows:
        a, b = printed[row["concurrency"]]
        assert row["a"]["off_plain"] == pytest.approx(a, abs=0.002)
        assert row["b"]["off_plain"] == pytest.approx(b, abs=0.002)
        assert row["a"]["on_plain"] > 1.2 and row["b"]["on_plain"] > 1.2
    assert comp.stack == []  # the same servers, one launch


def _script(name: str, *args: str) -> str:
    done = subprocess.run([sys.executable, str(SCRIPTS / name), *args], capture_output=True, text=True,
                          timeout=120, cwd=RESULTS)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_flashinfer_knob_at_max_over_every_saved_run_is_what_the_readme_says() -> None:
    """The knob at max against an un-gated EAGLE-3 server on flashinfer, every saved run with the gated
    decode on (stop 28's two unpaired, 2026-12-03's three paired), pooled by ``knob_max_ab.py --summarize``:
    the paired figure at each level as data/gpu-runs/h200-8b-pair-flashinfer-2026-12-03/README.md gives it,
    each at least the 0.97 that issue #12 asks."""
    old, new = "h200-8b-pair-flashinfer-2026-12-02c", "h200-8b-pair-flashinfer-2026-12-03"
    files = [f"{old}/3-knob-max-vs-ungated/knob_max_vs_ungated.json",
             f"{old}/5-knob-max-ab-4-rounds/ab_gated_decode_on_4rounds.json",
             f"{new}/1-launch-ungated-no-prefill-graphs/knob_max_vs_ungated.json",
             f"{new}/3-knob-max-vs-ungated/knob_max_vs_ungated.json",
             f"{new}/4-knob-max-c64-8-rounds/knob_max_vs_ungated.json"]  # fmt: skip
    lines = _script("knob_max_ab.py", "--summarize", *files).strip().splitlines()
    paired = {int(line.split(":")[0].removeprefix("C=")): float(line.split("over windows; ")[1].split()[0])
              for line in lines}  # fmt: skip
    assert paired == {1: 0.992, 16: 0.976, 64: 0.983}
    assert "paired over 18 rounds" in lines[-1]


def test_always_on_under_the_day_load_scores_as_the_readme_says() -> None:
    """The always-on run on flashinfer (2026-12-03) and learn (2026-12-01), scored against the same sweep:
    learn served what always on serves, so the day load's churn, not learn, is what keeps both near 0.8."""
    base = "h200-8b-pair-flashinfer-2026-12-01"
    out = _script("policy_table.py", "--sweep", f"{base}/2-sweep/sweep.json",
                  "h200-8b-pair-flashinfer-2026-12-03/5-always-on-day-load/load-on.log",
                  f"{base}/5-learn/load-learn.log")  # fmt: skip
    rows = {line.split()[0]: line.split() for line in out.splitlines()[2:]}  # a line naming the baselines
    # policy, tokens, best fixed, never drafts, ratio
    assert [rows["on"][i] for i in (1, 2, 4)] == ["3080274", "3907566", "0.788"]
    assert [rows["learn"][i] for i in (1, 2, 4)] == ["3132166", "3930389", "0.797"]


def test_a_policys_zero_with_windows_against_plain_is_what_the_readme_says() -> None:
    """Issue #32 item 1 (2026-12-03): a policy's 0 with exploration in windows against the plain server,
    mixed output lengths, pooled over calls 1 and 4 by ``knob_max_ab.py --summarize``; the same server
    without windows and an operator's 0 from the same launch, as the results' README gives them."""
    import importlib.util

    base = RESULTS / "h200-8b-pair-triton-windows-2026-12-03"
    spec = importlib.util.spec_from_file_location("knob_max_ab", SCRIPTS / "knob_max_ab.py")
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)  # in-process: the --summarize lines, without a process per group

    def paired(*names: str) -> dict[int, float]:
        rows = script.summarize([base / n for n in names])
        lines = [script.describe_level(row, row["label"]) for row in rows]
        return {int(line.split(":")[0].removeprefix("C=")): float(line.split("over windows; ")[1].split()[0])
                for line in lines}  # fmt: skip

    windows = paired("policy_off_vs_plain-windows.json", "policy_off_vs_plain-windows-2.json")
    assert windows == {1: 0.984, 4: 0.990, 16: 0.978, 32: 0.978, 64: 0.990}
    without = paired("policy_off_vs_plain-nowindows.json")
    assert without == {1: 0.943, 4: 0.938, 16: 0.933, 32: 0.859, 64: 0.806}
    assert paired("operator_off_vs_plain.json") == {1: 0.978, 4: 0.983, 16: 1.030, 32: 0.911, 64: 1.009}
    assert paired("policy_32_vs_plain.json") == {48: 0.947, 64: 0.924}
