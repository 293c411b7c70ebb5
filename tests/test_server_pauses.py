"""A server's pauses (scheduler stalls, long collections, the launcher's held Python) from /server_info into
``server_pause`` and back: the extraction (collectors/sglang/pauses.py) from blocks the plugin's own classes
made, malformed blocks, the scraper and the sink (a block read again stores nothing twice), the query,
retention, and schema v5 -> v6."""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pandas as pd
import plotly.graph_objects as go
import pytest
from spectower.collectors.sglang.pauses import DETAIL_CHARS, NewPauses, PauseRow, pause_rows
from spectower.collectors.sglang.scraper import ScrapeResult, SglangScraper
from spectower.collectors.sink import StorageSink
from spectower.console import charts, data, pause_marks
from spectower.plugin import gc_pauses, stall_watch
from spectower.storage import SCHEMA_VERSION, Database, open_database, queries
from spectower.storage.retention import DAY_S, apply_retention
from sqlalchemy import inspect, text

from tests.conftest import REAL_DATA
from tests.test_engine_counters import FakeClock
from tests.test_gpu_call_summary import _stalled
from tests.test_storage_schema import schema_of, stamped

URL = "http://sglang.test:30000"
STALL_AT = 1_796_463_029.5  # tests/test_gpu_call_summary.py's stall: a 1.1-s wait for an extend's result
AT = 1_796_463_000.0


def _gc_block(at: float, took: tuple[float, ...], generation: int = 2) -> dict[str, Any]:
    """A process's ``gc`` block from the plugin's own timer: a short collection, then ``took`` long ones,
    each ending a second after the one before (wall clock from ``at``)."""
    clock = FakeClock()
    pauses = gc_pauses.GcPauses(threshold_s=0.05, clock=clock, wall=lambda: at + clock.now - 100.0)
    for seconds in (0.001, *took):
        pauses.callback("start", {"generation": generation})
        clock.now += seconds
        pauses.callback("stop", {"generation": generation})
        clock.now += 1.0
    return pauses.report()


def _launcher() -> dict[str, Any]:
    """The launcher's block (plugin/launcher_state.py's shape) from the plugin's timer and watch thread."""
    watch = stall_watch.StallWatch(None, 0, wall=lambda: AT + 20.0)
    for late in (0.12, 0.44):  # the first is late but not held long enough to be kept
        watch.watch_once(0.0, late_s=late)
    return {"pid": 637, "gc": _gc_block(AT + 10.0, (0.37,)) | {"frozen": 0}, "watch": watch.report()}


def _document() -> dict[str, Any]:
    """Two DP ranks: rank 0 with a stall and a long collection, rank 1 a long collection; the launcher's
    block on both, as SGLang's launcher adds it."""
    launcher = _launcher()
    ranks = [
        {"spec_max_bs": 16, "loop": _stalled(), "gc": _gc_block(AT + 1.0, (0.21,), generation=1)},
        {"spec_max_bs": 16, "gc": _gc_block(AT + 2.0, (0.06, 0.5))},
    ]
    info = json.loads((REAL_DATA / "sglang-0.5.17-h200/server_info_after.json").read_text())
    info["internal_states"] = [{"dp_rank": i, "spectower": block | {"launcher": launcher}}
                               for i, block in enumerate(ranks)]  # fmt: skip
    return info


def _said(rows: list[PauseRow]) -> list[tuple[str, str, float, str | None]]:
    return [(r.process, r.kind, round(r.seconds, 3), r.detail) for r in rows]


def test_every_pause_of_every_rank_and_the_launchers_once() -> None:
    rows = pause_rows(_document())
    stall = rows[0]
    assert (stall.process, stall.kind, stall.ts) == ("rank 0", "stall", STALL_AT)
    assert stall.seconds == pytest.approx(1.1, abs=0.02)
    assert stall.detail is not None and stall.detail.startswith("waiting for a batch's result 1.10 s")
    assert _said(rows[1:]) == [
        ("rank 0", "gc", 0.21, "gen 1"),
        ("rank 1", "gc", 0.06, "gen 2"),
        ("rank 1", "gc", 0.5, "gen 2"),
        ("launcher", "gc", 0.37, "gen 2"),
        ("launcher", "held", 0.44, None),  # once, though both ranks carry the block
    ]
    assert rows[-1].ts == AT + 20.0 and rows[-2].ts == pytest.approx(AT + 11.371, abs=1e-3)  # its end


def test_a_long_cause_is_cut() -> None:
    doc = _document()
    loop = doc["internal_states"][0]["spectower"]["loop"]
    loop["recent"][0]["batches"][0]["mode"] = "X" * 1000  # the batch named in the cause
    (stall,) = [r for r in pause_rows(doc) if r.kind == "stall"]
    assert stall.detail is not None and len(stall.detail) == DETAIL_CHARS


MALFORMED: list[Any] = [
    None, "x", [], 3, {"internal_states": "x"}, {"internal_states": [None, 3, "x"]},
    {"internal_states": [{"spectower": []}, {"spectower": "x"}]},
    {"internal_states": [{"spectower": {"loop": {"recent": 5}, "gc": [1, 2], "launcher": "x"}}]},
    {"internal_states": [{"spectower": {"loop": {"recent": [{"at": 1e9, "seconds": 1.0, "batches": 7}]},
                                        "gc": {"recent_long": "nope"}, "launcher": {"gc": 3, "watch": []}}}]},
    {"internal_states": [{"spectower": {"loop": {"recent": [{"at": "x", "seconds": None}, "y"]},
                                        "gc": {"recent_long": [{"at": float("nan"), "seconds": 1.0},
                                                               {"at": 1e9, "seconds": -1.0},
                                                               {"at": 1e9, "seconds": float("inf")},
                                                               {"at": True, "seconds": 1.0}, 7]},
                                        "launcher": {"gc": {"recent_long": [{"at": None}]},
                                                     "watch": {"recent_held": {"at": 1e9}}}}}]},
]  # fmt: skip


@pytest.mark.parametrize("doc", MALFORMED)
def test_a_malformed_document_gives_no_rows_and_no_exception(doc: Any) -> None:
    assert pause_rows(doc) == []


def test_a_block_that_does_not_read_costs_only_its_own_rows() -> None:
    doc = _document()
    doc["internal_states"][0]["spectower"]["loop"] = {"recent": 5}  # loop_report cannot iterate it
    doc["internal_states"][1]["spectower"]["gc"] = {"recent_long": [None, {"at": "x"}]}
    assert _said(pause_rows(doc)) == [("rank 0", "gc", 0.21, "gen 1"), ("launcher", "gc", 0.37, "gen 2"),
                                      ("launcher", "held", 0.44, None)]  # fmt: skip


def test_new_pauses_hands_each_over_once() -> None:
    seen = NewPauses()
    rows = pause_rows(_document())
    assert seen.new(rows) == rows
    assert seen.new(pause_rows(_document())) == []
    later = PauseRow(AT + 99.0, 0.4, "gc", "launcher", "gen 2")
    assert seen.new([*rows, later]) == [later]


@pytest.fixture
def db(db_url: str) -> Iterator[Database]:
    d = open_database(db_url)
    yield d
    d.close()


def _scrape(rows: list[PauseRow], ts: float = AT + 30.0) -> ScrapeResult:
    return ScrapeResult(ts=ts, readings=[], info=None, restarted=False, duration_s=0.0, pauses=rows)


def test_the_sink_stores_them_once_and_the_query_reads_them(db: Database) -> None:
    """Both backends: the same rows handed over twice (a restarted collector reads the same lists again) are
    stored once, and the writer refuses nothing."""
    sink = StorageSink(db)
    rows = pause_rows(_document())
    for _ in range(2):
        sink.engine(URL, _scrape(rows))
        assert sink.flush(timeout=30)
    stats = sink.writer.stats()
    assert stats.rejected == 0 and stats.rejected_by_kind == {}
    sid = db.server_id(URL)
    stored = queries.server_pauses(db, sid, AT, STALL_AT + 1)
    assert len(stored) == len(rows) == 6
    assert [(p.ts, p.process, p.kind) for p in stored] == sorted((r.ts, r.process, r.kind) for r in rows)
    stall = next(p for p in stored if p.kind == "stall")
    assert (stall.process, stall.ts, stall.detail) == ("rank 0", STALL_AT, rows[0].detail)
    assert {p.process for p in queries.server_pauses(db, sid, AT, STALL_AT + 1, min_seconds=0.3)} == {
        "rank 0", "rank 1", "launcher"}  # fmt: skip
    assert len(queries.server_pauses(db, sid, AT, STALL_AT + 1, min_seconds=0.3)) == 4
    assert queries.server_pauses(db, sid, AT + 100.0, AT + 200.0) == []


def _pause(server_id: int, ts: float, seconds: float) -> dict[str, Any]:
    return {"server_id": server_id, "ts": ts, "seconds": seconds, "kind": "gc", "process": "launcher"}


def test_the_query_keeps_the_longest_past_its_limit(tmp_path: Path) -> None:
    with open_database(tmp_path / "p.db") as db:
        sid = db.server_id(URL)
        db.insert_many("server_pause", [_pause(sid, AT + i, 0.1 * (i % 5 + 1)) for i in range(20)])
        kept = queries.server_pauses(db, sid, AT, AT + 100.0, limit=4)
        assert [p.seconds for p in kept] == pytest.approx([0.5] * 4)
        assert [p.ts for p in kept] == sorted(p.ts for p in kept)


def _transport(doc: dict[str, Any]) -> httpx.MockTransport:
    metrics = (REAL_DATA / "sglang-0.5.17-h200/metrics_after.txt").read_text()

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/metrics":
            return httpx.Response(200, text=metrics)
        if request.url.path == "/server_info":
            return httpx.Response(200, text=json.dumps(doc))
        return httpx.Response(404)

    return httpx.MockTransport(handler)


def test_the_scraper_hands_over_only_pauses_it_has_not_seen(tmp_path: Path) -> None:
    """Every /server_info read carries the same lists: the first scrape hands them over, the next one none
    until the plugin reports a new pause."""
    doc = _document()
    ticks = iter(range(0, 10_000, 6))  # every scrape reads /server_info (every 5 s)

    async def scrapes() -> list[ScrapeResult]:
        async with httpx.AsyncClient(transport=_transport(doc)) as client:
            scraper = SglangScraper(URL, client, clock=lambda: AT + next(ticks))
            out = [await scraper.scrape(), await scraper.scrape()]
            doc["internal_states"][0]["spectower"]["launcher"] = newer = copy.deepcopy(_launcher())
            newer["watch"]["recent_held"].append({"at": AT + 50.0, "seconds": 0.3})
            out.append(await scraper.scrape())
            return out

    first, second, third = asyncio.run(scrapes())
    assert len(first.pauses) == 6 and second.pauses == []
    assert [(p.process, p.kind, p.ts) for p in third.pauses] == [("launcher", "held", AT + 50.0)]
    with open_database(tmp_path / "s.db") as db:
        sink = StorageSink(db)
        for result in (first, second, third):
            sink.engine(URL, result)
        assert sink.flush(timeout=30)
        assert len(queries.server_pauses(db, db.server_id(URL), 0.0, AT + 1e5)) == 7


def test_retention_drops_pauses_with_the_raw_samples(tmp_path: Path) -> None:
    with open_database(tmp_path / "r.db") as db:
        sid = db.server_id(URL)
        db.insert_many("server_pause", [_pause(sid, AT - 20 * DAY_S, 0.4), _pause(sid, AT - DAY_S, 0.4)])
        deleted = apply_retention(db.engine, raw_days=14, now=AT)
        assert deleted["server_pause"] == 1
        assert [p.ts for p in queries.server_pauses(db, sid, 0.0, AT)] == [AT - DAY_S]


def test_a_v5_database_gets_the_pause_table_and_keeps_its_rows(tmp_path: Path) -> None:
    path = tmp_path / "v5.db"
    stamped(
        path,
        5,
        """
        DROP TABLE server_pause;
        INSERT INTO server (id, url, first_seen, last_seen) VALUES (1, 'http://v5:30000', 100.0, 200.0);
        INSERT INTO engine_sample (server_id, dp_rank, ts, num_running_reqs) VALUES (1, 0, 150.0, 3.0);
        """,
    )
    with open_database(path) as db:
        assert db.schema_version == SCHEMA_VERSION == 7
        assert [r.num_running_reqs for r in queries.latest_engine_samples(db)] == [3.0]
        assert "server_pause" in inspect(db.engine).get_table_names()
        with db.engine.connect() as conn:
            assert conn.execute(text("SELECT value FROM meta WHERE key='schema_version'")).scalar() == "7"
        sink = StorageSink(db)
        sink.engine("http://v5:30000", _scrape(pause_rows(_document())))
        assert sink.flush(timeout=30)
        assert len(queries.server_pauses(db, 1, 0.0, AT + 1e5)) == 6
    assert (tmp_path / "v5.db.schema-v5.bak").exists()
    assert schema_of(f"sqlite:///{path}") == schema_of(f"sqlite:///{tmp_path / 'fresh.db'}")


def _pause_frame() -> pd.DataFrame:
    return pd.DataFrame(
        [[AT + 5.0, 1.2, "stall", "rank 0", "waiting for a batch's result 1.10 s"],
         [AT + 1.0, 0.37, "gc", "launcher", "gen 2"], [AT + 3.0, 0.3, "held", "launcher", None]],
        columns=pause_marks.PAUSE_COLUMNS,
    )  # fmt: skip


def test_the_marks_are_a_valid_plotly_trace_on_a_second_axis() -> None:
    series = pd.DataFrame({"ts": [AT, AT + 10.0], "output_tok_s": [100.0, 120.0]})
    fig = pause_marks.mark_pauses(charts.timeseries(series, {"output_tok_s": "output"}, "Throughput"),
                                  _pause_frame())  # fmt: skip
    plain = fig.to_dict()
    built = go.Figure(fig.__dict__["_plain"])  # validated: every key is a plotly attribute
    assert plain == go.Figure(fig.__dict__["_plain"], _validate=False).to_dict()
    marks = plain["data"][-1]
    assert marks["name"] == pause_marks.PAUSE_TRACE and marks["text"] == [
        "launcher gc 0.37 s (gen 2)", "launcher Python held 0.30 s",
        "rank 0 stall 1.20 s: waiting for a batch's result 1.10 s"]  # fmt: skip
    assert built.layout.yaxis2.overlaying == "y" and built.layout.yaxis2.side == "right"
    # a figure plotly already built takes the marks through its own calls
    built_first = charts.timeseries(series, {"output_tok_s": "output"}, "Throughput")
    assert built_first.layout.title.text == "Throughput"
    marked = pause_marks.mark_pauses(built_first, _pause_frame(), stale=True)
    assert marked.to_dict()["data"][-1]["marker"]["color"] == [charts.COLOR_STALE] * 3
    empty = pause_marks.mark_pauses(charts.timeseries(series, {"output_tok_s": "output"}, "T"),
                                    _pause_frame().iloc[:0])  # fmt: skip
    assert [t["name"] for t in empty.to_dict()["data"]] == ["output"]


def test_the_csv_has_a_row_per_pause() -> None:
    series = pd.DataFrame({"ts": [AT, AT + 4.0], "output_tok_s": [100.0, 120.0]})
    frame = pause_marks.with_pauses(series, _pause_frame())
    assert list(frame["ts"]) == [AT, AT + 1.0, AT + 3.0, AT + 4.0, AT + 5.0]
    assert list(frame.columns) == ["ts", "output_tok_s", "pause_seconds", "pause_kind", "pause_process",
                                   "pause_detail"]  # fmt: skip
    assert frame.iloc[1]["pause_detail"] == "gen 2" and frame.iloc[1]["pause_process"] == "launcher"
    assert pause_marks.with_pauses(series, _pause_frame().iloc[:0]) is series


def test_console_data_reads_the_window(tmp_path: Path) -> None:
    with open_database(tmp_path / "c.db") as db:
        sid = db.server_id(URL)
        db.insert_many("server_pause", [_pause(sid, AT + 1.0, 0.02), _pause(sid, AT + 2.0, 0.4)])
        frame = data.server_pauses(db, sid, AT, AT + 10.0, min_seconds=pause_marks.MIN_MARKED_S)
        assert list(frame.columns) == pause_marks.PAUSE_COLUMNS
        shown = frame[["ts", "seconds", "kind", "process"]].values.tolist()
        assert shown == [[AT + 2.0, 0.4, "gc", "launcher"]]
        assert data.server_pauses(db, sid, AT + 5.0, AT + 10.0).empty
