"""`spectower control freeze-gc` (control/gc_freeze.py, console/commands/control_gc.py) against the wire
simulator, whose /freeze_gc freezes its one process as SGLang's does its launcher and scheduler, and whose
plugin blocks report the frozen objects as plugin 0.4.8 does: admin key, confirmation, read-back, audit."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from spectower.control.gc_freeze import check_readable, frozen_counts
from spectower.control.knob_state import KnobUnsupportedError, knob_state

from tests.test_control_cli import ADMIN_KEY, events, run_cli


@pytest.fixture
def fresh_sim(simulator_factory: Any) -> Any:
    """A simulator of this test's own: a freeze cannot be undone over the wire."""
    return simulator_factory(admin_key=ADMIN_KEY, dp_size=2)


def _frozen(sim: Any) -> dict[str, int | None]:
    info = httpx.get(f"{sim.base_url}/server_info", timeout=5).json()
    return frozen_counts(knob_state(info, sim.base_url))


def test_a_freeze_is_confirmed_by_read_back_and_audited(fresh_sim: Any, tmp_path: Path) -> None:
    db = tmp_path / "audit.db"
    before = run_cli(["get", "--server", fresh_sim.base_url])
    assert before.exit_code == 0 and "launcher (pid " in before.output and "nothing frozen" in before.output
    assert _frozen(fresh_sim) == {"launcher": 0, "rank 0": 0, "rank 1": 0}
    knob = json.loads(run_cli(["get", "--server", fresh_sim.base_url, "--json"]).stdout)["ranks"][0]
    done = run_cli(["freeze-gc", "--server", fresh_sim.base_url, "--reason", "launcher gc pauses", "--yes",
                    "--db", str(db), "--as", "dana"])  # fmt: skip
    assert done.exit_code == 0, done.output
    assert "frozen objects now: launcher 0, rank 0 0, rank 1 0" in done.output
    assert "frozen, confirmed by read-back: launcher 0 -> " in done.output
    after = _frozen(fresh_sim)
    assert all(count and count > 0 for count in after.values()), after
    (event,) = events(db)
    assert (event.action, event.actor, event.confirmed) == ("freeze-gc", "operator:dana", True)
    assert event.error is None
    assert event.old_max_bs == event.new_max_bs == knob["spec_max_bs"]  # the knob is not touched
    assert event.note.startswith("frozen objects: launcher 0 -> ")
    assert "Garbage collection frozen." in event.note
    shown = run_cli(["get", "--server", fresh_sim.base_url]).output
    assert "objects frozen" in shown and "/freeze_gc (after" not in shown
    listed = run_cli(["events", "--db", str(db)])
    assert "operator:dana freeze-gc ok" in listed.output


def test_without_the_admin_key_nothing_freezes_and_the_refusal_is_audited(
    fresh_sim: Any, tmp_path: Path
) -> None:
    db = tmp_path / "audit.db"
    refused = run_cli(["freeze-gc", "--server", fresh_sim.base_url, "--reason", "try", "--yes",
                       "--db", str(db)], key=None)  # fmt: skip
    assert refused.exit_code == 2
    lines = [line for line in refused.output.splitlines() if line.strip()]
    assert lines[-1].startswith("error: ") and "/freeze_gc" in lines[-1]
    assert "SPECTOWER_ADMIN_KEY" in lines[-1]
    assert "Traceback" not in refused.output
    assert _frozen(fresh_sim) == {"launcher": 0, "rank 0": 0, "rank 1": 0}
    (event,) = events(db)
    assert event.action == "freeze-gc" and not event.confirmed and event.error.startswith("not applied:")


def test_a_declined_confirmation_sends_nothing(fresh_sim: Any, tmp_path: Path) -> None:
    db = tmp_path / "audit.db"
    from spectower.console.cli import app
    from typer.testing import CliRunner

    declined = CliRunner().invoke(app, ["control", "freeze-gc", "--server", fresh_sim.base_url, "--reason",
                                        "maybe", "--db", str(db)], input="n\n",
                                  env={"SPECTOWER_ADMIN_KEY": ADMIN_KEY})  # fmt: skip
    assert declined.exit_code == 1 and "not frozen" in declined.output
    assert _frozen(fresh_sim) == {"launcher": 0, "rank 0": 0, "rank 1": 0}
    assert not db.exists() or events(db) == []


def test_a_server_that_cannot_report_frozen_objects_is_refused_before_the_send(real_data: Path) -> None:
    """A real 0.5.17 capture from a plugin before 0.4.8: no launcher block, no frozen count."""
    capture = real_data / "sglang-0.5.17-h200" / "server_info_after.json"
    info = json.loads(capture.read_text(encoding="utf-8"))
    state = knob_state(info, "http://127.0.0.1:30000")
    assert frozen_counts(state) == {"rank 0": None}
    with pytest.raises(KnobUnsupportedError, match="does not report its frozen objects"):
        check_readable(state)
