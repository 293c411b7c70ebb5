"""Spec-on / spec-off throughput ratio per concurrency, the crossover, and the knob value to use.

The ratio's interval comes from the repeated windows of each point: a t-interval on log(mean_on/mean_off)
with the delta-method standard error, so it is symmetric on a log scale and never goes negative.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

DEFAULT_CONFIDENCE = 0.95
# Two-sided 95% Student t quantiles by degrees of freedom (no scipy in the product).
_T95 = {
    1: 12.706,
    2: 4.303,
    3: 3.182,
    4: 2.776,
    5: 2.571,
    6: 2.447,
    7: 2.365,
    8: 2.306,
    9: 2.262,
    10: 2.228,
    12: 2.179,
    15: 2.131,
    20: 2.086,
    30: 2.042,
    60: 2.000,
}


def t95(df: int) -> float:
    if df < 1:
        return math.inf
    keys = [k for k in sorted(_T95) if k <= df]
    return _T95[keys[-1]] if df < 120 else 1.96


@dataclass(frozen=True)
class RatioPoint:
    concurrency: float
    ratio: float
    lo: float
    hi: float


def ratio_interval(on: Sequence[float], off: Sequence[float]) -> tuple[float, float, float]:
    """(ratio, lo, hi) of mean(on)/mean(off) from repeated window throughputs."""
    if not on or not off:
        raise ValueError("ratio needs at least one window in each mode")
    m_on, m_off = statistics.fmean(on), statistics.fmean(off)
    if m_on <= 0 or m_off <= 0:
        raise ValueError("ratio needs positive throughput in both modes")
    ratio = m_on / m_off
    if len(on) < 2 or len(off) < 2:
        return ratio, ratio, ratio
    var = statistics.variance(on) / (len(on) * m_on**2) + statistics.variance(off) / (len(off) * m_off**2)
    half = t95(min(len(on), len(off)) - 1) * math.sqrt(var)
    return ratio, ratio * math.exp(-half), ratio * math.exp(half)


def paired_ratio_interval(on: Sequence[float], off: Sequence[float]) -> tuple[float, float, float]:
    """(ratio, lo, hi) from paired measurements: the geometric mean of ``on[i] / off[i]`` with a t-interval
    on their logs.

    For designs where each pair shares what moves both of its halves (the same prompts, run back to back):
    the pair's own ratio carries the comparison, the drift between pairs drops out, and one pair whose one
    half ran unusually fast or slow moves the result by its log ratio over n rather than by its whole
    tok/s, as it would in a ratio of means."""
    if len(on) != len(off):
        raise ValueError(f"paired ratio needs as many values on each side, got {len(on)} and {len(off)}")
    if not on:
        raise ValueError("paired ratio needs at least one pair")
    if min(on) <= 0 or min(off) <= 0:
        raise ValueError("paired ratio needs positive throughput in every pair")
    logs = [math.log(a / b) for a, b in zip(on, off, strict=True)]
    centre = statistics.fmean(logs)
    ratio = math.exp(centre)
    if len(logs) < 2:
        return ratio, ratio, ratio
    half = t95(len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs))
    return ratio, math.exp(centre - half), math.exp(centre + half)


CrossoverStatus = Literal["found", "none_in_range", "below_range"]


@dataclass(frozen=True)
class Crossover:
    status: CrossoverStatus
    value: float | None = None  # interpolated concurrency where the ratio falls through 1
    lo: float | None = None
    hi: float | None = None
    bracket: tuple[float, float] | None = None  # the two measured levels around it
    # none_in_range / below_range: the measured levels whose ratio interval contains 1, where the sweep
    # cannot tell speculation from none (a 0.999 with 0.958-1.042 is no evidence that it pays)
    not_significant_at: tuple[float, ...] = ()

    def describe(self) -> str:
        if self.status in ("none_in_range", "below_range"):
            claim = (
                "speculation pays at every measured concurrency"
                if self.status == "none_in_range"
                else "speculation loses even at the lowest measured concurrency"
            )
            where = self.status.replace("_", " ")
            if not self.not_significant_at:
                return f"{where} ({claim})"
            levels = ", ".join(f"{c:g}" for c in self.not_significant_at)
            return f"{where}: the difference is not significant at concurrency {levels} (interval contains 1)"
        assert self.value is not None
        return f"{self.value:.1f} (interval {self.lo:.1f}-{self.hi:.1f})"


def first_fall(cs: Sequence[float], rs: Sequence[float]) -> float | None:
    """Where ``rs`` first falls from >= 1 to < 1, linear in log(concurrency) (linear in concurrency where
    one side is not positive, as a live bin starting at 0 can be); None if it never does."""
    for i in range(1, len(cs)):
        if rs[i - 1] >= 1.0 > rs[i]:
            c0, c1 = cs[i - 1], cs[i]
            frac = (rs[i - 1] - 1.0) / (rs[i - 1] - rs[i])
            if c0 > 0 and c1 > 0:
                return math.exp(math.log(c0) + frac * (math.log(c1) - math.log(c0)))
            return c0 + frac * (c1 - c0)
    return None


def monotone_decreasing(values: Sequence[float], weights: Sequence[float]) -> list[float]:
    """Weighted least-squares fit of a non-increasing sequence (pool adjacent violators).

    Speculation's relative benefit falls as load rises, so the measured ratios are noisy samples of a
    non-increasing curve: fitting that shape first keeps one noisy low point at small concurrency from
    being reported as the crossover (seen on a real H200 sweep with 6 s windows).
    """
    blocks: list[list[float]] = []  # [weighted mean, total weight, count]
    for value, weight in zip(values, weights, strict=True):
        blocks.append([value, weight, 1])
        while len(blocks) > 1 and blocks[-2][0] < blocks[-1][0]:
            v2, w2, n2 = blocks.pop()
            v1, w1, n1 = blocks.pop()
            blocks.append([(v1 * w1 + v2 * w2) / (w1 + w2), w1 + w2, n1 + n2])
    fitted: list[float] = []
    for value, _weight, count in blocks:
        fitted.extend([value] * int(count))
    return fitted


def _weights(pts: Sequence[RatioPoint]) -> list[float]:
    """Inverse variance in log-ratio space from each point's interval (tight points count more)."""
    out = []
    for p in pts:
        half = (math.log(p.hi) - math.log(p.lo)) / 2 if p.lo > 0 and p.hi > 0 else 0.0
        out.append(1.0 / max(half, 1e-3) ** 2)
    return out


def fit_ratios(values: Sequence[float], weights: Sequence[float]) -> list[float]:
    """``monotone_decreasing`` of on/off ratios, fitted in log space (a ratio halving and doubling weigh
    the same)."""
    logs = monotone_decreasing([math.log(max(v, 1e-12)) for v in values], weights)
    return [math.exp(v) for v in logs]


def find_crossover(points: Sequence[RatioPoint]) -> Crossover:
    pts = sorted(points, key=lambda p: p.concurrency)
    if not pts:
        raise ValueError("no points to find a crossover in")
    cs = [p.concurrency for p in pts]
    weights = _weights(pts)
    rs = fit_ratios([p.ratio for p in pts], weights)
    unclear = tuple(p.concurrency for p in pts if p.lo <= 1.0 <= p.hi)
    if rs[0] < 1.0:
        return Crossover(status="below_range", not_significant_at=unclear)
    value = first_fall(cs, rs)
    if value is None:
        return Crossover(status="none_in_range", not_significant_at=unclear)
    # The pessimistic curve (lower bounds) falls first, the optimistic one (upper bounds) last.
    lo = first_fall(cs, fit_ratios([p.lo for p in pts], weights))
    hi = first_fall(cs, fit_ratios([p.hi for p in pts], weights))
    lo = min(value, lo if lo is not None else cs[0])
    hi = max(value, hi if hi is not None else cs[-1])
    i = next(i for i in range(1, len(cs)) if rs[i - 1] >= 1.0 > rs[i])
    return Crossover(status="found", value=value, lo=lo, hi=hi, bracket=(cs[i - 1], cs[i]))


def best_knob(crossover: Crossover, max_running_requests: int) -> int:
    """The ``spectower_spec_max_bs`` that drafts exactly where speculation pays."""
    if crossover.status == "none_in_range":
        return max_running_requests
    if crossover.status == "below_range":
        return 0
    assert crossover.value is not None
    return max(0, min(max_running_requests, math.floor(crossover.value)))
