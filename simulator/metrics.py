"""``GET /metrics``: the simulator's state as SGLang 0.5.23 names, types and labels it.

Rendered by a prometheus_client custom collector on its own ``CollectorRegistry``. Like SGLang (which
runs prometheus_client in multiprocess mode) nothing carries a ``_created`` sample. Scheduler-side
metrics carry ``model_name, engine_type, tp_rank, pp_rank, moe_ep_rank`` (+ ``dp_rank`` when
``--dp-size > 1``, one series per rank); tokenizer-side ones carry ``model_name, engine_type``. The gauges
show what the scheduler last published (on each prefill batch and every ``decode_log_interval`` decode
steps), not live values, as in SGLang. Names and label sets are checked against
``tests/fixtures/reference/sglang-0.5.23-metrics.tsv`` by ``tests/test_sim_metrics.py``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from .engine import Engine, RankScheduler
from .http_metrics import HttpCounters
from .server_info import STARTUP_TIME
from .stats import Hist

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
ENGINE_TYPE = "unified"
ROUTING_KEY_BUCKETS = (
    (0, 1),
    (1, 2),
    (2, 3),
    (3, 5),
    (5, 7),
    (7, 10),
    (10, 20),
    (20, 50),
    (50, 100),
    (100, 200),
    (200, None),
)
# /server_info's startup times as SGLang's two startup gauges split them: phases, CUDA graph captures.
STARTUP_PHASES: dict[str, float] = {k: v for k, v in STARTUP_TIME.items() if not isinstance(v, dict)}
CUDA_GRAPH_STARTUP: dict[str, float] = STARTUP_TIME["cuda_graph"]
CUDA_GRAPH_PHASES = tuple(CUDA_GRAPH_STARTUP)
CONTEXT_LEN = 131072

# (name without the prefix, help) of the plain scheduler gauges, in SGLang's order.
_SCHED_GAUGES: tuple[tuple[str, str], ...] = (
    ("num_running_reqs", "The number of running requests."),
    ("num_queue_reqs", "The number of requests in the waiting queue."),
    ("num_grammar_queue_reqs", "The number of requests in the grammar waiting queue."),
    ("gen_throughput", "The generation throughput (token/s)."),
    ("cache_hit_rate", "The prefix cache hit rate."),
    ("decode_sum_seq_lens", "The sum of all sequence lengths in decode."),
    ("token_usage", "The token usage."),
    ("full_token_usage", "The token usage for full attention layers."),
    ("swa_token_usage", "The token usage for SWA layers."),
    ("mamba_usage", "The token usage for Mamba layers."),
    ("num_used_tokens", "The number of used tokens."),
    ("kv_available_tokens", "Number of free token slots in the KV cache pool."),
    ("kv_evictable_tokens", "Number of evictable (radix-cached) token slots in the KV cache pool."),
    ("kv_used_tokens", "Number of actively used token slots in the KV cache pool."),
    ("swa_available_tokens", "Number of free token slots in the SWA pool (hybrid-SWA only)."),
    ("swa_evictable_tokens", "Number of evictable (radix-cached) token slots in the SWA pool."),
    ("swa_used_tokens", "Number of actively used token slots in the SWA pool."),
    ("mamba_available_tokens", "Number of free state slots in the mamba SSM pool (hybrid-SSM only)."),
    ("mamba_evictable_tokens", "Number of evictable (radix-cached) state slots in the mamba SSM pool."),
    ("mamba_used_tokens", "Number of actively used state slots in the mamba SSM pool."),
    (
        "spec_accept_length",
        "Mean acceptance length of speculative decoding (accepted drafts + bonus token per forward).",
    ),
    ("spec_accept_rate", "Speculative acceptance rate (`accepted drafts / proposed drafts` in batch)."),
    (
        "spec_cap_length",
        "Mean DSpark confidence-scheduled verify window per verify step, incl the bonus slot "
        "(0 when no cap is scheduled).",
    ),
    ("spec_block_accept_length", "Mean uncapped full-block accept length per verify step."),
    ("spec_num_steps", "Currently active speculative_num_steps."),
    (
        "spec_num_draft_tokens",
        "Currently active speculative_num_draft_tokens (decouples from steps under topk>1).",
    ),
    ("num_retracted_reqs", "The number of retracted requests."),
    ("num_paused_reqs", "The number of paused requests by async weight sync."),
    ("num_prefill_bootstrap_queue_reqs", "The number of requests in the prefill bootstrap queue."),
    ("num_prefill_inflight_queue_reqs", "The number of requests in the prefill inflight queue."),
    ("num_decode_prealloc_queue_reqs", "The number of requests in the decode prealloc queue."),
    ("num_decode_transfer_queue_reqs", "The number of requests in the decode transfer queue."),
    (
        "pending_prealloc_token_usage",
        "The token usage for pending preallocated tokens (not preallocated yet).",
    ),
    ("utilization", "The utilization."),
    ("fwd_occupancy", "Forward pass GPU occupancy percentage."),
    ("new_token_ratio", "The new token ratio."),
    ("is_cuda_graph", "Whether the batch is using CUDA graph."),
    ("num_unique_running_routing_keys", "Number of unique routing keys in running batch."),
    ("max_total_num_tokens", "Maximum total number of tokens in the KV cache pool."),
    ("weight_memory_usage_gb", "Memory used by model weights in GB."),
    ("kv_cache_memory_usage_gb", "Memory used by the KV cache pools in GB."),
    ("page_size", "KV cache page size in tokens."),
    ("num_pages", "Number of KV cache pages."),
    ("context_len", "Maximum context length."),
    ("startup_available_gpu_memory_gb", "Available GPU memory in GB at startup."),
)


def _gauge_values(engine: Engine, rank: RankScheduler) -> dict[str, float]:
    g = rank.gauges
    mem = engine.memory
    total = mem.max_total_num_tokens
    used = g.num_used_tokens
    return {
        "num_running_reqs": g.num_running_reqs,
        "num_queue_reqs": g.num_queue_reqs,
        "num_grammar_queue_reqs": 0,
        "gen_throughput": rank.current_gen_throughput(),
        "cache_hit_rate": g.cache_hit_rate,
        "decode_sum_seq_lens": g.decode_sum_seq_lens,
        "token_usage": g.token_usage,
        "full_token_usage": g.token_usage,
        "swa_token_usage": 0.0,
        "mamba_usage": 0.0,
        "num_used_tokens": used,
        "kv_available_tokens": total - used,
        "kv_evictable_tokens": 0,
        "kv_used_tokens": used,
        "swa_available_tokens": 0,
        "swa_evictable_tokens": 0,
        "swa_used_tokens": 0,
        "mamba_available_tokens": 0,
        "mamba_evictable_tokens": 0,
        "mamba_used_tokens": 0,
        "spec_accept_length": g.spec_accept_length,
        "spec_accept_rate": g.spec_accept_rate,
        "spec_cap_length": 0.0,
        "spec_block_accept_length": 0.0,
        "spec_num_steps": g.spec_num_steps,
        "spec_num_draft_tokens": g.spec_num_draft_tokens,
        "num_retracted_reqs": 0,
        "num_paused_reqs": 0,
        "num_prefill_bootstrap_queue_reqs": 0,
        "num_prefill_inflight_queue_reqs": 0,
        "num_decode_prealloc_queue_reqs": 0,
        "num_decode_transfer_queue_reqs": 0,
        "pending_prealloc_token_usage": 0.0,
        "utilization": g.utilization,
        "fwd_occupancy": 100.0 * g.utilization,
        "new_token_ratio": g.new_token_ratio,
        "is_cuda_graph": g.is_cuda_graph,
        "num_unique_running_routing_keys": 0,
        "max_total_num_tokens": total,
        "weight_memory_usage_gb": mem.weight_gb,
        "kv_cache_memory_usage_gb": mem.kv_cache_gb,
        "page_size": 1,
        "num_pages": total,
        "context_len": CONTEXT_LEN,
        "startup_available_gpu_memory_gb": mem.startup_available_gb,
    }


def _hist(name: str, doc: str, labelnames: list[str], series: Iterable[tuple[list[str], Hist]]) -> Metric:
    fam = HistogramMetricFamily(name, doc, labels=labelnames)
    for values, h in series:
        fam.add_metric(values, h.cumulative(), h.total)
    return fam


class SGLangCollector(Collector):
    def __init__(self, engine: Engine, http: HttpCounters) -> None:
        self.engine = engine
        self.http = http

    def collect(self) -> Iterator[Metric]:
        # SGLang's scheduler processes publish per rank; its tokenizer and HTTP server, once per server
        yield from _scheduler_families(self.engine)
        yield from _tokenizer_families(self.engine)
        yield from _http_and_process_families(self.http)


def _scheduler_families(engine: Engine) -> Iterator[Metric]:
    """The scheduler side: one series per DP rank (``dp_rank`` label only when ``--dp-size > 1``)."""
    model = engine.profile.served_model_name
    dp = engine.config.dp_size > 1
    s_names = ["model_name", "engine_type", "tp_rank", "pp_rank", "moe_ep_rank"] + (["dp_rank"] if dp else [])

    def s_vals(rank: RankScheduler) -> list[str]:
        return [model, ENGINE_TYPE, "0", "0", "0"] + ([str(rank.dp_rank)] if dp else [])

    per_rank = [(s_vals(r), _gauge_values(engine, r), r) for r in engine.ranks]
    for name, doc in _SCHED_GAUGES:
        fam = GaugeMetricFamily(f"sglang:{name}", doc, labels=s_names)
        for labels, values, _ in per_rank:
            fam.add_metric(labels, float(values[name]))
        yield fam
    graph = GaugeMetricFamily(
        "sglang:graph_memory_usage_gb",
        "Memory used by captured device graphs in GB.",
        labels=[*s_names, "phase"],
    )
    for labels, _, _ in per_rank:
        for phase in CUDA_GRAPH_PHASES:
            share = 0.0 if phase == "decode" else engine.memory.graph_gb / (len(CUDA_GRAPH_PHASES) - 1)
            graph.add_metric([*labels, phase], share)
    yield graph
    for key, doc in (
        ("routing_key_running_req_count", "running"),
        ("routing_key_all_req_count", "running+waiting"),
    ):
        fam = GaugeMetricFamily(
            f"sglang:{key}",
            f"Distribution of routing keys by {doc} request count (gt < count <= le).",
            labels=[*s_names, "gt", "le"],
        )
        for labels, _, _ in per_rank:
            for gt, le in ROUTING_KEY_BUCKETS:
                fam.add_metric([*labels, str(gt), "+Inf" if le is None else str(le)], 0.0)
        yield fam
    realtime = CounterMetricFamily(
        "sglang:realtime_tokens",
        "Total number of tokens processed (updated on "
        "each log interval). mode: prefill_compute, prefill_cache, decode.",
        labels=[*s_names, "mode"],
    )
    passes = CounterMetricFamily(
        "sglang:cuda_graph_passes",
        "Total number of forward passes categorized by CUDA graph.",
        labels=[*s_names, "mode"],
    )
    for labels, _, r in per_rank:
        realtime.add_metric([*labels, "prefill_compute"], float(r.total_prefill_tokens))
        realtime.add_metric([*labels, "prefill_cache"], 0.0)
        realtime.add_metric([*labels, "decode"], float(r.total_decode_tokens))
        passes.add_metric([*labels, "prefill_cuda_graph"], float(r.prefill_passes))
        passes.add_metric([*labels, "decode_cuda_graph"], float(r.decode_passes))
    yield realtime
    yield passes
    yield _hist(
        "sglang:queue_time_seconds",
        "Histogram of queueing time in seconds.",
        s_names,
        ((labels, r.queue_hist) for labels, _, r in per_rank),
    )


def _tokenizer_families(engine: Engine) -> Iterator[Metric]:
    """The tokenizer side: startup phases, request and token counters, latency histograms."""
    model = engine.profile.served_model_name
    t_names = ["model_name", "engine_type"]
    t_vals = [model, ENGINE_TYPE]
    t = engine.tokenizer
    for name, doc, phases in (
        ("startup_time_seconds", "Engine startup duration by phase in seconds.", STARTUP_PHASES),
        ("startup_cuda_graph_time_seconds", "CUDA graph capture duration by phase in seconds.",
         CUDA_GRAPH_STARTUP),
    ):  # fmt: skip
        startup = GaugeMetricFamily(f"sglang:{name}", doc, labels=[*t_names, "phase"])
        for phase, secs in phases.items():
            startup.add_metric([*t_vals, phase], secs)
        yield startup
    for name, doc, data in (
        ("prompt_tokens", "Number of prefill tokens processed.", t.prompt_tokens),
        ("generation_tokens", "Number of generation tokens processed.", t.generation_tokens),
        ("num_requests", "Number of requests processed.", t.num_requests),
    ):
        counter = CounterMetricFamily(f"sglang:{name}", doc, labels=[*t_names, "is_streaming"])
        for flag in ("false", "true"):
            counter.add_metric([*t_vals, flag], float(data[flag]))
        yield counter
    verify = CounterMetricFamily(
        "sglang:spec_verify_calls", "Number of speculative decoding verification calls.", labels=t_names
    )
    verify.add_metric(t_vals, float(t.spec_verify_calls))
    yield verify
    cached = CounterMetricFamily(
        "sglang:cached_tokens",
        "Number of cached prompt tokens by source (device/host/storage).",
        labels=[*t_names, "cache_source"],
    )
    cached.add_metric([*t_vals, "device"], float(t.cached_tokens))
    yield cached
    aborted = CounterMetricFamily(
        "sglang:num_aborted_requests", "Number of requests aborted.", labels=t_names
    )
    aborted.add_metric(t_vals, float(t.num_aborted))
    yield aborted
    for name, doc, hist in (
        ("prompt_tokens_histogram", "Histogram of prompt token length.", t.prompt_hist),
        (
            "uncached_prompt_tokens_histogram",
            "Histogram of uncached (compute) prompt token length.",
            t.uncached_prompt_hist,
        ),
        ("generation_tokens_histogram", "Histogram of generation token length.", t.generation_hist),
        ("inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", t.itl),
        ("get_loads_duration_seconds", "Time spent serving /v1/loads requests (seconds).", t.get_loads),
    ):
        yield _hist(f"sglang:{name}", doc, t_names, [(t_vals, hist)])
    for name, doc, split in (
        ("time_to_first_token_seconds", "Histogram of time to first token in seconds.", t.ttft),
        ("e2e_request_latency_seconds", "Histogram of End-to-end request latency in seconds", t.e2e),
        (
            "request_time_per_output_token_seconds",
            "Histogram of request time per output token in seconds.",
            t.tpot,
        ),
    ):
        yield _hist(
            f"sglang:{name}",
            doc,
            [*t_names, "is_streaming"],
            (([*t_vals, flag], split[flag]) for flag in ("false", "true")),
        )


def _http_and_process_families(http: HttpCounters) -> Iterator[Metric]:
    """The HTTP server's request counters and the process's CPU time."""
    by_request = ["endpoint", "method"]
    http_families = (
        (CounterMetricFamily, "http_requests", "Total number of HTTP requests by endpoint and method",
         by_request, http.requests),
        (CounterMetricFamily, "http_responses",
         "Total number of HTTP responses by endpoint and status code",
         ["endpoint", "status_code", "method"], http.responses),
        (GaugeMetricFamily, "http_requests_active", "Number of currently active HTTP requests",
         by_request, http.active),
    )  # fmt: skip
    for family, name, doc, label_names, counts in http_families:
        counted = family(f"sglang:{name}", doc, labels=label_names)
        for label_values, n in list(counts.items()):
            counted.add_metric(list(label_values), float(n))
        yield counted
    yield GaugeMetricFamily(
        "sglang:routing_keys_active", "Number of unique routing keys with active requests", value=0.0
    )
    cpu = CounterMetricFamily(
        "sglang:process_cpu_seconds",
        "Total CPU time consumed by this process (user + system)",
        labels=["component"],
    )
    times = os.times()
    own = times.user + times.system
    # One process plays SGLang's tokenizer and detokenizer: split its CPU time between them.
    cpu.add_metric(["detokenizer"], own / 3)
    cpu.add_metric(["tokenizer"], own * 2 / 3)
    yield cpu


def build_registry(engine: Engine, http: HttpCounters) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SGLangCollector(engine, http))
    return registry


def render(registry: CollectorRegistry) -> bytes:
    return generate_latest(registry)
