"""`spectower control auto` on a fleet: one policy per replica in one process, each with its own lock and
audit rows; a replica down at the start is named and left out, one that dies later stops only itself.
REAL simulators, a REAL collector (`spectower collect`) feeding the database the runners read."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import httpx
import pytest
from spectower.control import audit
from spectower.storage.database import open_database

from benchmarks.simulator_process import SimulatorFactory
from tests.conftest import REPO_ROOT, SPECTOWER_CLI, collect_cli, dead_url
from tests.test_control_cli import OutputReader, wait_for

pytestmark = pytest.mark.integration
ADMIN_KEY = "adm-fleet-auto-9d"


def knob(url: str) -> int:
    return int(
        httpx.get(f"{url}/server_info", timeout=5).json()["internal_states"][0]["spectower"]["spec_max_bs"]
    )


def control(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SPECTOWER_ADMIN_KEY": ADMIN_KEY, "SPECTOWER_ADMIN_KEY_FILE": ""}
    return subprocess.run([*SPECTOWER_CLI, "control", *args], cwd=REPO_ROOT, env=env, capture_output=True,
                          text=True, timeout=120)  # fmt: skip


def confirmed_set(db: Path, url: str) -> bool:
    """Whether a policy's set on ``url`` is audited, confirmed by its read-back."""
    with open_database(db) as store:
        rows = audit.list_events(store, limit=1000)
    return any(r.server_url == url and r.action == "set" and r.confirmed for r in rows)


def test_one_policy_per_replica_each_with_its_own_lock_and_one_failure_stops_no_other(
    simulator_factory: SimulatorFactory, tmp_path: Path
) -> None:
    a, b, c = (simulator_factory(admin_key=ADMIN_KEY) for _ in range(3))
    down = dead_url()
    db = tmp_path / "fleet.db"
    open_database(db).close()
    held = control("set", "--server", c.base_url, "--db", str(db), "--off", "--yes", "--reason", "c is mine",
                   "--as", "cy")  # fmt: skip
    assert held.returncode == 0, held.stderr
    collector = collect_cli(*[arg for s in (a, b, c) for arg in ("--server", s.base_url)], "--interval", "1s",
                            "--db", str(db), "--log-level", "WARNING")  # fmt: skip
    env = {
        **os.environ,
        "SPECTOWER_ADMIN_KEY": ADMIN_KEY,
        "SPECTOWER_ADMIN_KEY_FILE": "",
        "PYTHONUNBUFFERED": "1",
    }
    servers = [arg for url in (a.base_url, b.base_url, c.base_url, down) for arg in ("--server", url)]
    proc = subprocess.Popen(
        [*SPECTOWER_CLI, "control", "auto", *servers, "--db", str(db), "--policy", "threshold:4",
         "--interval", "1s", "--stale-after", "5s"],
        cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    output = OutputReader(proc)
    try:
        assert wait_for(lambda: knob(a.base_url) == 4 and knob(b.base_url) == 4, 90), output.text()
        assert output.has(f"{down}: no policy: cannot reach")  # named, and the others run
        assert output.has(f"{c.base_url}: ") and knob(c.base_url) == 0  # c's own lock holds its policy
        assert wait_for(lambda: output.has("paused"), 30), output.text()
        # a's set read back and audited before a dies: its knob reads 4 as soon as the set lands, while the
        # runner may still be reading it back (a fresh clone's suite, four workers on two cores, 2026-12-04:
        # one replica's set was not audited as confirmed though its knob read 4; this is the likely cause)
        assert wait_for(lambda: confirmed_set(db, a.base_url), 30), output.text()
        a.kill()  # one replica dies under its policy
        released = control("release", "--server", c.base_url, "--db", str(db), "--reason", "yours again")
        assert released.returncode == 0, released.stderr
        assert wait_for(lambda: knob(c.base_url) == 4, 60), output.text()  # c's policy goes on
        assert proc.poll() is None
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0, output.text()
    finally:
        for child in (proc, collector):
            if child.poll() is None:
                child.kill()
                child.wait(timeout=10)
    with open_database(db) as store:
        rows = audit.list_events(store, limit=1000)
    starts = {r.server_url for r in rows if r.action == "auto-start"}
    stops = {r.server_url for r in rows if r.action == "auto-stop"}
    assert starts == stops == {a.base_url, b.base_url, c.base_url}  # each its own rows; none for the down one
    sets = [(r.server_url, r.confirmed, r.error)
            for r in rows if r.actor == "policy:threshold" and r.action == "set"]  # fmt: skip
    assert {url for url, confirmed, _ in sets if confirmed} == {a.base_url, b.base_url, c.base_url}, sets
