"""The console's reads (spectower.console.data) on a real SQLite file filled through storage."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from spectower.console import data, synthetic
from spectower.storage import Database, open_database
from spectower.storage.models import EngineSample


@pytest.fixture
def db(tmp_path: Path) -> Database:
    store = open_database(f"sqlite:///{tmp_path / 'd.db'}")
    now = time.time()
    synthetic.fill(store, t0=now - 7200, t1=now, servers=1, gpus=2, step_s=1.0, knob_period_s=300)
    yield store
    store.close()


def test_open_store_does_not_create_a_missing_file(tmp_path: Path) -> None:
    assert data.open_store(f"sqlite:///{tmp_path / 'missing.db'}") is None
    assert not (tmp_path / "missing.db").exists()


@pytest.mark.parametrize("max_points", [10, 100, 600])
def test_series_are_bounded(db: Database, max_points: int) -> None:
    now = time.time()
    s = data.engine_series(db, 1, now - 7200, now, ["output_tok_s", "num_running_reqs"], max_points)
    assert 2 <= len(s) <= max_points
    assert (s["output_tok_s_min"] <= s["output_tok_s"]).all() and (
        s["output_tok_s"] <= s["output_tok_s_max"]
    ).all()
    g = data.gpu_series(db, [1, 2], now - 7200, now, ["gpu_util_pct"], max_points)
    assert set(g["gpu_id"]) == {1, 2}
    assert g.groupby("gpu_id").size().max() <= max_points


def test_latest_engine_sums_dp_ranks(db: Database) -> None:
    now = time.time() + 1
    with db.session() as s:
        for rank in (0, 1):
            s.add(EngineSample(server_id=1, dp_rank=rank, ts=now, num_running_reqs=10, output_tok_s=100,
                               spec_accept_length=2.0 + rank, spec_max_bs=32))  # fmt: skip
    got = data.latest_engine(db, 1)
    assert got is not None
    assert got["num_running_reqs"] == 20 and got["output_tok_s"] == 200  # additive: summed
    assert got["spec_accept_length"] == pytest.approx(2.5)  # the rest: averaged
    assert got["dp_ranks"] == 2


def test_speedup_bins_split_by_active_speculation(db: Database) -> None:
    now = time.time()
    bins = data.speedup_bins(db, 1, now - 7200, now, 64)
    t = bins.table
    assert not t.empty and (t["n_on"] > 0).any() and (t["n_off"] > 0).any()
    ok = t.dropna(subset=["speedup"])
    low = ok[ok["concurrency"] < 6]["speedup"]
    high = ok[ok["concurrency"] > 40]["speedup"]
    # the profile: speculation wins at low load and loses at high load; the estimate must see it
    assert (low > 1.0).all() and (high < 1.0).all()


def test_control_events_filters(db: Database) -> None:
    now = time.time()
    synthetic.add_policy_events(db, "http://10.0.0.1:30000", now - 600, now, 120, 64)
    ev = data.control_events(db, server_url="http://10.0.0.1:30000", actor_prefix="policy:")
    assert len(ev) == 6 and set(ev["actor"]) == {"policy:learn"}
    assert data.control_events(db, actor_prefix="operator:").empty
    assert len(data.control_events(db, t0=now - 250)) == 3


def test_engine_series_sums_dp_ranks(tmp_path: Path) -> None:
    store = open_database(f"sqlite:///{tmp_path / 'dp.db'}")
    now = time.time()
    sid = store.server_id("http://dp")
    with store.session() as s:
        for i in range(120):
            for rank in (0, 1):
                tok_s, accept = 100.0 * (rank + 1), 2.0 + rank
                s.add(EngineSample(server_id=sid, dp_rank=rank, ts=now - 120 + i, output_tok_s=tok_s,
                                   spec_accept_length=accept))  # fmt: skip
    series = data.engine_series(store, sid, now - 120, now, ["output_tok_s", "spec_accept_length"], 20)
    store.close()
    assert len(series) >= 2
    assert series["output_tok_s"].tolist() == pytest.approx([300.0] * len(series))  # 100 + 200, not 150
    assert series["spec_accept_length"].tolist() == pytest.approx([2.5] * len(series))
