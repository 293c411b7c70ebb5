"""One measured point's figures, named as SGLang's benchmark client names them (docs/sglang-reference.md §6).

Throughput is counted three ways. ``output_throughput`` is SGLang's: output tokens received in the phase /
the phase's wall time, ramp-up and tail included. The ``steady_*`` figures count only the tokens that
arrived while exactly C requests were in flight (``LoopResult.steady_*``), in equal windows.
The steady figure is the point's throughput for the curve, the ratio and the crossover, and its windows
give the ratio's interval. ``decode_throughput`` (C x the mean per-request decode rate,
``RequestRecord.decode_rate``) is kept as a diagnostic: it leaves out the client's gap between one request
and the next, but overstates the aggregate when requests finish at different times (a smaller batch
decodes faster per request).
"""

from __future__ import annotations

import bisect
import math
import statistics
from collections.abc import Iterable, Sequence
from typing import Any

# the one percentile rule, shared with the open-loop figures (a replay's and the simulator's)
from ...storage.request_traces import percentile
from .loadgen import LoopResult
from .records import RequestRecord

DEFAULT_WINDOWS = 5
LATENCY_STATS = ("mean", "median", "std", "p90", "p95", "p99")


def summarize_ms(name: str, values_s: Iterable[float]) -> dict[str, float | None]:
    values = [v * 1000.0 for v in values_s]
    if not values:
        return {f"{stat}_{name}": None for stat in LATENCY_STATS}
    return {
        f"mean_{name}": statistics.fmean(values),
        f"median_{name}": percentile(values, 50),
        f"std_{name}": statistics.pstdev(values),
        f"p90_{name}": percentile(values, 90),
        f"p95_{name}": percentile(values, 95),
        f"p99_{name}": percentile(values, 99),
    }


def tokens_by(rec: RequestRecord, t: float) -> float:
    """Output tokens ``rec`` had produced by time ``t``, linear between chunk arrivals (and from 0 at the
    request's start to its first chunk).

    Counting whole chunks makes a window's total jump by a whole step at its edges: a speculative chunk
    carries ~4 tokens, and a step's C chunks reach the client spread over a few ms, so an edge that falls
    on a step (the steady interval ends at a completion, which is a step) takes some of them and not
    others. On a 3 s window at C=1 that is 1 step in 25 (-4%); at C=64, a step's burst split at the edge
    (-3%). Interpolating makes the count a continuous function of the edges, so those losses vanish."""
    times, tokens = rec.chunk_times, rec.chunk_tokens
    if not times or t <= rec.start:
        return 0.0
    i = bisect.bisect_right(times, t)
    done = float(sum(tokens[:i]))
    if i == len(times):
        return done
    prev = times[i - 1] if i else rec.start
    span = times[i] - prev
    return done + (tokens[i] * (t - prev) / span if span > 0 else 0.0)


def window_throughputs(loop: LoopResult, windows: int = DEFAULT_WINDOWS) -> list[float]:
    """Output tok/s in ``windows`` equal slices of the steady interval (``tokens_by``)."""
    span = loop.steady_s
    if span <= 0 or windows < 1:
        return []
    width = span / windows
    edges = [loop.steady_start + i * width for i in range(windows + 1)]
    counts = [0.0] * windows
    for rec in loop.records:
        if not rec.chunk_times or rec.chunk_times[-1] <= edges[0] or rec.start >= edges[-1]:
            continue
        cum = [tokens_by(rec, e) for e in edges]
        for i in range(windows):
            counts[i] += cum[i + 1] - cum[i]
    return [c / width for c in counts]


def decode_windows(loop: LoopResult, windows: int = DEFAULT_WINDOWS) -> list[float]:
    """C x the mean per-request decode rate of the requests finishing in each of ``windows``
    equal slices of the phase: the aggregate decode throughput with C requests decoding together.

    Unlike counting tokens per window, this does not depend on where chunk boundaries fall (a speculative
    chunk carries several tokens) nor on the client's gap between one request's end and the next one's
    first token, so short measurements on a busy machine still measure the server."""
    done = [(r.start + (r.e2e_s or 0.0), rate) for r in loop.records
            if r.success and not r.warmup and (rate := r.decode_rate)]  # fmt: skip
    if not done:
        return []
    span = max(loop.phase_end - loop.phase_start, 1e-9)
    buckets: list[list[float]] = [[] for _ in range(max(1, windows))]
    for end, rate in done:
        i = min(int((end - loop.phase_start) / span * len(buckets)), len(buckets) - 1)
        buckets[max(i, 0)].append(rate)
    return [loop.concurrency * statistics.fmean(b) for b in buckets if b]


def request_figures(recs: Sequence[RequestRecord], duration: float) -> dict[str, Any]:
    """bench_serving's keys that only need the requests and the phase's length: counts, tokens,
    throughputs and the latency statistics (a closed-loop point's and an open-loop replay's)."""
    done = [r for r in recs if r.success]
    duration = max(duration, 1e-9)
    out_tokens = sum(r.output_tokens for r in recs)
    in_tokens = sum(r.input_tokens for r in recs if r.output_tokens > 0)
    figures: dict[str, Any] = {
        "duration": duration,
        "completed": len(done),
        "failed": sum(1 for r in recs if r.error is not None),
        "aborted": sum(1 for r in recs if r.aborted),
        "total_input_tokens": in_tokens,
        "total_output_tokens": out_tokens,
        "request_throughput": len(done) / duration,
        "input_throughput": in_tokens / duration,
        "output_throughput": out_tokens / duration,
        "total_throughput": (in_tokens + out_tokens) / duration,
        "concurrency": sum(r.e2e_s for r in done if r.e2e_s is not None) / duration,
        "max_output_tokens_per_s": _max_per_second(recs),
    }
    figures.update(summarize_ms("ttft_ms", [r.ttft_s for r in recs if r.ttft_s is not None]))
    figures.update(summarize_ms("tpot_ms", [t for r in done if (t := r.tpot_s) is not None]))
    figures.update(summarize_ms("itl_ms", [x for r in recs for x in r.itl_s]))
    figures.update(summarize_ms("e2e_latency_ms", [r.e2e_s for r in done if r.e2e_s is not None]))
    errors = [r.error for r in recs if r.error]
    figures["first_error"] = errors[0] if errors else None
    return figures


def point_figures(loops: LoopResult | Sequence[LoopResult], windows: int = DEFAULT_WINDOWS) -> dict[str, Any]:
    """bench_serving's keys for one point (one or several slices of it), plus the steady-state figures."""
    parts = [loops] if isinstance(loops, LoopResult) else list(loops)
    if not parts:
        raise ValueError("point_figures needs at least one loop")
    recs = [r for loop in parts for r in loop.records if not r.warmup]
    done = [r for r in recs if r.success]
    win = [w for loop in parts for w in window_throughputs(loop, windows)]
    dec = [w for loop in parts for w in decode_windows(loop, windows)]
    rates = [rate for r in done if (rate := r.decode_rate)]
    figures: dict[str, Any] = {
        "max_concurrency": parts[0].concurrency,
        "request_rate": math.inf,
        **request_figures(recs, sum(loop.phase_end - loop.phase_start for loop in parts)),
        "max_concurrent_requests": parts[0].concurrency,
        "steady_output_throughput": statistics.fmean(win) if win else None,
        "steady_duration": sum(loop.steady_s for loop in parts),
        "steady_windows": win,
        "decode_throughput": parts[0].concurrency * statistics.fmean(rates) if rates else None,
        "decode_windows": dec,
    }
    return figures


def _max_per_second(records: Sequence[RequestRecord]) -> float:
    buckets: dict[int, int] = {}
    for rec in records:
        for t, n in zip(rec.chunk_times, rec.chunk_tokens, strict=True):
            buckets[int(t)] = buckets.get(int(t), 0) + n
    return float(max(buckets.values())) if buckets else 0.0
