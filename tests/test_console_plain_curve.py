"""The Speculation page draws a sweep's plain-server curve beside spec on / knob off (AppTest, SQLite)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from spectower.collectors.bench.persist import to_models
from spectower.storage import open_database
from streamlit.testing.v1 import AppTest

from benchmarks import synthetic
from tests.test_bench_plain_results import _result

APP = str(Path(__file__).resolve().parents[1] / "console" / "app.py")
TIMEOUT = 120


@pytest.fixture(autouse=True)
def _no_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("SPECTOWER_ADMIN_KEY", "SPECTOWER_ADMIN_KEY_FILE", "SPECTOWER_OPERATOR"):
        monkeypatch.delenv(var, raising=False)


def test_speculation_page_shows_on_off_and_plain(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    now = time.time()
    with open_database(url) as db:
        synthetic.fill(db, t0=now - 600, t1=now, servers=1, gpus=1, step_s=5.0, knob_period_s=120)
        db.save_bench_run(*to_models(_result()))
    monkeypatch.setenv("SPECTOWER_DB", url)
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.run()
    at.switch_page("pages/speculation.py")
    at.run()
    assert not at.exception, [e.value for e in at.exception]

    names = set()
    for chart in at.get("plotly_chart"):
        spec = json.loads(chart.proto.spec)
        names |= {str(t.get("name")) for t in spec.get("data", [])}
    assert any(n.endswith("on / plain") for n in names), names  # on / plain beside on / off
    tables = [df.value for df in at.dataframe]
    three = next(t for t in tables if "plain tok/s" in t.columns)
    assert list(three["concurrency"]) == [1, 16, 64]
    row16 = three[three["concurrency"] == 16].iloc[0]
    assert row16["knob off tok/s"] == pytest.approx(2042.3) and row16["plain tok/s"] == pytest.approx(3063.9)
    assert row16["off / plain"] == pytest.approx(2042.3 / 3063.9)
