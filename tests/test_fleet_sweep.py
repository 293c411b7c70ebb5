"""`spectower bench sweep --fleet NAME` (and repeated `--server`) against REAL simulated replicas: two
alike in the fleet, one URL of the fleet where nothing listens, and a bystander outside the fleet, with a
real SQLite database. The fleet is named once, in ./spectower.toml.

What is checked is the fleet part: one replica at a time (each replica's audit rows and knob moves lie
between its own borrow and give-back, and the next replica's borrow comes after), the others untouched
(their knob, owner, lock and last write read before and after are the same, and they have no audit row),
each replica's run saved like a single sweep's, the down replica named while the others are still swept,
and exit 3 (partial), 0 (all), 2 (bad input: nothing sent)."""

from __future__ import annotations

import concurrent.futures
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
from spectower.console.commands.bench_fleet import _profile_path
from spectower.storage import open_database
from spectower.storage.models import BenchRun, ControlEvent
from sqlmodel import select

from benchmarks.simulator_process import SimulatorProcess
from tests.conftest import SPECTOWER_CLI, cli_in_process, dead_url

ADMIN_KEY = "fleet-sweep-key"
LEVELS = (1, 2)
# Low rates (at most a few hundred SSE chunks/s) so a shared 2-core box streams two replicas' slices easily.
PROFILE: dict[str, Any] = {
    "name": "fleet-sweep",
    "description": "test profile: speculation pays at 1, loses at 2",
    "gpus": {"count": 1, "name": "NVIDIA H100 80GB HBM3", "memory_mib": 81559, "power_limit_w": 700},
    "served_model_name": "fleet-sweep",
    "speculative_algorithm": "EAGLE3",
    "speculative_num_steps": 3,
    "max_running_requests": 16,
    "concurrency": list(LEVELS),
    "output_tok_s": {"spec_on": [150.0, 160.0], "spec_off": [50.0, 240.0]},
    "accept_length": [2.0, 2.0],
    "prefill_tok_s": 40000.0,
    "noise_cv": 0.0,
}
START_KNOBS = (5, 6, 7)  # replica A, replica B, the bystander: neither "on" nor "off", each its own


@pytest.fixture(scope="module")
def sims(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[SimulatorProcess]]:
    """Replicas A and B of the fleet and a bystander outside it, started once for the module."""
    path = tmp_path_factory.mktemp("profile") / "fleet-sweep.json"
    path.write_text(json.dumps(PROFILE))
    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        started = list(pool.map(lambda _: SimulatorProcess(profile=str(path), admin_key=ADMIN_KEY), range(3)))
    try:
        yield started
    finally:
        for sim in started:
            sim.close()


@pytest.fixture
def fleet(sims: list[SimulatorProcess], tmp_path: Path) -> dict[str, Any]:
    """Each simulator's knob at its own start value (no lock), and ``prod`` = [A, down, B] in the working
    directory's spectower.toml."""
    for sim, value in zip(sims, START_KNOBS, strict=True):
        args = {"spectower_spec_max_bs": value, "spectower_writer": 1, "spectower_release": 1}
        body = {"server_args": args}
        assert httpx.post(f"{sim.base_url}/set_internal_state", json=body, headers=sim.admin_headers,
                          timeout=5).json() == [True]  # fmt: skip
    a, b, bystander = (sim.base_url for sim in sims)
    down = dead_url()
    (tmp_path / "spectower.toml").write_text(f'[fleets.prod]\nservers = ["{a}", "{down}", "{b}"]\n')
    return {"a": a, "b": b, "down": down, "bystander": bystander, "cwd": tmp_path, "db": tmp_path / "f.db"}


def _command(fleet: dict[str, Any], *args: str, level_s: int = 1) -> tuple[list[str], dict[str, str]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPECTOWER_")}
    env |= {"SPECTOWER_ADMIN_KEY": ADMIN_KEY, "XDG_CONFIG_HOME": str(fleet["cwd"] / "config")}
    argv = [
        *SPECTOWER_CLI, "bench", "sweep", *args, "--concurrency", ",".join(map(str, LEVELS)),
        "--modes", "on,off", "--duration-per-level", str(level_s), "--rounds", "1", "--input-len", "8",
        "--output-len", "16", "--warmup", "1", "--db", str(fleet["db"]), "--as", "tester",
    ]  # fmt: skip
    return argv, env


def _sweep(fleet: dict[str, Any], *args: str) -> subprocess.CompletedProcess[str]:
    argv, env = _command(fleet, *args)
    return subprocess.run(argv, cwd=fleet["cwd"], env=env, capture_output=True, text=True, timeout=240)


def _knob_state(url: str) -> list[dict[str, Any]]:
    """Every DP rank's knob as the replica reports it: value, owner, lock and its last write."""
    info = httpx.get(f"{url}/server_info", timeout=5).json()
    keys = ("spec_max_bs", "owner", "lock", "last_write")
    return [{k: rank["spectower"][k] for k in keys} for rank in info["internal_states"]]


def _running(url: str) -> int:
    loads = httpx.get(f"{url}/v1/loads", timeout=5).json()["loads"]
    return sum(int(rank.get("num_running_reqs") or 0) for rank in loads)


def _audit(db_path: Path) -> list[ControlEvent]:
    with open_database(f"sqlite:///{db_path}") as db, db.session() as session:
        return list(session.exec(select(ControlEvent).order_by(ControlEvent.ts)).all())


def _runs(db_path: Path) -> list[BenchRun]:
    with open_database(f"sqlite:///{db_path}") as db, db.session() as session:
        return list(session.exec(select(BenchRun).order_by(BenchRun.id)).all())


@pytest.mark.integration
def test_fleet_sweep_one_replica_at_a_time_others_untouched_down_one_named(fleet: dict[str, Any]) -> None:
    bystander_before = _knob_state(fleet["bystander"])
    proc = _sweep(fleet, "--fleet", "prod", "--save", "--json")
    assert proc.returncode == 3, proc.stderr  # partial: A and B swept, the down replica not
    assert "Traceback" not in proc.stderr
    doc = json.loads(proc.stdout)
    rows = {row["replica"]: row for row in doc["replicas"]}
    assert [row["replica"] for row in doc["replicas"]] == [fleet["a"], fleet["down"], fleet["b"]]
    assert doc["fleet"] == "prod" and doc["exit_code"] == 3
    down = rows[fleet["down"]]
    assert not down["swept"] and down["result"] is None and "127.0.0.1" in down["error"]
    assert f"partial: not swept: {fleet['down']} (exit 3)" in proc.stderr
    for url in (fleet["a"], fleet["b"]):
        result = rows[url]["result"]
        assert rows[url]["swept"] and result["server"] == url and result["run_id"] is not None
        assert {(p["concurrency"], p["mode"]) for p in result["points"]} == {
            (c, m) for c in LEVELS for m in ("on", "off")
        }
    # each replica's run saved like a single sweep's: its own server_url, the fleet's tag
    runs = _runs(fleet["db"])
    assert [(r.id, r.server_url, r.tag) for r in runs] == [
        (rows[fleet["a"]]["result"]["run_id"], fleet["a"], "fleet prod"),
        (rows[fleet["b"]]["result"]["run_id"], fleet["b"], "fleet prod"),
    ]
    # one at a time: A borrowed and gave back, then B; nothing else audited (the bystander, the down one)
    events = _audit(fleet["db"])
    assert [(e.server_url, e.action, e.confirmed) for e in events] == [
        (fleet["a"], "sweep-start", True), (fleet["a"], "sweep-end", True),
        (fleet["b"], "sweep-start", True), (fleet["b"], "sweep-end", True),
    ]  # fmt: skip
    a_start, a_end, b_start, b_end = (e.ts for e in events)
    for run, (start, end) in zip(runs, [(a_start, a_end), (b_start, b_end)], strict=True):
        moves = json.loads(run.params_json or "{}")["knob_moves"]
        assert moves and all(start <= move["ts"] <= end for move in moves)  # each moved only its own knob
    # every knob as it was: the swept ones given back, the bystander never written at all
    assert [rank["spec_max_bs"] for rank in _knob_state(fleet["a"])] == [START_KNOBS[0]]
    assert [rank["spec_max_bs"] for rank in _knob_state(fleet["b"])] == [START_KNOBS[1]]
    assert all(rank["owner"] == "policy" and rank["lock"] is None for u in ("a", "b")
               for rank in _knob_state(fleet[u]))  # fmt: skip
    assert _knob_state(fleet["bystander"]) == bystander_before


@pytest.mark.integration
def test_several_servers_print_each_table_and_one_summary_and_exit_0(fleet: dict[str, Any]) -> None:
    """Repeated --server (no fleet named): each replica's own table as a single sweep prints it, then one
    summary row per replica; the fleet's third replica (B), not named, is untouched."""
    b_before = _knob_state(fleet["b"])
    proc = _sweep(fleet, "--server", fleet["a"], "--server", fleet["bystander"])
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert f"replica 1/2: {fleet['a']}" in out and f"replica 2/2: {fleet['bystander']}" in out
    assert out.index(f"spectower bench sweep: {fleet['a']}") < out.index(
        f"spectower bench sweep: {fleet['bystander']}"
    )
    summary = out.split("fleet sweep: every replica")[1]
    for url in (fleet["a"], fleet["bystander"]):
        row = next(line for line in summary.splitlines() if url in line)
        assert "swept" in row and "NOT" not in row
    assert "partial" not in proc.stderr and "not swept" not in proc.stderr
    assert _knob_state(fleet["b"]) == b_before
    assert {e.server_url for e in _audit(fleet["db"])} == {fleet["a"], fleet["bystander"]}
    assert _runs(fleet["db"]) == []  # no --save: nothing stored but the audit


@pytest.mark.integration
def test_every_replica_down_exits_1(fleet: dict[str, Any]) -> None:
    other = dead_url()
    proc = _sweep(fleet, "--server", fleet["down"], "--server", other, "--json")
    assert proc.returncode == 1, proc.stderr
    assert f"failed: not swept: {fleet['down']}, {other} (exit 1)" in proc.stderr
    assert not any(row["swept"] for row in json.loads(proc.stdout)["replicas"])


@pytest.mark.integration
def test_ctrl_c_stops_the_fleet_sweep_the_replica_swept_gets_its_knob_back_the_next_is_untouched(
    fleet: dict[str, Any],
) -> None:
    b_before = _knob_state(fleet["b"])
    argv, env = _command(
        fleet, "--server", fleet["a"], "--server", fleet["b"], "--save", "--json", level_s=30
    )
    proc = subprocess.Popen(argv, cwd=fleet["cwd"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)  # fmt: skip
    try:
        # A's first slice is under way once A's knob is under the sweep's lock and A serves requests
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and not (_knob_state(fleet["a"])[0]["owner"] == "sweep"
                                                   and _running(fleet["a"])):  # fmt: skip
            time.sleep(0.1)
        assert _knob_state(fleet["a"])[0]["owner"] == "sweep", "the sweep of the first replica did not start"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert f"interrupted: not swept: {fleet['a']}, {fleet['b']} (exit 130)" in err
    rows = {row["replica"]: row for row in json.loads(out)["replicas"]}
    assert rows[fleet["a"]]["result"]["interrupted"] and rows[fleet["a"]]["result"]["knob_restored"]
    assert (
        rows[fleet["b"]]["result"] is None and "interrupted before this replica" in rows[fleet["b"]]["error"]
    )
    assert [rank["spec_max_bs"] for rank in _knob_state(fleet["a"])] == [START_KNOBS[0]]
    assert _knob_state(fleet["b"]) == b_before
    assert [(e.server_url, e.action) for e in _audit(fleet["db"])] == [
        (fleet["a"], "sweep-start"), (fleet["a"], "sweep-end"),
    ]  # fmt: skip


@pytest.mark.integration
def test_a_replica_killed_mid_sweep_is_named_and_the_next_is_still_swept(
    fleet: dict[str, Any], simulator_factory: Any, tmp_path: Path
) -> None:
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(PROFILE))
    doomed = simulator_factory(profile=str(path), admin_key=ADMIN_KEY)
    argv, env = _command(fleet, "--server", doomed.base_url, "--server", fleet["b"], "--json", level_s=5)
    proc = subprocess.Popen(argv, cwd=fleet["cwd"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and not (_knob_state(doomed.base_url)[0]["owner"] == "sweep"
                                                   and _running(doomed.base_url)):  # fmt: skip
            time.sleep(0.1)
        doomed.kill()  # mid-slice, its knob under the sweep's lock
        out, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 3, err
    rows = {row["replica"]: row for row in json.loads(out)["replicas"]}
    # its row says why; what the error reads depends on where the kill landed (a warm-up's requests cut off,
    # or the next request refused), which the wait above cannot pin down: its requests run in both
    assert not rows[doomed.base_url]["swept"] and rows[doomed.base_url]["error"]
    assert rows[fleet["b"]]["swept"] and not rows[fleet["b"]]["result"]["interrupted"]
    assert f"partial: not swept: {doomed.base_url} (exit 3)" in err
    ends = [e for e in _audit(fleet["db"]) if e.action == "sweep-end"]
    assert [(e.server_url, e.confirmed) for e in ends] == [(doomed.base_url, False), (fleet["b"], True)]


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["--gpu-metrics", "http://127.0.0.1:9400/metrics"], "--gpu-metrics"),
        (["--plain-server", "{a}"], "--plain-server"),
        (["--fleet", "nope"], "--fleet nope"),
        (["--concurrency", "0"], "--concurrency"),
    ],
)
def test_bad_input_is_one_line_and_nothing_is_sent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], field: str
) -> None:
    """Refused before any replica is touched: nothing listens at these URLs, so any request would show
    as a replica's failure (exit 1 or 3), not exit 2. In process: refused before the sweep takes the
    process's signals (cli_in_process checks), a subprocess each cost 1.6 CPU-s."""
    a, b = (dead_url() for _ in range(2))
    for name in [k for k in os.environ if k.startswith("SPECTOWER_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.chdir(tmp_path)
    proc = cli_in_process("bench", "sweep", "--server", a, "--server", b, "--db", str(tmp_path / "x.db"),
                          *[arg.format(a=a) for arg in args])  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("error:") and field in proc.stderr and "Traceback" not in proc.stderr
    assert "replica 1/2" not in proc.stdout


def test_profile_out_gets_one_file_per_replica(tmp_path: Path) -> None:
    out = tmp_path / "measured.json"
    assert _profile_path(out, "http://10.0.0.1:30000") == tmp_path / "measured-10.0.0.1-30000.json"
    assert _profile_path(out, "https://gpu-node-3") == tmp_path / "measured-gpu-node-3-https.json"
    assert _profile_path(None, "http://10.0.0.1:30000") is None
