"""spectower.collectors.sglang.reading (+ rates, histograms): rates, bucket-delta percentiles, restarts."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from spectower.collectors.histograms import bucket_delta, quantile
from spectower.collectors.rates import CounterRates
from spectower.collectors.sglang.metrics import parse_metrics
from spectower.collectors.sglang.reading import EngineDeriver


def _bump(text: str, name_re: str, add: float) -> str:
    """Add ``add`` to every sample whose line matches ``name_re`` (a synthetic later scrape)."""

    def repl(m: re.Match[str]) -> str:
        return f"{m.group(1)} {float(m.group(2)) + add}"

    return "\n".join(
        re.sub(r"^(.*\}) (\S+)$", repl, line) if re.match(name_re, line) else line
        for line in text.split("\n")
    )


def test_quantile_interpolates_like_promql() -> None:
    b = {0.1: 10.0, 0.2: 30.0, 0.4: 40.0, float("inf"): 40.0}
    assert quantile(0.5, b) == pytest.approx(0.15)  # rank 20 of 40, halfway through (0.1, 0.2]
    assert quantile(0.25, b) == pytest.approx(0.1)
    assert quantile(1.0, b) == pytest.approx(0.4)
    assert quantile(0.99, {0.1: 0.0, 1.0: 0.0, float("inf"): 5.0}) == 1.0  # in +Inf: highest finite bound
    assert quantile(0.5, {0.1: 0.0, float("inf"): 0.0}) is None  # nothing observed
    assert quantile(0.5, {0.1: 5.0, 0.2: 3.0, float("inf"): 5.0}) is None  # decreasing: garbage
    assert bucket_delta({1.0: 3, float("inf"): 5}, {1.0: 4, float("inf"): 5}) is None  # reset


def test_counter_rates_reset_and_wrap() -> None:
    c = CounterRates()
    assert c.update("a", 0.0, 100) is None
    assert c.update("a", 2.0, 300) == 100.0
    assert c.update("a", 3.0, 50) is None and c.resets == 1  # restart: no negative rate
    assert c.update("a", 4.0, 80) == 30.0
    assert c.update("w", 0.0, 2**32 - 100, modulus=2**32) is None
    assert c.update("w", 1.0, 400, modulus=2**32) == 500.0 and c.wraps == 1


def test_rates_and_percentiles_between_two_real_scrapes(real_data: Path) -> None:
    text = (real_data / "sglang-0.5.17-h200/metrics_after.txt").read_text()
    later = _bump(text, r"^sglang:realtime_tokens_total\{.*mode=\"decode\"", 2000)
    later = _bump(later, r"^sglang:realtime_tokens_total\{.*mode=\"prefill_compute\"", 500)
    later = _bump(later, r"^sglang:num_requests_total\{.*is_streaming=\"true\"", 10)
    # 10 more requests, all with TTFT in (0.2, 0.4]: buckets le>=0.4 and +Inf/_count grow by 10.
    for le in (
        "0.4",
        "0.6",
        "0.8",
        "1.0",
        "2.0",
        "4.0",
        "6.0",
        "8.0",
        "10.0",
        "20.0",
        "40.0",
        "60.0",
        "80.0",
        "100.0",
        "200.0",
        "400.0",
        r"\+Inf",
    ):
        later = _bump(
            later, rf'^sglang:time_to_first_token_seconds_bucket\{{.*is_streaming="true",le="{le}"', 10
        )
    d = EngineDeriver()
    [first] = d.derive(1000.0, parse_metrics(text))
    assert first.output_tok_s is None and first.ttft_p50_s is None  # no baseline yet
    [r] = d.derive(1002.0, parse_metrics(later))
    assert r.output_tok_s == pytest.approx(1000.0)
    assert r.prefill_tok_s == pytest.approx(250.0)
    assert r.request_rate == pytest.approx(5.0)
    assert r.ttft_p50_s is not None and 0.2 < r.ttft_p50_s <= 0.4
    assert r.ttft_p50_s == pytest.approx(0.3)
    assert r.ttft_p99_s == pytest.approx(0.398)
    assert r.itl_p50_s is None  # no ITL observed in between: no percentile rather than a stale one
    assert r.spec_accept_length == 1.0 and r.num_running_reqs == 0.0
    assert d.restarts == 0


def test_restart_detected_by_fingerprint_no_rates(real_data: Path) -> None:
    idle = parse_metrics((real_data / "sglang-0.5.17-h200/metrics_idle.txt").read_text())
    after = parse_metrics((real_data / "sglang-0.5.17-h200/metrics_after.txt").read_text())
    d = EngineDeriver()
    d.derive(0.0, idle)
    [r] = d.derive(10.0, after)  # counters went UP across the restart: only the fingerprint shows it
    assert d.restarts == 1
    assert r.output_tok_s is None and r.request_rate is None  # not 161983 tokens in 10 s


def test_restart_detected_by_counter_going_down(real_data: Path) -> None:
    text = (real_data / "sglang-0.5.17-h200/metrics_after.txt").read_text()
    d = EngineDeriver()
    d.derive(0.0, parse_metrics(text))
    smaller = _bump(text, r"^sglang:realtime_tokens_total\{.*mode=\"decode\"", -161000)
    [r] = d.derive(1.0, parse_metrics(smaller))
    assert d.restarts == 1 and r.output_tok_s is None
    again = _bump(smaller, r"^sglang:realtime_tokens_total\{.*mode=\"decode\"", 300)
    [r2] = d.derive(2.0, parse_metrics(again))
    assert r2.output_tok_s == pytest.approx(300.0)  # the scrape after resumes


def test_generation_tokens_fallback_on_old_release(real_data: Path) -> None:
    text = (real_data / "metrics/sglang_docs_production_metrics_example_llama31_8b.txt").read_text()
    later = _bump(text, r"^sglang:generation_tokens_total", 4000)
    d = EngineDeriver()
    d.derive(0.0, parse_metrics(text))
    [r] = d.derive(4.0, parse_metrics(later))
    assert r.output_tok_s == pytest.approx(1000.0)
    assert r.gen_throughput == pytest.approx(86.50814177726902)
