"""Downsampled series (bounded buckets, exact min/mean/max), latest values, audit filters."""

from __future__ import annotations

import math
import random
from collections import defaultdict
from collections.abc import Iterator

import pytest
from spectower.storage import Database, open_database, queries
from spectower.storage.models import ControlEvent, EngineSample, GpuSample, PolicyState
from sqlalchemy import text

from tests import queries_reference as reference
from tests.conftest import new_postgres_database

T0 = 1_764_000_000.0  # a whole hour (multiple of 3600)


@pytest.fixture
def db(db_url: str) -> Database:
    # every test here runs on SQLite and on PostgreSQL (tests/conftest.py: db_url)
    d = open_database(db_url)
    yield d  # type: ignore[misc]
    d.close()


def fill_gpu(db: Database, gid: int, seconds: int, seed: int = 1) -> list[tuple[float, float | None]]:
    rnd = random.Random(seed)
    data: list[tuple[float, float | None]] = []
    for i in range(seconds):
        v = None if i % 97 == 13 else round(rnd.uniform(-50, 100), 3)  # gaps in the metric too
        data.append((T0 + i + 0.25, v))
    with db.engine.begin() as conn:
        conn.execute(
            text("INSERT INTO gpu_sample (gpu_id, ts, lost, gpu_util_pct) VALUES (:g, :ts, false, :v)"),
            [{"g": gid, "ts": ts, "v": v} for ts, v in data],
        )
    return data


def expected(
    data: list[tuple[float, float | None]], width: float, start: float, end: float
) -> dict[int, tuple]:
    acc: dict[int, list[float]] = defaultdict(list)
    for ts, v in data:
        if start <= ts <= end and v is not None:
            acc[math.floor(ts / width)].append(v)
    return {k: (min(v), sum(v) / len(v), max(v), len(v)) for k, v in acc.items()}


@pytest.mark.parametrize("max_points", [2, 7, 50, 500])
def test_raw_series_buckets_are_bounded_and_exact(db: Database, max_points: int) -> None:
    gid = db.gpu_id("h", 0, "U")
    data = fill_gpu(db, gid, 600)
    start, end = T0 + 10, T0 + 100  # short range: the raw tier
    s = queries.series(db, "gpu", gid, "gpu_util_pct", start, end, max_points)
    assert len(s.points) <= max_points
    if s.tier == "raw":
        exp = expected(data, s.bucket_s, start, end)
        assert len(s.points) == len(exp)
        for b in s.points:
            lo, mean, hi, n = exp[round(b.ts / s.bucket_s)]
            assert (b.min, b.max, b.n) == (lo, hi, n)
            assert b.mean == pytest.approx(mean, rel=1e-9)
        assert s.rows_read == sum(1 for ts, _ in data if start <= ts <= end)


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def six_hours(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Database, int, list[tuple[float, float | None]]]]:
    """Six hours of one GPU at 1 s, rolled up, on each backend: written once for the module (a fill took
    0.4-0.8 CPU-s a test), for tests that only read it."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path_factory.mktemp('six-hours') / 'spectower.db'}"
    else:
        url = new_postgres_database(request.getfixturevalue("postgres_server"))
    d = open_database(url)
    gid = d.gpu_id("h", 0, "U")
    data = fill_gpu(d, gid, 6 * 3600)
    assert d.update_rollups() == len(data)
    yield d, gid, data
    d.close()


@pytest.mark.parametrize("max_points", [3, 10, 24, 100, 1000])
def test_rollup_series_match_raw_aggregation(
    six_hours: tuple[Database, int, list[tuple[float, float | None]]], max_points: int
) -> None:
    db, gid, data = six_hours
    start, end = T0, T0 + 6 * 3600
    s = queries.series(db, "gpu", gid, "gpu_util_pct", start, end, max_points)
    assert 1 <= len(s.points) <= max_points
    assert s.tier in ("raw", "1m", "1h")
    if s.tier != "raw":
        assert s.bucket_s % (60 if s.tier == "1m" else 3600) == 0
        assert s.rows_read <= queries.DEFAULT_MAX_ROWS_PER_BUCKET * max_points + 2
    exp = expected(data, s.bucket_s, start, end)
    assert {round(b.ts / s.bucket_s) for b in s.points} == set(exp)
    for b in s.points:
        lo, mean, hi, n = exp[round(b.ts / s.bucket_s)]
        assert (b.min, b.max, b.n) == (lo, hi, n)
        assert b.mean == pytest.approx(mean, rel=1e-9)


def test_rows_past_the_rollup_watermark_are_included(db: Database) -> None:
    gid = db.gpu_id("h", 0, "U")
    fill_gpu(db, gid, 3 * 3600)
    db.update_rollups()
    # new rows arrive after maintenance: a late one inside an old bucket, and fresh ones
    w = db.writer(maintenance=None)
    w.put(GpuSample(gpu_id=gid, ts=T0 + 5, gpu_util_pct=1000.0))
    w.put(*[GpuSample(gpu_id=gid, ts=T0 + 3 * 3600 + i, gpu_util_pct=-70.0) for i in range(120)])
    assert w.flush(30)
    s = queries.series(db, "gpu", gid, "gpu_util_pct", T0, T0 + 4 * 3600, 20)
    assert s.tier != "raw"
    assert max(b.max for b in s.points if b.max is not None) == 1000.0
    assert s.points[-1].min == -70.0
    assert sum(b.n for b in s.points) == 3 * 3600 - sum(1 for i in range(3 * 3600) if i % 97 == 13) + 1 + 120
    # and after maintenance the same answer comes from the rollups alone
    db.update_rollups()
    s2 = queries.series(db, "gpu", gid, "gpu_util_pct", T0, T0 + 4 * 3600, 20)
    assert [(b.ts, b.min, b.max, b.n) for b in s2.points] == [(b.ts, b.min, b.max, b.n) for b in s.points]


def test_engine_series_per_rank_and_pooled(db: Database) -> None:
    sid = db.server_id("http://s")
    w = db.writer(maintenance=None)
    w.put(*[EngineSample(server_id=sid, dp_rank=r, ts=T0 + i, num_running_reqs=float(10 * r + i % 3))
            for i in range(300) for r in (0, 1)])  # fmt: skip
    assert w.flush(30)
    pooled = queries.series(db, "engine", sid, "num_running_reqs", T0, T0 + 299, 2)
    rank1 = queries.series(db, "engine", sid, "num_running_reqs", T0, T0 + 299, 2, dp_rank=1)
    assert sum(b.n for b in pooled.points) == 600
    assert min(b.min for b in pooled.points) == 0.0 and max(b.max for b in pooled.points) == 12.0
    assert min(b.min for b in rank1.points) == 10.0


def test_series_input_errors_name_the_field(db: Database) -> None:
    with pytest.raises(ValueError, match="metric"):
        queries.series(db, "gpu", 1, "gpu_util_pct; DROP TABLE gpu", 0, 1)
    with pytest.raises(ValueError, match="max_points"):
        queries.series(db, "gpu", 1, "gpu_util_pct", 0, 1, 1)
    with pytest.raises(ValueError, match="kind"):
        queries.series(db, "cpu", 1, "x", 0, 1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="start/end"):
        queries.series(db, "gpu", 1, "gpu_util_pct", 10, 1)


def test_latest_samples(db: Database) -> None:
    a, b = db.server_id("http://a"), db.server_id("http://b")
    w = db.writer(maintenance=None)
    for i in range(50):
        w.put(*[EngineSample(server_id=a, dp_rank=r, ts=T0 + i, num_running_reqs=float(i)) for r in (0, 1)])
    w.put(EngineSample(server_id=b, ts=T0, num_queue_reqs=3.0))
    g = db.gpu_id("h", 0, "U")
    w.put(GpuSample(gpu_id=g, ts=T0, power_w=100.0), GpuSample(gpu_id=g, ts=T0 + 1, power_w=200.0))
    assert w.flush(30)
    latest = queries.latest_engine_samples(db)
    assert [(r.server_id, r.dp_rank, r.ts) for r in latest] == [(a, 0, T0 + 49), (a, 1, T0 + 49), (b, 0, T0)]
    assert [r.power_w for r in queries.latest_gpu_samples(db)] == [200.0]
    # every column as the ORM read gave it (models made of plain rows now), for all servers and for one
    for sid in (None, a, b):
        want = [r.model_dump() for r in reference.latest_engine_samples(db, sid)]
        assert [r.model_dump() for r in queries.latest_engine_samples(db, sid)] == want


def test_control_events_filters(db: Database) -> None:
    with db.session(write=True) as s:
        s.add(ControlEvent(ts=1.0, actor="operator:ann", server_url="http://a", action="set", reason="r1"))
        s.add(ControlEvent(ts=2.0, actor="policy:auto", server_url="http://a", action="set", reason="r2"))
        s.add(ControlEvent(ts=3.0, actor="policy:auto", server_url="http://b", action="set", reason="r3"))
        s.add(ControlEvent(ts=4.0, actor="policyx", server_url="http://b", action="set", reason="r4"))
    reasons = lambda evs: [e.reason for e in evs]  # noqa: E731
    assert reasons(queries.control_events(db)) == ["r4", "r3", "r2", "r1"]
    assert reasons(queries.control_events(db, actor="policy")) == ["r3", "r2"]
    assert reasons(queries.control_events(db, server_url="http://a")) == ["r2", "r1"]
    assert reasons(queries.control_events(db, start=2.0, end=3.0)) == ["r3", "r2"]
    assert reasons(queries.control_events(db, limit=1)) == ["r4"]


def test_recent_engine_samples_of_either_url_spelling(db: Database) -> None:
    slash, other = db.server_id("http://a/"), db.server_id("http://b")
    w = db.writer(maintenance=None)
    w.put(*[EngineSample(server_id=slash, dp_rank=r, ts=T0 + i, num_running_reqs=float(i))
            for i in range(10) for r in (1, 0)])  # fmt: skip
    w.put(EngineSample(server_id=other, ts=T0 + 50))
    assert w.flush(30)
    got = queries.recent_engine_samples(db, ["http://a", "http://a/"], since=T0 + 7)
    assert got.server_ids == [slash] and got.latest_ts == T0 + 9
    assert sorted((r.ts, r.dp_rank) for r in got.rows) == [(T0 + i, r) for i in (7, 8, 9) for r in (0, 1)]
    assert [r.ts for r in got.rows] == sorted(r.ts for r in got.rows)  # oldest first
    stale = queries.recent_engine_samples(db, ["http://a/"], since=T0 + 10)  # nothing that new
    assert (stale.server_ids, stale.latest_ts, stale.rows) == ([slash], T0 + 9, [])
    assert queries.recent_engine_samples(db, ["http://a"], since=T0).server_ids == []  # URLs match exactly
    quiet = db.server_id("http://d")  # known, never sampled
    assert queries.recent_engine_samples(db, ["http://d"], since=T0) == queries.RecentEngineSamples(
        [quiet], None, []
    )


def test_count_control_events_is_exact_and_after(db: Database) -> None:
    def event(ts: float, actor: str = "policy:learn", action: str = "set", url: str = "http://a") -> None:
        queries.add_control_event(db, ControlEvent(ts=ts, actor=actor, server_url=url, action=action,
                                                   reason="r"))  # fmt: skip

    for ts in (100.0, 200.0, 300.0):
        event(ts)
    event(250.0, actor="policy:learn:other")  # a longer actor name is another actor
    event(250.0, action="auto-start")
    event(250.0, url="http://b")
    count = lambda after: queries.count_control_events(  # noqa: E731
        db, server_url="http://a", actor="policy:learn", action="set", after=after
    )
    assert [count(99.0), count(100.0), count(300.0)] == [3, 2, 0]  # strictly newer than `after`
    assert len(queries.control_events(db)) == 6  # add_control_event wrote every row


def test_policy_state_saved_and_replaced(db: Database) -> None:
    assert queries.policy_state(db, "http://a") is None
    queries.save_policy_state(db, "http://a", mode="learn", state_json='{"n": 1}', ts=10.0)
    with db.session(write=True) as s:  # a pause set elsewhere survives the policy's own saves
        row = s.get(PolicyState, "http://a")
        assert row is not None
        row.paused_until = 99.0
        s.add(row)
    queries.save_policy_state(db, "http://a", mode="threshold", state_json='{"n": 2}', ts=20.0)
    saved = queries.policy_state(db, "http://a")
    assert saved is not None
    got = (saved.mode, saved.state_json, saved.updated_ts, saved.paused_until)
    assert got == ("threshold", '{"n": 2}', 20.0, 99.0)
    assert queries.policy_state(db, "http://b") is None


@pytest.mark.parametrize("hours", [0.05, 6])  # the raw tier, then rollups plus rows past the watermark
def test_series_many_is_series_for_every_pair(db: Database, hours: float) -> None:
    gids = [db.gpu_id("h", i, f"U{i}") for i in range(3)]
    for k, gid in enumerate(gids[:2]):  # the third GPU has no samples: its series come back empty
        fill_gpu(db, gid, int(hours * 3600), seed=k)
    with db.engine.begin() as conn:
        conn.execute(text("UPDATE gpu_sample SET power_w = gpu_util_pct * 2 + gpu_id"))
    db.update_rollups()
    w = db.writer(maintenance=None)
    w.put(*[GpuSample(gpu_id=gids[0], ts=T0 + hours * 3600 + i, gpu_util_pct=-99.0) for i in range(30)])
    assert w.flush(30)
    end = T0 + hours * 3600 + 60
    many = queries.series_many(db, "gpu", gids, ["gpu_util_pct", "power_w"], T0, end, 40)
    assert set(many) == {(g, m) for g in gids for m in ("gpu_util_pct", "power_w")}
    for (gid, metric), got in many.items():
        one = queries.series(db, "gpu", gid, metric, T0, end, 40)
        assert (got.tier, got.bucket_s, got.source_id, got.metric) == (one.tier, one.bucket_s, gid, metric)
        exact = [(b.ts, b.min, b.max, b.n) for b in one.points]
        assert [(b.ts, b.min, b.max, b.n) for b in got.points] == exact
        assert [b.mean for b in got.points] == pytest.approx([b.mean for b in one.points], rel=1e-12)
    assert many[(gids[2], "power_w")].points == []
    assert many[(gids[0], "gpu_util_pct")].points[-1].min == -99.0  # the unfolded tail is there
    power = many[(gids[1], "power_w")].points
    util = {b.ts: b for b in many[(gids[1], "gpu_util_pct")].points}
    assert all(b.mean == pytest.approx(util[b.ts].mean * 2 + gids[1]) for b in power)
    with pytest.raises(ValueError, match="metric"):
        queries.series_many(db, "gpu", gids, ["power_w", "watts"], T0, end)
    assert queries.series_many(db, "gpu", [], ["power_w"], T0, end) == {}
