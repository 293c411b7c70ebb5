"""The console's reads (spectower.console.data) on a real SQLite file filled through storage."""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from spectower.console import data
from spectower.control import speedup
from spectower.storage import Database, open_database, queries
from spectower.storage.models import EngineSample
from sqlalchemy import text
from sqlalchemy.exc import OperationalError

from benchmarks import synthetic
from tests import console_reference as reference
from tests.conftest import examples


@pytest.fixture(scope="module")
def _two_hours(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two hours of one server and two GPUs at 1 s, filled once per module (a fill costs a second of CPU);
    each test gets its own copy. Aged by at most the module's run: the reads below take their windows from
    the clock and ask for less than the two hours."""
    path = tmp_path_factory.mktemp("console-data") / "d.db"
    store = open_database(f"sqlite:///{path}")
    now = time.time()
    synthetic.fill(store, t0=now - 7200, t1=now, servers=1, gpus=2, step_s=1.0, knob_period_s=300)
    store.close()
    return path


@pytest.fixture
def db(_two_hours: Path, tmp_path: Path) -> Iterator[Database]:
    copy = tmp_path / "d.db"
    shutil.copyfile(_two_hours, copy)
    store = open_database(f"sqlite:///{copy}")
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


def _empty_store(tmp_path: Path) -> Database:
    """A database with one server and no samples."""
    store = open_database(f"sqlite:///{tmp_path / 'empty.db'}")
    synthetic.fill(store, t0=0.0, t1=0.0, servers=1, gpus=0, step_s=1.0)
    with store.session() as s:
        s.execute(text("DELETE FROM engine_sample"))
        s.commit()
    return store


def test_latest_engine_sums_dp_ranks(tmp_path: Path) -> None:
    db = _empty_store(tmp_path)
    now = time.time() + 1
    with db.session() as s:
        for rank in (0, 1):
            s.add(EngineSample(server_id=1, dp_rank=rank, ts=now, num_running_reqs=10, output_tok_s=100,
                               spec_accept_length=2.0 + rank, spec_max_bs=32))  # fmt: skip
        s.commit()
    got = data.latest_engine(db, 1)
    assert got is not None
    assert got["num_running_reqs"] == 20 and got["output_tok_s"] == 200  # additive: summed
    assert got["spec_accept_length"] == pytest.approx(200 / (100 / 2 + 100 / 3))  # tokens over verify steps
    assert got["dp_ranks"] == 2


def test_latest_engine_reads_its_rates_over_the_last_seconds_each_sample_by_the_seconds_it_covers(
    tmp_path: Path,
) -> None:
    """The rates an operator reads as "now" are each rank's over the last ``NOW_RATE_WINDOW_S``: 1-s samples
    alternating 0 and 2 000 tok/s read 1 000, where the newest alone read 2 000; a sample after a 4-s gap
    covers those 4 s; a rank with a single sample gives its own; a rate the newest sample lacks is no data;
    gauges stay the newest sample's."""
    db = _empty_store(tmp_path)
    end = time.time()
    with db.session() as s:
        for k in range(30):  # rank 0: 1-s samples up to ``end``, the output alternating, the prefill steady
            ts = end - 29 + k
            s.add(EngineSample(server_id=1, dp_rank=0, ts=ts, output_tok_s=2000.0 * (k % 2),
                               prefill_tok_s=300.0, request_rate=None if k == 29 else 4.0,
                               num_running_reqs=k))  # fmt: skip
        s.add(EngineSample(server_id=1, dp_rank=1, ts=end - 2, output_tok_s=50.0))  # one sample: its own
        s.commit()
    got = data.latest_engine(db, 1)
    assert got is not None and got["rate_window_s"] == data.NOW_RATE_WINDOW_S == 10.0
    assert got["output_tok_s"] == pytest.approx(1000.0 + 50.0)  # the newest alone: 2 000 + 50
    assert got["prefill_tok_s"] == pytest.approx(300.0)
    assert got["request_rate"] is None  # the newest has none: no data, not the seconds before
    assert got["num_running_reqs"] == 29  # a gauge: the newest sample's
    # a 4-s gap before the newest sample: its rate covers those 4 s of the window's 10
    with db.session() as s:
        s.add(EngineSample(server_id=1, dp_rank=0, ts=end + 4, output_tok_s=500.0, num_running_reqs=3))
        s.commit()
    got = data.latest_engine(db, 1)
    assert got is not None and got["dp_ranks"] == 1  # rank 1's sample is 6 s older than the newest
    # (end+4) - 10 = end-6: samples end-5 ... end (6 s, 3 at 2 000) then 4 s at 500
    assert got["output_tok_s"] == pytest.approx((3 * 2000.0 + 4 * 500.0) / 10)


def test_live_speedup_is_the_counters_estimate(db: Database) -> None:
    now = time.time()
    live = data.live_speedup(db, 1, now - 3600, now)
    assert live.has_counters and live.estimate.intervals > 0
    t = live.measured
    assert not t.empty and list(t.columns) == list(data.LIVE_TABLE_COLUMNS)
    # the profile: speculation wins at low load and loses at high load; the estimate must see it
    assert (t[t["batch_size"] <= 4]["speedup"] > 1.0).all() and (
        t[t["batch_size"] >= 32]["speedup"] < 1.0
    ).all()
    assert (t["lo"] <= t["speedup"]).all() and (t["speedup"] <= t["hi"]).all()
    est = live.estimate
    assert est.status == "found" and est.crossover is not None and 8 < est.crossover < 32
    assert est.crossover_lo is not None and est.crossover_hi is not None
    assert est.crossover_lo <= est.crossover <= est.crossover_hi
    # exactly the one estimator over the stored intervals (what control get and the policy compute)
    assert est == speedup.estimate(queries.counter_intervals(db, 1, now - 3600, now))
    assert live.table is live.table  # built once a refresh, however often the page reads it


def test_live_speedup_of_a_server_without_counters(db: Database) -> None:
    sid = db.server_id("http://old-plugin:30000")
    now = time.time()
    with db.session() as s:
        s.add(EngineSample(server_id=sid, ts=now, num_running_reqs=3.0, output_tok_s=100.0))
    live = data.live_speedup(db, sid, now - 3600, now)
    assert not live.has_counters and live.estimate.label == "not enough data" and live.table.empty
    # a server with counters, but none in this window: it has them, just not enough data here
    old = data.live_speedup(db, 1, now - 10 * 86400, now - 9 * 86400)
    assert old.has_counters and old.estimate.status == "no_data"


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


def test_no_rows_is_an_empty_frame(tmp_path: Path) -> None:
    store = open_database(f"sqlite:///{tmp_path / 'empty.db'}")
    try:
        assert data.servers(store).empty and "url" in data.servers(store).columns
        assert data.latest_gpu(store).empty and data.bench_runs(store).empty
        assert data.bench_points(store, [1]).empty and data.gpu_processes(store, [1], 0.0).empty
        assert data.control_events(store).empty and data.last_setter(store, "http://x") is None
        assert data.latest_engine(store, 1) is None
    finally:
        store.close()


def test_a_database_error_is_raised_not_an_empty_frame(db: Database) -> None:
    """The old reads turned any error into an empty frame: a broken database looked like "no data"."""
    with db.engine.begin() as conn:
        conn.execute(text("DROP TABLE control_event"))
    with pytest.raises(OperationalError, match="control_event"):
        data.control_events(db)


def test_latest_gpu_joins_every_gpu_with_its_newest_sample(db: Database) -> None:
    spare = db.gpu_id("node-b", 0, "GPU-spare", name="spare")  # no sample yet: still listed
    inv = data.latest_gpu(db)
    assert list(inv.columns[:6]) == ["gpu_id", "host", "gpu_index", "name", "source", "uuid"]
    assert set(inv["gpu_id"]) == {1, 2, spare}
    have = inv[inv["gpu_id"] != spare]
    assert have["ts"].notna().all() and inv[inv["gpu_id"] == spare]["ts"].isna().all()
    newest = {s.gpu_id: s.ts for s in queries.latest_gpu_samples(db)}
    assert dict(zip(have["gpu_id"], have["ts"], strict=True)) == newest


def test_bench_frames_count_and_order_points(db: Database) -> None:
    rid = synthetic.add_bench_run(db, synthetic.DEFAULT_PROFILE, time.time(), "t")
    runs = data.bench_runs(db)
    (row,) = runs[runs["id"] == rid].itertuples()
    points = data.bench_points(db, [rid])
    assert row.points == len(points) > 0
    keys = list(zip(points["concurrency"], points["spec_on"], strict=True))
    assert keys == sorted(keys)
    assert data.last_setter(db, "http://nowhere") is None


def test_accept_over_dp_ranks_is_all_tokens_over_all_steps_and_an_idle_rank_does_not_pull_it_down() -> None:
    def combined(*ranks: tuple[float | None, float | None, float | None]) -> dict[str, Any]:
        rows = [EngineSample(server_id=1, dp_rank=r, ts=1000.0, output_tok_s=tok, spec_accept_length=a,
                             spec_accept_rate=rate) for r, (tok, a, rate) in enumerate(ranks)]  # fmt: skip
        row = data.combine_ranks(data._frame(rows, EngineSample))
        assert row is not None
        return row

    idle = combined((900.0, 3.0, 0.6), (0.0, 1.0, 0.0))  # rank 1 idle: it verified nothing
    assert idle["spec_accept_length"] == pytest.approx(3.0) and idle["spec_accept_rate"] == pytest.approx(0.6)
    busy = combined((100.0, 2.0, 0.4), (300.0, 3.0, 0.8))  # 50 + 100 steps made 400 tokens
    assert busy["spec_accept_length"] == pytest.approx(400 / 150)
    assert busy["spec_accept_rate"] == pytest.approx((0.4 * 50 + 0.8 * 100) / 150)
    unknown = combined((None, 2.0, None), (None, 3.0, None))  # no output figure: the plain mean stands
    assert unknown["spec_accept_length"] == pytest.approx(2.5)


@settings(max_examples=examples(150), deadline=None, derandomize=True, database=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from([0.0, -1.0, -4.9, -5.0, -7.0]),  # each rank's newest, relative to the newest
            st.one_of(st.none(), st.floats(-1e6, 1e6)),
            st.one_of(st.none(), st.floats(-1e6, 1e6)),
            st.one_of(st.none(), st.integers(0, 2**40)),
        ),
        min_size=1,
        max_size=12,
    )
)
def test_ranks_combine_as_the_pandas_definition(ranks: list[tuple[float, Any, Any, Any]]) -> None:
    rows = [
        EngineSample(server_id=1, dp_rank=r, ts=1000.0 + age, output_tok_s=tok, spec_accept_length=accept,
                     batches_drafted=drafted)
        for r, (age, tok, accept, drafted) in enumerate(ranks)
    ]  # fmt: skip
    frame = data._frame(rows, EngineSample)
    assert data.combine_ranks(frame) == reference.combine_ranks(frame)


def test_gated_reason_compares_the_knob_with_one_dp_ranks_batch() -> None:
    """Two DP ranks of 20 running requests under a knob of 24 draft (each rank's batch is 20): the summed 40
    read as gated. Ranks of 30 run gated, and the line says per DP rank."""
    two = {"num_running_reqs": 40.0, "dp_ranks": 2, "spec_max_bs": 24, "spec_num_steps": 3}
    assert data.gated_reason(two) is None
    assert data.gated_reason({**two, "num_running_reqs": 60.0}) == (
        "30 running requests per DP rank > knob 24, so batches run without drafting")
    one = {"num_running_reqs": 30.0, "dp_ranks": 1, "spec_max_bs": 24}
    assert data.gated_reason(one) == "30 running requests > knob 24, so batches run without drafting"
    assert data.gated_reason({**one, "spec_max_bs": 0}) == "the knob is off (spec_max_bs = 0)"
    assert data.gated_reason({"num_running_reqs": 4.0, "spec_max_bs": 64, "spec_num_steps": 0}) == (
        "the engine reports 0 active draft steps")
    assert data.gated_reason({"num_running_reqs": None, "spec_max_bs": None}) is None


def test_accept_is_blanked_where_a_bucket_drafted_nothing(tmp_path: Path) -> None:
    """Two DP ranks under a knob of 24, idle from the start: the gauge's 0 there is blanked; ranks of 20
    (their summed 40 over the knob, each rank's batch within it) keep their accept; ranks of 30 and a knob
    of 0 run gated, and the gauge's 1.00 and 0 there are blanked in every bucket that held only such
    samples; a bucket across a phase's edge keeps the mix."""
    store = open_database(f"sqlite:///{tmp_path / 'gated.db'}")
    t0 = 1_000_000.0
    sid = store.server_id("http://dp")
    # 40 s of each: idle, drafting at 20 a rank, gated at 30, drafting, the knob at 0
    phases = [(0.0, 24, 0.0, 0.0), (20.0, 24, 2.5, 0.6), (30.0, 24, 1.0, 0.0), (20.0, 24, 2.5, 0.6),
              (20.0, 0, 1.0, 0.0)]
    with store.session() as s:
        for i in range(200):
            running, knob, accept, rate = phases[i // 40]
            for rank in (0, 1):
                sample = {"num_running_reqs": running, "spec_max_bs": knob, "spec_accept_length": accept,
                          "spec_accept_rate": rate}  # fmt: skip
                s.add(EngineSample(server_id=sid, dp_rank=rank, ts=t0 + i, **sample))
    columns = ["spec_accept_length", "spec_accept_rate", "num_running_reqs", "spec_max_bs"]
    series = data.engine_series(store, sid, t0, t0 + 200, columns, 24)
    store.close()
    width = float(series["ts"].diff().median())
    start = series["ts"] - t0
    end = start + width - 1e-6  # 24 buckets: edges between the phases' (a width that does not divide 40)
    inside = (end <= 40) | ((start >= 80) & (end <= 120)) | (start >= 160)
    gated = data.drafted_nothing(series, dp_ranks=2)
    assert gated.any() and gated.tolist() == inside.tolist()
    shown = data.accept_while_drafting(series, dp_ranks=2)
    blanked = ["spec_accept_length", "spec_accept_rate", "spec_accept_length_min", "spec_accept_rate_max"]
    assert shown.loc[gated, blanked].isna().all(axis=None)
    kept = shown.loc[~gated, "spec_accept_length"]
    assert kept.notna().all() and kept.max() == pytest.approx(2.5)
    assert 0.0 < kept.min() < 2.5  # a bucket across an edge keeps the gauge's mix of both
    assert shown["num_running_reqs"].equals(series["num_running_reqs"])  # the load and knob are untouched
    # read as one rank, the summed 40 is over the knob: the drafting phases would be blanked too
    assert data.drafted_nothing(series, dp_ranks=1).sum() > gated.sum()


def test_latency_columns_in_ms_keep_their_bands_and_gaps() -> None:
    series = pd.DataFrame({"ts": [0.0, 5.0], "ttft_p99_s": [0.25, None], "ttft_p99_s_min": [0.2, None],
                           "ttft_p99_s_max": [0.3, None], "itl_p50_s": [0.012, 0.014]})  # fmt: skip
    ms = data.in_ms(series, ("ttft_p99_s", "itl_p50_s", "e2e_p99_s"))
    assert list(ms.columns) == ["ts", "ttft_p99_ms", "ttft_p99_ms_min", "ttft_p99_ms_max", "itl_p50_ms"]
    assert ms["ttft_p99_ms"].iloc[0] == pytest.approx(250.0) and pd.isna(ms["ttft_p99_ms"].iloc[1])
    assert ms["ttft_p99_ms_max"].iloc[0] == pytest.approx(300.0)
    assert ms["itl_p50_ms"].tolist() == pytest.approx([12.0, 14.0])
