"""storage/queries_counters.py: the decode-counter intervals computed for all intervals at once equal, value
for value, what ``plugin.engine_counters.rates`` gives one interval at a time (tests/queries_reference.py,
the read as it was): on random cells (sparse intervals, bins that come and go, zero and tiny step times,
counts past 2**31 as after a restart, an unknown mode) and on a database read through every tier; the extend
block's rows stored beside the decode ones change none of it. The ``prefilled`` block (plugin 0.4.14 on):
plugin snapshots stored through the real scraper and sink into SQLite read back as intervals whose block is
what ``rates()`` gives the same consecutive snapshots, on the raw tier and the rollups, from the first
interval with a prefilled row on; a window without such rows reads back without the key; and
``control.prefilled.levelled_intervals`` (what learn's warm start runs through ``as_choices``) levels the
stored intervals as it levels learn's live ones."""

from __future__ import annotations

import math
import random
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from spectower.control import kept_extend, mix_levelled, prefilled, speedup, warm_start
from spectower.control.policy import learn_counters
from spectower.plugin import engine_counters as ec
from spectower.storage import Database, open_database, queries, rollups
from spectower.storage.counter_modes import EXTEND_MODES, MIX_MODES, MIX_ROWS, PREFILLED_MODES, SLOTS_MODES
from spectower.storage.models import EngineCounterSample
from spectower.storage.queries_counters import (
    INTERVALS_READ,
    TIME_DECIMALS,
    _Cells,
    _Entries,
    _intervals,
    _intervals_of,
    _per_bin,
)
from sqlalchemy import event, text

from tests import queries_reference as reference
from tests.conftest import examples
from tests.test_part_mix import Req
from tests.test_sglang_counters import _counters, _doc, stored_documents

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
    assert _per_bin(entries)[0] == speedup.per_bin(want)
    # same types too: ints stay ints, a missing rate is None (not NaN)
    assert [type(v) for i in got for m in ("drafted", "gated") for v in i[m]["steps"]] == [
        int for i in want for m in ("drafted", "gated") for _ in i[m]["steps"]
    ]


def test_no_rows_no_intervals() -> None:
    entries = _Entries.of(_Cells.of([]))
    assert _intervals(entries, 0) == [] and _per_bin(entries) == ({}, None)


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


# ---- the prefilled block (plugin 0.4.14 on) --------------------------------------------------------------

FIELDS = ("steps", "tokens", "time_s")
CEILING = 16  # the ceiling the workload runs under: bins 16 and below drafted, 32 gated
PREFILLED_STORED = tuple(PREFILLED_MODES.values())


def _step(c: ec.EngineCounters, rng: random.Random, batch: int, drafted: bool, tokens: int, step_s: float,
          prefill_every: float) -> None:  # fmt: skip
    """One decode step with a random gap before it; a prefill (4 ms) in its span one step in
    ``prefill_every`` (0: never)."""
    pre = prefill_every > 0 and rng.random() < 1 / prefill_every
    seconds = step_s * rng.uniform(0.9, 1.1) + (0.004 if pre else 0.0)
    c.record(batch, drafted, tokens, seconds, outside_s=rng.uniform(0.0, 0.001), prefilled=pre)


def _workload(c: ec.EngineCounters, rng: random.Random, intervals: int,
              prefills: bool = True) -> list[dict[str, Any]]:  # fmt: skip
    """A snapshot of ``c`` after each of ``intervals`` intervals of decode steps under ceiling 16: bin 16
    drafts steadily (a prefill every 6 steps) with explored gated steps among them (as many prefills, the
    drafting stream's); bin 32 gates steadily (one every 16) with explored drafted steps (the gated
    stream's); bin 8 comes and goes without a prefill, bin 4 with one now and then. ``prefills`` False: no
    step carries a prefill (a plugin's interval with no prefilled row)."""
    every = (lambda n: n) if prefills else (lambda n: 0)
    snaps = []
    for _ in range(intervals):
        steps: list[tuple[int, bool, int, float, float]] = [
            *[(16, True, 40, 0.010, every(6))] * rng.randint(40, 80),
            *[(16, False, 16, 0.007, every(6))] * rng.randint(5, 12),
            *[(32, False, 24, 0.009, every(16))] * rng.randint(40, 80),
            *[(32, True, 60, 0.014, every(16))] * rng.randint(5, 12),
        ]
        if rng.random() < 0.5:
            steps += [(8, True, 30, 0.008, 0)] * rng.randint(1, 5)
        if rng.random() < 0.5:
            steps += [(4, False, 4, 0.005, every(2))] * rng.randint(1, 5)
        rng.shuffle(steps)
        for batch, drafted, tokens, step_s, prefill_every in steps:
            _step(c, rng, batch, drafted, tokens + rng.randint(-2, 2), step_s, prefill_every)
        snaps.append(c.snapshot())
    return snaps


def _snapshots(intervals: int, seed: int) -> list[dict[str, Any]]:
    """A plugin 0.4.14's snapshots of one rank: the counters at start, then after each interval."""
    c = _counters(64)
    return [c.snapshot(), *_workload(c, random.Random(seed), intervals)]


def _without(snap: Mapping[str, Any], *blocks: str) -> dict[str, Any]:
    """A snapshot without ``blocks``: what an older plugin publishes."""
    return {key: value for key, value in snap.items() if key not in blocks}


def _live(snaps: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Learn's own intervals of the snapshots, 5 s apart from t=1000 as ``scrape_documents`` reads them."""
    return speedup.intervals_from_snapshots([(1000.0 + 5 * k, snap) for k, snap in enumerate(snaps)])


@contextmanager
def _stored(path: Path, snaps: Sequence[dict[str, Any]], fold_before: int | None = None
            ) -> Iterator[tuple[Database, int]]:  # fmt: skip
    """The snapshots as /server_info documents through the real scraper and sink into SQLite under ``path``
    (``stored_documents``): the open database and the server's id."""
    path.mkdir(parents=True, exist_ok=True)
    with stored_documents(path, [_doc(snap) for snap in snaps], fold_before) as found:
        yield found


Intervals = list[dict[str, Any]]


def _read_back(path: Path, snaps: Sequence[dict[str, Any]]) -> tuple[Intervals, Intervals]:
    """The snapshots stored (``_stored``) and read back by ``counter_intervals`` over the whole window (the
    raw tier), and learn's own intervals of them (``_live``)."""
    with _stored(path, snaps) as (db, sid):
        return queries.counter_intervals(db, sid, 900.0, 2000.0), _live(snaps)


def _on_bins(block: Mapping[str, Mapping[str, Sequence[Any]]], bins: Sequence[int],
             on: Sequence[int]) -> dict[str, dict[str, list[Any]]]:  # fmt: skip
    """A block of lists parallel to ``bins`` taken on the bins ``on`` (a stored interval's: with rows)."""
    at = [list(bins).index(b) for b in on]
    return {kind: {field: [values[i] for i in at] for field, values in fields.items()}
            for kind, fields in block.items()}  # fmt: skip


def test_stored_intervals_carry_the_prefilled_block_rates_gives_the_same_snapshots(tmp_path: Path) -> None:
    snaps = _snapshots(12, seed=1)
    got, live = _read_back(tmp_path, snaps)
    assert [i["ts"] for i in got] == [i["ts"] for i in live] and {i["res_s"] for i in got} == {0}
    for stored, interval in zip(got, live, strict=True):
        # the one definition: rates() of the same consecutive snapshots, on the bins the interval stored
        assert stored["prefilled"] == _on_bins(interval["prefilled"], interval["bins"], stored["bins"])
        # and nothing of it left behind: a bin the stored interval lacks had no prefilled step
        rest = [k for k, b in enumerate(interval["bins"]) if b not in stored["bins"]]
        assert not any(interval["prefilled"][m][f][k] for m in ec.MODES for f in FIELDS for k in rest)
        # the decode modes as they always were (with_outside(rates()))
        assert {m: stored[m] for m in ec.MODES} == _on_bins({m: interval[m] for m in ec.MODES},
                                                          interval["bins"], stored["bins"])  # fmt: skip
    blocks = [i["prefilled"][m] for i in got for m in ec.MODES]
    assert {type(v) for block in blocks for f in ("steps", "tokens") for v in block[f]} == {int}
    assert all(sum(i["prefilled"][m]["steps"]) > 0 for i in got for m in ec.MODES)
    # bin 8 ran without a prefill: its place in the block holds zeros
    eights = [i["prefilled"]["drafted"]["steps"][i["bins"].index(8)] for i in got if 8 in i["bins"]]
    assert eights and set(eights) == {0}


def _reads_on_every_tier(path: Path, snaps: Sequence[dict[str, Any]]
                         ) -> tuple[list[list[dict[str, Any]]], queries.CounterSamples]:  # fmt: skip
    """``snaps`` stored through the real scraper and sink, folded into the rollups, then read over 900-1200 s:
    ``counter_intervals`` raw, by the minute and by the hour (2000, 10 and 2 intervals at most), and
    ``counter_samples`` raw."""
    with _stored(path, snaps) as (db, sid):
        db.update_rollups()
        reads = [queries.counter_intervals(db, sid, 900.0, 1200.0, max_intervals=limit)
                 for limit in (2000, 10, 2)]  # fmt: skip
        return reads, queries.counter_samples(db, sid, 900.0, 1200.0)


def test_a_window_without_prefilled_rows_reads_back_as_it_always_did(tmp_path: Path) -> None:
    """A plugin before 0.4.14 (the same snapshots without the block): no ``prefilled`` key, the intervals
    otherwise those the plugin 0.4.14's rows give, on every tier."""
    snaps = [_without(snap, "slots", "mix") for snap in _snapshots(14, seed=2)]  # plugin 0.4.14's
    older = [_without(snap, "prefilled") for snap in snaps]
    reads = {name: _reads_on_every_tier(tmp_path / name, stored)[0]
             for name, stored in (("older", older), ("0.4.14", snaps))}  # fmt: skip
    assert [{i["res_s"] for i in read} for read in reads["older"]] == [{0}, {60}, {3600}]
    for old, new in zip(reads["older"], reads["0.4.14"], strict=True):
        assert old and all(set(i) == {"ts", "res_s", "bins", "restarted", *ec.MODES} for i in old)
        assert all("prefilled" in i for i in new)
        assert old == [{key: value for key, value in i.items() if key != "prefilled"} for i in new]


def test_learn_levels_the_stored_intervals_as_it_levels_its_own(tmp_path: Path) -> None:
    """``control.prefilled.levelled_intervals`` with the ceiling's masks gives the stored intervals the
    levelled step times it gives learn's live ones; so does ``as_choices``, what the warm start
    (control/warm_start.py ``from_counters``) runs on the stored ones and learn on its own."""
    snaps = _snapshots(12, seed=3)
    got, live = _read_back(tmp_path, snaps)

    def masks(intervals: list[dict[str, Any]]) -> list[list[bool]]:
        return [learn_counters.drafted_by(i["bins"], CEILING) for i in intervals]

    levelled = prefilled.levelled_intervals(got, masks(got))
    own = prefilled.levelled_intervals(live, masks(live))
    for stored, interval in zip(levelled, own, strict=True):
        mine = {m: stored[m] for m in ec.MODES}
        assert mine == _on_bins({m: interval[m] for m in ec.MODES}, interval["bins"], stored["bins"])
    # the explored cells moved (bin 16's gated steps, bin 32's drafted ones): the stored intervals were
    # levelled, not passed through as they were before they carried the block
    for mode, b in (("gated", 16), ("drafted", 32)):
        moved = [s[mode]["time_s"][s["bins"].index(b)] != i[mode]["time_s"][i["bins"].index(b)]
                 for s, i in zip(levelled, got, strict=True)]  # fmt: skip
        assert all(moved)
    scale = 1 / (1 - learn_counters.DEFAULT_KEPT_EXTEND_TAX)
    chosen = learn_counters.as_choices(got, masks(got), scale)
    learned = learn_counters.as_choices(live, masks(live), scale)
    for stored, interval in zip(chosen, learned, strict=True):
        fields = {m: {f: interval[m][f] for f in FIELDS} for m in ec.MODES}
        assert {m: {f: stored[m][f] for f in FIELDS} for m in ec.MODES} == _on_bins(
            fields, interval["bins"], stored["bins"]
        )


def test_after_an_upgrade_the_block_starts_at_the_first_interval_with_a_prefilled_row(tmp_path: Path) -> None:
    """An older plugin's intervals, then (a restart) plugin 0.4.14's, its first interval and a later one
    without a prefill: no key before the first interval with a prefilled row (not known), the block from it
    on, zeros in an interval without a prefill (known: none), each what rates() gives the snapshots."""
    rng = random.Random(4)
    old = _counters(64)
    before = [old.snapshot(), *_workload(old, rng, 3)]
    before = [_without(snap, "prefilled", "slots", "mix") for snap in before]
    new = _counters(64, started_at=900.0)  # the upgrade restarted the server
    after = [*_workload(new, rng, 1, prefills=False), *_workload(new, rng, 3),
             *_workload(new, rng, 1, prefills=False), *_workload(new, rng, 2)]  # fmt: skip
    snaps = [*before, *after]
    got, live = _read_back(tmp_path, snaps)
    assert [i["ts"] for i in got] == [i["ts"] for i in live]
    first = len(before)  # the interval after the restart's (the first of 0.4.14's, no prefill in it)
    assert [("prefilled" in i) for i in got] == [k >= first for k in range(len(got))]
    assert "prefilled" in live[first - 1] and not any(live[first - 1]["prefilled"]["gated"]["steps"])
    for stored, interval in zip(got[first:], live[first:], strict=True):
        assert stored["prefilled"] == _on_bins(interval["prefilled"], interval["bins"], stored["bins"])
    quiet = got[first + 3]["prefilled"]
    assert quiet == {m: {f: [0] * len(got[first + 3]["bins"]) for f in FIELDS} for m in ec.MODES}


def test_a_rollup_buckets_block_is_rates_over_the_bucket(tmp_path: Path) -> None:
    """The minute and hour tiers, rows past the watermark added to their buckets: a bucket's block is
    ``rates()`` of the snapshots around the bucket's intervals (its seconds summed from rounded deltas:
    within a nanosecond per interval)."""
    snaps = _snapshots(30, seed=5)
    live = _live(snaps)
    with _stored(tmp_path, snaps, fold_before=20) as (db, sid):
        reads = [queries.counter_intervals(db, sid, 900.0, 1200.0, max_intervals=limit) for limit in (10, 2)]
        with db.engine.connect() as conn:  # the rows of scrape 20 on wait past the watermark
            past = conn.execute(text("SELECT min(ts) FROM engine_counter_sample WHERE id > :w"),
                                {"w": rollups.watermark(conn, rollups.COUNTERS)}).scalar()  # fmt: skip
        assert past == live[19]["ts"] == 1100
    for read, res in zip(reads, (60, 3600), strict=True):
        assert {i["res_s"] for i in read} == {res}
        assert [i["ts"] for i in read] == ([960, 1020, 1080, 1140] if res == 60 else [0])  # 1080: both parts
        for bucket in read:
            inside = [k for k, i in enumerate(live) if math.floor(i["ts"] / res) * res == bucket["ts"]]
            want = _on_bins(ec.rates(snaps[inside[0]], snaps[inside[-1] + 1])["prefilled"],
                            live[inside[-1]]["bins"], bucket["bins"])  # fmt: skip
            got = bucket["prefilled"]
            for m in ec.MODES:
                assert (got[m]["steps"], got[m]["tokens"]) == (want[m]["steps"], want[m]["tokens"])
                assert got[m]["time_s"] == pytest.approx(want[m]["time_s"], rel=0, abs=len(inside) * 1e-9)
                assert sum(got[m]["steps"]) > 0


prefilled_row = st.tuples(
    st.sampled_from([T0 + 5 * k for k in range(6)] + [T0 + 2.5, T0 + 3600.0]),
    st.sampled_from([1, 2, 3, 4, 6, 8, 12, 16, 64, 96]),
    st.sampled_from(["drafted", "gated", "settling", "outside_drafted", "outside_gated", *PREFILLED_STORED]),
    counts,
    counts,
    seconds,
)


def _with_prefilled_reference(rows: list[tuple[Any, ...]], res_s: int) -> list[dict[str, Any]]:
    """The reference intervals of the decode rows, each from the first with a prefilled row in one of its
    bins on with the block: per mode and bin the rows' sums one by one, steps and tokens int(), the time
    rounded as rates() rounds it, zeros where none."""
    cells: reference.Cells = {}
    sums: dict[tuple[float, int, str], list[float]] = {}
    for ts, b, mode, *values in rows:
        if mode in PREFILLED_STORED:
            cell = sums.setdefault((float(ts), int(b), mode), [0.0, 0.0, 0.0])
            for k, v in enumerate(values):
                cell[k] += float(v)
        else:
            reference.add_row(cells, ts, b, mode, values)
    out = reference.intervals_of(cells, res_s)
    seen = [k for k, i in enumerate(out) for b in i["bins"] for m in PREFILLED_STORED
            if (i["ts"], b, m) in sums]  # fmt: skip
    first = min(seen, default=len(out))
    for interval in out[first:]:
        block = {}
        for mode, stored in PREFILLED_MODES.items():
            found = [sums.get((interval["ts"], b, stored), [0.0, 0.0, 0.0]) for b in interval["bins"]]
            block[mode] = {"steps": [int(v[0]) for v in found], "tokens": [int(v[1]) for v in found],
                           "time_s": [round(v[2], TIME_DECIMALS) for v in found]}  # fmt: skip
        interval["prefilled"] = block
    return out


@SETTINGS
@given(rows=st.lists(prefilled_row, max_size=60), res_s=st.sampled_from([0, 60, 3600]))
def test_prefilled_blocks_equal_the_rows_summed_per_interval_and_bin(rows: list[tuple[Any, ...]],
                                                                     res_s: int) -> None:  # fmt: skip
    """Random rows, prefilled ones among them (in bins and intervals without a decode row too, which no
    block can hold): the intervals are the decode rows' as before, the block the reference's."""
    got = _intervals_of(_Cells.of(rows, INTERVALS_READ), res_s)
    assert got == _with_prefilled_reference(rows, res_s)
    blocks = [i["prefilled"][m] for i in got if "prefilled" in i for m in ec.MODES]
    assert [type(v) for block in blocks for f in ("steps", "tokens") for v in block[f]] == [
        int for block in blocks for f in ("steps", "tokens") for _ in block[f]
    ]


def test_counter_samples_carry_each_samples_prefilled_steps_and_the_console_levels_them_as_learn(
    tmp_path: Path,
) -> None:
    """``counter_samples`` (the console's read: per-bin samples, no dict per interval) holds beside each
    sample its prefilled steps, as ``control.prefilled.prefilled_samples`` reads them off the same stored
    intervals; and ``kept_extend.corrected_estimate`` levels each bin's minority mode with them as
    ``levelled_intervals`` levels the intervals with that bin's mode explored: the console and learn give one
    answer. A window of an older plugin has none (``prefilled`` None), and the estimate is as before."""
    snaps = _snapshots(12, seed=5)
    with _stored(tmp_path / "new", snaps) as (db, sid):
        got = queries.counter_intervals(db, sid, 900.0, 2000.0)
        samples = queries.counter_samples(db, sid, 900.0, 2000.0)
    assert samples.per_bin == speedup.per_bin(got)
    assert samples.prefilled is not None and samples.prefilled == prefilled.prefilled_samples(got)
    mostly = {b.batch_size: b.ran_mostly for b in speedup.estimate(got).bins}
    assert mostly[16] == "drafted" and mostly[32] == "gated"
    masks = [[mostly[int(b)] == "drafted" for b in i["bins"]] for i in got]
    want = speedup.estimate(prefilled.levelled_intervals(got, masks))
    est, _ = kept_extend.corrected_estimate(samples.per_bin, samples.intervals, 0.0, samples.prefilled)
    assert [b.batch_size for b in est.bins] == [b.batch_size for b in want.bins]
    for mine, theirs in zip(est.bins, want.bins, strict=True):
        assert mine.gated_tok_s == pytest.approx(theirs.gated_tok_s, rel=1e-9)
        assert mine.drafted_tok_s == pytest.approx(theirs.drafted_tok_s, rel=1e-9)
    raw = {b.batch_size: b for b in speedup.estimate_per_bin(samples.per_bin, samples.intervals).bins}
    levelled = {b.batch_size: b for b in est.bins}
    assert levelled[16].gated_tok_s != raw[16].gated_tok_s  # the explored cells moved
    assert levelled[32].drafted_tok_s != raw[32].drafted_tok_s
    assert levelled[16].drafted_tok_s == raw[16].drafted_tok_s  # the steady ones did not
    older = [{key: value for key, value in snap.items() if key != "prefilled"} for snap in snaps]
    with _stored(tmp_path / "old", older) as (db, sid):
        plain = queries.counter_samples(db, sid, 900.0, 2000.0)
    assert plain.prefilled is None
    assert kept_extend.corrected_estimate(plain.per_bin, plain.intervals, 0.0, plain.prefilled)[0] == (
        speedup.estimate_per_bin(plain.per_bin, plain.intervals))


# ---- the slots and mix blocks (plugin 0.4.15 on) ---------------------------------------------------------

LISTS = ("slots", "mix")
ACCEPTS = (4.0, 2.0)  # half a part's requests accept 4 a verify, half 2: A 3.0, H 24 / 9 = 2.667
H = 24 / 9


def _part(c: ec.EngineCounters, size: int, verifies: int) -> None:
    """One exploring part of ``size`` requests (half of them accepting 4 a verify, half 2) drafted for
    ``verifies`` steps, then out of it: its mix counts in the bin of ``size`` (plugin/part_mix.py)."""
    reqs = [Req(ACCEPTS[k % 2]) for k in range(size)]
    c.part_mix.batch(True, True, size, lambda: reqs)
    for _ in range(verifies):
        for req in reqs:
            req.verify()
    c.part_mix.batch(False, False, size, lambda: reqs)


def _mix_workload(c: ec.EngineCounters, rng: random.Random, intervals: int,
                  orphans: bool = True) -> list[dict[str, Any]]:  # fmt: skip
    """A snapshot of ``c`` after each of ``intervals`` intervals under ceiling 16: bin 16 drafts steadily (40
    tokens a 10-ms step) with explored gated steps (16 a 7-ms step); bin 32 gates steadily (32 tokens a 9-ms
    step, 3556 tok/s) with explored drafted steps, their requests a gated stream's batch: 93 tokens a 25-ms
    step (3720 tok/s, 1.046 of gated), 2.9 a request where a steady drafting stream's requests commit H =
    2.667 (slots x H: 3413 tok/s, 0.96 of gated). A prefill in one step in 10. Two exploring parts of 28-32
    requests an interval (bin 32); with ``orphans`` one interval in three also a part whose first batch (40)
    lies in bin 48, where no step of the interval ran (the part ran on across a scrape)."""
    snaps = []
    for k in range(intervals):
        steps: list[tuple[int, bool, int, float]] = [
            *[(16, True, 40, 0.010)] * rng.randint(50, 70),
            *[(16, False, 16, 0.007)] * rng.randint(6, 10),
            *[(32, False, 32, 0.009)] * rng.randint(50, 70),
            *[(32, True, 93, 0.025)] * rng.randint(8, 12),
        ]
        rng.shuffle(steps)
        for batch, drafted, tokens, step_s in steps:
            pre = rng.random() < 0.1
            c.record(batch, drafted, tokens + rng.randint(-1, 1), step_s * rng.uniform(0.97, 1.03) +
                     (0.003 if pre else 0.0), outside_s=rng.uniform(0.0, 0.0005), prefilled=pre)  # fmt: skip
        for _ in range(2):
            _part(c, 2 * rng.randint(14, 16), rng.randint(3, 8))
        if orphans and k % 3 == 1:
            _part(c, 40, 4)
        snaps.append(c.snapshot())
    return snaps


def _mix_snapshots(intervals: int, seed: int, orphans: bool = True) -> list[dict[str, Any]]:
    """A plugin 0.4.15's snapshots of one rank: the counters at start, then after each interval."""
    c = _counters(64)
    return [c.snapshot(), *_mix_workload(c, random.Random(seed), intervals, orphans)]


def _lists_on_bins(interval: Mapping[str, Any], on: Sequence[int]) -> dict[str, dict[str, list[Any]]]:
    """A live interval's ``slots`` and ``mix`` blocks taken on the bins ``on`` (a stored interval's)."""
    return _on_bins({name: interval[name] for name in LISTS}, interval["bins"], on)


def test_stored_intervals_carry_the_slots_and_mix_blocks_of_the_same_snapshots(tmp_path: Path) -> None:
    """Through the real scraper and sink into SQLite: each stored interval's ``slots`` and ``mix`` are what
    ``rates()`` gives the same consecutive snapshots, value for value (floats, as ``rates()`` gives them), on
    the bins the interval stored; a part whose first batch's bin ran no step in its interval (48) has that
    bin among the interval's, with zero decode counts as in ``rates()``; nothing is left behind."""
    snaps = _mix_snapshots(12, seed=7)
    got, live = _read_back(tmp_path, snaps)
    assert [i["ts"] for i in got] == [i["ts"] for i in live] and {i["res_s"] for i in got} == {0}
    for stored, interval in zip(got, live, strict=True):
        assert {name: stored[name] for name in LISTS} == _lists_on_bins(interval, stored["bins"])
        for name in LISTS:  # a bin the stored interval lacks had none
            totals = {key: sum(values) for key, values in stored[name].items()}
            assert totals == {key: sum(values) for key, values in interval[name].items()}
        assert {m: stored[m] for m in ec.MODES} == _on_bins({m: interval[m] for m in ec.MODES},
                                                          interval["bins"], stored["bins"])  # fmt: skip
    assert {type(v) for i in got for name in LISTS for values in i[name].values() for v in values} == {float}
    assert all(sum(i["mix"]["parts"]) >= 2 and sum(i["slots"]["drafted"]) > 0 for i in got)
    orphaned = [i for i in got if 48 in i["bins"]]
    assert len(orphaned) == 4
    for interval in orphaned:
        at = interval["bins"].index(48)
        assert interval["mix"]["parts"][at] == 1.0 and interval["mix"]["requests"][at] == 40.0
        assert interval["drafted"]["steps"][at] == interval["gated"]["steps"][at] == 0
    assert all(48 not in i["bins"] for i in got if i not in orphaned)


def test_a_rollup_buckets_slots_and_mix_are_rates_over_the_bucket(tmp_path: Path) -> None:
    """The minute and hour tiers, rows past the watermark added to their buckets: a bucket's blocks are
    ``rates()`` of the snapshots around its intervals (the counts exact, the sums within a nanosecond per
    interval)."""
    snaps = _mix_snapshots(30, seed=8)
    live = _live(snaps)
    with _stored(tmp_path, snaps, fold_before=20) as (db, sid):
        reads = [queries.counter_intervals(db, sid, 900.0, 1200.0, max_intervals=limit) for limit in (10, 2)]
    for read, res in zip(reads, (60, 3600), strict=True):
        assert {i["res_s"] for i in read} == {res}
        assert [i["ts"] for i in read] == ([960, 1020, 1080, 1140] if res == 60 else [0])
        for bucket in read:
            inside = [k for k, i in enumerate(live) if math.floor(i["ts"] / res) * res == bucket["ts"]]
            whole = ec.rates(snaps[inside[0]], snaps[inside[-1] + 1])
            want = _lists_on_bins(whole, bucket["bins"])
            assert bucket["slots"] == want["slots"]
            for field in ec.MIX_FIELDS:
                tolerance = len(inside) * 1e-9 if field.endswith("_sum") else 0
                assert bucket["mix"][field] == pytest.approx(want["mix"][field], rel=0, abs=tolerance)
            assert sum(bucket["mix"]["parts"]) == sum(whole["mix"]["parts"]) > 0


def test_after_an_upgrade_the_slots_and_mix_start_at_the_first_interval_with_a_row(tmp_path: Path) -> None:
    """An older plugin's intervals (no blocks), then (a restart) plugin 0.4.15's: no ``slots`` or ``mix`` key
    before its first interval, both from it on, each what ``rates()`` gives the snapshots."""
    rng = random.Random(9)
    old = _counters(64)
    before = [_without(snap, "slots", "mix") for snap in [old.snapshot(), *_mix_workload(old, rng, 4)]]
    new = _counters(64, started_at=900.0)
    snaps = [*before, *_mix_workload(new, rng, 5)]
    got, live = _read_back(tmp_path, snaps)
    first = len(before) - 1  # the interval across the restart: plugin 0.4.15's first
    assert [i["ts"] for i in got] == [i["ts"] for i in live]
    assert [[name in i for name in LISTS] for i in got] == [[k >= first] * 2 for k in range(len(got))]
    assert all("prefilled" in i for i in got)  # the prefilled block as before: both plugins publish it
    for stored, interval in zip(got[first:], live[first:], strict=True):
        assert {name: stored[name] for name in LISTS} == _lists_on_bins(interval, stored["bins"])


def test_a_window_without_slots_or_mix_rows_reads_back_as_it_always_did(tmp_path: Path) -> None:
    """A plugin before 0.4.15 (the same snapshots without the blocks): no ``slots`` or ``mix`` key, the
    intervals otherwise those plugin 0.4.15's rows give, on every tier (no part here ran on into a bin of no
    step: such a part's bin is the one thing the blocks add to an interval)."""
    snaps = _mix_snapshots(14, seed=10, orphans=False)
    older = [_without(snap, *LISTS) for snap in snaps]
    reads: dict[str, list[list[dict[str, Any]]]] = {}
    for name, stored in (("older", older), ("0.4.15", snaps)):
        reads[name], samples = _reads_on_every_tier(tmp_path / name, stored)
        reads[name].append([{"per_bin": samples.per_bin, "prefilled": samples.prefilled}])
    assert [{i["res_s"] for i in read} for read in reads["older"][:3]] == [{0}, {60}, {3600}]
    for old, new in zip(reads["older"], reads["0.4.15"], strict=True):
        assert old and all(not set(LISTS) & set(i) for i in old)
        assert old == [_without(i, *LISTS) for i in new]
    assert all(set(LISTS) <= set(i) for read in reads["0.4.15"][:3] for i in read)


def _with_ceiling(intervals: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The intervals as learn holds them: each with the ceiling it ran under (16)."""
    return [{**i, learn_counters.CEILING_KEY: CEILING} for i in intervals]


def test_learn_levels_the_stored_explored_drafting_for_the_mix_as_it_levels_its_own(tmp_path: Path) -> None:
    """``control.mix_levelled.mix_levelled_intervals`` with ``learn_counters.ceiling_masks`` gives the stored
    intervals the levelled drafted tokens it gives learn's live ones: bin 32's explored drafting at slots x H
    (H 2.667 of the parts' requests, where its steps committed 2.9 a request), and so does ``as_choices``."""
    snaps = _mix_snapshots(12, seed=11)
    got, live = map(_with_ceiling, _read_back(tmp_path, snaps))
    window = mix_levelled.levelling_mix(got)
    assert window is not None and window == mix_levelled.levelling_mix(live)
    assert window.harmonic == pytest.approx(H) and window.arithmetic == pytest.approx(3.0)
    levelled = mix_levelled.mix_levelled_intervals(got, learn_counters.ceiling_masks(got))
    own = mix_levelled.mix_levelled_intervals(live, learn_counters.ceiling_masks(live))
    for stored, interval, raw in zip(levelled, own, got, strict=True):
        assert {m: stored[m] for m in ec.MODES} == _on_bins({m: interval[m] for m in ec.MODES},
                                                          interval["bins"], stored["bins"])  # fmt: skip
        assert stored["prefilled"] == _on_bins(interval["prefilled"], interval["bins"], stored["bins"])
        at = stored["bins"].index(32)
        slots = raw["slots"]["drafted"][at]
        assert stored["drafted"]["tokens"][at] == pytest.approx(slots * H)
        assert stored["drafted"]["tokens"][at] < raw["drafted"]["tokens"][at]  # moved: 2.9 a request to H
        i16 = stored["bins"].index(16)  # the steady drafted cell: as measured
        assert stored["drafted"]["tokens"][i16] == raw["drafted"]["tokens"][i16]
    scale = 1 / (1 - learn_counters.DEFAULT_KEPT_EXTEND_TAX)
    chosen = learn_counters.as_choices(got, learn_counters.ceiling_masks(got), scale)
    learned = learn_counters.as_choices(live, learn_counters.ceiling_masks(live), scale)
    for stored, interval in zip(chosen, learned, strict=True):
        fields = {m: {f: interval[m][f] for f in FIELDS} for m in ec.MODES}
        assert {m: {f: stored[m][f] for f in FIELDS} for m in ec.MODES} == _on_bins(
            fields, interval["bins"], stored["bins"]
        )


def test_the_warm_start_reads_the_stored_explored_drafting_levelled_for_the_mix(tmp_path: Path) -> None:
    """Learn's warm start (control/warm_start.py ``from_counters``) over a plugin 0.4.15's stored intervals,
    the knob of 16 stored beside them: bin 32's explored drafting read raw pays (1.046 of gated), levelled
    for its requests' mix it does not (0.96), so the warm start puts the crossover between 16 and 32 and
    starts at 24, exactly as over learn's live intervals; the same stored intervals without the blocks (what
    storage gave before it kept them) read drafting as paying at every load and start at 32."""
    snaps = _mix_snapshots(24, seed=12)
    got, live = _read_back(tmp_path, snaps)
    ceilings = [CEILING] * len(got)
    stored = warm_start.from_counters(got, 64, ceilings=ceilings)
    own = warm_start.from_counters(live, 64, ceilings=ceilings)
    raw = warm_start.from_counters([_without(i, *LISTS) for i in got], 64, ceilings=ceilings)
    assert stored is not None and raw is not None
    assert stored == own and stored.ceiling == 24 and "crossover ~31 (31-32)" in stored.line
    assert raw.ceiling == 32 and "crossover > 32 (pays at every load seen)" in raw.line


LIST_STORED = (*SLOTS_MODES.values(), *MIX_ROWS)
blocks_row = st.tuples(
    st.sampled_from([T0 + 5 * k for k in range(6)] + [T0 + 2.5, T0 + 3600.0]),
    st.sampled_from([1, 2, 3, 4, 6, 8, 12, 16, 64, 96]),
    # the blocks' rows twice as likely as the others
    st.sampled_from(["drafted", "gated", "settling", "outside_drafted", "outside_gated", *PREFILLED_STORED,
                     *LIST_STORED, *LIST_STORED]),
    counts,
    counts,
    seconds,
)


def _with_blocks_reference(rows: list[tuple[Any, ...]], res_s: int) -> list[dict[str, Any]]:
    """The reference intervals of the rows: the decode rows' with every (interval, bin) of a slots or mix
    row among them (zero decode counts where it has no decode row); from the first interval with a prefilled
    row on its ``prefilled`` block (``_with_prefilled_reference``), from the first with a slots or mix row on
    its ``slots`` and ``mix``: per bin the rows' column (``SLOTS_MODES``: tokens; ``MIX_MODES``) summed one
    by one, rounded as rates() rounds it, zeros where none."""
    cells: reference.Cells = {}
    sums: dict[tuple[float, int, str], list[float]] = {}
    for ts, b, mode, *values in rows:
        if mode in PREFILLED_STORED or mode in LIST_STORED:
            cell = sums.setdefault((float(ts), int(b), mode), [0.0, 0.0, 0.0])
            for k, v in enumerate(values):
                cell[k] += float(v)
        if mode not in PREFILLED_STORED:
            reference.add_row(cells, ts, b, mode, values)  # a block's row: its bin shows, no decode counts
    out = reference.intervals_of(cells, res_s)

    def first(modes: Sequence[str]) -> int:
        seen = [k for k, i in enumerate(out) for b in i["bins"] for m in modes if (i["ts"], b, m) in sums]
        return min(seen, default=len(out))

    def column(interval: Mapping[str, Any], stored: str, k: int) -> list[float]:
        return [sums.get((interval["ts"], b, stored), [0.0, 0.0, 0.0])[k] for b in interval["bins"]]

    for interval in out[first(PREFILLED_STORED):]:
        interval["prefilled"] = {mode: {
            "steps": [int(v) for v in column(interval, stored, 0)],
            "tokens": [int(v) for v in column(interval, stored, 1)],
            "time_s": [round(v, TIME_DECIMALS) for v in column(interval, stored, 2)],
        } for mode, stored in PREFILLED_MODES.items()}  # fmt: skip
    for interval in out[first(LIST_STORED):]:
        interval["slots"] = {mode: [round(v, TIME_DECIMALS) for v in column(interval, stored, 1)]
                             for mode, stored in SLOTS_MODES.items()}  # fmt: skip
        interval["mix"] = {
            field: [round(v, TIME_DECIMALS) for v in column(interval, stored, FIELDS.index(name))]
            for field, (stored, name) in MIX_MODES.items()
        }
    return out


@SETTINGS
@given(rows=st.lists(blocks_row, max_size=60), res_s=st.sampled_from([0, 60, 3600]))
def test_slots_and_mix_blocks_equal_the_rows_summed_per_interval_and_bin(rows: list[tuple[Any, ...]],
                                                                         res_s: int) -> None:  # fmt: skip
    """Random rows, slots and mix ones among them (in bins and intervals without a decode row too, which
    they add to the intervals), prefilled ones beside them: the reference's intervals, value for value and
    type for type (the blocks' lists floats)."""
    got = _intervals_of(_Cells.of(rows, INTERVALS_READ), res_s)
    assert got == _with_blocks_reference(rows, res_s)
    lists = [values for i in got if "slots" in i for name in LISTS for values in i[name].values()]
    assert all(type(v) is float for values in lists for v in values)


def test_counter_samples_carry_each_drafted_samples_slots_and_the_windows_mix_on_every_tier(
    tmp_path: Path,
) -> None:
    """``counter_samples`` (the console's read) holds beside each drafted sample its slots and the window's
    mix sums, as ``control.mix_levelled`` reads them off the same stored intervals (``slot_samples``,
    ``window_mix``), raw and rolled up; and ``kept_extend.corrected_estimate`` with them levels bin 32's
    explored drafting (the bin ran mostly gated) at slots x H, as ``as_choices`` levels learn's drafting side
    of the same intervals under their ceiling: the console and learn give one answer."""
    snaps = _mix_snapshots(30, seed=12)
    with _stored(tmp_path, snaps, fold_before=20) as (db, sid):
        for limit in (2000, 10, 2):
            got = queries.counter_intervals(db, sid, 900.0, 1200.0, max_intervals=limit)
            samples = queries.counter_samples(db, sid, 900.0, 1200.0, max_intervals=limit)
            assert samples.per_bin == speedup.per_bin(got)
            assert samples.slots == mix_levelled.slot_samples(got)
            assert samples.mix_sums is not None
            window = mix_levelled.window_of(samples.mix_sums, samples.mix_intervals or ())
            expected = mix_levelled.window_mix(got)
            assert window is not None and expected is not None and window.intervals == expected.intervals
            assert window[:4] == pytest.approx(expected[:4])
            assert window.harmonic_rel_var == pytest.approx(expected.harmonic_rel_var)
        got = _with_ceiling(queries.counter_intervals(db, sid, 900.0, 1200.0))
        samples = queries.counter_samples(db, sid, 900.0, 1200.0)
    assert samples.mix_sums is not None
    mix = mix_levelled.window_of(samples.mix_sums, samples.mix_intervals or ())
    est, _ = kept_extend.corrected_estimate(samples.per_bin, samples.intervals, 0.0, samples.prefilled,
                                            samples.slots, mix)  # fmt: skip
    raw = {b.batch_size: b for b in speedup.estimate_per_bin(samples.per_bin, samples.intervals).bins}
    at_32 = {b.batch_size: b for b in est.bins}[32]
    assert at_32.ran_mostly == "gated"
    chosen = learn_counters.as_choices(got, learn_counters.ceiling_masks(got), 1.0)
    cells = [(i["drafted"]["tokens"][i["bins"].index(32)], i["drafted"]["time_s"][i["bins"].index(32)])
             for i in chosen if 32 in i["bins"]]  # fmt: skip
    assert at_32.drafted_tok_s == pytest.approx(sum(t for t, _ in cells) / sum(s for _, s in cells), rel=1e-9)
    assert at_32.drafted_tok_s < 0.95 * raw[32].drafted_tok_s  # 2.9 tokens a request levelled to H = 2.667
