"""storage/queries_counters.py: the decode-counter intervals computed for all intervals at once equal, value
for value, what ``plugin.engine_counters.rates`` gives one interval at a time (tests/queries_reference.py,
the read as it was): on random cells (sparse intervals, bins that come and go, zero and tiny step times,
counts past 2**31 as after a restart, an unknown mode) and on a database read through every tier; the extend
block's rows stored beside the decode ones change none of it."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from spectower.control import speedup
from spectower.storage import Database, open_database, queries
from spectower.storage.counter_modes import EXTEND_MODES
from spectower.storage.models import EngineCounterSample
from spectower.storage.queries_counters import _Cells, _Entries, _intervals, _per_bin
from sqlalchemy import event, text

from tests import queries_reference as reference
from tests.conftest import examples

SETTINGS = settings(
    max_examples=examples(300),
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)
T0 = 1_764_000_000.0  # a whole hour

seconds = st.one_of(
    st.just(0.0),
    st.floats(min_value=0.0, max_value=10.0, allow_nan=False),
    st.integers(0, 10**6).map(lambda n: n * 1e-9 + 0.5e-9),  # halfway between nanoseconds: rounding matters
)
counts = st.one_of(st.integers(0, 1000), st.integers(0, 2**40))
row = st.tuples(
    st.sampled_from([T0 + 5 * k for k in range(6)] + [T0 + 2.5, T0 + 3600.0]),  # sparse: gaps between
    st.sampled_from([1, 2, 3, 4, 6, 8, 12, 16, 64, 96]),
    # an unknown mode: its bin shows, no counts; the outside rows (plugin 0.4.13): their mode's time grows
    st.sampled_from(["drafted", "gated", "settling", "outside_drafted", "outside_gated"]),
    counts,
    counts,
    seconds,
)


@SETTINGS
@given(rows=st.lists(row, max_size=60), res_s=st.sampled_from([0, 60, 3600]))
def test_intervals_equal_rates_of_each_interval(rows: list[tuple[Any, ...]], res_s: int) -> None:
    cells: reference.Cells = {}
    for ts, b, mode, *values in rows:
        reference.add_row(cells, ts, b, mode, values)
    want = reference.intervals_of(cells, res_s)
    entries = _Entries.of(_Cells.of(rows))
    got = _intervals(entries, res_s)
    assert got == want
    # grouped per bin as the estimator groups the intervals: the same samples, in the same order
    assert _per_bin(entries) == speedup.per_bin(want)
    # same types too: ints stay ints, a missing rate is None (not NaN)
    assert [type(v) for i in got for m in ("drafted", "gated") for v in i[m]["steps"]] == [
        int for i in want for m in ("drafted", "gated") for _ in i[m]["steps"]
    ]


def test_no_rows_no_intervals() -> None:
    entries = _Entries.of(_Cells.of([]))
    assert _intervals(entries, 0) == [] and _per_bin(entries) == {}


@pytest.fixture
def db(db_url: str) -> Iterator[Database]:
    d = open_database(db_url)  # SQLite and PostgreSQL
    yield d
    d.close()


def _random_rows(sid: int, start: float, n: int, seed: int) -> list[EngineCounterSample]:
    """n scrapes 5 s apart (some missing: gaps) with a few bins and modes each, random counts."""
    rng = random.Random(seed)
    out = []
    for k in range(n):
        if rng.random() < 0.1:
            continue
        for b in rng.sample([1, 2, 4, 8, 16, 32], rng.randint(1, 3)):
            for mode in rng.sample(["drafted", "gated"], rng.randint(1, 2)):
                steps = rng.randint(0, 500)
                ts = start + 5 * k + rng.random()
                out.append(EngineCounterSample(
                    server_id=sid, ts=ts, batch_size=b, mode=mode, steps=steps,
                    tokens=steps * rng.randint(1, 40), time_s=round(steps * rng.uniform(0.005, 0.05), 9),
                ))  # fmt: skip
                if rng.random() < 0.5:  # its seconds outside the steps (plugin 0.4.13), as collectors store
                    outside = round(steps * rng.uniform(0, 0.005), 9)
                    out.append(EngineCounterSample(server_id=sid, ts=ts, batch_size=b, mode=f"outside_{mode}",
                                                   steps=0, tokens=0, time_s=outside))  # fmt: skip
    return out


def test_counter_intervals_equal_the_reference_on_every_tier(db: Database) -> None:
    sid = db.server_id("http://a")
    other = db.server_id("http://b")
    rows = _random_rows(sid, T0, 3 * 720, seed=1) + _random_rows(other, T0, 100, seed=2)
    db.insert_many("engine_counter_sample", (r.model_dump(exclude={"id"}) for r in rows))
    db.update_rollups()
    late = _random_rows(sid, T0 + 3 * 3600, 24, seed=3)  # after the fold: past the watermark
    db.insert_many("engine_counter_sample", (r.model_dump(exclude={"id"}) for r in late))
    end = T0 + 3 * 3600 + 130
    tiers = set()
    for start, stop, limit in [
        (T0, T0 + 600, 2000),  # raw
        (T0 + 33, end, 2000),  # minutes, a partial first bucket, the late rows in the last ones
        (T0, end, 50),  # hours
        (T0 + 3 * 3600 + 10, end, 2000),  # raw: only the rows past the watermark
        (T0 - 600, T0 - 1, 2000),  # nothing
    ]:
        got = queries.counter_intervals(db, sid, start, stop, max_intervals=limit)
        assert got == reference.counter_intervals(db, sid, start, stop, limit)
        tiers |= {i["res_s"] for i in got}
        samples = queries.counter_samples(db, sid, start, stop, max_intervals=limit)
        assert samples.intervals == len(got) and samples.per_bin == speedup.per_bin(got)
        old = speedup.estimate(got)
        assert speedup.estimate_per_bin(samples.per_bin, samples.intervals) == old
    assert tiers == {0, 60, 3600}


def _extend_rows(sid: int, start: float, n: int, seed: int) -> list[EngineCounterSample]:
    """The extend block's rows (plugin 0.4.6 on) as the collector stores them beside the decode rows, and
    where a decode reader that did not filter them would see something: a bin no decode row has (96) and
    scrapes without a decode row (the extend's steps of a settling gated step are in no bin)."""
    rng = random.Random(seed)
    out = []
    for k in range(n):
        ts = start + 5 * k + (2.5 if rng.random() < 0.2 else rng.random())
        for b in rng.sample([4, 8, 32, 96], rng.randint(1, 2)):
            for mode in rng.sample(sorted(EXTEND_MODES.values()), rng.randint(1, 2)):
                steps = rng.randint(1, 200)
                out.append(EngineCounterSample(server_id=sid, ts=ts, batch_size=b, mode=mode, steps=steps,
                                               tokens=steps * rng.randint(1, 40),
                                               time_s=steps * 0.01))  # fmt: skip
    return out


def test_extend_rows_beside_the_decode_rows_change_no_decode_read(db: Database) -> None:
    """Two servers with the same decode rows, one with the extend block's rows beside them: every decode read
    (``counter_intervals``, ``counter_samples``, ``has_counters``) gives the same on both, on every tier;
    a server with extend rows alone has no decode counters."""
    sid, twin, alone = db.server_id("http://a"), db.server_id("http://b"), db.server_id("http://c")

    def load(rows: list[EngineCounterSample], extend: list[EngineCounterSample]) -> None:
        dumped = [r.model_dump(exclude={"id"}) for r in rows]
        both = [*dumped, *({**r, "server_id": twin} for r in dumped)]
        db.insert_many("engine_counter_sample", [*both, *(r.model_dump(exclude={"id"}) for r in extend)])

    load(_random_rows(sid, T0, 3 * 720, seed=1), _extend_rows(twin, T0, 3 * 720, seed=4))
    db.update_rollups()
    load(_random_rows(sid, T0 + 3 * 3600, 24, seed=3), _extend_rows(twin, T0 + 3 * 3600, 24, seed=5))
    only_extend = _extend_rows(alone, T0, 50, seed=6)
    db.insert_many("engine_counter_sample", (r.model_dump(exclude={"id"}) for r in only_extend))
    end = T0 + 3 * 3600 + 130
    tiers = set()
    for start, stop, limit in [(T0, T0 + 600, 2000), (T0 + 33, end, 2000), (T0, end, 50),
                               (T0 + 3 * 3600 + 10, end, 2000)]:  # fmt: skip
        got = queries.counter_intervals(db, twin, start, stop, max_intervals=limit)
        assert got and got == queries.counter_intervals(db, sid, start, stop, max_intervals=limit)
        tiers |= {i["res_s"] for i in got}
        samples = queries.counter_samples(db, twin, start, stop, max_intervals=limit)
        assert samples == queries.counter_samples(db, sid, start, stop, max_intervals=limit)
        assert queries.extend_totals(db, twin, start, stop, max_intervals=limit) is not None
    assert tiers == {0, 60, 3600}
    assert queries.has_counters(db, twin) and not queries.has_counters(db, alone)
    assert queries.counter_intervals(db, alone, T0, end) == [] and queries.extend_totals(db, alone, T0, end)
    db.update_rollups()  # the extend-only server's rows in the rollups too: still no decode counters
    with db.engine.begin() as conn:
        conn.execute(text("DELETE FROM engine_counter_sample"))
    assert queries.has_counters(db, twin) and not queries.has_counters(db, alone)


def test_rows_past_the_watermark_are_found_by_primary_key(tmp_path: Path) -> None:
    """The rollup tiers add the raw rows past the watermark: SQLite must find them by id, not walk the
    (server_id, ts) index over the whole window (7 days of counters: 220 ms to find no row)."""
    db = open_database(f"sqlite:///{tmp_path / 'spectower.db'}")
    sid = db.server_id("http://a")
    rows = _random_rows(sid, T0, 200, seed=1)
    db.insert_many("engine_counter_sample", (r.model_dump(exclude={"id"}) for r in rows))
    db.update_rollups()
    seen: list[tuple[str, Any]] = []

    def keep(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, many: bool) -> None:
        seen.append((statement, parameters))

    event.listen(db.engine, "before_cursor_execute", keep)
    try:
        assert queries.counter_intervals(db, sid, T0, T0 + 600, max_intervals=10)  # the minute tier
    finally:
        event.remove(db.engine, "before_cursor_execute", keep)
    tail = [(s, p) for s, p in seen if "engine_counter_sample.id >" in s]
    assert len(tail) == 1
    statement, parameters = tail[0]
    with db.engine.connect() as conn:
        steps = conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {statement}", parameters).all()
    plan = " ".join(str(step[-1]) for step in steps)
    assert "PRIMARY KEY" in plan and "ix_engine_counter_sample_server_ts" not in plan, plan
    db.close()
