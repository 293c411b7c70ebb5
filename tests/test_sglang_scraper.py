"""collectors.sglang.scraper (unit level, httpx.MockTransport) + collectors.sink into a real SQLite file:
malformed, truncated and hostile /metrics bodies never crash and never store an invalid number."""

from __future__ import annotations

import asyncio
import json
import math
import sqlite3
import tempfile
from pathlib import Path

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from spectower.collectors.sglang.scraper import ScrapeError, SglangScraper
from spectower.collectors.sink import StorageSink
from spectower.storage import open_database

from tests.conftest import REAL_DATA, examples

BASE = (REAL_DATA / "sglang-0.5.17-h200/metrics_after.txt").read_text()
INFO = (REAL_DATA / "sglang-0.5.17-h200/server_info_after.json").read_text()
URL = "http://sglang.test:30000"
RATE_COLUMNS = ("output_tok_s", "prefill_tok_s", "request_rate")


def _transport(bodies: list[str], seen_auth: list[str | None] | None = None) -> httpx.MockTransport:
    def handler(request: httpx.Request) -> httpx.Response:
        if seen_auth is not None:
            seen_auth.append(request.headers.get("authorization"))
        if request.url.path == "/metrics":
            return httpx.Response(200, text=bodies.pop(0) if len(bodies) > 1 else bodies[0])
        if request.url.path == "/server_info":
            return httpx.Response(200, text=INFO)
        return httpx.Response(404)

    return httpx.MockTransport(handler)


async def _scrape_all(bodies: list[str], clock_start: float = 1000.0) -> list[object]:
    ticks = iter(range(10_000))
    out: list[object] = []
    async with httpx.AsyncClient(transport=_transport(list(bodies))) as client:
        scraper = SglangScraper(URL, client, clock=lambda: clock_start + next(ticks))
        for _ in bodies:
            try:
                out.append(await scraper.scrape())
            except ScrapeError as exc:
                out.append(exc)
    return out


def test_bearer_sent_only_when_configured() -> None:
    seen: list[str | None] = []

    async def go(key: str | None) -> None:
        async with httpx.AsyncClient(transport=_transport([BASE], seen)) as client:
            await SglangScraper(URL, client, api_key=key).scrape()

    asyncio.run(go("k-1"))
    assert seen and all(h == "Bearer k-1" for h in seen)
    seen.clear()
    asyncio.run(go(None))
    assert seen and all(h is None for h in seen)


def test_scrape_real_body_gives_knob_and_gauges() -> None:
    [res] = asyncio.run(_scrape_all([BASE]))
    assert not isinstance(res, Exception)
    [r] = res.readings  # type: ignore[attr-defined]
    assert r.spec_max_bs == 0 and r.batches_drafted == 8991 and r.batches_gated == 8457
    assert r.spec_accept_length == 1.0 and r.num_running_reqs == 0.0
    assert res.info is not None and res.info.version == "0.5.17"  # type: ignore[attr-defined]


def _mutate(text: str, cut: int | None, junk: str, value: str, line_no: int) -> str:
    lines = text.split("\n")
    i = line_no % len(lines)
    if lines[i] and not lines[i].startswith("#") and " " in lines[i]:
        lines[i] = lines[i].rsplit(" ", 1)[0] + " " + value
    body = "\n".join(lines)
    if cut is not None:
        body = body[: cut % (len(body) + 1)]
    return body + junk


@settings(max_examples=examples(30), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    cut=st.none() | st.integers(min_value=0, max_value=80_000),
    junk=st.sampled_from(["", "\n", "garbage\n", 'sglang:x{a="1"} 1 2 3\n', "\x00\xff", "# TYPE\n"]),
    value=st.sampled_from(["NaN", "+Inf", "-Inf", "-5", "1e308", "0", "abc", "7"]),
    line_no=st.integers(min_value=0, max_value=700),
)
def test_property_hostile_bodies_never_store_invalid(
    cut: int | None, junk: str, value: str, line_no: int
) -> None:
    bad = _mutate(BASE, cut, junk, value, line_no)
    results = asyncio.run(_scrape_all([BASE, bad, BASE]))
    with tempfile.TemporaryDirectory() as tmp:
        db_path = Path(tmp) / "p.db"
        db = open_database(str(db_path))
        try:
            sink = StorageSink(db)
            for res in results:
                if isinstance(res, ScrapeError):
                    continue
                assert not isinstance(res, Exception)
                for r in res.readings:  # type: ignore[attr-defined]
                    for k, v in r.as_row().items():
                        assert v is None or not isinstance(v, float) or math.isfinite(v), k
                    for col in RATE_COLUMNS:
                        v = getattr(r, col)
                        assert v is None or v >= 0
                sink.engine(URL, res)  # type: ignore[arg-type]
            assert sink.flush(timeout=10)
        finally:
            db.close()
        con = sqlite3.connect(db_path)
        try:
            for col in RATE_COLUMNS:
                assert con.execute(f"select count(*) from engine_sample where {col} < 0").fetchone()[0] == 0
            stored = con.execute("select * from engine_sample").fetchall()
            for row in stored:
                assert all(not isinstance(v, float) or math.isfinite(v) for v in row)
            assert len(stored) == sum(1 for r in results if not isinstance(r, ScrapeError))
        finally:
            con.close()


def test_negative_counter_in_body_is_not_a_rate() -> None:
    bad = BASE.replace(
        'sglang:realtime_tokens_total{engine_type="unified",mode="decode",model_name=".gpu/tiny/target",'
        'moe_ep_rank="0",pp_rank="0",tp_rank="0"} 161993.0',
        'sglang:realtime_tokens_total{engine_type="unified",mode="decode",model_name=".gpu/tiny/target",'
        'moe_ep_rank="0",pp_rank="0",tp_rank="0"} -5',
    )
    assert bad != BASE
    res = asyncio.run(_scrape_all([BASE, bad]))
    assert isinstance(res[1], ScrapeError) or all(r.output_tok_s is None for r in res[1].readings)  # type: ignore[attr-defined]


def test_server_info_401_names_the_variables() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/metrics":
            return httpx.Response(200, text=BASE)
        return httpx.Response(401, json={"error": "Unauthorized"})

    async def go() -> None:
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
            await SglangScraper(URL, client, api_key="secret-zzz").scrape()

    with pytest.raises(ScrapeError, match="SPECTOWER_API_KEY") as info:
        asyncio.run(go())
    assert "secret-zzz" not in str(info.value)


def test_metrics_disabled_falls_back_to_loads() -> None:
    loads = (REAL_DATA / "sglang-0.5.17-h200/loads_all_after.json").read_text()

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/metrics":
            return httpx.Response(404)
        if request.url.path == "/server_info":
            return httpx.Response(200, text=INFO)
        if request.url.path == "/v1/loads":
            return httpx.Response(200, text=loads)
        return httpx.Response(404)

    async def go() -> object:
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
            return await SglangScraper(URL, client).scrape()

    res = asyncio.run(go())
    [r] = res.readings  # type: ignore[attr-defined]
    assert res.metrics_enabled is False  # type: ignore[attr-defined]
    assert r.num_running_reqs == 0 and r.spec_accept_length == pytest.approx(1.0002287805994052)
    assert json.loads(loads)["loads"][0]["max_running_requests"] == 48
