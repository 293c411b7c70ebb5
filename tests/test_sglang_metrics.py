"""collectors.sglang.metrics (+ collectors.promtext): the real scrapes of every release we have."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from spectower.collectors.promtext import MetricsParseError, parse_prometheus_text
from spectower.collectors.sglang.metrics import parse_metrics

from tests.conftest import examples


def _read(real_data: Path, rel: str) -> str:
    return (real_data / rel).read_text(encoding="utf-8")


def test_0517_after_load_values(real_data: Path) -> None:
    snap = parse_metrics(_read(real_data, "sglang-0.5.17-h200/metrics_after.txt"))
    assert snap.model_name == ".gpu/tiny/target"
    assert list(snap.ranks) == [0]
    assert snap.reporting_schedulers == {0: (0, 0, 0)}
    r = snap.ranks[0]
    assert r.gauges["num_running_reqs"] == 0.0
    assert r.gauges["spec_accept_length"] == 1.0
    assert r.gauges["spec_num_steps"] == 0.0  # the knob was 0: every batch gated
    assert r.gauges["max_total_num_tokens"] == 6463684.0
    assert "fwd_occupancy" not in r.gauges  # NaN in the scrape: dropped, not stored as a number
    assert r.counters["realtime_tokens_total:decode"] == 161993.0
    assert r.counters["realtime_tokens_total:prefill_compute"] == 1275.0
    assert r.counters["realtime_tokens_total:prefill_cache"] == 632.0
    # tokenizer-side counters are summed over is_streaming=false|true
    assert r.counters["generation_tokens_total"] == 8.0 + 162048.0
    assert r.counters["num_requests_total"] == 1.0 + 633.0
    assert r.counters["spec_verify_calls_total"] == 161388.0
    ttft = r.histograms["ttft"]
    assert ttft[0.1] == 0.0 + 621.0 and ttft[float("inf")] == 1.0 + 633.0
    assert r.histograms["itl"][float("inf")] == 161415.0  # 0.5.17 ITL has no is_streaming label
    assert r.histograms["e2e"][float("inf")] == 634.0
    assert snap.startup_fingerprint is not None and len(snap.startup_fingerprint) == 4


def test_idle_and_after_are_two_server_starts(real_data: Path) -> None:
    # The two captures come from two launches: the startup phases differ, which is what the restart
    # detection keys on.
    idle = parse_metrics(_read(real_data, "sglang-0.5.17-h200/metrics_idle.txt"))
    after = parse_metrics(_read(real_data, "sglang-0.5.17-h200/metrics_after.txt"))
    assert idle.ranks[0].counters["realtime_tokens_total:decode"] == 10.0
    assert "realtime_tokens_total:prefill_cache" not in idle.ranks[0].counters
    assert idle.startup_fingerprint != after.startup_fingerprint
    assert dict(idle.startup_fingerprint or ())["tokenizer_e2e"] == pytest.approx(34.322907593000025)


def test_old_release_model_name_only(real_data: Path) -> None:
    snap = parse_metrics(_read(real_data, "metrics/sglang_docs_production_metrics_example_llama31_8b.txt"))
    assert snap.model_name == "meta-llama/Llama-3.1-8B-Instruct"
    assert snap.reporting_schedulers == {}  # no rank labels at all
    r = snap.ranks[0]
    assert r.gauges == {
        "token_usage": 0.28,
        "cache_hit_rate": 0.007507552643049313,
        "num_running_reqs": 162.0,
        "gen_throughput": 86.50814177726902,
        "num_queue_reqs": 2826.0,
    }
    assert r.counters == {"prompt_tokens_total": 8128902.0, "generation_tokens_total": 7557572.0}
    assert r.histograms["ttft"][float("inf")] == 11008.0
    # the old ITL name time_per_output_token_seconds stands in for inter_token_latency_seconds
    assert r.histograms["itl"][0.05] == 11685.0
    assert r.histograms["itl"][float("inf")] == 7400757.0


def test_v051_label_set(real_data: Path) -> None:
    snap = parse_metrics(_read(real_data, "metrics/sglang_issue13485_v0.5.1_Qwen-32B_excerpt.txt"))
    assert snap.model_name == "Qwen-32B"
    assert snap.ranks[0].gauges == {
        "num_running_reqs": 1.0,
        "token_usage": 0.0,
        "gen_throughput": 0.8371284457403783,
    }


def _series(name: str, value: float, **labels: str) -> str:
    lab = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    return f"sglang:{name}{{{lab}}} {value}\n"


def test_all_schedulers_tp_ranks_not_double_counted() -> None:
    # --enable-metrics-for-all-schedulers with TP=4: every TP rank repeats the same batch.
    text = "# TYPE sglang:num_running_reqs gauge\n"
    for tp in range(4):
        text += _series("num_running_reqs", 7, engine_type="unified", tp_rank=str(tp), pp_rank="0")
    text += "# TYPE sglang:realtime_tokens_total counter\n"
    for tp in range(4):
        text += _series("realtime_tokens_total", 1000, mode="decode", tp_rank=str(tp), pp_rank="0")
    snap = parse_metrics(text)
    assert list(snap.ranks) == [0]
    assert snap.ranks[0].gauges["num_running_reqs"] == 7
    assert snap.ranks[0].counters["realtime_tokens_total:decode"] == 1000  # not 4000


def test_dp_ranks_grouped_and_dp_attention_tp_ranks() -> None:
    # DP=2 under DP attention: DP rank 1 reports from TP rank 2 (not 0); both ranks must come through.
    text = "# TYPE sglang:num_running_reqs gauge\n"
    text += _series("num_running_reqs", 3, dp_rank="0", tp_rank="0", pp_rank="0")
    text += _series("num_running_reqs", 3, dp_rank="0", tp_rank="1", pp_rank="0")
    text += _series("num_running_reqs", 5, dp_rank="1", tp_rank="2", pp_rank="0")
    text += _series("num_running_reqs", 5, dp_rank="1", tp_rank="3", pp_rank="0")
    text += "# TYPE sglang:realtime_tokens_total counter\n"
    text += _series("realtime_tokens_total", 10, dp_rank="0", tp_rank="0", pp_rank="0", mode="decode")
    text += _series("realtime_tokens_total", 20, dp_rank="1", tp_rank="2", pp_rank="0", mode="decode")
    snap = parse_metrics(text)
    assert sorted(snap.ranks) == [0, 1]
    assert snap.reporting_schedulers == {0: (0, 0, 0), 1: (2, 0, 0)}
    assert snap.ranks[0].gauges["num_running_reqs"] == 3
    assert snap.ranks[1].gauges["num_running_reqs"] == 5
    assert snap.ranks[1].counters["realtime_tokens_total:decode"] == 20


def test_truncated_body_is_an_error(real_data: Path) -> None:
    text = _read(real_data, "sglang-0.5.17-h200/metrics_after.txt")
    with pytest.raises(MetricsParseError, match="truncated"):
        parse_metrics(text[: len(text) // 2])


def test_garbage_is_an_error() -> None:
    with pytest.raises(MetricsParseError, match="not Prometheus text"):
        parse_metrics('sglang:num_running_reqs{tp_rank="0" 1.0\n')
    with pytest.raises(MetricsParseError):
        parse_prometheus_text("x" * 100, families=frozenset({"x"}), max_bytes=10)


@settings(
    max_examples=examples(150),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(cut=st.integers(min_value=0, max_value=71955), junk=st.binary(max_size=40))
def test_property_cut_or_garbled_real_scrape_never_crashes(real_data: Path, cut: int, junk: bytes) -> None:
    text = _read(real_data, "sglang-0.5.17-h200/metrics_after.txt")
    body = text[:cut] + junk.decode("latin-1")
    try:
        snap = parse_metrics(body)
    except MetricsParseError:
        return  # refused as a whole: nothing of it is used
    # Accepted: every number in it is a real, finite number.
    for r in snap.ranks.values():
        for v in [*r.gauges.values(), *r.counters.values()]:
            assert v == v and abs(v) != float("inf")
