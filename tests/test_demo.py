"""`spectower demo` end to end: every child comes up, data and a policy decision land in the DB, SIGINT stops
every child, the DB stays intact and a second run reuses it.

How soon the demo as shipped shows data and its first decision is a figure, printed by
``python benchmarks/demo_first_decision.py``; here a steady load of about 24 clients beside the demo's own
(above glm5's crossover of ~15) gives the learn policy both modes' evidence at once, so it decides in about a
minute instead of waiting for the compressed day's plateau.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import sqlite3
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import psutil
import pytest

from benchmarks.simulator_process import steady_load
from tests.conftest import REPO_ROOT, SPECTOWER_CLI, free_port

# The demo binds the simulator to its default port (30000) when it is free: two demos started at once
# race for it between the check and the bind, so the tests that start one run on one worker, in turn.
pytestmark = pytest.mark.xdist_group("demo-default-ports")

# Generous: a loaded 2-core machine; the test returns as soon as what it waits for is there.
UP_TIMEOUT_S = 180.0
DECISION_TIMEOUT_S = 240.0
STOP_TIMEOUT_S = 60.0
POLICY_LOAD = 24  # clients beside the demo's own: bins above the crossover, measured in both modes


class Demo:
    """`spectower demo` as a child; its output read as it comes (the simulator's URL is in it)."""

    def __init__(self, db: Path, port: int, *extra: str) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SPECTOWER_")}
        self.proc = subprocess.Popen(
            [*SPECTOWER_CLI, "demo", "--port", str(port), "--db", str(db), *extra],
            cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        self.lines: list[str] = []
        assert self.proc.stdout is not None
        self._reader = threading.Thread(
            target=lambda out: self.lines.extend(iter(out.readline, "")),
            args=(self.proc.stdout,),
            daemon=True,
        )
        self._reader.start()

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def sim_url(self) -> str | None:
        """The simulator's URL once the demo says it is up."""
        found = re.search(r"simulated SGLang server (http://127\.0\.0\.1:\d+)", self.output)
        return found.group(1) if found and "spectower demo is up" in self.output else None

    def wait(self, timeout: float) -> str:
        """Its whole output once it has exited by itself."""
        self.proc.wait(timeout=timeout)
        self._reader.join(timeout=10)
        return self.output

    def stop(self) -> str:
        """SIGINT, as a Ctrl-C; its whole output."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        try:
            return self.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            pytest.fail(f"the demo did not stop within {STOP_TIMEOUT_S}s of SIGINT:\n{self.output}")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)


def _counts(db: Path) -> dict[str, int]:
    try:
        with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)) as conn:
            q = conn.execute
            return {
                "engine": q("SELECT count(*) FROM engine_sample").fetchone()[0],
                "gpu": q("SELECT count(*) FROM gpu_sample").fetchone()[0],
                "decisions": q(
                    "SELECT count(*) FROM control_event WHERE actor LIKE 'policy:%' AND action = 'set'"
                ).fetchone()[0],
                "sweeps": q("SELECT count(*) FROM bench_run WHERE tag = 'demo sweep'").fetchone()[0],
            }
    except sqlite3.Error:
        return {"engine": 0, "gpu": 0, "decisions": 0, "sweeps": 0}


def _console_answers(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/_stcore/health", timeout=3).status_code == 200
    except httpx.HTTPError:
        return False


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _kill_leftovers(pids: dict[str, int]) -> None:
    for pid in pids.values():
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)


def _poll(done: Callable[[], object], timeout: float, poll_s: float = 0.25) -> None:
    """Call ``done()`` until it is true or ``timeout`` seconds passed (the caller asserts what it found)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not done():
        time.sleep(poll_s)


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_demo_comes_up_records_decides_and_stops_cleanly(tmp_path: Path) -> None:
    db = tmp_path / "demo" / "spectower.db"
    pids_file = db.parent / "pids.json"
    port = free_port()
    demo = Demo(db, port)
    pids: dict[str, int] = {}
    try:
        _poll(lambda: demo.proc.poll() is not None or demo.sim_url(), UP_TIMEOUT_S)
        sim_url = demo.sim_url()
        assert sim_url is not None, f"the demo did not come up:\n{demo.output}"
        assert _console_answers(port), "the console never answered /_stcore/health"
        counts = _counts(db)
        with steady_load(sim_url, POLICY_LOAD):

            def recorded_and_decided() -> bool:
                nonlocal counts
                counts = _counts(db)
                return demo.proc.poll() is not None or bool(
                    counts["engine"] and counts["gpu"] and counts["decisions"] and counts["sweeps"]
                )

            _poll(recorded_and_decided, DECISION_TIMEOUT_S)
        if pids_file.exists():
            pids = json.loads(pids_file.read_text())
        assert demo.proc.poll() is None, f"the demo exited early:\n{demo.output}"
        assert counts["engine"] > 0 and counts["gpu"] > 0, counts
        assert counts["decisions"] >= 1, f"no policy decision within {DECISION_TIMEOUT_S:g} s: {counts}"
        # the demo's sweep of its fourth server ended, saved, and the demo went on (a one-shot child's exit
        # is no death); the Benchmarks page lists it and the Speculation page draws its crossover
        assert counts["sweeps"] == 1, f"no saved sweep within {DECISION_TIMEOUT_S:g} s: {counts}"
        _poll(lambda: "benchmark sweep is saved" in demo.output, 10)
        assert "benchmark sweep is saved" in demo.output, demo.output
        assert set(pids) == {"sim", "sim2", "sim3", "router", "collect", "policy", "load", "console", "bench",
                             "sweep"}  # fmt: skip
        _fleet_flip_through_the_router(demo, db)
        out = demo.stop()
    finally:
        demo.kill()
        _kill_leftovers(pids)
    assert demo.proc.returncode == 0, out
    assert "Traceback" not in out
    assert f"http://127.0.0.1:{port}" in out  # the URL is printed
    alive = [name for name, pid in pids.items() if _alive(pid)]
    assert not alive, f"children still alive after SIGINT: {alive}"
    with contextlib.closing(sqlite3.connect(db)) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        started = conn.execute("SELECT reason FROM control_event WHERE action = 'auto-start'").fetchone()[0]
    assert "max 12 flips/h" in started  # the README's "at most 12 changes an hour" (it was 60)
    key = db.parent / "admin_key"
    assert key.stat().st_mode & 0o777 == 0o600
    secret = key.read_text().strip()
    for log in db.parent.glob("*.log"):  # the key never reaches a log or a command line
        assert secret not in log.read_text(errors="replace"), log.name
    with contextlib.closing(sqlite3.connect(db)) as conn:
        before = conn.execute("SELECT count(*) FROM engine_sample").fetchone()[0]

    # A second run reuses the database, and a taken console port gets the next free one with a note. Its
    # --duration counts from the console answering; the collector, started with the console, has been
    # sampling every second by then.
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", port))
        blocker.listen()
        again = Demo(db, port, "--duration", "5s")
        try:
            out2 = again.wait(timeout=UP_TIMEOUT_S)
        finally:
            again.kill()
    assert again.proc.returncode == 0, out2
    assert f"port {port} is taken" in out2 and "Traceback" not in out2
    with contextlib.closing(sqlite3.connect(db)) as conn:
        after = conn.execute("SELECT count(*) FROM engine_sample").fetchone()[0]
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert after > before


def _fleet_flip_through_the_router(demo: Demo, db: Path) -> None:
    """`control set --fleet demo` (no --db, no URL) finds the running demo's fleet (its router's worker
    list) and database, and flips all three replicas at once; `release` hands them back."""
    router = re.search(r"behind the simulated SGLang router (http://127\.0\.0\.1:\d+)", demo.output)
    assert router is not None, demo.output
    workers = httpx.get(f"{router.group(1)}/workers", timeout=5).json()["workers"]
    assert len(workers) == 3 and all(w["is_healthy"] for w in workers)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPECTOWER_")}
    env["SPECTOWER_ADMIN_KEY_FILE"] = str(db.parent / "admin_key")

    def control(*args: str) -> subprocess.CompletedProcess[str]:
        argv = [*SPECTOWER_CLI, "control", *args, "--reason", "demo incident", "--as", "tess"]
        return subprocess.run(argv, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120)

    flipped = control("set", "--fleet", "demo", "--off", "--yes")
    assert flipped.returncode == 0, flipped.stdout + flipped.stderr
    assert "confirmed on 3 of 3 replica(s)" in flipped.stdout and "(the running demo's)" in flipped.stderr
    for worker in workers:
        info = httpx.get(f"{worker['url']}/server_info", timeout=5).json()
        assert {s["spectower"]["spec_max_bs"] for s in info["internal_states"]} == {0}
    released = control("release", "--fleet", "demo")
    assert released.returncode == 0, released.stdout + released.stderr
    with contextlib.closing(sqlite3.connect(db)) as conn:
        rows = conn.execute(
            "SELECT action, confirmed FROM control_event WHERE actor = 'operator:tess'"
        ).fetchall()
    assert sorted(rows) == [("release", 1)] * 3 + [("set", 1)] * 3


@pytest.mark.integration
def test_demo_bad_profile_is_one_error_line(tmp_path: Path) -> None:
    proc = subprocess.run(
        [*SPECTOWER_CLI, "demo", "--profile", "no-such-profile", "--db",
         str(tmp_path / "d" / "x.db")],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 2
    assert "error:" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "d").exists()  # nothing started, nothing written


@pytest.mark.integration
def test_demo_names_a_child_that_dies(tmp_path: Path) -> None:
    """A child that exits early is named with its log; the others are stopped."""
    from spectower.console.demo.run import DemoConfig, run_demo, sim_names

    broken = tmp_path / "broken.json"
    broken.write_text((REPO_ROOT / "simulator/profiles/glm5-nvfp4-8x-rtx-pro-6000.json").read_text())
    config = DemoConfig(profile=str(broken), console_port=free_port(), db_path=tmp_path / "d" / "x.db")
    lines: list[str] = []

    def say(line: str) -> None:
        lines.append(line)
        if line.startswith("starting the simulator"):
            broken.write_text("{not json")  # the check in `demo` passed; the child now fails to load it

    code = run_demo(config, say, cwd=REPO_ROOT)
    text = "\n".join(lines)
    assert code == 1
    # every replica reads the broken profile: whichever the demo finds dead first is named, with its own log
    # (a fresh clone's run of 2026-12-05 found sim2 or sim3 before sim, and "sim exited early" failed)
    dead = re.search(r"\b(sim\d?|bench) exited early \(code -?\d+\); its log is (\S+):", text)
    assert dead is not None, text
    assert dead[1] in [*sim_names(config), "bench"]
    assert dead[2] == str(config.folder.resolve() / f"{dead[1]}.log")
    pids = json.loads(config.pids_file.read_text())
    assert pids and not [n for n, pid in pids.items() if _alive(pid)]


def test_the_demos_learn_policy_keeps_a_snapshot_every_five_seconds(tmp_path: Path) -> None:
    """The demo's day is compressed into minutes: its policy child samples the counters 3x as often."""
    from spectower.console.demo.run import DemoConfig, build_children

    config = DemoConfig(console_port=free_port(), db_path=tmp_path / "d" / "x.db")
    policy = next(c for c in build_children(config) if c.name == "policy")
    assert policy.argv[policy.argv.index("--policy") + 1] == "learn"
    assert policy.argv[policy.argv.index("--sample") + 1] == "5s"
