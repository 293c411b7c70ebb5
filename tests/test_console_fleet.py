"""The console's Fleet page: AppTest over a real SQLite file filled through storage (rows, a replica that
stopped answering, fleet totals), and the fleet totals' arithmetic against the per-replica series."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from spectower.console import data
from spectower.storage import open_database
from streamlit.testing.v1 import AppTest

from benchmarks import synthetic

APP = str(Path(__file__).resolve().parents[1] / "console" / "app.py")
TIMEOUT = 120


@pytest.fixture
def filled(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Three synthetic replicas (http://10.0.0.1-3:30000, none of which answers here), 30 min of history."""
    path = tmp_path / "fleet.db"
    now = time.time()
    with open_database(f"sqlite:///{path}") as db:
        synthetic.fill(db, t0=now - 1800, t1=now, servers=3, gpus=2, step_s=2.0, knob_period_s=300)
    for var in ("SPECTOWER_ADMIN_KEY", "SPECTOWER_ADMIN_KEY_FILE", "SPECTOWER_OPERATOR"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("SPECTOWER_DB", f"sqlite:///{path}")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.chdir(tmp_path)
    return path


def test_fleet_totals_sum_the_replicas_and_count_those_drafting(filled: Path) -> None:
    now = time.time()
    with open_database(f"sqlite:///{filled}") as db:
        ids = [int(i) for i in data.servers(db)["id"]]
        totals = data.fleet_totals(db, ids, now - 1200, now - 600, 20)
        one = [data.engine_series(db, i, now - 1200, now - 600, ["output_tok_s"], 20) for i in ids]
    # storage picks the tier (raw or the 1-minute rollups): at most 20 buckets, each with every replica
    assert 5 <= len(totals) <= 20 and set(totals["replicas_reporting"]) == {3}
    assert totals["replicas_drafting"].between(0, 3).all()
    # every replica's mean over the window, summed, is the fleet's mean over it (equal buckets)
    assert abs(totals["output_tok_s"].mean() - sum(f["output_tok_s"].mean() for f in one)) < 0.05 * sum(
        f["output_tok_s"].mean() for f in one
    )


def test_the_fleet_page_shows_one_row_per_replica_and_since_when_one_stopped(filled: Path) -> None:
    (filled.parent / "spectower.toml").write_text(
        '[fleets.prod]\nservers = ["http://10.0.0.1:30000", "http://10.0.0.2:30000"]\n'
    )
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.run()
    at.switch_page("pages/fleet.py").run()
    assert not at.exception, at.exception
    assert at.selectbox(key="fl_fleet").options == ["prod", "All collected servers"]
    table = at.dataframe[0].value
    assert list(table["replica"]) == ["http://10.0.0.1:30000", "http://10.0.0.2:30000"]
    assert {
        "output tok/s",
        "running",
        "queued",
        "knob",
        "owner",
        "speedup now",
        "accept length",
        "GPUs",
    } <= set(table.columns)
    assert table["status"].str.startswith("stopped answering since").all()  # nothing answers at 10.0.0.x
    assert table["output tok/s"].notna().all() and table["knob"].str.endswith("(as last collected)").all()
    warnings = [w.value for w in at.warning]
    assert any("http://10.0.0.2:30000: stopped answering since" in w for w in warnings)
    assert any("Read-only" in w for w in warnings)  # no operator: no flip form
    at.selectbox(key="fl_fleet").set_value("All collected servers").run()
    assert len(at.dataframe[0].value) == 3
