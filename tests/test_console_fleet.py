"""The console's Fleet page: AppTest over a real SQLite file filled through storage (rows, a replica that
stopped answering, fleet totals), and the fleet totals' arithmetic against the per-replica series."""

from __future__ import annotations

import time
from pathlib import Path

import pandas as pd
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
        "TTFT p99 ms",
        "ITL p99 ms",
        "knob",
        "owner",
        "speedup now",
        "accept length",
        "GPUs",
    } <= set(table.columns)
    assert table["status"].str.startswith("stopped answering since").all()  # nothing answers at 10.0.0.x
    assert table["output tok/s"].notna().all() and table["knob"].str.endswith("(as last collected)").all()
    # the synthetic p99s: TTFT 0.8 s + 10 ms a request, ITL 30 ms + 0.5 ms a request, here in ms
    assert table["TTFT p99 ms"].between(800, 1500).all() and table["ITL p99 ms"].between(30, 70).all()
    warnings = [w.value for w in at.warning]
    assert any("http://10.0.0.2:30000: stopped answering since" in w for w in warnings)
    assert any("Read-only" in w for w in warnings)  # no operator: no flip form
    at.selectbox(key="fl_fleet").set_value("All collected servers").run()
    assert len(at.dataframe[0].value) == 3


def test_a_replica_with_two_dp_ranks_drafts_by_one_ranks_batch_and_its_gpus_are_named_by_host(
    tmp_path: Path,
) -> None:
    """Two DP ranks of 20 running requests each under a knob of 24: each rank's batch is within the knob,
    so the replica drafts (the summed 40 is not one batch), and its tokens/s is both ranks'. Its GPUs are
    the ones collected on its URL's host, named by it."""
    from spectower.console.views import fleet as fleet_view
    from spectower.storage.models import EngineSample, GpuSample

    t0 = 1_000_000.0
    with open_database(f"sqlite:///{tmp_path / 'dp.db'}") as db:
        server = db.server_id("http://node-a:30000")
        writer = db.writer(maintenance=None)
        writer.put(*[EngineSample(server_id=server, dp_rank=rank, ts=t0 + i, num_running_reqs=20.0,
                                  output_tok_s=500.0, spec_max_bs=24)
                     for i in range(120) for rank in (0, 1)])  # fmt: skip
        for index, util in enumerate((40.0, 60.0)):
            gpu = db.gpu_id("node-a", index, f"GPU-a{index}")
            writer.put(GpuSample(gpu_id=gpu, ts=t0 + 119, gpu_util_pct=util))
        other = db.gpu_id("node-b", 0, "GPU-b0")
        writer.put(GpuSample(gpu_id=other, ts=t0 + 119, gpu_util_pct=99.0))
        assert writer.flush(30)
        totals = data.fleet_totals(db, [server], t0, t0 + 120, 10)
        latest = data.latest_engine(db, server)
        gpus = fleet_view._gpu_text(db, "http://node-a:30000")
    assert len(totals) >= 5 and set(totals["replicas_drafting"]) == {1}
    assert totals["output_tok_s"].tolist() == pytest.approx([1000.0] * len(totals))
    assert data.running_per_rank(latest) == 20.0
    assert gpus == "node-a: 2 GPUs 50 % (max 60 %)"


def test_a_gated_replicas_accept_length_reads_gated_as_the_overview_says() -> None:
    """The fleet's accept length column, as the Overview reads it: "gated" where the replica drafts nothing
    now (its 1.00 is no measurement), the value where it drafts, each DP rank's batch against the knob."""
    from spectower.console.views import fleet as fleet_view

    gated = {"num_running_reqs": 30.0, "dp_ranks": 1, "spec_max_bs": 16, "spec_accept_length": 1.0}
    assert fleet_view._accept_text(gated) == "gated"
    assert fleet_view._accept_text({**gated, "num_running_reqs": 30.0, "dp_ranks": 2}) == "1.00"
    drafting = {**gated, "num_running_reqs": 8.0, "spec_accept_length": 2.544}
    assert fleet_view._accept_text(drafting) == "2.54"
    assert fleet_view._accept_text(None) is None


def test_a_young_fleets_charts_start_where_its_data_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three replicas five minutes old under the page's hour: both fleet charts start near their first
    sample, as the Overview's charts of a young server do, where a fresh demo's fleet was a sliver at the
    right edge of the hour."""
    import json

    path = tmp_path / "young.db"
    now = time.time()
    with open_database(f"sqlite:///{path}") as db:
        synthetic.fill(db, t0=now - 300, t1=now, servers=3, gpus=1, step_s=2.0)
    monkeypatch.setenv("SPECTOWER_DB", f"sqlite:///{path}")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.chdir(tmp_path)
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.run()
    at.switch_page("pages/fleet.py").run()
    assert not at.exception, at.exception
    figures = [json.loads(chart.proto.spec) for chart in at.get("plotly_chart")]
    starts = [pd.Timestamp(fig["layout"]["xaxis"]["range"][0], tz="UTC").timestamp() for fig in figures]
    assert len(starts) == 2 and all(now - 400 < start < now - 250 for start in starts), starts
