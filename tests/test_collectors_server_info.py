"""How often the collector parses a server's whole /server_info (issue #36 item 4: ~3 ms each): on the first
read, then once a minute, and at once when the server looks new; the reads between refresh the ranks
(knob, counters) only. An injected clock, httpx.MockTransport: no waiting."""

from __future__ import annotations

import asyncio
import copy
import json
from typing import Any

import httpx
import pytest
from spectower.collectors.sglang import scraper as scraper_module
from spectower.collectors.sglang.scraper import ScrapeResult, SglangScraper
from spectower.collectors.sglang.server_info import parse_server_info, refresh_ranks
from spectower.storage.redact import REDACTED

from tests.conftest import REAL_DATA

METRICS = (REAL_DATA / "sglang-0.5.17-h200/metrics_after.txt").read_text()
INFO: dict[str, Any] = json.loads((REAL_DATA / "sglang-0.5.17-h200/server_info_after.json").read_text())
URL = "http://sglang.test:30000"
DECODE_LINE = (
    'sglang:realtime_tokens_total{engine_type="unified",mode="decode",model_name=".gpu/tiny/target",'
    'moe_ep_rank="0",pp_rank="0",tp_rank="0"} '
)


class Server:
    """A mock SGLang server whose /metrics and /server_info a test changes between scrapes."""

    def __init__(self) -> None:
        self.metrics = METRICS
        self.info = copy.deepcopy(INFO)
        self.info_reads = 0

    def handler(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/metrics":
            return httpx.Response(200, text=self.metrics)
        if request.url.path == "/server_info":
            self.info_reads += 1
            return httpx.Response(200, text=json.dumps(self.info))
        return httpx.Response(404)

    def set_knob(self, value: int) -> None:
        self.info["internal_states"][0]["spectower"]["spec_max_bs"] = value


def _scrapes(
    server: Server, times: list[float], changes: dict[float, Any], monkeypatch: pytest.MonkeyPatch
) -> tuple[list[ScrapeResult], list[float]]:
    """One scrape at each of ``times`` (``changes[t](server)`` first); the results and the times of the
    full parses."""
    now = [0.0]
    parsed_at: list[float] = []

    def counting(doc: Any) -> Any:
        parsed_at.append(now[0])
        return parse_server_info(doc)

    monkeypatch.setattr(scraper_module, "parse_server_info", counting)

    async def run() -> list[ScrapeResult]:
        out: list[ScrapeResult] = []
        async with httpx.AsyncClient(transport=httpx.MockTransport(server.handler)) as client:
            scraper = SglangScraper(URL, client, clock=lambda: now[0])
            for t in times:
                now[0] = t
                if t in changes:
                    changes[t](server)
                out.append(await scraper.scrape())
        return out

    return asyncio.run(run()), parsed_at


def test_whole_document_parsed_first_then_once_a_minute_ranks_every_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server = Server()
    times = [0.0, 5.0, 10.0, 12.0, 30.0, 59.0, 60.0, 65.0, 121.0]
    results, parsed_at = _scrapes(server, times, {10.0: lambda s: s.set_knob(7)}, monkeypatch)
    assert parsed_at == [0.0, 65.0]
    assert [r.ts for r in results if r.info is not None] == [0.0, 65.0]
    assert server.info_reads == 7  # every 5 s as before: 0, 5, 10, 30, 59, 65, 121
    # the knob set at 10 s is in that scrape's readings without a full parse, and stays
    assert [r.readings[0].spec_max_bs for r in results] == [0, 0, 7, 7, 7, 7, 7, 7, 7]
    assert not any(r.restarted for r in results)


def test_a_new_launch_is_parsed_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """startup_time changed: a restart /server_info shows (the rates start again)."""
    server = Server()

    def relaunch(s: Server) -> None:
        s.info["startup_time"] = {**s.info["startup_time"], "scheduler_e2e": 99.0}
        s.info["version"] = "0.5.18"

    results, parsed_at = _scrapes(server, [0.0, 5.0, 10.0, 15.0], {10.0: relaunch}, monkeypatch)
    assert parsed_at == [0.0, 10.0]
    assert results[2].info is not None and results[2].info.version == "0.5.18"
    assert [r.restarted for r in results] == [False, False, True, False]


def test_a_restart_in_metrics_reads_server_info_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A counter that went down at 7 s (no /server_info due until 10 s): read and parsed whole then."""
    server = Server()
    assert DECODE_LINE + "161993.0" in server.metrics

    def restart(s: Server) -> None:
        s.metrics = s.metrics.replace(DECODE_LINE + "161993.0", DECODE_LINE + "12.0")

    results, parsed_at = _scrapes(server, [0.0, 5.0, 7.0, 8.0, 12.0], {7.0: restart}, monkeypatch)
    assert parsed_at == [0.0, 7.0]
    assert server.info_reads == 4  # 0, 5, 7 (at once), 12
    assert [r.restarted for r in results] == [False, False, True, False, False]


def test_refreshed_ranks_are_the_full_parse_ranks_and_hold_no_secret() -> None:
    doc = copy.deepcopy(INFO)
    known = parse_server_info(doc)
    block = doc["internal_states"][0]["spectower"]
    block.update(spec_max_bs=3, batches_drafted=9000, lock={"writer": "manual", "api_key": "sk-123"})
    refreshed = refresh_ranks(known, doc)
    assert refreshed is not None
    assert refreshed.ranks == parse_server_info(doc).ranks
    assert refreshed.knob == 3 and refreshed.ranks[0].lock == {"writer": "manual", "api_key": REDACTED}
    # the facts, the kept document and its hash stay those of the full parse
    facts = ("version", "max_running_requests", "startup_fingerprint", "info", "info_hash")
    assert [getattr(refreshed, f) for f in facts] == [getattr(known, f) for f in facts]
    assert "sk-123" not in json.dumps(refreshed.model_dump())


def test_refresh_ranks_leaves_another_launch_or_shape_to_the_full_parse() -> None:
    known = parse_server_info(copy.deepcopy(INFO))
    relaunched = {**copy.deepcopy(INFO), "startup_time": {"scheduler_e2e": 1.0}}
    assert refresh_ranks(known, relaunched) is None
    assert refresh_ranks(known, {**copy.deepcopy(INFO), "internal_states": "x"}) is None
    assert refresh_ranks(known, {"unrelated": 1}) is None
    assert refresh_ranks(known, [1, 2]) is None
