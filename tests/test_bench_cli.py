"""`spectower bench sweep` as an operator meets it: clear errors, Ctrl-C, the knob always restored."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import httpx
import pytest
from spectower.storage import open_database
from spectower.storage.models import BenchPoint, BenchRun, ControlEvent
from sqlmodel import select

from tests.conftest import REPO_ROOT, SPECTOWER_CLI, cli_in_process, dead_url

ADMIN_KEY = "cli-admin-key"


def _env(admin_key: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPECTOWER_ADMIN_KEY")}
    if admin_key:
        env["SPECTOWER_ADMIN_KEY"] = admin_key
    return env


def _argv(server: str, tmp_path: Path, *extra: str) -> list[str]:
    return [*SPECTOWER_CLI, "bench", "sweep", "--server", server,
            "--db", str(tmp_path / "db.sqlite"), "--as", "tester", *extra]  # fmt: skip


def _run(argv: list[str], admin_key: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, cwd=REPO_ROOT, env=_env(admin_key), capture_output=True, text=True, timeout=120
    )


def _knob(sim) -> int:
    return httpx.get(f"{sim.base_url}/server_info").json()["internal_states"][0]["spectower"]["spec_max_bs"]


def _set_knob(sim, value: int) -> None:
    body = {"server_args": {"spectower_spec_max_bs": value}}
    assert httpx.post(f"{sim.base_url}/set_internal_state", json=body, headers=sim.admin_headers).json() == [
        True
    ]


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["--concurrency", "1,two,4"], "--concurrency"),
        (["--concurrency", "0"], "--concurrency"),
        (["--modes", "on,sideways"], "--modes"),
        (["--api", "grpc"], "--api"),
        (["--output-len", "1"], "--output-len"),
        (["--requests-per-level", "5", "--duration-per-level", "3"], "--requests-per-level"),
    ],
)
def test_bad_input_names_the_field_without_traceback(tmp_path: Path, args: list[str], field: str) -> None:
    proc = cli_in_process(*_argv("http://127.0.0.1:9", tmp_path, *args)[len(SPECTOWER_CLI) :])
    assert proc.returncode == 2
    assert "error:" in proc.stderr and field in proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout


def test_unreachable_server_is_a_clear_error(tmp_path: Path) -> None:
    url = dead_url()
    proc = _run(_argv(url, tmp_path, "--concurrency", "1"))  # a subprocess: the sweep sets its signals
    assert proc.returncode == 2
    assert "error:" in proc.stderr and "127.0.0.1" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert list(tmp_path.iterdir()) == []  # the database it would have audited to was not left behind empty
    assert "database:" not in proc.stderr  # nor named as where rows went


def test_an_unreachable_gpu_metrics_url_is_one_line_before_anything_runs(tmp_path: Path) -> None:
    """2026-12-05: `--gpu-metrics` at a port where nothing listens printed a traceback (the inventory's
    ConnectionError came through the CLI); now one line naming the option, and no profile written."""
    profile_out = tmp_path / "profile.json"
    metrics = f"{dead_url()}/metrics"
    args = _argv("http://127.0.0.1:9", tmp_path, "--gpu-metrics", metrics, "--profile-out", str(profile_out))
    proc = cli_in_process(*args[len(SPECTOWER_CLI) :])
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and f"--gpu-metrics {metrics}: unreachable" in proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    assert not profile_out.exists()


@pytest.mark.integration
def test_refused_knob_changes_nothing_and_is_audited(simulator_factory, tmp_path: Path) -> None:
    sim = simulator_factory(admin_key=ADMIN_KEY)
    _set_knob(sim, 5)
    proc = _run(
        _argv(sim.base_url, tmp_path, "--concurrency", "1", "--duration-per-level", "1"), admin_key=None
    )
    assert proc.returncode == 2, proc.stderr
    assert "error:" in proc.stderr and "SPECTOWER_ADMIN_KEY" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert _knob(sim) == 5
    db = open_database(f"sqlite:///{tmp_path / 'db.sqlite'}")
    with db.session() as s:
        events = s.exec(select(ControlEvent).where(ControlEvent.action == "sweep-start")).all()
        runs = s.exec(select(BenchRun)).all()
    db.close()
    assert events and all(not e.confirmed and e.error for e in events)
    assert runs == []


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "term"])
def test_ctrl_c_keeps_finished_points_and_restores_the_knob(
    simulator_factory, tmp_path: Path, stop: signal.Signals
) -> None:
    """SIGTERM too: its default ended the sweep at once and left the server under the sweep's lock."""
    sim = simulator_factory(admin_key=ADMIN_KEY)
    _set_knob(sim, 5)
    argv = _argv(
        sim.base_url,
        tmp_path,
        "--concurrency",
        "1,2,4,8,16",
        "--duration-per-level",
        "2",
        "--rounds",
        "1",
        "--output-len",
        "32",
        "--input-len",
        "8",
        "--warmup",
        "1",
        "--save",
        "--json",
    )
    # Started with SIGINT ignored, as a background job without job control (``cmd &`` in a script, nohup)
    # starts it: the sweep must still stop on SIGINT (it once ran to its end: SIG_IGN is inherited).
    ignoring_sigint = ["sh", "-c", 'trap "" INT; exec "$@"', "sh", *argv]
    proc = subprocess.Popen(ignoring_sigint, cwd=REPO_ROOT, env=_env(ADMIN_KEY), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    db_url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    try:
        # Level 1 is done (both modes) once the third knob move (level 2, spec on) reached the server:
        # the server names the sweep's last write (borrow, then one move per slice).
        deadline = time.monotonic() + 90
        writes: set[int] = set()
        while time.monotonic() < deadline and len(writes) < 4:
            time.sleep(0.1)
            block = httpx.get(f"{sim.base_url}/server_info").json()["internal_states"][0]["spectower"]
            last = block.get("last_write") or {}
            if last.get("writer") == "sweep" and last.get("request_id"):
                writes.add(last["request_id"])
        assert len(writes) >= 4, "the sweep did not get past its first level"
        time.sleep(0.5)
        proc.send_signal(stop)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    data = json.loads(out)
    assert data["interrupted"] is True and data["knob_restored"] is True
    assert _knob(sim) == 5
    block = httpx.get(f"{sim.base_url}/server_info").json()["internal_states"][0]["spectower"]
    assert not block.get("lock"), block.get("lock")  # the sweep's lock is given back
    kept = {(p["concurrency"], p["mode"]) for p in data["points"]}
    assert {(1, "on"), (1, "off")} <= kept and len(kept) < 10
    db = open_database(db_url)
    with db.session() as s:
        runs = s.exec(select(BenchRun)).all()
        points = s.exec(select(BenchPoint)).all()
        last = s.exec(select(ControlEvent).order_by(ControlEvent.id.desc())).first()  # type: ignore[union-attr]
    db.close()
    params = json.loads(runs[0].params_json)
    assert len(runs) == 1 and params["interrupted"] is True
    # the per-slice knob moves are the run's own record (the audit has the sweep's start and end only)
    assert [m["value"] for m in params["knob_moves"][:3]] == [data["max_running_requests"], 0,
                                                               data["max_running_requests"]]  # fmt: skip
    assert len(points) == len(kept)
    assert last is not None and last.action == "sweep-end" and last.new_max_bs == 5 and last.confirmed


@pytest.mark.integration
def test_the_sweep_as_a_whole_shows_progress_and_time_left(simulator_factory, tmp_path: Path) -> None:
    sim = simulator_factory(admin_key=ADMIN_KEY)
    argv = _argv(sim.base_url, tmp_path, "--concurrency", "1,2", "--duration-per-level", "1", "--rounds", "2",
                 "--output-len", "16", "--input-len", "8", "--warmup", "1")  # fmt: skip
    proc = _run(argv, admin_key=ADMIN_KEY)
    assert proc.returncode == 0, proc.stderr
    # 2 levels x 2 modes x 2 rounds; the overall line ends complete, with elapsed and remaining time
    overall = [line for line in proc.stderr.splitlines() if "sweep " in line and " slices" in line]
    assert overall and "sweep 8/8 slices" in overall[-1], proc.stderr
    assert overall[-1].count(":") >= 2  # 0:00:0x elapsed, 0:00:00 left


def test_each_slice_line_keeps_its_own_figures_and_the_pooled_point_gets_its_own_line() -> None:
    """The sweep calls point_finished once per mode after all rounds of a level: its pooled figure once
    overwrote the level's LAST slice line (the plain server's round 2 read as knob on: 397 tok/s, 11 req,
    where it served 210 tok/s; seen on the H200 sweep of 2026-12-01)."""
    import io

    from rich.console import Console
    from spectower.collectors.bench.records import RequestRecord
    from spectower.collectors.bench.sweep import PointResult
    from spectower.console.commands.bench_progress import SweepProgressLines as _RichProgress

    console = Console(file=io.StringIO(), record=True, width=160, force_terminal=False)
    progress = _RichProgress(4, console=console)
    measured = {("on", 1): 400.0, ("plain", 1): 210.0, ("on", 2): 380.0, ("plain", 2): 208.0}
    with progress:
        for round_ in (1, 2):
            for mode in ("on", "plain"):
                progress.point_started(1, mode, None, 3.0)  # type: ignore[arg-type]
                progress.request_done(RequestRecord(index=0, start=0.0), int(measured[mode, round_]), 1.0)
                progress.slice_finished(1, mode)  # type: ignore[arg-type]
        for mode, tok_s, done in (("on", 390.0, 11), ("plain", 209.0, 6)):
            figures = {"steady_output_throughput": tok_s, "completed": done, "rounds": 2}
            progress.point_finished(PointResult(1, mode, None, figures, None, None, 0.0))  # type: ignore[arg-type]
    text = console.export_text()
    slice_lines = [line for line in text.splitlines() if "req done" in line and "pooled" not in line]
    plain_lines = [line for line in slice_lines if "plain" in line]
    shown = [line.split("req done")[1].split("tok/s")[0].strip() for line in plain_lines]
    assert shown == ["210", "208"], text
    assert "C=1    spec on  pooled over 2 rounds: 11 req done, 390 tok/s" in text, text
    assert "C=1    plain    pooled over 2 rounds: 6 req done, 209 tok/s" in text, text
