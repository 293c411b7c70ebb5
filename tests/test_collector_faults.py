"""Issue #15 at the collector: hostile HTTP peers (a trickling body, a huge body, not an SGLang server),
a /server_info integer no column holds, a collector killed with -9 in the middle of a gap, and a second
collector on the same SQLite file. Every server here binds 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import time
import tracemalloc
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from spectower.collectors.daemon import Collector, DaemonConfig
from spectower.collectors.sglang.scraper import ScrapeError, SglangScraper
from spectower.collectors.sink import StorageSink
from spectower.storage import open_database, queries
from spectower.storage.models import EngineSample

from tests.conftest import REAL_DATA, collect_cli, db_rows
from tests.drip_server import LocalHttpServer, QuietHandler

METRICS = (REAL_DATA / "sglang-0.5.17-h200/metrics_after.txt").read_bytes()
INFO = json.loads((REAL_DATA / "sglang-0.5.17-h200/server_info_after.json").read_text())
VLLM_METRICS = (
    b"# HELP vllm:num_requests_running Number of requests in model execution batches.\n"
    b"# TYPE vllm:num_requests_running gauge\n"
    b'vllm:num_requests_running{model_name="meta-llama/Llama-3.1-8B-Instruct"} 3.0\n'
    b"# TYPE vllm:generation_tokens_total counter\n"
    b'vllm:generation_tokens_total{model_name="meta-llama/Llama-3.1-8B-Instruct"} 12345.0\n'
)
MB = 1024 * 1024


class FakeSglang:
    """An SGLang-shaped HTTP server on 127.0.0.1 whose answers a test switches: ok | down (503) |
    vllm | garbage | trickle (1 MB every 0.2 s, no length) | huge (50 MB, no length)."""

    def __init__(self, info: dict[str, Any] | None = None) -> None:
        self.mode = "ok"
        self.info = json.dumps(info if info is not None else INFO).encode()
        self.trickle_s = 8.0
        self.metrics_hits = 0
        fake = self

        class Handler(QuietHandler):
            protocol_version = "HTTP/1.0"

            def do_GET(self) -> None:
                mode = fake.mode
                if mode == "down":
                    self.send_error(503)
                    return
                if self.path.startswith("/server_info"):
                    self._send(fake.info, "application/json")
                    return
                if not self.path.startswith("/metrics"):
                    self.send_error(404)
                    return
                fake.metrics_hits += 1
                if mode == "ok":
                    self._send(METRICS)
                elif mode == "vllm":
                    self._send(VLLM_METRICS)
                elif mode == "garbage":
                    self._send(b"<html><body>502 Bad Gateway</body></html>\n")
                elif mode in ("trickle", "huge"):
                    self.send_response(200)
                    self.send_header("Content-Type", "text/plain")
                    self.end_headers()  # no Content-Length: the body ends when the connection closes
                    line = b"# " + b"x" * 1000 + b"\n"
                    chunk = line * (MB // len(line))
                    end = time.monotonic() + fake.trickle_s
                    try:
                        if mode == "huge":
                            for _ in range(50):
                                self.wfile.write(chunk)
                        else:
                            while time.monotonic() < end:
                                self.wfile.write(chunk)
                                self.wfile.flush()
                                time.sleep(0.2)
                    except (BrokenPipeError, ConnectionResetError):
                        pass

            def _send(self, body: bytes, ctype: str = "text/plain; version=0.0.4") -> None:
                self.send_response(200)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.http = LocalHttpServer(Handler)
        self.url = self.http.url

    def close(self) -> None:
        self.http.close()


@pytest.fixture
def fake() -> Iterator[FakeSglang]:
    f = FakeSglang()
    yield f
    f.close()


async def _one_scrape(url: str, timeout_s: float = 1.0) -> tuple[object, float, int]:
    """One scrape: (result or ScrapeError, seconds, peak bytes Python allocated meanwhile)."""
    async with httpx.AsyncClient(trust_env=False) as client:
        scraper = SglangScraper(url, client, timeout_s=timeout_s)
        tracemalloc.start()
        t0 = time.monotonic()
        try:
            out: object = await scraper.scrape()
        except ScrapeError as exc:
            out = exc
        took = time.monotonic() - t0
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return out, took, peak


# -- bounded reads --------------------------------------------------------------------------------------
def test_trickling_metrics_hit_the_total_deadline(fake: FakeSglang) -> None:
    fake.mode = "trickle"
    out, took, peak = asyncio.run(_one_scrape(fake.url, timeout_s=1.0))
    assert isinstance(out, ScrapeError) and "timed out" in str(out) and "/metrics" in str(out)
    # one deadline for the whole read (the server would trickle for 8 s): old code read on and on
    assert took < 4.0
    assert peak < 40 * MB


def test_huge_metrics_body_stops_at_the_cap(fake: FakeSglang) -> None:
    fake.mode = "huge"
    out, _took, peak = asyncio.run(_one_scrape(fake.url, timeout_s=30.0))
    assert isinstance(out, ScrapeError) and "byte limit" in str(out)
    assert peak < 40 * MB  # streamed and cut at 16 MB, not read whole (50 MB + its text) first


# -- not an SGLang server ---------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["vllm", "garbage"])
def test_not_sglang_metrics_are_an_error_not_an_empty_row(fake: FakeSglang, mode: str) -> None:
    fake.mode = mode
    out, _, _ = asyncio.run(_one_scrape(fake.url))
    assert isinstance(out, ScrapeError)
    assert "not an SGLang server / no sglang: series" in str(out)


# -- the collector end to end --------------------------------------------------------------------------
def _run(config: DaemonConfig, db_path: Path, chaos: Callable[[], Awaitable[None]]) -> StorageSink:
    db = open_database(db_path)
    sink = StorageSink(db)
    collector = Collector(config, sink)

    async def main() -> None:
        task = asyncio.create_task(collector.run())
        try:
            await chaos()
        finally:
            collector.stop()
            await asyncio.wait_for(task, timeout=60)

    try:
        asyncio.run(main())
    finally:
        db.close()
    return sink


async def _until(pred: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    end = time.monotonic() + timeout  # a guard only: each wait ends on the event it watches for
    while not pred():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


def test_server_info_integer_too_large_stores_everything_else(tmp_path: Path) -> None:
    info = json.loads(json.dumps(INFO))
    info["max_running_requests"] = 10**20
    for st in info.get("internal_states") or []:
        st.setdefault("spectower", {})["spec_max_bs"] = 10**20
        # the ranks' own values come first in the max_running_requests rule (server_info.py)
        st["effective_max_running_requests_per_dp"] = st["max_running_requests"] = 10**20
    fake = FakeSglang(info)
    db_path = tmp_path / "c.db"

    async def chaos() -> None:
        tenth = "select 1 from engine_sample limit 1 offset 9"
        await _until(lambda: bool(db_rows(db_path, tenth)), "10 samples")

    try:
        sink = _run(DaemonConfig(servers=[fake.url], interval_s=0.05), db_path, chaos)
    finally:
        fake.close()
    c = sink.summary()
    assert c["lost"] == 0 and c["rejected"] == 0 and c["written"] >= 10
    assert db_rows(db_path, "select count(*) from engine_sample where spec_max_bs is not null") == [(0,)]
    assert db_rows(db_path, "select max_running_requests from server") == [(None,)]


def test_not_sglang_is_a_gap_with_the_reason(fake: FakeSglang, tmp_path: Path) -> None:
    fake.mode = "vllm"
    db_path = tmp_path / "v.db"

    async def chaos() -> None:
        await _until(lambda: bool(db_rows(db_path, "select 1 from collection_gap")), "the gap")
        hits = fake.metrics_hits
        await _until(lambda: fake.metrics_hits >= hits + 2, "two more scrapes")

    _run(DaemonConfig(servers=[fake.url], interval_s=0.05), db_path, chaos)
    assert db_rows(db_path, "select count(*) from engine_sample") == [(0,)]
    ((reason,),) = db_rows(db_path, "select reason from collection_gap")
    assert "not an SGLang server" in reason
    ((errors, last_error),) = db_rows(db_path, "select errors_total, last_error from collector_health")
    assert errors >= 1 and "no sglang: series" in last_error


@pytest.mark.integration
def test_kill_9_mid_gap_then_restart_closes_it_and_never_merges(fake: FakeSglang, tmp_path: Path) -> None:
    db_path = tmp_path / "k.db"
    fake.mode = "down"
    first = collect_cli("--server", fake.url, "--interval", "0.1s", "--db", str(db_path))
    try:
        deadline = time.monotonic() + 60
        while not db_rows(db_path, "select 1 from collection_gap"):
            assert first.poll() is None, first.stdout.read() if first.stdout else ""
            assert time.monotonic() < deadline, "the first collector never recorded the gap"
            time.sleep(0.05)
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(30)
    assert db_rows(db_path, "select end_ts from collection_gap") == [(None,)]  # kill -9: left open
    fake.mode = "ok"
    marks: dict[str, float] = {}

    async def chaos() -> None:
        any_sample = "select 1 from engine_sample"
        await _until(lambda: bool(db_rows(db_path, any_sample)), "samples after the restart")
        marks["down"] = time.time()
        fake.mode = "down"
        await _until(lambda: len(db_rows(db_path, "select 1 from collection_gap")) >= 2, "the second gap")

    _run(DaemonConfig(servers=[fake.url], interval_s=0.1), db_path, chaos)
    gaps = db_rows(db_path, "select start_ts, end_ts, reason from collection_gap order by start_ts")
    assert len(gaps) == 2, gaps
    (s1, e1, r1), (s2, _e2, _r2) = gaps
    assert e1 is not None and s1 <= e1 <= s2 and "closed at restart" in r1
    assert s2 >= marks["down"] - 0.5  # the new outage is its own gap, starting when it started
    first_sample = db_rows(db_path, "select min(ts) from engine_sample")[0][0]
    assert e1 <= first_sample


@pytest.mark.integration
def test_second_collector_on_a_sqlite_file_is_refused_in_one_line(fake: FakeSglang, tmp_path: Path) -> None:
    db_path = tmp_path / "two.db"
    holder = open_database(db_path)
    claim = holder.claim_collector([("sglang", fake.url)])
    try:
        p = collect_cli("--server", fake.url, "--db", str(db_path), "--duration", "20s")
        out, _ = p.communicate(timeout=60)
    finally:
        claim.release()
        holder.close()
    assert p.returncode == 2, out
    assert f"another collector (pid {os.getpid()})" in out and "Traceback" not in out
    assert "one collector per SQLite database" in out
    assert db_rows(db_path, "select count(*) from engine_sample") == [(0,)]


@pytest.mark.integration
def test_two_collectors_on_one_postgres_database(postgres_url: str) -> None:
    """Two collectors (own sources) write one PostgreSQL database at once; the rollups are exact."""
    fakes = [FakeSglang(), FakeSglang()]
    dbs = [open_database(postgres_url) for _ in fakes]
    try:
        sinks = [StorageSink(d) for d in dbs]
        collectors = [Collector(DaemonConfig(servers=[f.url], interval_s=0.05), s)
                      for f, s in zip(fakes, sinks, strict=True)]  # fmt: skip

        def count(url: str) -> int:
            with dbs[0].engine.connect() as conn:
                from sqlalchemy import text

                sql = (
                    "select count(*) from engine_sample e join server s on s.id = e.server_id"
                    " where s.url = :u"
                )
                return int(conn.execute(text(sql), {"u": url}).scalar() or 0)

        async def main() -> None:
            tasks = [asyncio.create_task(c.run()) for c in collectors]
            try:
                # the same source twice is refused while its owner runs
                third = Collector(DaemonConfig(servers=[fakes[0].url], interval_s=0.05), StorageSink(dbs[0]))
                await _until(lambda: all(count(f.url) >= 20 for f in fakes), "samples from both")
                from spectower.storage.database import CollectorConflictError

                with pytest.raises(CollectorConflictError):
                    await third.run()
            finally:
                for c in collectors:
                    c.stop()
                await asyncio.wait_for(asyncio.gather(*tasks), 60)

        asyncio.run(main())
        dbs[0].update_rollups()
        for f in fakes:
            sid = queries.server_by_url(dbs[0], f.url).id
            assert sid is not None
            n = count(f.url)
            s = queries.series(dbs[1], "engine", sid, "num_running_reqs", 0, time.time() + 60, 50)
            assert sum(b.n for b in s.points) == n
    finally:
        for d in dbs:
            d.close()
        for f in fakes:
            f.close()


def test_fake_server_binds_loopback_only(fake: FakeSglang) -> None:
    host = fake.http.server.server_address[0]
    assert host == "127.0.0.1" and socket.inet_aton(host)


def test_prometheus_source_reads_are_bounded_too(fake: FakeSglang) -> None:
    import requests
    from spectower.collectors.prometheus import BoundedSession

    fake.mode = "trickle"
    t0 = time.monotonic()
    with pytest.raises(requests.exceptions.Timeout, match="no complete answer within 1s"):
        BoundedSession(deadline_s=1.0).get(fake.url + "/metrics", timeout=1.0)
    assert time.monotonic() - t0 < 4.0  # the server would go on for 8 s
    fake.mode = "huge"
    with pytest.raises(requests.exceptions.ContentDecodingError, match="byte limit"):
        BoundedSession(deadline_s=30.0, max_bytes=16 * MB).get(fake.url + "/metrics", timeout=30.0)


def _last_sample_at(db_path: Path, url: str, ts: float) -> None:
    """A database whose newest sample of ``url`` is at ``ts``: what a collector killed then left behind."""
    with open_database(db_path) as db:
        sid = db.server_id(url, ts=ts)
        with db.session(write=True) as s:
            s.add(EngineSample(server_id=sid, dp_rank=0, ts=ts, num_running_reqs=1.0))


def test_the_collectors_own_downtime_is_a_gap(fake: FakeSglang, tmp_path: Path) -> None:
    """#34: kill -9, restart 11 s later: the 12.7 s hole had no gap row. At start the collector compares
    each source's last stored sample with now and records the time no collector ran."""
    db_path = tmp_path / "down.db"
    killed_at = time.time() - 12.7  # the last sample the killed collector stored
    _last_sample_at(db_path, fake.url, killed_at)

    async def chaos() -> None:
        await _until(lambda: len(db_rows(db_path, "select 1 from engine_sample")) >= 2, "a new sample")

    _run(DaemonConfig(servers=[fake.url], interval_s=0.1), db_path, chaos)
    gaps = db_rows(db_path, "select source, target, start_ts, end_ts, reason from collection_gap")
    assert len(gaps) == 1, gaps
    ((source, target, start, end, reason),) = gaps
    assert (source, target, start) == ("sglang", fake.url, killed_at)
    assert 12.7 <= end - start < 12.7 + 30  # until this collector started
    assert "collector not running" in reason
    first_new = db_rows(db_path, f"select min(ts) from engine_sample where ts > {killed_at}")[0][0]
    assert end <= first_new


def test_a_quick_restart_or_a_first_start_is_no_gap(tmp_path: Path) -> None:
    """The downtime rule at the sink, on an injected clock: past 2 s (two 1 s intervals) it is a gap; a
    restart within them, or a source never collected, is none; an open gap a killed collector left covers
    its downtime already (closed at the restart, not doubled)."""
    url, last = "http://10.0.0.7:30000", 1_800_000_000.0
    db_path = tmp_path / "rule.db"
    _last_sample_at(db_path, url, last)
    sources = [("sglang", url), ("sglang", "http://10.0.0.8:30000")]  # the second never collected
    with open_database(db_path) as db:
        for started in (last + 1.9, last + 12.7):
            sink = StorageSink(db)
            sink.claim(sources, started, downtime_after_s=2.0)
            sink.release()
            assert sink.flush(30)
        assert [(g.target, g.start_ts, g.end_ts) for g in queries.gaps(db)] == [(url, last, last + 12.7)]
        queries.open_gap(db, "sglang", url, last + 20.0, "HTTP 503")  # an outage when it was killed
        sink = StorageSink(db)
        sink.claim(sources, last + 60.0, downtime_after_s=2.0)
        sink.release()
        assert sink.flush(30)
        assert [(g.start_ts, g.end_ts) for g in queries.gaps(db)] == [
            (last, last + 12.7),
            (last + 20.0, last + 60.0),
        ]
