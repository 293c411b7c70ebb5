"""Counters, histograms and the scheduler's gauge snapshot, kept as plain numbers.

The simulator does not use prometheus_client's metric objects on its hot path (one decode step touches
every running request); it keeps its own numbers here and ``simulator.metrics`` renders them through a
prometheus_client custom collector. Bucket boundaries are SGLang's defaults, as a real 0.5.17 server
exposed them (``tests/fixtures/real/sglang-0.5.17-h200/metrics_after.txt``).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from prometheus_client.utils import floatToGoString

TTFT_BUCKETS = (
    0.1,
    0.2,
    0.4,
    0.6,
    0.8,
    1.0,
    2.0,
    4.0,
    6.0,
    8.0,
    10.0,
    20.0,
    40.0,
    60.0,
    80.0,
    100.0,
    200.0,
    400.0,
)
E2E_BUCKETS = (*TTFT_BUCKETS, 600.0, 1200.0, 1800.0, 2400.0)
ITL_BUCKETS = (
    0.002,
    0.004,
    0.006,
    0.008,
    0.01,
    0.015,
    0.02,
    0.025,
    0.03,
    0.035,
    0.04,
    0.06,
    0.08,
    0.1,
    0.2,
    0.4,
    0.6,
    0.8,
    1.0,
    2.0,
    4.0,
    6.0,
    8.0,
)
# SGLang's time-per-output-token buckets (not in the 0.5.17 capture: it had no such request yet).
TPOT_BUCKETS = (
    0.002,
    0.005,
    0.01,
    0.02,
    0.03,
    0.04,
    0.05,
    0.06,
    0.07,
    0.08,
    0.09,
    0.1,
    0.15,
    0.2,
    0.3,
    0.4,
    0.6,
    0.8,
    1.0,
    2.0,
)
TOKEN_COUNT_BUCKETS = (
    100.0,
    300.0,
    500.0,
    700.0,
    1000.0,
    1500.0,
    2000.0,
    3000.0,
    4000.0,
    5000.0,
    6000.0,
    7000.0,
    8000.0,
    9000.0,
    10000.0,
    12500.0,
    15000.0,
    17500.0,
    20000.0,
    22500.0,
    25000.0,
    27500.0,
    30000.0,
    35000.0,
    40000.0,
    60000.0,
    80000.0,
    100000.0,
    200000.0,
    300000.0,
    400000.0,
    600000.0,
    800000.0,
    1e6,
    1.1e6,
)
QUEUE_TIME_BUCKETS = (
    0.0,
    0.001,
    0.005,
    0.01,
    0.05,
    0.1,
    0.2,
    0.5,
    1.0,
    2.0,
    3.0,
    4.0,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    50.0,
    60.0,
    70.0,
    80.0,
    90.0,
    100.0,
    200.0,
    300.0,
    400.0,
    500.0,
    600.0,
    700.0,
    800.0,
    900.0,
    1000.0,
    1200.0,
    1400.0,
    1600.0,
    1800.0,
    2000.0,
    2500.0,
    3000.0,
)
GET_LOADS_BUCKETS = (0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0)


class Hist:
    """A cumulative-on-read histogram: per-bucket counts, sum and count."""

    __slots__ = ("bounds", "count", "counts", "total")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # last slot: above every bound (+Inf)
        self.total = 0.0
        self.count = 0

    def observe(self, value: float, times: int = 1) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += times
        self.total += value * times
        self.count += times

    def cumulative(self) -> list[tuple[str, float]]:
        out: list[tuple[str, float]] = []
        running = 0
        for bound, n in zip(self.bounds, self.counts, strict=False):
            running += n
            out.append((_le(bound), float(running)))
        out.append(("+Inf", float(self.count)))
        return out


def _le(bound: float) -> str:
    # prometheus_client's own formatting, so `le` reads as SGLang's does ("0.1", "1.0", "1e+06").
    return floatToGoString(bound)


@dataclass
class SchedulerGauges:
    """What SGLang's scheduler last published (refreshed on prefill and every decode_log_interval steps)."""

    num_running_reqs: int = 0
    num_queue_reqs: int = 0
    gen_throughput: float = 0.0
    token_usage: float = 0.0
    num_used_tokens: int = 0
    cache_hit_rate: float = 0.0
    decode_sum_seq_lens: int = 0
    spec_accept_length: float = 0.0
    spec_accept_rate: float = 0.0
    spec_num_steps: int = 0
    spec_num_draft_tokens: int = 0
    utilization: float = 0.0
    new_token_ratio: float = 0.0
    is_cuda_graph: float = 0.0
    published_at: float = 0.0  # monotonic


@dataclass
class TokenizerStats:
    """The tokenizer-side counters and histograms, split by ``is_streaming`` where SGLang splits them."""

    prompt_tokens: dict[str, int] = field(default_factory=lambda: {"false": 0, "true": 0})
    generation_tokens: dict[str, int] = field(default_factory=lambda: {"false": 0, "true": 0})
    num_requests: dict[str, int] = field(default_factory=lambda: {"false": 0, "true": 0})
    num_aborted: int = 0
    cached_tokens: int = 0
    spec_verify_calls: int = 0
    ttft: dict[str, Hist] = field(default_factory=lambda: {k: Hist(TTFT_BUCKETS) for k in ("false", "true")})
    e2e: dict[str, Hist] = field(default_factory=lambda: {k: Hist(E2E_BUCKETS) for k in ("false", "true")})
    tpot: dict[str, Hist] = field(default_factory=lambda: {k: Hist(TPOT_BUCKETS) for k in ("false", "true")})
    itl: Hist = field(default_factory=lambda: Hist(ITL_BUCKETS))
    prompt_hist: Hist = field(default_factory=lambda: Hist(TOKEN_COUNT_BUCKETS))
    uncached_prompt_hist: Hist = field(default_factory=lambda: Hist(TOKEN_COUNT_BUCKETS))
    generation_hist: Hist = field(default_factory=lambda: Hist(TOKEN_COUNT_BUCKETS))
    get_loads: Hist = field(default_factory=lambda: Hist(GET_LOADS_BUCKETS))
