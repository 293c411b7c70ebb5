"""collectors.sglang.counters: the engine's decode counters read from /server_info per DP rank (a bad
block is one warning naming the field, the scrape goes on), turned into per-interval rows, carried by the
scraper and written by the sink into a real SQLite file; and from the real simulator end to end."""

from __future__ import annotations

import asyncio
import copy
import json
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from spectower.collectors.sglang.counters import CounterDeltas, CounterRow, read_counters
from spectower.collectors.sglang.scraper import SglangScraper
from spectower.collectors.sink import StorageSink
from spectower.control import speedup
from spectower.plugin import engine_counters as ec
from spectower.storage import Database, open_database, queries

from benchmarks.sim_fidelity import TokenClock, stream_worker
from benchmarks.simulator_process import SimulatorFactory
from tests.conftest import REAL_DATA

METRICS = (REAL_DATA / "sglang-0.5.17-h200/metrics_after.txt").read_text()
INFO = json.loads((REAL_DATA / "sglang-0.5.17-h200/server_info_after.json").read_text())
URL = "http://sglang.test:30000"


def _counters(max_running: int = 16, started_at: float = 500.0) -> ec.EngineCounters:
    return ec.EngineCounters(max_running, clock=lambda: 0.0, wall=lambda: started_at)


def scrape_documents(docs: list[dict[str, Any]]) -> list[Any]:
    """The real scraper's result for each /server_info document in turn (with the H200's /metrics), read
    5 s apart from t=1000 over an httpx transport that serves them."""
    served = iter(docs)

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/metrics":
            return httpx.Response(200, text=METRICS)
        if request.url.path == "/server_info":
            return httpx.Response(200, text=json.dumps(next(served)))
        return httpx.Response(404)

    ticks = iter(1000.0 + 5.0 * i for i in range(len(docs)))

    async def scrape_all() -> list[Any]:
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
            scraper = SglangScraper(URL, client, server_info_every_s=0.0, clock=lambda: next(ticks))
            return [await scraper.scrape() for _ in docs]

    return asyncio.run(scrape_all())


@contextmanager
def stored_documents(tmp_path: Path, docs: list[dict[str, Any]],
                     fold_before: int | None = None) -> Iterator[tuple[Database, int]]:  # fmt: skip
    """The documents scraped in turn (``scrape_documents``) and written by the real sink into a SQLite file
    under ``tmp_path``: the open database and the server's id. ``fold_before``: the rollups are folded once
    the scrapes before that one are stored, so the later ones' rows lie past the watermark."""
    db = open_database(tmp_path / "db.sqlite")
    sink = StorageSink(db)
    try:
        for k, result in enumerate(scrape_documents(docs)):
            if k == fold_before:
                assert sink.flush()
                db.update_rollups()
            sink.engine(URL, result)
        assert sink.flush()
        sid = queries.server_by_url(db, URL).id
        assert sid is not None
        yield db, sid
    finally:
        db.close()


def _doc(*ranks: Any) -> dict[str, Any]:
    """The real 0.5.17 /server_info with one internal state per rank, each given a spectower block with
    these counters (a snapshot dict, or None for a rank without them)."""
    doc = copy.deepcopy(INFO)
    state = doc["internal_states"][0]
    doc["internal_states"] = []
    for i, counters in enumerate(ranks):
        block: dict[str, Any] = {"spec_max_bs": 8, "batches_drafted": 0, "batches_gated": 0}
        if counters is not None:
            block["counters"] = counters
        doc["internal_states"].append({**state, "dp_rank": i, "spectower": block})
    return doc


def test_read_counters_per_rank_and_a_bad_block_names_its_field() -> None:
    good = _counters().snapshot()
    bad = _counters().snapshot()
    bad["gated"]["steps"] = bad["gated"]["steps"][:-1]
    read = read_counters(_doc(good, bad, None))
    assert read.blocks == [good]
    assert read.warnings == [
        "/server_info: internal_states[1].spectower.counters.gated.steps must be a list as long as bins "
        "(rank left out)"
    ]
    # no plugin block, an older plugin, no internal_states, not even an object: nothing, no warning
    assert read_counters(INFO) == read_counters({"version": "x"}) == read_counters([1])
    assert read_counters(INFO).blocks == [] and read_counters(INFO).warnings == []
    odd = _counters().snapshot()
    odd["started_at"] = "yesterday"
    assert read_counters(_doc(odd)).warnings == [
        "/server_info: internal_states[0].spectower.counters.started_at must be a number (rank left out)"
    ]
    # a PD router: the decode workers' ranks
    router = {"prefill": [{"version": "p"}], "decode": [_doc(good), _doc(good)]}
    assert len(read_counters(router).blocks) == 2


def test_deltas_between_reads_summed_over_ranks() -> None:
    r0, r1 = _counters(), _counters()
    deltas = CounterDeltas()
    assert deltas.update(10.0, [r0.snapshot(), r1.snapshot()]) == []  # the first read: a baseline
    r0.record(4, True, 12, 0.02)
    r1.record(4, True, 8, 0.02)
    r1.record(16, False, 16, 0.01)
    rows = deltas.update(15.0, [r0.snapshot(), r1.snapshot()])
    assert rows == [
        CounterRow(15.0, 4, "drafted", 2, 20, 0.04),
        CounterRow(15.0, 16, "gated", 1, 16, 0.01),
        # plugin 0.4.15's slots (storage.counter_modes.SLOTS_MODES): each mode's requests per step summed
        CounterRow(15.0, 4, "slots_drafted", 0, 8, 0.0),
        CounterRow(15.0, 16, "slots_gated", 0, 16, 0.0),
    ]
    assert deltas.update(20.0, [r0.snapshot(), r1.snapshot()]) == []  # nothing happened: no rows
    # one rank fewer (a rank left out as malformed): not the same counters, so a new baseline
    r0.record(1, False, 1, 0.01)
    assert deltas.update(25.0, [r0.snapshot()]) == []
    r0.record(1, False, 1, 0.01)
    assert deltas.update(30.0, [r0.snapshot()]) == [CounterRow(30.0, 1, "gated", 1, 1, 0.01),
                                                    CounterRow(30.0, 1, "slots_gated", 0, 1, 0.0)]
    # a restart in between: the new process's own counts
    fresh = _counters(started_at=900.0)
    fresh.record(2, True, 5, 0.01)
    assert deltas.update(35.0, [fresh.snapshot()]) == [CounterRow(35.0, 2, "drafted", 1, 5, 0.01),
                                                       CounterRow(35.0, 2, "slots_drafted", 0, 2, 0.0)]
    deltas.forget()
    assert deltas.update(40.0, [fresh.snapshot()]) == []


def test_scraper_carries_counters_and_the_sink_stores_them(tmp_path: Path, caplog: Any) -> None:
    """Three scrapes of a server whose counters move between them, one with a malformed rank: rows in
    SQLite, read back as intervals, estimated as the counters say."""
    r0, r1 = _counters(), _counters()
    docs: list[dict[str, Any]] = [_doc(r0.snapshot(), r1.snapshot())]
    r0.record(8, True, 1200, 1.0)  # 1200 tok/s drafted
    r1.record(8, False, 400, 0.5)  # 800 tok/s gated
    docs.append(_doc(r0.snapshot(), r1.snapshot()))
    r0.record(8, True, 1200, 1.0)
    r1.record(8, False, 400, 0.5)
    broken = r1.snapshot()
    broken["drafted"]["time_s"][0] = -1.0
    docs.append(_doc(r0.snapshot(), broken))  # rank 1 left out: no interval this time
    db = open_database(tmp_path / "db.sqlite")
    sink = StorageSink(db)
    try:
        with caplog.at_level(logging.WARNING, logger="spectower.collectors.sglang.scraper"):
            results = scrape_documents(docs)
        assert [len(r.counters) for r in results] == [0, 4, 0]
        assert results[1].counters == [
            CounterRow(1005.0, 8, "drafted", 1, 1200, 1.0),
            CounterRow(1005.0, 8, "gated", 1, 400, 0.5),
            CounterRow(1005.0, 8, "slots_drafted", 0, 8, 0.0),  # plugin 0.4.15's slots
            CounterRow(1005.0, 8, "slots_gated", 0, 8, 0.0),
        ]
        assert results[2].readings
        assert "drafted.time_s must hold finite non-negative" in results[2].warnings[0]
        assert [r.message for r in caplog.records] == [f"{URL}: {results[2].warnings[0]}"]
        for r in results:
            sink.engine(URL, r)
        assert sink.flush()
        sid = queries.server_by_url(db, URL).id
        assert sid is not None
        intervals = queries.counter_intervals(db, sid, 900.0, 1100.0)
        assert [i["ts"] for i in intervals] == [1005.0]
        est = speedup.estimate(intervals)
        assert est.bins[0].batch_size == 8 and est.bins[0].speedup == pytest.approx(1.5)
    finally:
        db.close()


@pytest.mark.integration
def test_simulator_counters_reach_storage_and_the_estimate(
    simulator_factory: SimulatorFactory, tmp_path: Path
) -> None:
    """The real simulator under load with the knob at 2: scraped, stored, read back; drafted steps at
    batch 2, gated ones at batch 4."""
    sim = simulator_factory(decode_log_interval=5)
    t0 = time.time()
    db = open_database(tmp_path / "db.sqlite")
    sink = StorageSink(db)

    async def run() -> None:
        async with httpx.AsyncClient(timeout=30) as client:
            r = await client.post(
                f"{sim.base_url}/set_internal_state", json={"server_args": {"spectower_spec_max_bs": 2}}
            )
            assert r.json() == [True]
            scraper = SglangScraper(sim.base_url, client, server_info_every_s=0.0)
            sink.engine(sim.base_url, await scraper.scrape())
            for c in (4, 2, 4, 2):
                clock, stop = TokenClock(), time.monotonic() + 1.0
                await asyncio.gather(
                    *(stream_worker(client, sim.base_url, 2000, clock, stop, {}) for _ in range(c))
                )
                sink.engine(sim.base_url, await scraper.scrape())

    try:
        asyncio.run(run())
        assert sink.flush()
        sid = queries.server_by_url(db, sim.base_url).id
        assert sid is not None
        intervals = queries.counter_intervals(db, sid, t0, time.time() + 60)
        assert len(intervals) == 4 and {i["res_s"] for i in intervals} == {0}
        est = speedup.estimate(intervals)
        by_bin = {b.batch_size: b for b in est.bins}
        # the knob at 2: batches of 2 draft, batches of 3-4 (bin 4) are gated (but for a step or two
        # while the clients come and go)
        assert by_bin[2].drafted_steps > 10 * by_bin[2].gated_steps
        assert by_bin[4].gated_steps > 10 * by_bin[4].drafted_steps
        assert est.seconds > 3.0
    finally:
        db.close()
