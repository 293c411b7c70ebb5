"""Property-based fuzzing (hypothesis) of every parser that takes outside input: /metrics, /server_info,
bench_serving result files, nvidia-smi CSV logs and request traces. Whatever arrives, each either refuses it
with its own error type or gives values every backend column can hold (finite floats, integers in range,
counts not negative), and what it gives is stored without a single quarantined row."""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from spectower.collectors.promtext import MetricsParseError
from spectower.collectors.sglang.metrics import parse_metrics
from spectower.collectors.sglang.reading import EngineDeriver
from spectower.collectors.sglang.scraper import ScrapeError, SglangScraper
from spectower.collectors.sglang.server_info import ServerInfoError, parse_server_info
from spectower.storage import Database, open_database
from spectower.storage.bench_serving import POINT_KEYS, build_run, parse_lines
from spectower.storage.gpu_csv import GpuCsvError, import_gpu_csv
from spectower.storage.models import INT32_MAX, INT32_MIN, EngineSample

from tests.conftest import REAL_DATA, examples

METRICS = (REAL_DATA / "sglang-0.5.17-h200/metrics_after.txt").read_text()
INFO = json.loads((REAL_DATA / "sglang-0.5.17-h200/server_info_after.json").read_text())
# derandomize: the same examples on every run (CI stays deterministic); raise max_examples to hunt locally
FUZZ = settings(
    max_examples=examples(60),
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)

# numbers at the edges: huge ints, non-finite floats, negative counts, bools posing as ints
EDGE_NUMBERS = st.sampled_from([10**20, -(10**20), 2**31, 2**63, -1, -5, 0, 1e308, -1e308, 1e-320, True])
JSON_SCALARS = (
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=12) | EDGE_NUMBERS
)  # fmt: skip
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


@pytest.fixture(scope="module")
def mem_db(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Database]:
    d = open_database(tmp_path_factory.mktemp("fuzz") / "fuzz.db")  # one database for every example
    yield d
    d.close()


def _column_safe(value: Any, *, infinite_ok: bool = False) -> bool:
    """Storable in its column on SQLite and PostgreSQL alike (NaN is not: SQLite turns it into NULL).
    ``infinite_ok``: bench results keep +-Infinity (bench_serving writes request_rate inf)."""
    if value is None or isinstance(value, bool | str):
        return True
    if isinstance(value, int):
        return INT32_MIN <= value <= INT32_MAX
    if not isinstance(value, float) or math.isnan(value):
        return False
    return infinite_ok or math.isfinite(value)


# -- /metrics ------------------------------------------------------------------------------------------
METRIC_NAMES = st.sampled_from(
    ["sglang:num_running_reqs", "sglang:gen_throughput", "sglang:realtime_tokens_total",
     "sglang:time_to_first_token_seconds_bucket", "sglang:spec_accept_length", "vllm:num_requests_running",
     "sglang:num_requests_total", "process_cpu_seconds_total", "x"]
)  # fmt: skip
LABELS = st.dictionaries(
    st.sampled_from(["tp_rank", "dp_rank", "pp_rank", "le", "mode", "model_name", "is_streaming"]),
    st.sampled_from(["0", "1", "-1", "99999999999999999999", "+Inf", "NaN", "decode", "x", ""]),
    max_size=4,
)
VALUES = st.sampled_from(["0", "1", "-5", "NaN", "+Inf", "-Inf", "1e308", "1e400", "7.5", "abc", "0x10"])


@st.composite
def metrics_line(draw: st.DrawFn) -> str:
    kind = draw(st.integers(0, 5))
    if kind == 0:
        return draw(st.text(max_size=40)).replace("\n", " ")
    if kind == 1:
        return f"# TYPE {draw(METRIC_NAMES)} {draw(st.sampled_from(['gauge', 'counter', 'histogram', 'x']))}"
    labels = ",".join(f'{k}="{v}"' for k, v in draw(LABELS).items())
    return f"{draw(METRIC_NAMES)}{{{labels}}} {draw(VALUES)}"


async def _scrape_metrics(body: str) -> object:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/metrics":
            return httpx.Response(200, text=body)
        return httpx.Response(200, json=INFO)

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        try:
            return await SglangScraper("http://fuzz.test", client).scrape()
        except ScrapeError as exc:
            return exc


@FUZZ
@given(
    lines=st.lists(metrics_line(), max_size=30), base=st.booleans(), cut=st.none() | st.integers(0, 60_000)
)
def test_fuzz_metrics_parser(lines: list[str], base: bool, cut: int | None) -> None:
    body = (METRICS if base else "") + "\n".join(lines) + "\n"
    if cut is not None:
        body = body[: cut % (len(body) + 1)]
    # through the scraper: a body is refused (ScrapeError) or has sglang: series; never an empty row
    scraped = asyncio.run(_scrape_metrics(body))
    try:
        snap = parse_metrics(body)
    except MetricsParseError:
        assert isinstance(scraped, ScrapeError)
        return
    if not snap.sample_count:
        assert isinstance(scraped, ScrapeError) and "no sglang: series" in str(scraped)
        return
    deriver = EngineDeriver()
    for ts in (1000.0, 1001.0):
        for r in deriver.derive(ts, snap):
            for k, v in r.as_row().items():
                assert _column_safe(v), (k, v)
            for k in ("output_tok_s", "prefill_tok_s", "request_rate"):
                assert getattr(r, k) is None or getattr(r, k) >= 0


# -- /server_info ----------------------------------------------------------------------------------------
@st.composite
def server_info_doc(draw: st.DrawFn) -> Any:
    shape = draw(st.integers(0, 3))
    if shape == 0:
        return draw(JSON_VALUES)
    doc = json.loads(json.dumps(INFO))
    for key in draw(st.lists(st.sampled_from(sorted(doc)), max_size=6)):
        doc[key] = draw(JSON_VALUES | EDGE_NUMBERS)
    states = doc.get("internal_states")
    if isinstance(states, list) and states and isinstance(states[0], dict):
        states[0]["spectower"] = draw(
            st.fixed_dictionaries({}, optional={k: JSON_VALUES | EDGE_NUMBERS for k in
                                                ("spec_max_bs", "batches_drafted", "batches_gated")})
        )  # fmt: skip
    if shape == 3:  # a PD router around it
        return {"prefill": [doc], "decode": draw(st.lists(st.just(doc) | JSON_VALUES, max_size=3))}
    return doc


@FUZZ
@given(doc=server_info_doc())
def test_fuzz_server_info_parser(doc: Any, mem_db: Database) -> None:
    try:
        info = parse_server_info(doc)
    except ServerInfoError:
        return
    for k in ("max_running_requests", "speculative_num_steps", "decode_log_interval", "tp_size", "dp_size"):
        assert _column_safe(getattr(info, k)), k
    readings = EngineDeriver().derive(1000.0, None, info)
    for r in readings:
        for k, v in r.as_row().items():
            assert _column_safe(v), (k, v)
    sid = mem_db.server_id("http://fuzz", max_running_requests=info.max_running_requests,
                           sglang_version=info.version)  # fmt: skip
    mem_db.record_server_info(sid, info.info)
    w = mem_db.writer(maintenance=None, max_delay_s=0.0)
    before = w.stats().rejected
    w.put(*[EngineSample(server_id=sid, **r.as_row()) for r in readings])
    assert w.flush(30)
    assert w.stats().rejected == before


# -- bench_serving files -----------------------------------------------------------------------------------
@st.composite
def bench_line(draw: st.DrawFn) -> str:
    kind = draw(st.integers(0, 4))
    if kind == 0:
        return draw(st.text(max_size=40)).replace("\n", " ")
    obj: dict[str, Any] = {"completed": draw(JSON_SCALARS)}
    for key in draw(st.lists(st.sampled_from(sorted(POINT_KEYS)), max_size=8)):
        obj[key] = draw(JSON_VALUES | EDGE_NUMBERS)
    if draw(st.booleans()):
        obj["server_info"] = draw(server_info_doc())
    if draw(st.booleans()):
        obj["spectower_run"] = draw(JSON_VALUES)
    return json.dumps(obj, allow_nan=True)


@FUZZ
@given(lines=st.lists(bench_line(), min_size=1, max_size=6))
def test_fuzz_bench_serving_parser(lines: list[str], mem_db: Database) -> None:
    good, _bad = parse_lines("\n".join(lines) + "\n")
    if not good:
        return
    run, points = build_run([o for _, o in good], source="import:fuzz", sha256=None, created_at=1.0)
    for p in points:
        for k, v in p.model_dump().items():
            assert _column_safe(v, infinite_ok=True), (k, v)
        for k in (
            "completed",
            "total_input_tokens",
            "total_output_tokens",
            "duration_s",
            "output_throughput",
        ):
            v = getattr(p, k)
            assert v is None or v >= 0, (k, v)
    for k, v in run.model_dump().items():
        assert _column_safe(v, infinite_ok=True), (k, v)
    mem_db.save_bench_run(run, points)  # storable as is


# -- nvidia-smi CSV ------------------------------------------------------------------------------------------
CELLS = st.sampled_from(["35 %", "[N/A]", "[Not Supported]", "1234 MiB", "250.5 W", "-1", "1e400", "nan",
                         "0x0000000000000004", "", "lots", "99999999999999999999", "1980 MHz"])  # fmt: skip
HEADER = "timestamp, index, uuid, utilization.gpu [%], memory.used [MiB], power.draw [W], " + (
    "clocks_event_reasons.active"
)


@FUZZ
@given(rows=st.lists(st.lists(CELLS, min_size=4, max_size=5), min_size=1, max_size=5), tmp=st.just(None))
def test_fuzz_gpu_csv(rows: list[list[str]], tmp: None, mem_db: Database, tmp_path_factory: Any) -> None:
    path: Path = tmp_path_factory.mktemp("csv") / "gpu.csv"
    body = [HEADER] + [f"2025/11/20 10:00:0{i}.000, 0, GPU-fuzz, " + ", ".join(r) for i, r in enumerate(rows)]
    path.write_text("\n".join(body) + "\n")
    try:
        import_gpu_csv(mem_db, path, host="fuzz")
    except GpuCsvError:
        return
    with mem_db.engine.connect() as conn:
        from sqlalchemy import text

        for row in conn.execute(text("SELECT * FROM gpu_sample")).mappings():
            for k, v in row.items():
                assert _column_safe(v), (k, v)


# -- request traces (Azure's TIMESTAMP,ContextTokens,GeneratedTokens) ---------------------------------------
TRACE_CELLS = st.sampled_from(["0", "1.5", "-3", "nan", "inf", "1e400", "99999999999999999999", "", "lots",
                               "2023-11-16 18:15:46.6805900", "2023-11-16T18:15:47+00:00", "\"1,2\"", "7",
                               "1048577", "0x10", " 12 "])  # fmt: skip
TRACE_HEADERS = st.sampled_from(["TIMESTAMP,ContextTokens,GeneratedTokens", "TIMESTAMP,ContextTokens", "",
                                 "ContextTokens,TIMESTAMP,GeneratedTokens"])  # fmt: skip


@FUZZ
@given(rows=st.lists(st.lists(TRACE_CELLS, min_size=2, max_size=4), max_size=6), header=TRACE_HEADERS)
def test_fuzz_request_trace_parser(rows: list[list[str]], header: str) -> None:
    from spectower.storage.request_traces import (
        MAX_TRACE_TOKENS,
        RequestTraceError,
        parse_request_trace,
        schedule,
    )

    text = "\n".join([header, *(",".join(r) for r in rows)])
    try:
        trace = parse_request_trace(text, "fuzz.csv")
    except RequestTraceError as exc:
        assert "\n" not in str(exc) and str(exc).startswith("fuzz.csv")
        return
    times = [r.t_s for r in trace.requests]
    assert times[0] == 0.0 and times == sorted(times) and all(math.isfinite(t) for t in times)
    assert all(1 <= r.input_tokens <= MAX_TRACE_TOKENS and 1 <= r.output_tokens <= MAX_TRACE_TOKENS
               for r in trace.requests)  # fmt: skip
    assert len(schedule(trace, speedup=3.0, rate_scale=2.0)) >= len(trace.requests)
