"""The Control page against the REAL simulator subprocess: confirm, read-back shown, audit row written."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from spectower.storage import open_database, queries
from spectower.storage.models import ControlEvent, EngineSample
from sqlmodel import select
from streamlit.testing.v1 import AppTest

from benchmarks.simulator_process import scaled_profile

REPO_ROOT = Path(__file__).resolve().parents[1]
APP = str(REPO_ROOT / "console" / "app.py")
GLM5 = "glm5-nvfp4-8x-rtx-pro-6000"  # the simulator's default profile
ADMIN_KEY = "console-test-admin-key"
TIMEOUT = 120


def _server_knob(sim: Any) -> int:
    info = httpx.get(f"{sim.base_url}/server_info", timeout=10).json()
    values = {state["spectower"]["spec_max_bs"] for state in info["internal_states"]}
    assert len(values) == 1
    return int(values.pop())


@pytest.fixture
def sim_db(tmp_path: Path, simulator_factory: Any) -> tuple[Any, str]:
    return _with_db(simulator_factory(admin_key=ADMIN_KEY), tmp_path)


@pytest.fixture
def fast_sim_db(tmp_path: Path, simulator_factory: Any) -> tuple[Any, str]:
    """``sim_db`` with glm5's profile served three times as fast: a sweep's requests (256 tokens, the
    page's default) end in a third of the time, and the sweep in about half."""
    sim = simulator_factory(profile=scaled_profile(GLM5, 3, tmp_path), admin_key=ADMIN_KEY)
    return _with_db(sim, tmp_path)


def _with_db(sim: Any, tmp_path: Path) -> tuple[Any, str]:
    url = f"sqlite:///{tmp_path / 'c.db'}"
    now = time.time()
    with open_database(url) as db:
        sid = db.server_id(sim.base_url, ts=now, max_running_requests=64, served_model_name="glm-5-nvfp4",
                           speculative_algorithm="EAGLE3")  # fmt: skip
        with db.session() as s:
            s.add(EngineSample(server_id=sid, ts=now, num_running_reqs=3, num_queue_reqs=0, output_tok_s=250,
                               spec_max_bs=_server_knob(sim), spec_num_steps=3))  # fmt: skip
    return sim, url


def _control(url: str, monkeypatch: pytest.MonkeyPatch, key: str | None, operator: str | None) -> AppTest:
    monkeypatch.setenv("SPECTOWER_DB", url)
    for var, value in (("SPECTOWER_ADMIN_KEY", key), ("SPECTOWER_OPERATOR", operator)):
        if value is None:
            monkeypatch.delenv(var, raising=False)
        else:
            monkeypatch.setenv(var, value)
    monkeypatch.delenv("SPECTOWER_ADMIN_KEY_FILE", raising=False)
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.run()
    at.switch_page("pages/control.py")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def _events(url: str) -> list[ControlEvent]:
    with open_database(url) as db, db.session() as s:
        return list(
            s.exec(select(ControlEvent).where(ControlEvent.action == "set").order_by(ControlEvent.id))
        )


def _confirm(at: AppTest, mode: str, reason: str, n: int | None = None) -> None:
    at.radio(key="ctl_mode").set_value(mode).run()
    if n is not None:
        at.number_input(key="ctl_n").set_value(n).run()
    at.text_input(key="ctl_reason").input(reason).run()
    at.button(key="ctl_review").click().run()
    assert not at.exception, [e.value for e in at.exception]
    at.button(key="ctl_confirm").click().run()
    assert not at.exception, [e.value for e in at.exception]


@pytest.mark.integration
def test_operator_flips_speculation_off_and_sees_read_back(
    sim_db: tuple[Any, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    sim, url = sim_db
    before = _server_knob(sim)
    assert before > 0
    at = _control(url, monkeypatch, ADMIN_KEY, "alice")
    assert any("operator:alice" in s.value for s in at.success)
    _confirm(at, "off", "incident 7: p99 ITL too high at peak")
    # the page shows the server's read-back ...
    assert any("Confirmed by read-back" in s.value and "**0**" in s.value for s in at.success), [
        s.value for s in at.success
    ]
    # the headline shows the read-back before the collector has recorded it
    assert any("read back from the server just now" in m.value and ">OFF<" in m.value for m in at.markdown)
    # ... which is what the simulator really holds now ...
    assert _server_knob(sim) == 0
    # ... and the audit row is written, and listed under the form
    events = _events(url)
    assert len(events) == 1
    ev = events[0]
    assert (ev.actor, ev.old_max_bs, ev.new_max_bs, ev.confirmed) == ("operator:alice", before, 0, True)
    assert ev.reason == "incident 7: p99 ITL too high at peak"
    assert ADMIN_KEY not in (ev.per_rank_json or "") + (ev.error or "") + ev.reason
    audit = at.dataframe[-1].value
    assert "operator:alice" in set(audit["actor"])
    # a confirmed set has no error: the lock it took is its note (#34)
    row = audit[audit["actor"] == "operator:alice"].iloc[0]
    assert row["error"] is None and row["note"] == "manual lock until released", row.to_dict()
    # who holds the server's lock, and since when: the audit row of the set that took it (#34)
    at.run()
    text = " ".join(m.value for m in at.markdown)
    assert "**Held by:** `operator:alice` since " in text and "(incident 7: p99 ITL too high at peak)" in text


@pytest.mark.integration
def test_operator_sets_a_threshold(sim_db: tuple[Any, str], monkeypatch: pytest.MonkeyPatch) -> None:
    sim, url = sim_db
    at = _control(url, monkeypatch, ADMIN_KEY, "bob")
    _confirm(at, "threshold N", "crossover moved after the CUDA upgrade", n=24)
    assert _server_knob(sim) == 24
    assert any("Confirmed by read-back" in s.value and "**24**" in s.value for s in at.success)
    assert [(e.new_max_bs, e.confirmed) for e in _events(url)] == [(24, True)]


@pytest.mark.integration
def test_wrong_key_is_refused_shown_and_audited(
    sim_db: tuple[Any, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    sim, url = sim_db
    before = _server_knob(sim)
    at = _control(url, monkeypatch, "not-the-key", "mallory")
    _confirm(at, "off", "testing a wrong key")
    assert any("Not confirmed" in e.value for e in at.error), [e.value for e in at.error]
    assert _server_knob(sim) == before  # nothing applied
    events = _events(url)
    assert len(events) == 1 and events[0].confirmed is False and events[0].error
    assert "not-the-key" not in events[0].error


@pytest.mark.integration
def test_a_hold_the_cli_refuses_is_refused_on_the_page_too(
    sim_db: tuple[Any, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`control set --hold 30` is refused (a bare number is seconds: a lock over before anyone reads it
    back); the page's Hold field takes the same range, and nothing reaches the server."""
    sim, url = sim_db
    before = _server_knob(sim)
    at = _control(url, monkeypatch, ADMIN_KEY, "alice")
    at.radio(key="ctl_mode").set_value("off").run()
    at.text_input(key="ctl_reason").input("incident 4711").run()
    at.text_input(key="ctl_hold").input("30").run()
    at.button(key="ctl_review").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert [e.value for e in at.error] == ["Hold must be between 1m and 720h, got '30'"]
    assert not [b for b in at.button if b.key == "ctl_confirm"]  # nothing to confirm
    assert _server_knob(sim) == before and _events(url) == []


@pytest.mark.integration
def test_read_only_mode_cannot_act(sim_db: tuple[Any, str], monkeypatch: pytest.MonkeyPatch) -> None:
    sim, url = sim_db
    at = _control(url, monkeypatch, None, None)
    assert any("Read-only" in w.value for w in at.warning)
    assert not [b for b in at.button if b.key in ("ctl_review", "ctl_confirm")]
    # reading the live value is still allowed (no key needed for /server_info)
    at.button(key="ctl_read").click().run()
    assert any(m.label == "Live spec_max_bs" and m.value == str(_server_knob(sim)) for m in at.metric)
    assert _events(url) == []


@pytest.mark.integration
def test_benchmarks_page_starts_a_sweep_and_shows_progress(
    fast_sim_db: tuple[Any, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    sim, url = fast_sim_db
    at = _control(url, monkeypatch, ADMIN_KEY, "carol")
    at.switch_page("pages/benchmarks.py")
    at.run()
    at.radio(key="bench_section").set_value("Start a sweep").run()
    at.text_input(key="sw_server").input(sim.base_url).run()
    at.text_input(key="sw_levels").input("1,4").run()
    at.number_input(key="sw_dur").set_value(2).run()
    at.text_input(key="sw_tag").input("from-the-page").run()
    at.button(key="sw_start").click().run()
    assert not at.exception, [e.value for e in at.exception]
    job = at.session_state["sweep_job"]
    assert ADMIN_KEY not in " ".join(job.argv)  # the key travels in the environment only
    deadline = time.time() + 240
    while job.poll() is None and time.time() < deadline:
        time.sleep(0.2)
    assert job.poll() == 0, job.tail(40)
    at.run()
    assert any("Sweep finished" in s.value for s in at.success), [s.value for s in at.success] + [job.tail()]
    with open_database(url) as db:
        runs = queries.bench_runs(db)
    assert [r.tag for r in runs] == ["from-the-page"], job.tail(40)


def _post(sim: Any, args: dict[str, Any]) -> list[bool]:
    url = f"{sim.base_url}/set_internal_state"
    return httpx.post(url, json={"server_args": args}, headers={"Authorization": f"Bearer {ADMIN_KEY}"},
                      timeout=10).json()  # fmt: skip


@pytest.mark.integration
def test_the_page_shows_the_servers_truth_and_release_clears_the_lock(
    sim_db: tuple[Any, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lock taken elsewhere (another database, another console) is shown from the server; the form starts
    at the server's state; Release is offered and the page shows the new state at once; yes/no booleans."""
    sim, url = sim_db
    held = {"spectower_writer": 1, "spectower_spec_max_bs": 24, "spectower_hold_s": 7200}
    assert _post(sim, held) == [True]
    assert _post(sim, {"spectower_writer": 2, "spectower_spec_max_bs": 3}) == [False]  # a policy refused
    at = _control(url, monkeypatch, ADMIN_KEY, "dana")
    text = " ".join(m.value for m in at.markdown)
    assert "manual lock since" in text and "left" in text, text
    assert "**Held by:** unknown: no set of this lock in this database's audit" in text, text
    assert "Policy's last decision:** set 3" in text and "refused by the server" in text
    # each rank's output stalls (plugin 0.4.7), which the simulator's ranks publish as the plugin does
    assert "**Output stalls, rank 0:** no gap between results >= 0.25 s in" in text, text
    # and its exploration, paused by the lock (0.4.12's window counts: the simulator's are the plugin's)
    assert ("**Exploration, rank 0:** 2.0% of each bin's batches, paused (a lock holds the knob); no "
            "exploring window among gated batches yet") in text, text  # fmt: skip
    assert "held back" not in text, text  # nothing held back yet: said in no words
    # and the launcher's collections (plugin 0.4.8), once: the simulator's one process is its launcher too
    assert text.count("**Launcher:** launcher (pid ") == 1, text
    assert any(m.label == "Owner" and m.value == "manual" for m in at.metric)
    assert at.radio(key="ctl_mode").value == "threshold N" and at.number_input(key="ctl_n").value == 24
    at.text_input(key="ctl_release_reason").input("incident over").run()
    at.button(key="ctl_release").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert any("Released, confirmed by read-back" in s.value and "**policy**" in s.value for s in at.success)
    assert any(m.label == "Owner" and m.value == "policy" for m in at.metric)  # no reload needed
    assert not [b for b in at.button if b.key == "ctl_release"]  # no lock: nothing to release
    audit = at.dataframe[-1].value
    assert list(audit["action"])[:1] == ["release"] and set(audit["confirmed"]) <= {"yes", "no"}


@pytest.mark.integration
def test_the_suggested_policy_command_runs_as_printed(
    sim_db: tuple[Any, str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import os
    import signal
    import subprocess

    from spectower.console.views.control import policy_command

    sim, url = sim_db
    key_file = tmp_path / "admin key"  # a path with a space: the command must quote it
    key_file.write_text(ADMIN_KEY + "\n")
    key_file.chmod(0o600)
    at = _control(url, monkeypatch, ADMIN_KEY, "erin")
    monkeypatch.setenv("SPECTOWER_ADMIN_KEY_FILE", str(key_file))  # the console's own key file
    at.radio(key="ctl_mode").set_value("learn").run()
    (shown,) = [c.value for c in at.code]
    assert shown == policy_command(sim.base_url, url, str(key_file))
    assert "--policy learn" in shown and ADMIN_KEY not in shown
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPECTOWER_")}
    proc = subprocess.Popen(["bash", "-c", shown], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)  # fmt: skip
    try:
        assert proc.stdout is not None
        # learn says where it starts (the warm start, issue #32), then the runner announces itself once it
        # has read the server
        first, second = proc.stdout.readline(), proc.stdout.readline()
        assert first.startswith("warm start: "), first + second
        assert f"policy learn on {sim.base_url}" in second, first + second + proc.stdout.read(2000)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)


@pytest.mark.integration
def test_an_operator_freezes_the_collectors_from_the_page(
    sim_db: tuple[Any, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Plugin 0.4.8's launcher block says nothing is frozen: the page offers SGLang's /freeze_gc, refuses it
    without a reason, then freezes, shows the read-back, writes the audit row and offers it no more; the
    knob is not touched. A reader without the admin key is offered nothing."""
    sim, url = sim_db
    knob = _server_knob(sim)
    reader = _control(url, monkeypatch, None, "reader")
    assert not [b for b in reader.button if b.key == "ctl_freeze"]
    at = _control(url, monkeypatch, ADMIN_KEY, "erin")
    at.button(key="ctl_freeze").click().run()
    assert any("Reason: required" in e.value for e in at.error)
    at.text_input(key="ctl_freeze_reason").input("launcher gc pauses in the TTFT tail").run()
    at.button(key="ctl_freeze").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert any("Frozen, confirmed by read-back" in s.value for s in at.success), [s.value for s in at.success]
    assert not [b for b in at.button if b.key == "ctl_freeze"]  # frozen now: nothing to offer
    assert "objects frozen" in " ".join(m.value for m in at.markdown)
    assert _server_knob(sim) == knob
    with open_database(url) as db, db.session() as s:
        (event,) = s.exec(select(ControlEvent).where(ControlEvent.action == "freeze-gc")).all()
    assert event.confirmed and event.actor == "operator:erin" and event.old_max_bs == event.new_max_bs == knob


@pytest.mark.integration
def test_the_page_says_why_the_policy_holds(sim_db: tuple[Any, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """A running policy's last line (its runner stores it: control/runner.py) is on the page, so the reason
    a knob does not move is there without the policy's terminal."""
    sim, url = sim_db
    now = time.time()
    said = "hold: would move the ceiling 16 -> 4 (crossover ~3.3 (1.8-9.1)), but the change limit applies"
    with open_database(url) as db:
        queries.save_policy_state(db, sim.base_url, mode="learn", state_json="{}", ts=now - 4)
        queries.save_policy_said(db, sim.base_url, said=said, ts=now - 40)
    at = _control(url, monkeypatch, key=None, operator=None)
    shown = " ".join(m.value for m in at.markdown)
    assert "**Policy learn says** (its last step " in shown and f": {said}" in shown, shown


def test_a_policy_whose_runner_stopped_stepping_is_said_to_have_said_it() -> None:
    from spectower.console.views.control import policy_says_text

    said = {"mode": "learn", "said": "hold: counters too thin", "said_ts": 1000.0, "updated_ts": 1000.0}
    fresh = policy_says_text(said, now=1004.0)
    assert fresh.startswith("**Policy learn says** (its last step 4 s ago), since "), fresh
    stale = policy_says_text(said, now=1000.0 + 720)
    assert stale.startswith("**Policy learn said** (its last step 12 min ago: is `spectower control auto`")
    assert stale.endswith(": hold: counters too thin")
