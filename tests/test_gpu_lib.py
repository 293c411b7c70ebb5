"""benchmarks/gpu/lib.sh: the GPU scripts' background CLI. ``kill $!`` after ``st_bg ...`` must stop the CLI
itself: with ``st ... &`` it stopped only a subshell, and the CLI went on (a load kept loading the server for
the next measurement, a policy kept writing the knob). A simulator stands in for the long-running command."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO_ROOT, free_port

SCRIPT = """
. benchmarks/gpu/lib.sh
st_bg sim serve --port "$PORT" --profile h200-8b-pair-triton > "$LOG" 2>&1
pid=$!
python3 - "$PORT" <<'PY'
import sys, time, urllib.request
deadline = time.monotonic() + 60
while True:
    try:
        urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/health", timeout=2)
        break
    except OSError:
        if time.monotonic() > deadline:
            raise SystemExit("the simulator did not come up")
        time.sleep(0.2)
PY
kill -TERM "$pid"; wait "$pid"
echo "stopped $pid"
"""


def _answers(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def test_kill_of_the_background_pid_stops_the_cli_itself(tmp_path: Path) -> None:
    port = free_port()
    # the test's own interpreter first on PATH: `python3` in the script is the one with spectower installed
    path = f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"
    env = {**os.environ, "PATH": path, "PORT": str(port), "LOG": str(tmp_path / "sim.log")}
    done = subprocess.run(["bash", "-c", SCRIPT], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120,
                          env=env)  # fmt: skip
    assert done.returncode in (0, 143), done.stdout + done.stderr  # wait returns the CLI's own SIGTERM status
    assert "stopped" in done.stdout, done.stdout + done.stderr
    # `wait` returned once the CLI's own process ended: nothing answers on its port any more
    assert not _answers(port), (tmp_path / "sim.log").read_text()


RUNNERS = [REPO_ROOT / "tests/run", REPO_ROOT / ".ci/run"]
SHELL_SCRIPTS = sorted([*REPO_ROOT.glob("benchmarks/gpu/*.sh"), *REPO_ROOT.glob("tests/*.sh"), *RUNNERS])


@pytest.mark.parametrize("script", SHELL_SCRIPTS, ids=lambda path: str(path.relative_to(REPO_ROOT)))
def test_every_shell_script_parses(script: Path) -> None:
    """bash parses a script command by command as it runs: a quote broken in a late phase only shows when the
    phase is reached, after a device call's launch has spent its time (2026-12-02: a Python snippet's comment
    carried an apostrophe inside measure_off.sh's single-quoted ``python3 -c``)."""
    proc = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr


def _measure_off(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    work = tmp_path / "work"
    environ = {**os.environ, "WORK": str(work), "OUT": str(tmp_path / "out"), "PHASES": "sweep", **env}
    argv = ["bash", "benchmarks/gpu/measure_off.sh"]
    return subprocess.run(argv, cwd=REPO_ROOT, env=environ, capture_output=True, text=True, timeout=120)


def test_a_throughput_phase_refuses_servers_profiled_since_their_launch(tmp_path: Path) -> None:
    """A profile leaves CUPTI on in the profiled server (pytorch/pytorch#144455): on the H200 the knob at 0
    then served 0.82 of plain at 64 requests where the same launch served 0.92 before. A sweep after a profile
    stops before it measures (no server runs here: the refusal comes first)."""
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "profiled").touch()
    refused = _measure_off(tmp_path)
    assert refused.returncode == 1
    assert "sweep: the servers were profiled since their launch" in refused.stdout
    assert "three curves, one client" not in refused.stdout  # the sweep never started
    anyway = _measure_off(tmp_path, AFTER_PROFILE="1", SPEC_PORT="9", PLAIN_PORT="9", CURL_MAX_S="2")
    assert "measured anyway (AFTER_PROFILE=1), not comparable" in anyway.stdout
    assert "three curves, one client" in anyway.stdout


def test_respec_and_abmax_refuse_a_machine_without_their_servers(tmp_path: Path) -> None:
    """``respec`` relaunches the speculative server of an earlier ``launch`` (SPEC_ENV for it alone) and
    ``abmax`` measures it against the un-gated server an earlier ``ungated`` left on the plain port: on a
    machine with neither, each stops in one line before it kills or measures anything."""
    (tmp_path / "work").mkdir()
    respec = _measure_off(tmp_path, PHASES="respec", SPEC_ENV="SPECTOWER_SEQ_LENS_MIRROR=0")
    assert respec.returncode == 1
    assert "respec: no speculative server of a launch here" in respec.stdout
    (tmp_path / "work" / "plain.kind").write_text("plain\n")  # `launch`'s plain server, not an un-gated one
    abmax = _measure_off(tmp_path, PHASES="abmax")
    assert abmax.returncode == 1
    assert "abmax: no un-gated server (run ungated first)" in abmax.stdout
    assert "knob at max" not in abmax.stdout  # nothing was measured


def test_wait_hands_back_policy_runs_without_a_sweep_to_score_them(tmp_path: Path) -> None:
    """A launch that ran no sweep (the always-on run of 2026-12-03 followed the knob-at-max calls) still
    hands back its policy runs; the score is left for a sweep saved elsewhere, and the call does not fail."""
    runs = tmp_path / "work" / "policy-out"
    runs.mkdir(parents=True)
    (tmp_path / "work" / "policy.done").touch()
    (runs / "policy.log").write_text("[02:45:29] policy on\n")
    (runs / "load-on.log").write_text("")
    (runs / "policy.db").write_bytes(b"")
    done = _measure_off(tmp_path, PHASES="wait", WAIT_SECONDS="1", SPEC_PORT="9", CURL_MAX_S="2")
    assert done.returncode == 0, done.stdout
    assert "no sweep at" in done.stdout and "to score against" in done.stdout
    assert "done: wait" in done.stdout
    assert {p.name for p in (tmp_path / "out").iterdir()} >= {"load-on.log", "policy.db", "policy.log"}


def test_policy_at_the_sweep_refuses_a_launch_without_a_sweep(tmp_path: Path) -> None:
    """``threshold:sweep`` and ``WARM_PROFILE=sweep`` take the threshold and learn's warm start from this
    launch's sweep (issue #32's early-crossover pair: its crossover is not known before the call that sweeps
    it); without a sweep on the machine the phase stops in one line before any policy runs."""
    (tmp_path / "work").mkdir()
    refused = _measure_off(tmp_path, PHASES="policy", POLICIES="learn threshold:sweep", WARM_PROFILE="sweep")
    assert refused.returncode == 1
    assert "threshold:sweep / WARM_PROFILE=sweep need a sweep of this launch" in refused.stdout
    assert "policy runs started" not in refused.stdout
    assert not (tmp_path / "work" / "policy-out" / "policy.log").exists()


def test_a_call_with_more_files_than_the_device_hands_back_packs_them(tmp_path: Path) -> None:
    """The device tool hands back 8 files a call: on 2026-12-03 a sweep's sweep.json and the policy runs'
    policy.db were left out and cost a call to fetch. Past 8 files, everything but measure.log goes back as
    out.tgz."""
    import tarfile

    runs = tmp_path / "work" / "policy-out"
    runs.mkdir(parents=True)
    (tmp_path / "work" / "policy.done").touch()
    (runs / "policy.log").write_text("[02:45:29] policy on\n")
    names = [f"load-threshold-{n}.log" for n in range(9)]
    for name in names:
        (runs / name).write_text(f"{name}\n")
    (runs / "policy.db").write_bytes(b"")
    done = _measure_off(tmp_path, PHASES="wait", WAIT_SECONDS="1", SPEC_PORT="9", CURL_MAX_S="2")
    assert done.returncode == 0, done.stdout
    assert "packed into out.tgz" in done.stdout
    out = tmp_path / "out"
    assert {p.name for p in out.iterdir()} == {"measure.log", "out.tgz"}
    with tarfile.open(out / "out.tgz") as packed:
        members = {Path(m.name).name for m in packed.getmembers() if m.isfile()}
        text = packed.extractfile("./load-threshold-3.log").read().decode()  # type: ignore[union-attr]
    assert members >= {*names, "policy.db", "policy.log"} and text == "load-threshold-3.log\n"


def test_a_call_ends_with_the_plugins_exploration_windows_and_never_the_admin_key(
    tmp_path: Path, simulator_factory: Any
) -> None:
    """Every call prints the exploring parts so far from /server_info (how many ended at their time cap,
    plugin 0.4.4, and how long the last one ran: the 2026-12-04 replay's threshold:16 run could not say how
    long its parts were). The simulator answers /server_info as a plugin-carrying SGLang does, server_args
    included; only the figures are printed."""
    key = "admin-key-that-must-not-print"
    sim = simulator_factory(admin_key=key)
    runs = tmp_path / "work" / "policy-out"
    runs.mkdir(parents=True)
    (tmp_path / "work" / "policy.done").touch()
    (runs / "policy.log").write_text("")
    (runs / "policy.db").write_bytes(b"")
    done = _measure_off(tmp_path, PHASES="wait", WAIT_SECONDS="1", SPEC_PORT=str(sim.port), CURL_MAX_S="5")
    assert done.returncode == 0, done.stdout + done.stderr
    line = next(text for text in done.stdout.splitlines() if text.startswith("explore windows, rank 0:"))
    assert "exploring parts" in line and "ended by time" in line and "doublings" in line
    # plugin 0.4.12's windows yield to a full server (the simulator's windows are the plugin's)
    assert "; a full server: 0 batches waited, 0 parts cut short, 0 windows run full" in line
    # and the scheduler process's collections (plugin 0.4.5; the simulator times its own process's)
    gc_line = next(text for text in done.stdout.splitlines() if text.startswith("scheduler gc, rank 0:"))
    assert " collections, " in gc_line and "of them >= 0.05 s" in gc_line and "newest long (UTC): " in gc_line
    # and what the draft extend costs a steady gated step (plugin 0.4.6): an idle server measured nothing
    assert "kept extend: not measured (a plugin before 0.4.6, a lock, or too few" in done.stdout
    assert key not in done.stdout + done.stderr


def test_a_call_whose_runs_are_still_going_hands_back_a_consistent_copy_of_their_database(
    tmp_path: Path,
) -> None:
    """2026-12-04: the device machine was taken back after the first call of a replay, and learn's counters
    went with it, because policy.db came back only once every run was done. A call whose runs are still
    going now hands back ``policy-partial.db``, SQLite's online backup of it taken while the collector
    writes (here: a writer holding the database in WAL mode, with rows committed and uncommitted)."""
    import sqlite3

    runs = tmp_path / "work" / "policy-out"
    runs.mkdir(parents=True)
    (runs / "policy.log").write_text("")
    live = sqlite3.connect(runs / "policy.db")
    live.execute("pragma journal_mode=wal")
    live.execute("create table engine_counter_sample (ts real, steps int)")
    live.executemany("insert into engine_counter_sample values (?, ?)", [(float(i), i) for i in range(500)])
    live.commit()
    live.execute("insert into engine_counter_sample values (1e9, 1)")  # uncommitted: not in the copy
    try:
        done = _measure_off(tmp_path, PHASES="wait", WAIT_SECONDS="1", SPEC_PORT="9", CURL_MAX_S="2")
    finally:
        live.close()
    assert done.returncode == 0, done.stdout + done.stderr
    assert "policy runs still going" in done.stdout
    out = tmp_path / "out"
    copy = sqlite3.connect(out / "policy-partial.db")
    try:
        assert copy.execute("select count(*), max(ts) from engine_counter_sample").fetchone() == (500, 499.0)
    finally:
        copy.close()
    assert not (out / "policy.db").exists()  # the whole database only once the runs are done


def test_freeze_gc_between_policy_runs_calls_sglangs_endpoint(tmp_path: Path, simulator_factory: Any) -> None:
    """``POLICIES="freeze-gc off learn"``: the launcher's long collections out of the runs. freeze-gc is no
    policy: `spectower control freeze-gc` POSTs SGLang's /freeze_gc (an admin endpoint: the launch's admin
    key), reads the frozen objects back and audits it; then the next entry runs. The simulator answers as
    SGLang does and reports its frozen objects as plugin 0.4.8 does."""
    key = "admin-key-of-this-launch"
    sim = simulator_factory(admin_key=key)
    work = tmp_path / "work"
    work.mkdir()
    (work / "admin_key").write_text(key)
    done = _measure_off(tmp_path, PHASES="policy wait", POLICIES="freeze-gc", SPEC_PORT=str(sim.port),
                        WAIT_SECONDS="60", CURL_MAX_S="5")  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    log = (work / "policy-out" / "policy.log").read_text()
    assert "frozen, confirmed by read-back: launcher 0 -> " in log, log
    from tests.test_control_cli import events

    assert [(e.action, e.actor, e.confirmed) for e in events(work / "policy-out" / "policy.db")] == [
        ("freeze-gc", "operator:gpu-check", True)]  # fmt: skip
    assert (work / "policy.done").exists()


def _run_label(tmp_path: Path, name: str) -> str:
    script = '. benchmarks/gpu/lib.sh; run_label "$DIR" "$NAME"'
    env = {**os.environ, "DIR": str(tmp_path), "NAME": name}
    done = subprocess.run(["bash", "-c", script], cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                          timeout=30)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_a_policy_run_again_gets_the_next_free_label(tmp_path: Path) -> None:
    """A launch's policy runs share one folder: a policy run a third time (a later call) is ``-3``, where the
    old rule gave every repeat ``-2`` and the third run's files overwrote the second's."""
    assert _run_label(tmp_path, "off") == "off"
    (tmp_path / "load-off.log").touch()
    assert _run_label(tmp_path, "off") == "off-2"
    (tmp_path / "load-off-2.log").touch()
    assert _run_label(tmp_path, "off") == "off-3"
    assert _run_label(tmp_path, "threshold-16") == "threshold-16"


def test_a_later_policy_phase_keeps_the_launchs_earlier_runs(tmp_path: Path) -> None:
    """2026-12-05f: each call's policy phase emptied the runs folder, database included, so learn in a later
    call found none of the server's counters to warm-start from, and its files could not sit beside the
    earlier runs'. A policy phase now adds to the folder a launch's ``start_spec`` cleared."""
    runs = tmp_path / "work" / "policy-out"
    runs.mkdir(parents=True)
    (runs / "load-off.log").write_text("earlier\n")
    (runs / "policy.log").write_text("[21:30:00] policy off\n")
    done = _measure_off(tmp_path, PHASES="policy", POLICIES="freeze-gc", SPEC_PORT="9", CURL_MAX_S="2")
    assert done.returncode == 0, done.stdout + done.stderr
    # the runs go on in the background (nothing answers on port 9: the freeze fails at once); their end is
    # the policy.done file they leave
    finished = tmp_path / "work" / "policy.done"
    deadline = time.monotonic() + 90
    while not finished.exists():
        assert time.monotonic() < deadline, (runs / "policy.log").read_text()
        time.sleep(0.1)
    assert (runs / "load-off.log").read_text() == "earlier\n"
    log = (runs / "policy.log").read_text()
    assert log.startswith("[21:30:00] policy off\n") and "freeze-gc" in log  # appended to, not replaced


def test_a_policy_entry_may_give_its_own_load_length(tmp_path: Path) -> None:
    """Steady levels for item 2: the locks need a minute each, the run whose windows explore needs about
    three windows of the default cycle (about 90 s apart at 48 requests). ``threshold:24=280`` runs that
    entry 280 s and the others LOAD_SECONDS; ``@steps:8`` runs it under its own load pattern (two levels in
    one call), the others under LOAD_PATTERN; its files are named for the policy alone."""
    runs = tmp_path / "work" / "policy-out"
    done = _measure_off(tmp_path, PHASES="policy", POLICIES="off threshold:24=3@steps:8", LOAD_SECONDS="2",
                        LOAD_PATTERN="steps:4", SPEC_PORT="9", CURL_MAX_S="2")  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    finished = tmp_path / "work" / "policy.done"  # the runs' end: the file they leave (a detached process)
    deadline = time.monotonic() + 90
    while not finished.exists():
        assert time.monotonic() < deadline, (runs / "policy.log").read_text()
        time.sleep(0.1)
    log = (runs / "policy.log").read_text()
    assert "policy off (2s, steps:4)" in log and "policy threshold:24 (3s, steps:8)" in log, log
    assert (runs / "load-threshold-24.log").exists(), sorted(runs.iterdir())
    assert not list(runs.glob("*=*")) and not list(runs.glob("*@*")), sorted(runs.iterdir())
