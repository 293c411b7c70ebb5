"""Request traces (storage/request_traces.py): the Azure-format parser, the open-loop schedule, the SLO and
the open-loop figures; and `--slo`'s parser (console/commands/options.py)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from spectower.collectors.bench.prompts import PromptFactory
from spectower.collectors.bench.replay import prompt_limit
from spectower.collectors.sglang.server_info import parse_server_info
from spectower.console.commands.options import parse_slo
from spectower.storage.request_traces import (
    DEFAULT_SLO,
    RequestOutcome,
    RequestTrace,
    RequestTraceError,
    Slo,
    TraceRequest,
    load_request_trace,
    open_loop_figures,
    parse_request_trace,
    percentile,
    schedule,
)

from tests.conftest import REPO_ROOT, SPECTOWER_CLI, cli_in_process

AZURE = REPO_ROOT / "data" / "traces" / "AzureLLMInferenceTrace_conv_first30min.csv"
HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens\n"


def _trace(times: list[float], output: int = 10) -> RequestTrace:
    reqs = tuple(TraceRequest(t, 100 + i, output, i + 1) for i, t in enumerate(times))
    return RequestTrace("hand", reqs)


# ---- the parser -------------------------------------------------------------------------------------
def test_the_shipped_azure_trace_reads_whole() -> None:
    trace = load_request_trace(str(AZURE))
    assert len(trace.requests) == 10108  # SOURCES.md: the first 30 minutes, 10,108 requests
    first, second = trace.requests[0], trace.requests[1]
    assert (first.t_s, first.input_tokens, first.output_tokens, first.row) == (0.0, 374, 44, 1)
    # 18:15:46.6805900 -> 18:15:50.9951690 (seven fractional digits, as Azure writes them)
    assert second.t_s == pytest.approx(4.314579, abs=1e-6) and second.output_tokens == 109
    assert 1790 < trace.duration_s <= 1800
    assert trace.name == "AzureLLMInferenceTrace_conv_first30min"
    assert (AZURE.parent / "SOURCES.md").read_text().count("CC-BY 4.0") == 1  # the attribution beside it


def test_plain_seconds_extra_columns_and_any_column_order_are_read() -> None:
    text = "GeneratedTokens,Other,TIMESTAMP,ContextTokens\n5,x,10.5,7\n6,y,12,8\n"
    trace = parse_request_trace(text, "t.csv")
    assert [(r.t_s, r.input_tokens, r.output_tokens) for r in trace.requests] == [(0.0, 7, 5), (1.5, 8, 6)]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "t.csv: empty; expected the header TIMESTAMP,ContextTokens,GeneratedTokens"),
        ("TIMESTAMP,ContextTokens\n1,2\n", "t.csv: line 1 (header) lacks column GeneratedTokens"),
        (HEADER, "t.csv: no requests after the header"),
        (
            HEADER + "0,10,5\n1,ten,5\n",
            "t.csv: row 2, column ContextTokens: expected a whole number, got 'ten'",
        ),
        (HEADER + "0,10,0\n", "t.csv: row 1, column GeneratedTokens: must be between 1 and 1048576, got 0"),
        (HEADER + "0,10,5\nnoon,10,5\n", "t.csv: row 2, column TIMESTAMP: expected a time like"),
        (HEADER + "5,10,5\n4,10,5\n", "t.csv: row 2, column TIMESTAMP: goes back in time (before row 1)"),
        (HEADER + "0,10,5\n-1,10,5\n", "t.csv: row 2, column TIMESTAMP: seconds must be finite and >= 0"),
        (HEADER + "nan,10,5\n", "t.csv: row 1, column TIMESTAMP: seconds must be finite and >= 0"),
        (HEADER + "0,10\n", "t.csv: row 1: 2 columns, the header has 3"),
        (
            HEADER + "0,10,5\n2023-11-16 18:15:46,10,5\n",
            "t.csv: row 2, column TIMESTAMP: mixes plain seconds",
        ),
        (
            HEADER + "2023-11-16 18:15:46,10,5\n2023-11-16 18:15:47+00:00,10,5\n",
            "t.csv: row 2, column TIMESTAMP: mixes times with and without a time zone",
        ),
        (HEADER + "0,10,5\n2600000,10,5\n", "t.csv: row 2, column TIMESTAMP: 2600000 s after row 1"),
    ],
)
def test_bad_input_is_one_line_naming_the_row_and_column(text: str, message: str) -> None:
    with pytest.raises(RequestTraceError) as err:
        parse_request_trace(text, "t.csv")
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


def test_a_file_is_read_under_a_byte_cap_and_as_utf8(tmp_path: Path) -> None:
    big = tmp_path / "big.csv"
    big.write_text(HEADER + "0,10,5\n" * 100)
    with pytest.raises(RequestTraceError, match=r"big.csv'?: more than 50 bytes"):
        load_request_trace(str(big), max_bytes=50)
    binary = tmp_path / "bin.csv"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(RequestTraceError, match="not UTF-8"):
        load_request_trace(str(binary))
    with pytest.raises(RequestTraceError, match="cannot read"):
        load_request_trace(str(tmp_path / "missing.csv"))


# ---- the schedule -----------------------------------------------------------------------------------
def test_speedup_divides_every_time_and_keeps_every_request() -> None:
    trace = _trace([0.0, 4.0, 10.0])
    arrivals = schedule(trace, speedup=4.0)
    assert [a.t_s for a in arrivals] == [0.0, 1.0, 2.5]
    assert [(a.input_tokens, a.output_tokens, a.row) for a in arrivals] == [
        (100, 10, 1),
        (101, 10, 2),
        (102, 10, 3),
    ]
    assert [a.t_s for a in schedule(trace, speedup=4.0, duration_s=2.0)] == [0.0, 1.0]


def test_rate_scale_thins_and_thickens_deterministically_per_seed() -> None:
    trace = load_request_trace(str(AZURE))
    n = len(trace.requests)
    half = schedule(trace, rate_scale=0.5, seed=3)
    assert half == schedule(trace, rate_scale=0.5, seed=3)  # one seed, one schedule
    assert half != schedule(trace, rate_scale=0.5, seed=4)
    assert 0.47 * n < len(half) < 0.53 * n  # binomial(10108, 0.5): 0.47-0.53 is over 6 sigma
    assert {a.row for a in half} < {r.row for r in trace.requests}  # a subset, every row at most once
    double = schedule(trace, rate_scale=2.5, seed=3)
    assert 2.45 * n < len(double) < 2.55 * n
    assert [a.t_s for a in double] == sorted(a.t_s for a in double)
    by_row = {r.row: r for r in trace.requests}
    following = {
        r.row: trace.requests[i + 1].t_s if i + 1 < n else r.t_s for i, r in enumerate(trace.requests)
    }
    for a in double:  # a copy keeps its row's lengths and arrives between its row and the next
        source = by_row[a.row]
        assert (a.input_tokens, a.output_tokens) == (source.input_tokens, source.output_tokens)
        assert source.t_s <= a.t_s <= following[a.row]
    assert [a.t_s for a in schedule(trace, rate_scale=1.0)] == [r.t_s for r in trace.requests]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"speedup": 0.0}, "--speedup must be > 0"),
        ({"speedup": float("inf")}, "--speedup must be > 0"),
        ({"rate_scale": -1.0}, "--rate-scale must be > 0"),
        ({"rate_scale": 1000.0}, "--rate-scale must be > 0 and at most 100"),
        ({"duration_s": 0.0}, "--duration must be a positive number"),
    ],
)
def test_a_bad_schedule_setting_is_named(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(RequestTraceError, match=message):
        schedule(_trace([0.0, 1.0]), **kwargs)


# ---- figures ----------------------------------------------------------------------------------------
def test_percentiles_interpolate_as_numpy_does() -> None:
    values = [1.0, 2.0, 3.0, 4.0, 10.0]
    assert percentile(values, 50) == 3.0
    assert percentile(values, 90) == pytest.approx(7.6)  # numpy.percentile([...], 90)
    assert percentile([5.0], 99) == 5.0
    with pytest.raises(ValueError):
        percentile([], 50)


def test_goodput_counts_the_requests_that_met_every_target() -> None:
    slo = Slo(ttft_s=1.0, itl_s=0.05)
    outcomes = [
        RequestOutcome(ok=True, output_tokens=11, ttft_s=0.5, e2e_s=0.5 + 10 * 0.04),  # meets both
        RequestOutcome(ok=True, output_tokens=11, ttft_s=1.5, e2e_s=1.5 + 10 * 0.01),  # TTFT too long
        RequestOutcome(ok=True, output_tokens=11, ttft_s=0.2, e2e_s=0.2 + 10 * 0.06),  # ITL too long
        RequestOutcome(ok=True, output_tokens=1, ttft_s=0.3, e2e_s=0.3),  # one token: no ITL to miss
        RequestOutcome(ok=False),  # failed (or shed)
    ]
    fig = open_loop_figures(outcomes, span_s=4.0, slo=slo)
    assert (fig["requests"], fig["completed"], fig["failed"], fig["slo_met"]) == (5, 4, 1, 2)
    assert fig["goodput_rps"] == pytest.approx(0.5) and fig["request_rps"] == pytest.approx(1.0)
    assert fig["output_tok_s"] == pytest.approx(34 / 4.0)
    assert fig["ttft_p50_s"] == pytest.approx(percentile([0.5, 1.5, 0.2, 0.3], 50))
    assert fig["itl_p99_s"] == pytest.approx(percentile([0.04, 0.01, 0.06], 99))
    assert fig["slo"] == {"ttft_s": 1.0, "itl_s": 0.05, "e2e_s": None}
    with_e2e = open_loop_figures(outcomes, 4.0, Slo(ttft_s=1.0, itl_s=0.05, e2e_s=0.6))
    assert with_e2e["slo_met"] == 1  # the first took 0.9 s end to end
    empty = open_loop_figures([RequestOutcome(ok=False)], 1.0, slo)
    assert empty["goodput_rps"] == 0 and empty["ttft_p99_s"] is None and empty["e2e_p50_s"] is None


# ---- --slo ------------------------------------------------------------------------------------------
def test_slo_parser_reads_durations_and_keeps_defaults_for_what_is_left_out() -> None:
    assert parse_slo("ttft=2s,itl=100ms") == DEFAULT_SLO == Slo(ttft_s=2.0, itl_s=0.1)
    assert parse_slo(" ttft = 500ms ") == Slo(ttft_s=0.5, itl_s=0.1)
    assert parse_slo("itl=50ms,e2e=1m") == Slo(ttft_s=2.0, itl_s=0.05, e2e_s=60.0)
    assert parse_slo("TTFT=3").ttft_s == 3.0
    assert Slo(ttft_s=0.5, itl_s=0.05, e2e_s=30.0).text() == "ttft=0.5s,itl=50ms,e2e=30s"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("tpot=1s", "--slo: 'tpot=1s' is not one of ttft=DURATION, itl=DURATION, e2e=DURATION"),
        ("ttft", "--slo: 'ttft' is not one of"),
        ("ttft=1s,ttft=2s", "--slo: ttft is given twice"),
        ("ttft=soon", "--slo ttft must be a duration like 5s, 500ms or 2m, got 'soon'"),
        ("itl=0ms", "--slo itl must be a positive duration"),
        (",", "--slo: empty"),
    ],
)
def test_slo_parser_names_the_bad_item(text: str, message: str) -> None:
    with pytest.raises(ValueError) as err:
        parse_slo(text)
    assert str(err.value).startswith(message)


def test_a_bad_slo_on_the_command_line_is_one_error_line() -> None:
    run = cli_in_process("bench", "replay", "--server", "http://127.0.0.1:9", "--trace", str(AZURE),
                         "--slo", "ttft=fast")  # fmt: skip
    assert run.returncode == 2
    assert run.stderr.strip() == "error: --slo ttft must be a duration like 5s, 500ms or 2m, got 'fast'"


def test_help_states_the_default_slo() -> None:
    run = subprocess.run([*SPECTOWER_CLI, "bench", "replay", "--help"], cwd=REPO_ROOT, capture_output=True,
                         text=True, timeout=60, env={"COLUMNS": "400", "PATH": ""})  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert "[default: ttft=2s,itl=100ms]" in " ".join(run.stdout.split())


def test_sim_evaluate_help_names_the_request_trace_it_replays_open_loop() -> None:
    run = subprocess.run([*SPECTOWER_CLI, "sim", "evaluate", "--help"], cwd=REPO_ROOT, capture_output=True,
                         text=True, timeout=60, env={"COLUMNS": "400", "PATH": ""})  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert "a request trace .csv (TIMESTAMP,ContextTokens,GeneratedTokens" in " ".join(run.stdout.split())


# ---- the pieces the replay builds prompts from --------------------------------------------------------
def test_the_server_reports_its_longest_prompt_and_the_replay_leaves_room_for_the_output() -> None:
    doc = json.loads((REPO_ROOT / "tests/fixtures/real/sglang-0.5.17-h200/server_info_idle.json").read_text())
    assert parse_server_info(doc).max_req_input_len == 4090  # the real 0.5.17 server (context 4096)
    # SGLang's rules for that server: a prompt under 4090 tokens, prompt + output within its 4096 context
    assert prompt_limit(4090, None, 4) == 4088  # the prompt's own limit, less the BOS margin
    assert prompt_limit(4090, None, 500) == 4096 - 500 - 2  # room for 500 output tokens
    assert prompt_limit(4090, 512, 500) == 512
    assert prompt_limit(None, 512, 5000) == 512  # --max-context alone: the prompt's length
    assert prompt_limit(4090, None, 5000) == 1  # an output past the context: the request will fail, counted
    assert prompt_limit(None, None, 100) is None


def sglang_accepts(prompt: int, output: int, *, context: int, reserved: int) -> bool:
    """SGLang 0.5.2x's TokenizerManager._validate_one_request: the prompt plus the draft slots it reserves
    must stay under the context, and with max_new_tokens within it."""
    counted = prompt + reserved
    return counted < context and counted + output <= context


def test_an_eagle_servers_draft_slots_are_left_free_beside_the_prompt_and_its_output() -> None:
    """2026-12-03 on the H200: 127 of 1 738 replayed prompts were refused with "4 036 tokens from the input
    messages and 62 for the completion" (context 4 096): SGLang counts EAGLE's 4 draft slots on top."""
    doc = json.loads((REPO_ROOT / "tests/fixtures/real/sglang-0.5.17-h200/server_info_idle.json").read_text())
    info = parse_server_info(doc)
    assert info.speculative_algorithm == "EAGLE3" and info.reserved_output_tokens == 4  # 4 draft tokens
    assert not sglang_accepts(prompt_limit(4090, None, 62) or 0, 62, context=4096, reserved=4)  # the old cut
    for output in (1, 4, 62, 500, 4000):
        limit = prompt_limit(4090, None, output, info.reserved_output_tokens)
        assert limit is not None and sglang_accepts(limit, output, context=4096, reserved=4), output
    plain = parse_server_info({**doc, "speculative_algorithm": None})
    assert plain.reserved_output_tokens == 0
    assert prompt_limit(4090, None, 62, plain.reserved_output_tokens) == 4096 - 62 - 2


def test_a_prompt_has_the_length_asked_for_each_request() -> None:
    ids = PromptFactory(8, as_text=False, seed=1)
    assert len(ids(3).input_ids or []) == 8 and len(ids(3, 250).input_ids or []) == 250
    assert ids(3, 5).input_ids == ids(3, 5).input_ids  # still a pure function of (seed, index)
    text = PromptFactory(8, as_text=True, seed=1)(4, 40).text or ""
    assert len(text.split()) == 40
    with pytest.raises(ValueError):
        ids(1, 0)
