"""bench_serving's figures and the steady-state windows from synthetic records."""

from __future__ import annotations

import statistics

import pytest
from spectower.collectors.bench.errors import BenchError
from spectower.collectors.bench.loadgen import LoopResult, _mark_steady
from spectower.collectors.bench.records import RequestRecord
from spectower.collectors.bench.stats import percentile, point_figures, summarize_ms, window_throughputs
from spectower.collectors.bench.sweep import SweepConfig, parse_concurrency, parse_modes


def test_percentile_matches_numpy_linear() -> None:
    values = [1.0, 2.0, 3.0, 4.0, 10.0]
    assert percentile(values, 50) == 3.0
    assert percentile(values, 90) == pytest.approx(7.6)
    assert percentile(values, 99) == pytest.approx(9.76)
    assert percentile([5.0], 99) == 5.0
    s = summarize_ms("ttft_ms", [0.001, 0.003])
    assert s["mean_ttft_ms"] == pytest.approx(2.0) and s["p99_ttft_ms"] == pytest.approx(2.98)


def _rec(index: int, start: float, rate: float, n: int, ttft: float = 0.1) -> RequestRecord:
    """A request emitting one token every 1/rate s after its TTFT."""
    times = [start + ttft + i / rate for i in range(n)]
    return RequestRecord(
        index=index,
        start=start,
        input_tokens=8,
        output_tokens=n,
        ttft_s=ttft,
        e2e_s=times[-1] - start,
        chunk_times=times,
        chunk_tokens=[1] * n,
        success=True,
    )


def test_closed_loop_figures() -> None:
    # two requests in flight, each 10 tok/s, back to back for 3 rounds: 20 tok/s aggregate
    recs = []
    for slot in range(2):
        t = 0.0
        for k in range(3):
            r = _rec(k * 2 + slot, t, 10.0, 20)  # indices in issue order
            recs.append(r)
            t = r.start + (r.e2e_s or 0)
    end = max(r.start + (r.e2e_s or 0) for r in recs)
    loop = LoopResult(concurrency=2, records=recs, phase_start=0.0, phase_end=end)
    last_issue = max(r.start for r in recs)
    _mark_steady(loop, last_issue, None)
    assert loop.steady_start == pytest.approx(0.1)
    fig = point_figures(loop, windows=4)
    assert fig["completed"] == 6 and fig["total_output_tokens"] == 120
    assert fig["steady_output_throughput"] == pytest.approx(20.0, rel=0.08)
    assert len(fig["steady_windows"]) == 4
    assert fig["median_itl_ms"] == pytest.approx(100.0)
    assert fig["median_ttft_ms"] == pytest.approx(100.0)
    assert fig["mean_tpot_ms"] == pytest.approx(100.0)
    assert fig["max_concurrency"] == 2
    assert fig["output_throughput"] == pytest.approx(120 / loop.phase_end)


def test_windows_count_only_the_steady_interval() -> None:
    rec = _rec(0, 0.0, 100.0, 100, ttft=0.0)  # 100 tokens over 1 s
    loop = LoopResult(concurrency=1, records=[rec], steady_start=0.5, steady_end=1.0)
    w = window_throughputs(loop, windows=5)
    assert len(w) == 5 and sum(w) / 5 == pytest.approx(100.0, rel=0.05)


def test_concurrency_and_modes_parsing_names_the_flag() -> None:
    assert parse_concurrency("8, 1,2,2") == (1, 2, 8)
    for bad in ("", "1,x", "0", "1,-4", "99999"):
        with pytest.raises(BenchError, match="--concurrency"):
            parse_concurrency(bad)
    assert parse_modes("off,on,off") == ("off", "on")
    with pytest.raises(BenchError, match="--modes"):
        parse_modes("on,maybe")


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"server": "localhost:30000"}, "--server"),
        ({"requests_per_level": 10}, "--requests-per-level"),
        ({"duration_per_level": -1.0}, "--duration-per-level"),
        ({"input_len": 0}, "--input-len"),
        ({"output_len": 1}, "--output-len"),
        ({"api": "grpc"}, "--api"),
        ({"warmup": -1}, "--warmup"),
    ],
)
def test_config_validation_names_the_field(kwargs: dict, field: str) -> None:
    base = {"server": "http://127.0.0.1:1"} | kwargs
    with pytest.raises(BenchError, match=field):
        SweepConfig(**base).validate()


def test_decode_rate_leaves_out_the_capped_last_chunk() -> None:
    # 1 token at t=0 (prefill), then 3 tokens every 0.1 s, and a last capped chunk of 1 token
    rec = RequestRecord(index=0, start=0.0, output_tokens=11, ttft_s=0.0, e2e_s=0.4, success=True,
                        chunk_times=[0.0, 0.1, 0.2, 0.3, 0.4], chunk_tokens=[1, 3, 3, 3, 1])  # fmt: skip
    assert rec.decode_rate == pytest.approx(30.0)  # 9 tokens over 0.3 s
    assert 1.0 / (rec.tpot_s or 1) == pytest.approx(25.0)  # TPOT counts the capped step: slower


def _spec_rec(index: int, start: float, first: float, step: float, per_step: int, steps: int,
              jitter: float = 0.0) -> RequestRecord:  # fmt: skip
    """A speculative request: its first token at ``first``, then ``per_step`` tokens every ``step`` s."""
    times = [first] + [first + (k + 1) * step + jitter for k in range(steps)]
    tokens = [1] + [per_step] * steps
    return RequestRecord(
        index=index,
        start=start,
        output_tokens=sum(tokens),
        ttft_s=first - start,
        e2e_s=times[-1] - start,
        chunk_times=times,
        chunk_tokens=tokens,
        success=True,
    )


def test_window_edges_on_a_speculative_step_do_not_lose_it() -> None:
    # C=1, 4 tokens per 0.1 s step (40 tok/s): the steady interval runs from the first token to the last
    # chunk, the edges fall exactly on chunks; whole-chunk counting dropped one step in the 25 (-4%).
    rec = _spec_rec(0, 0.0, 0.05, 0.1, 4, 25)
    loop = LoopResult(concurrency=1, records=[rec], phase_start=0.0, phase_end=rec.chunk_times[-1])
    _mark_steady(loop, last_issue=0.0, cut_at=None)
    fig = point_figures(loop, windows=5)
    assert fig["steady_output_throughput"] == pytest.approx(40.0, rel=1e-9)


def test_a_step_burst_split_by_the_edge_counts_whole() -> None:
    # C=8: each step's 8 chunks reach the client 0..7 ms apart; the interval ends on request 3's last
    # chunk, in the middle of the burst. Every request decodes 5 tokens per 50 ms step: 800 tok/s.
    recs = [_spec_rec(i, 0.0, 0.01, 0.05, 5, 40 if i != 3 else 30, jitter=i * 0.001) for i in range(8)]
    loop = LoopResult(concurrency=8, records=recs, phase_start=0.0, phase_end=2.1)
    _mark_steady(loop, last_issue=0.0, cut_at=None)
    assert loop.steady_end == pytest.approx(recs[3].chunk_times[-1])
    w = window_throughputs(loop, windows=5)
    assert statistics.fmean(w) == pytest.approx(800.0, rel=0.01)
