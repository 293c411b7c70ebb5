"""`spectower control auto --policy learn` starts warm: against the REAL simulator subprocess, with a real
SQLite database holding saved sweeps of a matching stack (crossover 16) and of another stack (newer, its
crossover 4), it moves the knob to 16 at its first decision, says which sweep in one line and in its
auto-start audit row, and holds 16; with only the other stack's sweep it says nothing matched and leaves the
knob where the server holds it; --no-warm-start says so and starts there too."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from spectower.collectors.bench.gpu_inventory import dcgm_inventory
from spectower.storage.database import open_database
from spectower.storage.models import BenchRun

from tests.conftest import REPO_ROOT, SPECTOWER_CLI
from tests.test_control_cli import ADMIN_KEY, OutputReader, SampleFeeder, events, knob_values, wait_for

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def shared_sim() -> Iterator[Any]:
    from benchmarks.simulator_process import SimulatorProcess

    with SimulatorProcess(admin_key=ADMIN_KEY) as process:
        yield process


@pytest.fixture
def sim(shared_sim: Any) -> Any:
    """The knob back at the launch value (always on: 64) and no lock."""
    body = {"server_args": {"spectower_spec_max_bs": 64, "spectower_writer": 1, "spectower_release": 1}}
    answer = httpx.post(f"{shared_sim.base_url}/set_internal_state", json=body,
                        headers=shared_sim.admin_headers, timeout=5)  # fmt: skip
    assert answer.json() == [True]
    return shared_sim


def save_sweep(
    db_path: Path, info: dict[str, Any], gpus: list[dict[str, Any]], crossover: float, age_s: float, tag: str
) -> int:
    """A sweep as `bench sweep --save` stores it (collectors/bench/persist.py): the server's /server_info,
    its GPU inventory, the crossover and its status."""
    run = BenchRun(
        created_at=time.time() - age_s, source="sweep", tag=tag, server_url="http://elsewhere:30000",
        served_model_name=info.get("served_model_name"), sglang_version=info.get("version"),
        server_info_json=json.dumps(info), gpu_inventory_json=json.dumps(gpus),
        params_json=json.dumps({"crossover_status": "found"}), crossover=crossover,
        crossover_lo=crossover - 2, crossover_hi=crossover + 3, best_max_bs=int(crossover),
    )  # fmt: skip
    with open_database(db_path) as db:
        return db.save_bench_run(run, [])


def stacks(sim: Any) -> tuple[dict[str, Any], list[dict[str, Any]], dict[str, Any]]:
    """The simulator's /server_info and GPUs, and the same with another draft (another stack)."""
    info = httpx.get(f"{sim.base_url}/server_info", timeout=5).json()
    info.pop("internal_states", None)
    other = {**info, "speculative_draft_model_path": "someone/else-eagle3"}
    return info, dcgm_inventory(sim.gpu_metrics_url), other


def start_auto(sim: Any, db: Path, *extra: str) -> tuple[subprocess.Popen[str], OutputReader]:
    env = {**os.environ, "SPECTOWER_ADMIN_KEY": ADMIN_KEY, "PYTHONUNBUFFERED": "1"}
    env.pop("SPECTOWER_ADMIN_KEY_FILE", None)
    proc = subprocess.Popen(
        [*SPECTOWER_CLI, "control", "auto", "--server", sim.base_url, "--db", str(db), "--policy", "learn",
         "--interval", "1s", "--stale-after", "5s", *extra],
        cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    return proc, OutputReader(proc)


def stop(proc: subprocess.Popen[str], output: OutputReader) -> str:
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0, output.text()
    return output.text()


def auto_start_reason(db: Path) -> str:
    return next(e.reason for e in events(db) if e.action == "auto-start")


def policy_sets(db: Path) -> list[int | None]:
    return [e.new_max_bs for e in events(db) if e.actor == "policy:learn" and e.action == "set"]


def test_a_matching_sweep_starts_learn_at_its_crossover_and_a_newer_other_stack_is_ignored(
    sim: Any, tmp_path: Path
) -> None:
    db = tmp_path / "warm.db"
    info, gpus, other = stacks(sim)
    matching = save_sweep(db, info, gpus, 16.0, age_s=7200, tag="this-stack")
    save_sweep(db, other, gpus, 4.0, age_s=60, tag="other-draft")  # newer, another stack: ignored
    proc, output = start_auto(sim, db, "--gpu-metrics", sim.gpu_metrics_url)
    try:
        with SampleFeeder(db, sim.base_url, running=48):
            assert wait_for(lambda: knob_values(sim) == [16]), output.text()
            assert wait_for(lambda: policy_sets(db) == [16]), output.text()
            time.sleep(3.0)  # more decisions inside the first dwell (300 s): none drafts above 16
            assert knob_values(sim) == [16] and policy_sets(db) == [16]
    finally:
        text = stop(proc, output)
    line = next(line for line in text.splitlines() if line.startswith("warm start:"))
    assert line.startswith(f"warm start: sweep #{matching} 'this-stack' of ")
    assert "matches this stack" in line and "crossover 16.0 (14.0-19.0); learn starts at ceiling 16" in line
    assert "GPUs not compared" not in line
    assert f"warm start: sweep #{matching} 'this-stack'" in auto_start_reason(db)
    assert "warm start: move the ceiling 64 -> 16" in text


def test_only_another_stacks_sweep_is_nothing_known_and_the_knob_stays(sim: Any, tmp_path: Path) -> None:
    db = tmp_path / "cold.db"
    _, gpus, other = stacks(sim)
    other_run = save_sweep(db, other, gpus, 4.0, age_s=60, tag="other-draft")
    proc, output = start_auto(sim, db, "--gpu-metrics", sim.gpu_metrics_url)
    try:
        with SampleFeeder(db, sim.base_url, running=48):
            assert wait_for(lambda: output.has("counters too thin") or output.has("hold:")), output.text()
            time.sleep(2.0)
            assert knob_values(sim) == [64] and policy_sets(db) == []
    finally:
        text = stop(proc, output)
    line = next(line for line in text.splitlines() if line.startswith("warm start:"))
    assert line.startswith("warm start: nothing known for this stack (model ")
    assert f"the newest, sweep #{other_run} 'other-draft'" in line and "draft someone/else-eagle3" in line
    assert line.endswith("learn starts from the ceiling the server holds now")
    assert "warm start: nothing known for this stack" in auto_start_reason(db)


def test_no_warm_start_says_so_and_starts_where_the_launch_put_the_knob(sim: Any, tmp_path: Path) -> None:
    db = tmp_path / "off.db"
    info, gpus, _ = stacks(sim)
    save_sweep(db, info, gpus, 16.0, age_s=60, tag="this-stack")
    proc, output = start_auto(sim, db, "--no-warm-start")
    try:
        with SampleFeeder(db, sim.base_url, running=48):
            assert wait_for(lambda: output.has("hold:")), output.text()
            time.sleep(2.0)
            assert knob_values(sim) == [64] and policy_sets(db) == []
    finally:
        text = stop(proc, output)
    assert "warm start: off (--no-warm-start); learn starts at the launch's ceiling (64)" in text
    assert "warm start: off (--no-warm-start)" in auto_start_reason(db)


def test_the_servers_own_stored_counters_start_learn_before_a_matching_sweep(
    sim: Any, tmp_path: Path
) -> None:
    """The collector stored this server's counters (drafting pays up to bin 16, loses from 24) and a sweep
    of the same stack (short prompts) says 48: learn starts at 16, from the counters, and says so in its
    line and its auto-start audit row; the intervals, each with the knob stored beside it, open its window."""
    from tests.test_warm_start import CURVE, store_counters

    db = tmp_path / "own.db"
    info, gpus, _ = stacks(sim)
    save_sweep(db, info, gpus, 48.0, age_s=600, tag="short-prompts")
    store_counters(db, sim.base_url, CURVE, end=time.time() - 30, knob=16)
    proc, output = start_auto(sim, db, "--gpu-metrics", sim.gpu_metrics_url)
    try:
        with SampleFeeder(db, sim.base_url, running=48):
            assert wait_for(lambda: knob_values(sim) == [16]), output.text()
            assert wait_for(lambda: policy_sets(db) == [16]), output.text()
    finally:
        text = stop(proc, output)
    line = next(line for line in text.splitlines() if line.startswith("warm start:"))
    assert line.startswith("warm start: this server's own counters of the last 30 min (12 intervals, ")
    assert "learn starts at ceiling 16; learn's window starts with the 12 stored intervals of " in line
    assert "warm start: this server's own counters" in auto_start_reason(db)
    assert "warm start: move the ceiling 64 -> 16" in text


def test_a_restored_window_says_the_warm_start_goes_unused(sim: Any, tmp_path: Path) -> None:
    """A `control auto` restarted within learn's window restores its own counters, which decide; its first
    line said "learn starts at ceiling 16" all the same, above a first move elsewhere (the H100, 2026-12-07).
    The line now says the warm start goes unused and what it would have said; so does the audit row."""
    from spectower.console.commands.control_auto import AutoPlan, runner_for
    from spectower.control.policy import make_policy
    from spectower.control.runner import RunnerConfig
    from spectower.simulator.harness import simulate
    from spectower.simulator.profile import load_profile
    from spectower.simulator.traces import parse_trace
    from spectower.storage import queries

    db_path = tmp_path / "restored.db"
    info, gpus, _ = stacks(sim)
    save_sweep(db_path, info, gpus, 16.0, age_s=600, tag="this-stack")
    plan = AutoPlan("learn", "learn", RunnerConfig(), None, True, [], None)
    learned = make_policy("learn", 64)
    simulate(load_profile("glm5-nvfp4-8x-rtx-pro-6000"), parse_trace([[0, 48], [300, 48]], source="busy"),
             learned, duration_s=300)  # fmt: skip
    state = learned.state()
    shift = time.time() - 20 - state["snapshots"][-1][0]  # its newest kept sample 20 s ago
    state["snapshots"] = [[ts + shift, snapshot] for ts, snapshot in state["snapshots"]]
    with open_database(db_path) as db:
        unused = "warm start: not used: learn restored "
        for saved, expected in ((None, "warm start: sweep #"), (state, unused)):
            if saved is not None:
                queries.save_policy_state(db, sim.base_url, mode="learn", state_json=json.dumps(saved),
                                          ts=time.time())  # fmt: skip
            lines: list[str] = []
            runner = runner_for(db, sim.base_url, plan, lines.append)
            try:
                (line,) = [line for line in lines if line.startswith("warm start:")]
                assert line.startswith(expected), line
                unchecked = "GPUs not compared: the server's are unknown (give --gpu-metrics)"
                assert line.endswith(f"learn starts at ceiling 16; {unchecked}"), line
                assert runner.start_note == line
            finally:
                runner.client.close()
    assert "kept samples of the last window, the newest at " in line
    assert "which decide; without them: sweep #" in line
