"""`spectower demo` end to end: every child comes up, data and a policy decision land in the DB within two
minutes, SIGINT stops every child, the DB stays intact and a second run reuses it."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sqlite3
import subprocess
import time
from pathlib import Path

import httpx
import psutil
import pytest

from tests.conftest import REPO_ROOT, SPECTOWER_CLI, free_port

BOUND_S = 120.0  # the bound: data and a policy decision within two minutes
STOP_TIMEOUT_S = 60.0


def _start(db: Path, port: int, *extra: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPECTOWER_")}
    return subprocess.Popen(
        [*SPECTOWER_CLI, "demo", "--port", str(port), "--db", str(db), *extra],
        cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip


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
            }
    except sqlite3.Error:
        return {"engine": 0, "gpu": 0, "decisions": 0}


def _console_answers(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/_stcore/health", timeout=3).status_code == 200
    except httpx.HTTPError:
        return False


def _stop(proc: subprocess.Popen[str]) -> str:
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
    try:
        out, _ = proc.communicate(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        pytest.fail(f"the demo did not stop within {STOP_TIMEOUT_S}s of SIGINT:\n{out}")
    return out


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _kill_leftovers(pids: dict[str, int]) -> None:
    for pid in pids.values():
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.timeout(420)
def test_demo_comes_up_records_decides_and_stops_cleanly(tmp_path: Path) -> None:
    db = tmp_path / "demo" / "spectower.db"
    pids_file = db.parent / "pids.json"
    port = free_port()
    proc = _start(db, port)
    pids: dict[str, int] = {}
    try:
        started = time.monotonic()
        deadline = started + BOUND_S + 90  # + start-up (imports, Streamlit) on a loaded machine
        up_at: float | None = None  # when the console first answered: the two minutes count from there
        counts = _counts(db)
        while time.monotonic() < deadline and proc.poll() is None:
            if up_at is None and _console_answers(port):
                up_at = time.monotonic()
            counts = _counts(db) if db.exists() else counts
            if up_at is not None and counts["engine"] and counts["gpu"] and counts["decisions"]:
                break
            if up_at is not None and time.monotonic() - up_at > BOUND_S:
                break
            time.sleep(2)
        answered = up_at is not None
        took = time.monotonic() - (up_at or started)
        if pids_file.exists():
            pids = json.loads(pids_file.read_text())
        assert proc.poll() is None, f"the demo exited early:\n{proc.stdout.read() if proc.stdout else ''}"
        assert answered, "the console never answered /_stcore/health"
        assert counts["engine"] > 0 and counts["gpu"] > 0, counts
        assert counts["decisions"] >= 1, f"no policy decision {took:.0f}s after the console was up: {counts}"
        assert took <= BOUND_S + 5, f"data and a decision took {took:.0f}s after the console answered"
        assert set(pids) == {"sim", "collect", "policy", "load", "console"}
        out = _stop(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
        _kill_leftovers(pids)
    assert proc.returncode == 0, out
    assert "Traceback" not in out
    assert f"http://127.0.0.1:{port}" in out  # the URL is printed
    alive = [name for name, pid in pids.items() if _alive(pid)]
    assert not alive, f"children still alive after SIGINT: {alive}"
    with contextlib.closing(sqlite3.connect(db)) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    key = db.parent / "admin_key"
    assert key.stat().st_mode & 0o777 == 0o600
    secret = key.read_text().strip()
    for log in db.parent.glob("*.log"):  # the key never reaches a log or a command line
        assert secret not in log.read_text(errors="replace"), log.name
    with contextlib.closing(sqlite3.connect(db)) as conn:
        before = conn.execute("SELECT count(*) FROM engine_sample").fetchone()[0]

    # A second run reuses the database, and a taken console port gets the next free one with a note.
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", port))
        blocker.listen()
        again = _start(db, port, "--duration", "25s")
        try:
            out2, _ = again.communicate(timeout=180)
        finally:
            if again.poll() is None:
                again.kill()
    assert again.returncode == 0, out2
    assert f"port {port} is taken" in out2 and "Traceback" not in out2
    with contextlib.closing(sqlite3.connect(db)) as conn:
        after = conn.execute("SELECT count(*) FROM engine_sample").fetchone()[0]
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert after > before


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
    from spectower.console.demo.run import DemoConfig, run_demo

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
    assert "sim exited early" in text and str(config.folder.resolve() / "sim.log") in text
    pids = json.loads(config.pids_file.read_text())
    assert pids and not [n for n, pid in pids.items() if _alive(pid)]
