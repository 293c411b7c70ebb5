"""`spectower control get/set/release/events --fleet` against 8 REAL simulated replicas: six alike, one
with a different profile, one behind a slow network (answers a second late), and one down (nothing
listens there), with a real SQLite audit trail. The fleet is named once, in ./spectower.toml."""

from __future__ import annotations

import concurrent.futures
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from spectower.console.cli import app
from spectower.console.commands import control as control_cmd
from spectower.control import audit
from spectower.storage.database import open_database
from typer.testing import CliRunner

from benchmarks.simulator_process import SimulatorProcess
from tests.conftest import dead_url
from tests.slow_proxy import SlowProxy

pytestmark = pytest.mark.integration

ADMIN_KEY = "adm-fleet-5b1c"
SLOW_S = 1.0


@pytest.fixture(scope="module")
def replicas() -> Iterator[dict[str, Any]]:
    """Seven simulators (the last with another profile) started at once, one behind the slow proxy, and
    one URL where nothing listens: the eight replicas, in the fleet's order."""
    profiles = ["glm5-nvfp4-8x-rtx-pro-6000"] * 6 + ["llama31-8b-1x-h100"]
    with concurrent.futures.ThreadPoolExecutor(len(profiles)) as pool:
        sims = list(pool.map(lambda p: SimulatorProcess(profile=p, admin_key=ADMIN_KEY), profiles))
    proxy = SlowProxy(sims[5].port, SLOW_S)
    down = dead_url()
    urls = [s.base_url for s in sims[:5]] + [proxy.base_url, sims[6].base_url, down]
    try:
        yield {"sims": sims, "urls": urls, "down": down, "slow": proxy.base_url, "other": sims[6].base_url}
    finally:
        proxy.close()
        for sim in sims:
            sim.close()


@pytest.fixture
def fleet(replicas: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The replicas with their knobs back at launch (always on, no lock), named as fleet ``prod`` in the
    working directory's spectower.toml, and a fresh database."""
    for sim in replicas["sims"]:
        limit = httpx.get(f"{sim.base_url}/server_info", timeout=5).json()["max_running_requests"]
        body = {
            "server_args": {"spectower_spec_max_bs": limit, "spectower_writer": 1, "spectower_release": 1}
        }
        httpx.post(f"{sim.base_url}/set_internal_state", json=body, headers=sim.admin_headers, timeout=5)
    urls = ", ".join(f'"{u}"' for u in replicas["urls"])
    (tmp_path / "spectower.toml").write_text(f'db = "audit.db"\n\n[fleets.prod]\nservers = [{urls}]\n')
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))  # no user config, no running demo
    monkeypatch.delenv("SPECTOWER_DB", raising=False)
    return {**replicas, "db": tmp_path / "audit.db"}


def run_cli(args: list[str], **kwargs: Any) -> Any:
    environ = {"SPECTOWER_ADMIN_KEY": ADMIN_KEY, "SPECTOWER_ADMIN_KEY_FILE": ""}
    return CliRunner().invoke(app, ["control", *args], env=environ, **kwargs)


def knob(url: str) -> tuple[int, str]:
    info = httpx.get(f"{url}/server_info", timeout=5).json()
    state = info["internal_states"][0]["spectower"]
    return state["spec_max_bs"], state["owner"]


def test_fleet_off_sets_every_answering_replica_names_the_down_one_and_exits_partial(fleet: Any) -> None:
    result = run_cli(["set", "--fleet", "prod", "--off", "--reason", "incident 4711", "--yes", "--as", "ana"])
    assert result.exit_code == 3, result.output  # partial: seven confirmed, one did not answer
    lines = result.stdout.splitlines()
    for url in fleet["urls"]:
        row = next(line for line in lines if line.startswith(url + " "))
        if url == fleet["down"]:
            assert "NOT confirmed" in row and "cannot reach" in row
        else:
            assert "confirmed" in row and "NOT" not in row and " manual " in row, row
    assert "confirmed on 7 of 8 replica(s)" in result.stdout
    assert f"partial: not confirmed on {fleet['down']} (exit 3)" in result.stderr
    for url in fleet["urls"][:-1]:
        assert knob(url) == (0, "manual")  # the slow one too, through its slow network
    with open_database(fleet["db"]) as db:
        rows = audit.list_events(db, limit=100)
    by_url = {row.server_url: row for row in rows}
    assert set(by_url) == set(fleet["urls"]) and len(rows) == 8  # each replica audited once
    assert all(by_url[u].confirmed and by_url[u].actor == "operator:ana" for u in fleet["urls"][:-1])
    assert not by_url[fleet["down"]].confirmed and by_url[fleet["down"]].error.startswith("not applied")


def test_fleet_release_clears_every_lock(fleet: Any) -> None:
    run_cli(["set", "--fleet", "prod", "--off", "--reason", "incident", "--yes"])
    result = run_cli(["release", "--fleet", "prod", "--reason", "incident over"])
    assert result.exit_code == 3, result.output
    assert "release: confirmed on 7 of 8 replica(s)" in result.stdout
    for url in fleet["urls"][:-1]:
        assert knob(url) == (0, "policy")  # the value stays, the lock is gone


def test_several_servers_all_confirmed_exit_0_and_all_down_exit_1(fleet: Any) -> None:
    two = [arg for url in fleet["urls"][:2] for arg in ("--server", url)]
    result = run_cli(["set", *two, "--max-bs", "8", "--reason", "two replicas", "--yes"])
    assert result.exit_code == 0, result.output
    assert [knob(u)[0] for u in fleet["urls"][:2]] == [8, 8] and knob(fleet["urls"][2])[0] != 8
    down = ["--server", fleet["down"], "--server", dead_url()]
    result = run_cli(["set", *down, "--off", "--reason", "nobody home", "--yes"])
    assert result.exit_code == 1, result.output
    assert "failed: not confirmed on" in result.stderr


def test_fleet_set_previews_every_replica_and_asks_once(fleet: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(control_cmd, "_stdin_is_tty", lambda: True)
    result = run_cli(["set", "--fleet", "prod", "--on", "--reason", "back on"], input="y\n")
    assert result.exit_code == 3, result.output
    assert result.stdout.count("Apply to 7 replica(s)?") == 1
    preview = result.stdout.split("Apply to")[0]
    assert f"{fleet['down']}  -" in preview and "CANNOT SET" in preview
    other = next(line for line in preview.splitlines() if line.startswith(fleet["other"]))
    limit = httpx.get(f"{fleet['other']}/server_info", timeout=5).json()["max_running_requests"]
    assert f"{limit} (on)" in other  # "on" resolved on that replica: its own max_running_requests
    aborted = run_cli(["set", "--fleet", "prod", "--off", "--reason", "no"], input="n\n")
    assert aborted.exit_code == 1 and "nothing was sent" in aborted.stdout
    assert knob(fleet["urls"][0])[0] != 0


def test_fleet_get_json_and_events(fleet: Any) -> None:
    run_cli(["set", "--server", fleet["urls"][0], "--off", "--reason", "just one", "--yes", "--as", "bo"])
    result = run_cli(["get", "--fleet", "prod", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    rows = {row["replica"]: row for row in doc["replicas"]}
    assert list(rows) == fleet["urls"] and "cannot reach" in rows[fleet["down"]]["error"]
    first = rows[fleet["urls"][0]]
    assert first["spec_max_bs"] == 0 and first["owner"] == "manual"
    assert first["lock_holder"]["actor"] == "operator:bo" and first["lock_holder"]["reason"] == "just one"
    human = run_cli(["get", "--fleet", "prod"])
    assert human.exit_code == 1  # a replica does not answer
    assert f"{fleet['down']}" in human.stdout and "NOT ANSWERING" in human.stdout
    assert "operator:bo: just one" in human.stdout
    run_cli(["set", "--server", "http://127.0.0.1:9", "--off", "--reason", "elsewhere", "--yes"])
    listed = run_cli(["events", "--fleet", "prod", "--json"])
    urls = {row["server_url"] for row in json.loads(listed.stdout)}
    assert urls == {fleet["urls"][0]}  # the other server's row is not this fleet's
