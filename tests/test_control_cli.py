"""`spectower control ...` against the REAL simulator subprocess, with a real SQLite audit trail.

The last test is the end-to-end one: `spectower control auto` as its own process moves the knob, a manual
`set` (another database, another spelling of the URL) pauses it through the server's lock, `release`
resumes it, SIGTERM stops it and the server keeps its ceiling.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from spectower.console.cli import app
from spectower.control import audit
from spectower.storage import queries
from spectower.storage.database import open_database
from spectower.storage.models import EngineSample
from typer.testing import CliRunner

from tests.conftest import REPO_ROOT, SPECTOWER_CLI, dead_url

ADMIN_KEY = "adm-7e41c0d9b2"


@pytest.fixture(scope="module")
def shared_sim() -> Iterator[Any]:
    """One simulator for the quick CLI cases (start-up costs seconds on a loaded machine)."""
    from benchmarks.simulator_process import SimulatorProcess

    with SimulatorProcess(admin_key=ADMIN_KEY, dp_size=2) as process:
        yield process


@pytest.fixture
def sim(shared_sim: Any) -> Any:
    """The shared simulator with its knob back at the launch value (always on)."""
    max_running = httpx.get(f"{shared_sim.base_url}/server_info", timeout=5).json()["max_running_requests"]
    # value and release in one request: back to always on, no lock left from an earlier test
    release = {"spectower_writer": 1, "spectower_release": 1}
    body = {"server_args": {"spectower_spec_max_bs": max_running, **release}}
    url = f"{shared_sim.base_url}/set_internal_state"
    answer = httpx.post(url, json=body, headers=shared_sim.admin_headers, timeout=5)
    assert answer.json() == [True, True]
    return shared_sim


def knob_values(sim: Any) -> list[int]:
    info = httpx.get(f"{sim.base_url}/server_info", timeout=5).json()
    return [state["spectower"]["spec_max_bs"] for state in info["internal_states"]]


def run_cli(args: list[str], *, key: str | None = ADMIN_KEY, **env: str) -> Any:
    environ = {"SPECTOWER_ADMIN_KEY": key or "", "SPECTOWER_ADMIN_KEY_FILE": "", **env}
    return CliRunner().invoke(app, ["control", *args], env=environ)


def events(db_path: Path) -> list[Any]:
    with open_database(db_path) as db:
        return list(reversed(audit.list_events(db, limit=1000)))


def test_get_json_reports_every_rank(sim: Any) -> None:
    result = run_cli(["get", "--server", sim.base_url, "--json"])
    assert result.exit_code == 0, result.output
    import json

    state = json.loads(result.stdout)
    assert state["plugin_installed"] and state["speculative_adaptive"] and state["bands_allow_zero"]
    assert [r["dp_rank"] for r in state["ranks"]] == [0, 1]
    assert state["spec_max_bs"] == state["max_running_requests"] and state["mode"] == "on"
    human = run_cli(["get", "--server", sim.base_url])
    assert "dp_rank 1" in human.stdout and "mode on" in human.stdout


def test_set_off_n_on_confirmed_and_audited(sim: Any, tmp_path: Path) -> None:
    db = tmp_path / "cli.db"
    base = ["set", "--server", sim.base_url, "--db", str(db), "--yes", "--as", "alice"]
    result = run_cli([*base, "--off", "--reason", "incident 7"])
    assert result.exit_code == 0, result.output
    assert "-> 0 (off)" in result.stdout and result.stdout.count("confirmed") >= 2
    assert knob_values(sim) == [0, 0]
    assert run_cli([*base, "--max-bs", "8", "--reason", "partial"]).exit_code == 0
    assert knob_values(sim) == [8, 8]
    on = run_cli([*base, "--on", "--reason", "back to normal"])
    assert on.exit_code == 0, on.output
    max_running = httpx.get(f"{sim.base_url}/server_info").json()["max_running_requests"]
    assert knob_values(sim) == [max_running, max_running]
    sets = [e for e in events(db) if e.action == "set"]
    assert [(e.old_max_bs, e.new_max_bs, e.confirmed) for e in sets] == [
        (max_running, 0, True), (0, 8, True), (8, max_running, True)]  # fmt: skip
    assert all(e.actor == "operator:alice" and e.server_url == sim.base_url for e in sets)
    assert ADMIN_KEY.encode() not in db.read_bytes()

    released = run_cli(
        ["release", "--server", sim.base_url, "--db", str(db), "--reason", "done", "--as", "alice"]
    )
    assert released.exit_code == 0 and "released" in released.stdout
    listed = run_cli(["events", "--db", str(db), "--server", sim.base_url])
    assert "operator:alice release" in listed.stdout and "0 -> 8 ok" in listed.stdout


def test_refusals_are_clean_audited_and_change_nothing(sim: Any, tmp_path: Path) -> None:
    db = tmp_path / "cli.db"
    start = knob_values(sim)
    base = ["set", "--server", sim.base_url, "--db", str(db), "--reason", "test"]

    wrong = run_cli([*base, "--off", "--yes"], key="not-the-admin-key")
    assert wrong.exit_code == 2 and "error:" in wrong.stderr and "wrong key" in wrong.stderr
    assert "not-the-admin-key" not in wrong.output and "Traceback" not in wrong.output
    missing = run_cli([*base, "--off", "--yes"], key=None)
    assert missing.exit_code == 2 and "none is set" in missing.stderr
    too_big = run_cli([*base, "--max-bs", "100000", "--yes"])
    assert too_big.exit_code == 2 and "exceeds the server's max_running_requests" in too_big.stderr
    dead = dead_url()
    unknown = run_cli(["set", "--server", dead, "--db", str(db), "--reason", "test", "--off", "--yes"])
    assert unknown.exit_code == 2 and "cannot reach" in unknown.stderr
    assert knob_values(sim) == start
    rows = events(db)
    assert len(rows) == 4 and not any(r.confirmed for r in rows)
    assert all((r.error or "").startswith("not applied: ") for r in rows)
    assert [(r.error or "").split(": ")[1] for r in rows] == [
        "KnobAuthError", "KnobAuthError", "KnobValueError", "ServerUnreachableError"]  # fmt: skip

    # Input mistakes never reach the server or the database.
    no_tty = run_cli([*base, "--off"])
    assert no_tty.exit_code == 2 and "pass --yes" in no_tty.stderr
    # a bad value is named before anything asks (it said "pass --yes", then refused the value after it)
    negative = run_cli([*base, "--max-bs", "-3"])
    assert negative.exit_code == 2 and negative.stderr.strip() == (
        "error: --max-bs must be >= 0 (0 switches speculation off), got -3")
    both = run_cli([*base, "--off", "--on", "--yes"])
    assert both.exit_code == 2 and "exactly one of" in both.stderr
    empty = run_cli(["set", "--server", sim.base_url, "--db", str(db), "--reason", " ", "--off", "--yes"])
    assert empty.exit_code == 2 and "--reason is required" in empty.stderr
    assert len(events(db)) == 4 and knob_values(sim) == start


def test_interactive_confirmation(sim: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from spectower.console.commands import control as control_cli

    monkeypatch.setattr(control_cli, "_stdin_is_tty", lambda: True)
    db = tmp_path / "cli.db"
    args = ["control", "set", "--server", sim.base_url, "--db", str(db), "--reason", "x", "--max-bs", "3"]
    env = {"SPECTOWER_ADMIN_KEY": ADMIN_KEY}
    declined = CliRunner().invoke(app, args, input="n\n", env=env)
    assert declined.exit_code == 1 and "nothing was sent" in declined.stdout
    assert knob_values(sim) != [3, 3] and events(db) == []
    accepted = CliRunner().invoke(app, args, input="y\n", env=env)
    assert accepted.exit_code == 0, accepted.output
    assert knob_values(sim) == [3, 3]


def test_key_file(sim: Any, tmp_path: Path) -> None:
    key_file = tmp_path / "admin.key"
    key_file.write_text(ADMIN_KEY + "\n")
    result = CliRunner().invoke(
        app,
        ["control", "set", "--server", sim.base_url, "--db", str(tmp_path / "k.db"), "--reason", "file",
         "--off", "--yes"],
        env={"SPECTOWER_ADMIN_KEY": "", "SPECTOWER_ADMIN_KEY_FILE": str(key_file)},
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert knob_values(sim) == [0, 0]


def test_api_key_protected_server(simulator_factory: Callable[..., Any], tmp_path: Path) -> None:
    sim = simulator_factory(api_key="api-5d1e")
    refused = run_cli(["get", "--server", sim.base_url], key=None)
    assert refused.exit_code == 2 and "SPECTOWER_API_KEY" in refused.stderr
    allowed = run_cli(["get", "--server", sim.base_url, "--json"], key=None, SPECTOWER_API_KEY="api-5d1e")
    assert allowed.exit_code == 0, allowed.output
    # Without an admin key SGLang takes the API key on admin endpoints too.
    done = run_cli(["set", "--server", sim.base_url, "--db", str(tmp_path / "a.db"), "--off", "--yes",
                    "--reason", "api key only"], key=None, SPECTOWER_API_KEY="api-5d1e")  # fmt: skip
    assert done.exit_code == 0, done.output
    assert httpx.get(f"{sim.base_url}/server_info", headers={"Authorization": "Bearer api-5d1e"}).json()[
        "internal_states"][0]["spectower"]["spec_max_bs"] == 0  # fmt: skip


# ------------------------------------------------------------------------------------- end to end


class SampleFeeder:
    """Writes fresh EngineSamples for a server as the collector would, until stopped."""

    def __init__(self, db_path: Path, url: str, running: float) -> None:
        self.db_path, self.url, self.running = db_path, url, running
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with open_database(self.db_path) as db:
            server_id = db.server_id(self.url)
            while not self._stop.is_set():
                now = time.time()
                with db.session(write=True) as session:
                    for rank in (0, 1):
                        session.add(EngineSample(server_id=server_id, dp_rank=rank, ts=now,
                                                 num_running_reqs=self.running / 2, num_queue_reqs=0,
                                                 output_tok_s=900.0, spec_accept_length=2.4))  # fmt: skip
                self._stop.wait(0.25)

    def __enter__(self) -> SampleFeeder:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


def wait_for(predicate: Callable[[], bool], timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return False


class OutputReader:
    """Collects a child's output lines as they come, so a test can wait for one without blocking."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.lines: list[str] = []
        self._thread = threading.Thread(target=self._read, args=(proc,), daemon=True)
        self._thread.start()

    def _read(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            self.lines.append(line)

    def has(self, text: str) -> bool:
        return any(text in line for line in self.lines)

    def text(self) -> str:
        self._thread.join(timeout=10)
        return "".join(self.lines)


@pytest.fixture
def auto_process(sim: Any, tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], Path]]:
    db = tmp_path / "auto.db"
    open_database(db).close()
    env = {**os.environ, "SPECTOWER_ADMIN_KEY": ADMIN_KEY, "PYTHONUNBUFFERED": "1"}
    env.pop("SPECTOWER_ADMIN_KEY_FILE", None)
    proc = subprocess.Popen(
        [*SPECTOWER_CLI, "control", "auto", "--server", sim.base_url, "--db", str(db),
         "--policy", "threshold:12", "--interval", "1s", "--stale-after", "5s"],
        cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    yield proc, db
    if proc.poll() is None:
        proc.kill()
        proc.wait(timeout=10)


@pytest.mark.integration
def test_auto_end_to_end_threshold_pause_release_sigterm(
    sim: Any, tmp_path: Path, auto_process: tuple[subprocess.Popen[str], Path]
) -> None:
    proc, db = auto_process
    output = OutputReader(proc)
    policy_sets = lambda: [e for e in events(db) if e.actor == "policy:threshold" and e.action == "set"]  # noqa: E731
    # Stale first: nothing collected yet, so the runner holds and the knob stays where it was.
    assert wait_for(lambda: any(e.action == "auto-start" for e in events(db)))
    time.sleep(1.0)
    assert policy_sets() == [] and knob_values(sim) != [12, 12]
    with SampleFeeder(db, sim.base_url, running=20):
        assert wait_for(lambda: knob_values(sim) == [12, 12]), output.text()
        # The server applies the value before the runner reads it back and audits it: wait for the row.
        assert wait_for(lambda: policy_sets() != []), output.text()
        assert [(e.new_max_bs, e.confirmed) for e in policy_sets()] == [(12, True)]

        # The operator uses another database and another spelling of the server: the lock is the server's.
        other_db = tmp_path / "operator.db"
        localhost = sim.base_url.replace("127.0.0.1", "localhost")
        manual = run_cli(["set", "--server", localhost, "--db", str(other_db), "--off", "--yes", "--reason",
                          "operator takes over", "--as", "bob"])  # fmt: skip
        assert manual.exit_code == 0, manual.output
        assert wait_for(lambda: output.has("paused")), output.text()
        time.sleep(2.5)  # a few more intervals (absence has no event): the runner must not undo the value
        assert knob_values(sim) == [0, 0] and len(policy_sets()) == 1

        released = run_cli(["release", "--server", localhost, "--db", str(other_db), "--reason", "hand back",
                            "--as", "bob"])  # fmt: skip
        assert released.exit_code == 0, released.output
        assert wait_for(lambda: knob_values(sim) == [12, 12])
        assert wait_for(lambda: len(policy_sets()) == 2), output.text()

    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0, output.text()
    assert "SIGTERM" in output.text() and "stale" not in output.text().split("paused")[-1]
    assert knob_values(sim) == [12, 12]  # the server keeps the last ceiling
    actions = [(e.actor.split(":")[0], e.action) for e in events(db)]
    assert actions[0] == ("policy", "auto-start") and actions[-1] == ("policy", "auto-stop")
    assert not any(actor == "operator" for actor, _ in actions)  # the operator audited in their own db
    assert [(e.actor, e.action) for e in events(tmp_path / "operator.db")] == [
        ("operator:bob", "set"), ("operator:bob", "release")]  # fmt: skip
    assert ADMIN_KEY not in output.text()


def test_get_shows_the_servers_owner_lock_expiry_and_policy_decision(sim: Any, tmp_path: Path) -> None:
    db = tmp_path / "cli.db"
    held = run_cli(["set", "--server", sim.base_url, "--db", str(db), "--yes", "--as", "alice",
                    "--max-bs", "6", "--hold", "2h", "--reason", "incident 9"])  # fmt: skip
    assert held.exit_code == 0, held.output
    assert f"database: {db} (--db)" in held.stderr  # a command that writes says where (#34)
    assert "manual lock for 2 h 0 min more" in held.stdout or "manual lock for 1 h 59 min more" in held.stdout
    url = f"{sim.base_url}/set_internal_state"
    body = {"server_args": {"spectower_writer": 2, "spectower_spec_max_bs": 30}}
    refused = httpx.post(url, json=body, headers=sim.admin_headers, timeout=5).json()
    assert refused == [False, False]  # a policy's write, refused by the server under the lock
    import json

    got = run_cli(["get", "--server", sim.base_url, "--json"])
    assert got.exit_code == 0, got.output
    state = json.loads(got.stdout)
    assert state["owner"] == "manual" and [r["spec_max_bs"] for r in state["ranks"]] == [6, 6]
    assert [r["owner"] for r in state["ranks"]] == ["manual", "manual"]
    assert 7100 < state["lock_left_s"] <= 7200 and state["lock"]["expires_at"] is not None
    assert state["last_write"]["writer"] == "manual" and state["last_write"]["value"] == 6
    assert state["policy_last"] == {**state["policy_last"], "value": 30, "applied": False}
    human = run_cli(["get", "--server", sim.base_url, "--db", str(db)])
    assert "owner            manual (manual lock for" in human.stdout, human.stdout
    # who holds it and since when: the audit row of the set that took it (#34)
    assert "held by          operator:alice since " in human.stdout and ": incident 9" in human.stdout
    holder = json.loads(run_cli(["get", "--server", sim.base_url, "--json", "--db", str(db)]).stdout)
    assert (holder["lock_holder"]["actor"], holder["lock_holder"]["reason"]) == (
        "operator:alice",
        "incident 9",
    )
    assert holder["lock"]["request_id"] == events(db)[-1].request_id is not None
    elsewhere = run_cli(["get", "--server", sim.base_url, "--db", str(tmp_path / "other.db")])
    assert "held by          unknown: no set of this lock in this database's audit" in elsewhere.stdout
    assert "policy says" not in human.stdout and holder["policy_said"] is None  # no policy ran here
    with open_database(db) as store:  # what a running policy's runner stores (control/runner.py)
        # its last step ten minutes ago (600-629 s read "10 min": no wall-clock race)
        queries.save_policy_state(store, sim.base_url, mode="learn", state_json="{}", ts=time.time() - 600)
        queries.save_policy_said(store, sim.base_url, said="paused: the server's manual lock holds the knob",
                                 ts=time.time() - 50)  # fmt: skip
    said = run_cli(["get", "--server", sim.base_url, "--db", str(db)])
    assert "policy says      learn, since " in said.stdout, said.stdout
    assert "(its last step 10 min ago): paused: the server's manual lock holds the knob" in said.stdout
    said_json = json.loads(run_cli(["get", "--server", sim.base_url, "--json", "--db", str(db)]).stdout)
    policy_said = said_json["policy_said"]
    assert policy_said["said"].startswith("paused: ") and policy_said["mode"] == "learn"
    assert "policy's last    set 30" in human.stdout and "REFUSED" in human.stdout
    assert "dp_rank 1: spec_max_bs=6 owner=manual" in human.stdout
    bad = run_cli(["set", "--server", sim.base_url, "--db", str(db), "--yes", "--off", "--hold", "soon",
                   "--reason", "x"])  # fmt: skip
    assert bad.exit_code == 2 and "--hold must be a duration" in bad.stderr and "Traceback" not in bad.output
    released = run_cli(["release", "--server", sim.base_url, "--db", str(db), "--reason", "done"])
    assert released.exit_code == 0 and "released: no lock" in released.stdout
    assert json.loads(run_cli(["get", "--server", sim.base_url, "--json"]).stdout)["owner"] == "policy"


def test_a_server_value_beyond_the_database_is_one_line_not_a_traceback(sim: Any, tmp_path: Path) -> None:
    too_big = run_cli(["set", "--server", sim.base_url, "--db", str(tmp_path / "c.db"), "--yes",
                       "--max-bs", str(2**70), "--reason", "x"])  # fmt: skip
    assert too_big.exit_code == 2 and "Traceback" not in too_big.output
    assert len(too_big.stderr.strip().splitlines()) == 1 and "--max-bs must be at most" in too_big.stderr


def test_get_shows_the_speedup_since_start_then_from_the_stored_counters(sim: Any, tmp_path: Path) -> None:
    """Without stored counters: the estimate over the server's counters since it started, saying so. With
    the collector's intervals in --db: the same estimate the console computes for that window."""
    import json

    from spectower.console import data
    from spectower.storage import queries
    from spectower.storage.counter_modes import EXTEND_MODES
    from spectower.storage.models import EngineCounterSample

    # some decode steps on the simulator, so its counters are not all zero
    body = {"model": "m", "prompt": "hi", "max_tokens": 64}
    for _ in range(3):
        assert httpx.post(f"{sim.base_url}/v1/completions", json=body, timeout=30).status_code == 200
    got = run_cli(["get", "--server", sim.base_url, "--json", "--db", str(tmp_path / "none.db")])
    assert got.exit_code == 0, got.output
    speed = json.loads(got.stdout)["speedup"]
    assert speed["source"] == "since_start" and speed["label"].endswith(", since the server started")
    assert speed["bins"] and sum(b["drafted_steps"] for b in speed["bins"]) > 0
    assert not (tmp_path / "none.db").exists()  # a missing --db file is not created
    human = run_cli(["get", "--server", sim.base_url, "--db", str(tmp_path / "none.db")])
    assert "crossover        " in human.stdout and "since the server started" in human.stdout
    # the knob drafted every batch: no steady gated step, so nothing measured what the draft extend costs
    assert speed["kept_extend"] is None and "kept extend      not measured" in human.stdout

    # the collector's intervals for this server: bin 4 pays (x1.5), bin 32 loses (x0.75)
    db_path = tmp_path / "collected.db"
    now = time.time()
    with open_database(db_path) as db:
        sid = db.server_id(sim.base_url)
        rows = []
        for i in range(12):
            ts, wobble = now - 300 + 5 * i, 1 + 0.02 * (i % 3 - 1)
            for b, (d, g) in {4: (600.0, 400.0), 32: (1500.0, 2000.0)}.items():
                n = 50 if b == 4 else 5  # drafted steps: batch 32 runs gated and explores drafting
                rows += [
                    EngineCounterSample(server_id=sid, ts=ts, batch_size=b, mode="drafted", steps=n,
                                        tokens=round(d * wobble), time_s=1.0),
                    EngineCounterSample(server_id=sid, ts=ts, batch_size=b, mode="gated", steps=50,
                                        tokens=round(g), time_s=1.0),
                ]  # fmt: skip
            # plugin 0.4.6's extend rows: bin 32's warm steps serve 0.88 of its cold ones
            for kind, n, tok_s in (("kept", 10, 1760.0), ("skipped", 40, 2000.0)):
                rows.append(EngineCounterSample(server_id=sid, ts=ts, batch_size=32, steps=n,
                                                mode=EXTEND_MODES[kind], tokens=round(tok_s * n * 0.02),
                                                time_s=n * 0.02))  # fmt: skip
        w = db.writer(maintenance=None)
        w.put(*rows)
        assert w.flush(30)
        w.close()
    got = run_cli(["get", "--server", sim.base_url, "--json", "--db", str(db_path), "--window", "15m"])
    assert got.exit_code == 0, got.output
    speed = json.loads(got.stdout)["speedup"]
    assert speed["source"] == "stored" and speed["window_s"] == 900 and speed["intervals"] == 12
    assert [b["batch_size"] for b in speed["bins"]] == [4, 32]
    assert speed["bins"][0]["lo"] < 1.5 < speed["bins"][0]["hi"] and 4 < speed["crossover"] < 32
    with open_database(db_path) as db:
        now = time.time()
        est = data.live_speedup(db, queries.server_by_url(db, sim.base_url).id, now - 900, now).estimate  # type: ignore[arg-type]
    assert speed["label"] == est.label and speed["crossover"] == est.crossover
    human = run_cli(["get", "--server", sim.base_url, "--db", str(db_path), "--window", "15m"])
    assert f"crossover        {est.label} (stored counters, last 15 min: 12 intervals" in human.stdout
    assert "batch     4: speedup x1.50 (95 %" in human.stdout
    batch4, batch32 = (next(x for x in human.stdout.splitlines() if f"batch {b:>5}:" in x) for b in (4, 32))
    assert batch32.endswith("gated 2000 tok/s, drafted side from exploration in a gated stream")
    assert "exploration" not in batch4
    assert [b["ran_mostly"] for b in speed["bins"]] == [None, "gated"]
    assert speed["kept_extend"]["tax"] == pytest.approx(0.12, abs=0.002)
    assert "kept extend      12.0 % measured (bin 32, 120 steps with the extend)" in human.stdout


def test_known_max_running_is_what_the_collector_stored(tmp_path: Path) -> None:
    """`control auto` falls back on the stored max_running_requests while the server does not answer."""
    from spectower.console.commands.control_auto import known_max_running as _known_max_running

    with open_database(tmp_path / "known.db") as db:
        db.server_id("http://a:30000", max_running_requests=48)
        assert _known_max_running(db, "http://a:30000") == 48
        assert _known_max_running(db, "http://never-collected:30000") is None


@pytest.mark.parametrize("flag", ["--interval", "--stale-after", "--sample"])
def test_auto_durations_are_checked_before_anything_starts(flag: str, tmp_path: Path) -> None:
    got = run_cli(["auto", "--server", "http://127.0.0.1:9", "--db", str(tmp_path / "d.db"), flag, "soon"])
    assert got.exit_code == 2 and f"{flag} must be a duration" in got.stderr and "Traceback" not in got.output


def test_auto_against_a_server_that_never_answers_leaves_no_empty_database(tmp_path: Path) -> None:
    """Nothing stored to fall back on and no answer: one error line, and no new database in the folder it
    ran in (a mistyped --server used to leave an empty spectower.db behind); one it found stays."""
    argv = [*SPECTOWER_CLI, "control", "auto", "--server", dead_url(), "--policy", "learn"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPECTOWER_")}
    proc = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr.startswith("error: cannot reach "), proc.stderr
    assert list(tmp_path.iterdir()) == []
    kept = tmp_path / "kept.db"
    open_database(kept).close()
    proc = subprocess.run([*argv, "--db", str(kept)], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert proc.returncode == 2 and kept.is_file()


def test_auto_sample_is_learns_alone(tmp_path: Path) -> None:
    got = run_cli(["auto", "--server", "http://127.0.0.1:9", "--db", str(tmp_path / "d.db"),
                   "--policy", "threshold:8", "--sample", "5s"])  # fmt: skip
    assert got.exit_code == 2 and "Traceback" not in got.output
    assert got.stderr.strip().splitlines() == [
        "error: --sample: only --policy learn keeps counters snapshots (got --policy threshold:8)"
    ]


def test_auto_dwell_is_learns_alone_and_reaches_its_policy(sim: Any, tmp_path: Path) -> None:
    """--dwell sets learn's least time between ceiling changes (default 5 min): a load compressed into minutes
    (the H200's 270-s day, issue #32) otherwise ends before learn may move once."""
    from spectower.console.commands.control_auto import AutoPlan, runner_for
    from spectower.control.runner import RunnerConfig

    got = run_cli(["auto", "--server", "http://127.0.0.1:9", "--db", str(tmp_path / "d.db"),
                   "--policy", "always-on", "--dwell", "30s"])  # fmt: skip
    assert got.exit_code == 2 and got.stderr.strip().splitlines() == [
        "error: --dwell: only --policy learn moves on its own (got --policy always-on)"
    ]
    base = ["auto", "--server", "http://127.0.0.1:9", "--db", str(tmp_path / "d.db")]
    short = run_cli([*base, "--dwell", "1s"])
    assert short.exit_code == 2 and "--dwell" in short.stderr and "Traceback" not in short.output
    with open_database(tmp_path / "d.db") as db:
        for dwell, expected in ((None, 300.0), (30.0, 30.0)):
            plan = AutoPlan("learn", "learn", RunnerConfig(), None, False, [], None, dwell)
            runner = runner_for(db, sim.base_url, plan, lambda line: None)
            try:
                assert runner.policy.min_dwell_s == expected  # type: ignore[attr-defined]
            finally:
                runner.client.close()


@pytest.mark.parametrize("command", [["get"], ["release", "--reason", "x"], ["events"]])
def test_a_server_url_that_does_not_parse_is_one_line(command: list[str], tmp_path: Path) -> None:
    # "http://[::1" raised urllib's ValueError as a traceback (control.knob.normalize_server_url)
    open_database(tmp_path / "c.db").close()  # events reads a database that is there
    result = run_cli([*command, "--server", "http://[::1", "--db", str(tmp_path / "c.db")])
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    said = "--server must be an http(s) URL, got 'http://[::1' (Invalid IPv6 URL)"
    assert result.output.strip() == f"error: {said}"


def test_get_since_start_reads_a_gated_bins_explored_drafting_as_learn_does() -> None:
    """``control get`` without a database reads the counters since the server started: plugin 0.4.15's
    counters under a ceiling of 16 (bin 32 gated, its explored drafting at 2.9 tokens a request where the
    parts' requests accept H = 2.667) give bin 32's drafted rate as learn's ``as_choices`` reads the same
    interval (the mix, then the prefills). One interval cannot say how far H's draw reaches
    (``mix_levelled.tells_apart``), so neither levels it for the mix, only for its prefills."""
    from spectower.collectors.sglang.server_info import ServerInfo
    from spectower.console.commands.control_get import speedup_of
    from spectower.control import prefilled
    from spectower.control.knob_state import KnobState
    from spectower.control.policy import learn_counters
    from spectower.plugin import engine_counters as ec

    from tests.test_queries_counters import _mix_snapshots

    snapshot = _mix_snapshots(12, seed=13)[-1]
    doc = {"internal_states": [{"spectower": {"counters": snapshot}}]}
    found = speedup_of(KnobState("http://sglang.test:30000", ServerInfo(info=doc), None), None, 600.0)
    assert found["source"] == "since_start"
    at_32 = next(b for b in found["bins"] if b["batch_size"] == 32)
    assert at_32["ran_mostly"] == "gated"
    since = ec.with_outside(ec.rates(None, snapshot))
    i = since["bins"].index(32)
    (chosen,) = learn_counters.as_choices([since], [learn_counters.drafted_by(since["bins"], 16)], 1.0)
    learn = chosen["drafted"]["tokens"][i] / chosen["drafted"]["time_s"][i]
    assert at_32["drafted_tok_s"] == pytest.approx(learn)
    # the prefill levelling alone: no mix levelling
    (prefill_only,) = prefilled.levelled_intervals([since], [learn_counters.drafted_by(since["bins"], 16)])
    cell = prefill_only["drafted"]
    assert at_32["drafted_tok_s"] == pytest.approx(cell["tokens"][i] / cell["time_s"][i])
