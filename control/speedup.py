"""The one speedup estimator: drafted vs gated decode throughput per batch-size bin, from the engine's own
counters (plugin/engine_counters.py), with a 95 % interval and the crossover.

Standard library only (the policy and the simulator import it; no pandas). Used by the console's live
curve and crossover, ``spectower control get`` and the learning policy, so every reader of one server at
one moment gets one answer.

Input: intervals, each an ``engine_counters.rates()`` result (per-bin deltas of steps, tokens and step
time per mode), from consecutive /server_info snapshots (``intervals_from_snapshots``) or from storage
(raw per-scrape rows or their per-minute rollups: same shape); either way a mode's step time holds its
seconds outside the steps where the plugin counts them (0.4.13, ``engine_counters.with_outside``), so a rate
is what the mode served a client, not what its spans alone held.

Statistics, per bin and mode: the rate is the ratio estimator ``R = sum(tokens) / sum(time_s)`` over the
intervals that saw steps there; treating the intervals as batch means, ``Var(R) ~= sum_i (tokens_i -
R * time_i)^2 / (n (n - 1) mean(time)^2)`` (no interval with n < ``MIN_INTERVALS``; the normal
quantile widened to Student's t for n batch means: ``small_sample_z``). The speedup is ``R_drafted /
R_gated``; its log variance is the sum of the two relative variances and the interval is
``speedup * exp(+-z * se)``. The crossover is the sweep's rule (collectors/bench/ratio.py
``fit_ratios`` + ``first_fall``: a weighted non-increasing fit in log space, interpolated in log batch size
where the fit falls through 1.0); its interval comes from fitting the lower and upper bounds the same way.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from ..collectors.bench.ratio import first_fall, fit_ratios
from ..plugin.engine_counters import MODES, rates, with_outside

Z95 = 1.96
# Floor on a bin's log-speedup standard error when weighting the fit, the sweep's floor
# (collectors/bench/ratio.py _weights): a bin whose intervals agree exactly must not outweigh all others
# by an unbounded factor.
MIN_SE = 1e-3
# A bin's interval needs this many intervals with steps in each mode (its batch means); fewer: no interval.
MIN_INTERVALS = 3
# The crossover's label where no bin has an interval yet (``estimate_per_bin``).
NO_INTERVAL_YET = f"no 95 % interval yet: no bin has {MIN_INTERVALS} intervals in each mode"
# Student's t (two-sided 95 %) by degrees of freedom: from a handful of batch means the normal quantile
# gives intervals too narrow often enough that a policy asking every few seconds would act on them.
T95 = ((1, 12.71), (2, 4.30), (3, 3.18), (4, 2.78), (5, 2.57), (6, 2.45), (8, 2.31), (10, 2.23), (15, 2.13),
       (20, 2.09), (30, 2.04), (60, 2.00))  # fmt: skip


def small_sample_z(intervals: int, z: float = Z95) -> float:
    """``z`` widened to Student's t for a mean of this many batch means (95 %: the table; else scaled)."""
    dof = max(1, intervals - 1)
    t95 = next((t for d, t in T95 if dof <= d), Z95)
    return z * t95 / Z95


EstimateStatus = Literal["found", "none_in_range", "below_range", "no_data"]
# A bin ran mostly one mode when the other has at most this share of its steps: the other mode's rate was
# measured inside the first one's stream (exploration runs 2 %; or a move within the window).
MOSTLY_SHARE = 0.2


@dataclass(frozen=True)
class BinEstimate:
    batch_size: int  # the bin (from the counters' bins)
    drafted_tok_s: float | None  # output tokens / step time of drafted steps in the bin
    gated_tok_s: float | None  # same for gated (0-step) steps
    speedup: float | None  # drafted_tok_s / gated_tok_s
    lo: float | None  # 95 % interval on speedup (None when it cannot be estimated yet)
    hi: float | None
    drafted_steps: int
    gated_steps: int
    drafted_s: float = 0.0  # step time behind each rate
    gated_s: float = 0.0
    intervals: int = 0  # intervals with steps in the scarcer mode (the batch means behind the interval)

    @property
    def ran_mostly(self) -> Literal["drafted", "gated"] | None:
        """The mode this bin's batches mostly ran (the other has <= ``MOSTLY_SHARE`` of its steps), else None.

        Why it matters: a bin that ran mostly gated measured its drafted rate on explored batches of a gated
        stream, whose request mix differs from a drafting stream's. Requests that accept more finish sooner
        when drafting, so a drafting stream holds more of the ones that accept less; the explored rate reads
        high by the ratio of the arithmetic to the harmonic mean of the requests' accept lengths (1.12 on
        the H200 pair, data/gpu-runs/NOTEBOOK.md). The gated side carries one token per request and has no
        such term."""
        total = self.drafted_steps + self.gated_steps
        if total == 0:
            return None
        if self.drafted_steps <= MOSTLY_SHARE * total:
            return "gated"
        if self.gated_steps <= MOSTLY_SHARE * total:
            return "drafted"
        return None


@dataclass(frozen=True)
class SpeedupEstimate:
    bins: tuple[BinEstimate, ...]
    # batch size where the fitted speedup falls through 1.0; None if it never does in range
    crossover: float | None
    # its interval: where the fits of the lower / upper bounds fall through 1.0 (found: clamped to the bins
    # measured; none_in_range: crossover_lo alone, where the pessimistic curve falls if it does;
    # below_range: crossover_hi alone, where the optimistic curve falls if it does)
    crossover_lo: float | None
    crossover_hi: float | None
    # short human text: "~24 (16-32)", "> 64 (pays at every load seen)", "< 2 (...)", "not enough data"
    label: str
    seconds: float  # step time covered
    # found: crossover in range; none_in_range: speculation pays at every bin measured in both modes;
    # below_range: it loses from the smallest one; no_data: no bin measured in both modes yet.
    status: EstimateStatus = "no_data"
    intervals: int = 0  # how many intervals went in

    def to_json(self) -> dict[str, Any]:
        """Plain JSON-ready dict (``control get --json``, the console)."""
        return {
            "crossover": self.crossover,
            "crossover_lo": self.crossover_lo,
            "crossover_hi": self.crossover_hi,
            "label": self.label,
            "status": self.status,
            "seconds": self.seconds,
            "intervals": self.intervals,
            "bins": [
                {
                    "batch_size": b.batch_size,
                    "speedup": b.speedup,
                    "lo": b.lo,
                    "hi": b.hi,
                    "drafted_tok_s": b.drafted_tok_s,
                    "gated_tok_s": b.gated_tok_s,
                    "drafted_steps": b.drafted_steps,
                    "gated_steps": b.gated_steps,
                    "drafted_s": b.drafted_s,
                    "gated_s": b.gated_s,
                    "ran_mostly": b.ran_mostly,
                }
                for b in self.bins
            ],
        }


# ---- counters -> intervals ------------------------------------------------------------------------------


def intervals_from_snapshots(snapshots: Sequence[tuple[float, Mapping[str, Any]]]) -> list[dict[str, Any]]:
    """``rates()`` of each consecutive pair of ``(ts, counters)`` snapshots, in time order, each mode's
    seconds outside its steps folded into its step time (``with_outside``, as storage reads the collector's
    intervals); each interval also carries ``ts`` (its end) and ``since`` (its start)."""
    ordered = sorted(snapshots, key=lambda pair: pair[0])
    out: list[dict[str, Any]] = []
    for (t0, before), (t1, after) in itertools.pairwise(ordered):
        interval = with_outside(rates(dict(before), dict(after)))
        interval["since"], interval["ts"] = t0, t1
        out.append(interval)
    return out


# ---- the estimate ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Rate:
    tok_s: float | None
    rel_var: float | None  # Var(R) / R^2; None with fewer than 2 intervals
    steps: int
    seconds: float


def ratio_estimate(samples: Sequence[tuple[float, float]]) -> tuple[float | None, float | None]:
    """The ratio estimator ``R = sum(y) / sum(x)`` over ``(y, x)`` samples, the intervals as batch means, and
    its relative variance ``Var(R) / R^2`` (the module's docstring); (None, None) where either sum is not
    positive, the variance None with fewer than 2 samples. The rates here, and the harmonic mean accept of
    the exploring parts' requests (``control.mix_levelled``: requests over their summed 1 / accept)."""
    return _ratio(samples, math.fsum(y for y, _ in samples), math.fsum(x for _, x in samples))


def _ratio(
    samples: Sequence[tuple[float, float]], y_sum: float, x_sum: float
) -> tuple[float | None, float | None]:
    """``ratio_estimate`` with the samples' sums already taken."""
    if x_sum <= 0 or y_sum <= 0:
        return None, None
    r = y_sum / x_sum
    n = len(samples)
    if n < 2:
        return r, None
    mean_x = x_sum / n
    var = math.fsum((y - r * x) ** 2 for y, x in samples) / (n * (n - 1) * mean_x**2)
    return r, var / r**2


def _rate(samples: Sequence[tuple[float, float]], steps: int) -> _Rate:
    """The ratio estimator over ``(tokens, time_s)`` of the intervals that saw steps, with its relative
    variance from the intervals as batch means."""
    seconds = math.fsum(x for _, x in samples)
    r, rel_var = _ratio(samples, math.fsum(y for y, _ in samples), seconds)
    return _Rate(r, rel_var, steps, seconds)


Sample = tuple[float, float, int]  # (tokens, time_s, steps) of one interval in one bin and mode
# One interval's samples of one mode: (bin, sample) of each bin with steps there (``mode_samples``)
ModeSamples = list[tuple[int, Sample]]
# ``per_bin``'s grouping as it builds it: bin -> mode -> samples in interval order
PerBin = dict[int, dict[str, list[Sample]]]


def per_bin(intervals: Iterable[Mapping[str, Any]]) -> PerBin:
    """bin -> mode -> [(tokens, time_s, steps) of each interval with steps there]; bins keyed by value so
    intervals whose bins grew line up."""
    return group_samples((mode, mode_samples(interval, mode)) for interval in intervals for mode in MODES)


def mode_samples(interval: Mapping[str, Any], mode: str) -> ModeSamples:
    """One interval's part of ``per_bin`` for one mode: (bin, (tokens, time_s, steps)) of each bin with steps
    there, in bin order. A reader that keeps an interval's part (learn's window,
    control/policy/learn_window.py) gives ``group_samples`` the parts it kept, not building them again."""
    bins = interval["bins"]
    block = interval[mode]
    tokens, seconds = block["tokens"], block["time_s"]
    # a load sits in a few bins: the bins without steps are skipped before anything is built
    return [(int(bins[i]), (float(tokens[i]), float(seconds[i]), int(steps)))
            for i, steps in enumerate(block["steps"][: len(bins)]) if int(steps) > 0]  # fmt: skip


def group_samples(parts: Iterable[tuple[str, Sequence[tuple[int, Sample]]]]) -> PerBin:
    """``per_bin`` of the (mode, ``mode_samples``) parts of its intervals, given in its order (interval by
    interval, ``MODES`` within each): each bin's samples of a mode in interval order."""
    out: PerBin = {}
    for mode, samples in parts:
        for b, sample in samples:
            out.setdefault(b, {m: [] for m in MODES})[mode].append(sample)
    return out


_Samples = Sequence[Sample]  # one per interval
# ``per_bin``'s shape as its readers take it: bin -> mode -> samples
Grouped = Mapping[int, Mapping[str, _Samples]]


def _bin_estimate(b: int, per_mode: Mapping[str, _Samples], z: float) -> BinEstimate:
    d, g = (_rate([(y, x) for y, x, _ in per_mode[m]], sum(s for *_, s in per_mode[m])) for m in MODES)
    speedup = lo = hi = None
    n = min(len(per_mode[m]) for m in MODES)
    if d.tok_s is not None and g.tok_s is not None:
        speedup = d.tok_s / g.tok_s
        if d.rel_var is not None and g.rel_var is not None and n >= MIN_INTERVALS:
            half = small_sample_z(n, z) * math.sqrt(d.rel_var + g.rel_var)
            lo, hi = speedup * math.exp(-half), speedup * math.exp(half)
    return BinEstimate(
        batch_size=b,
        drafted_tok_s=d.tok_s,
        gated_tok_s=g.tok_s,
        speedup=speedup,
        lo=lo,
        hi=hi,
        drafted_steps=d.steps,
        gated_steps=g.steps,
        drafted_s=d.seconds,
        gated_s=g.seconds,
        intervals=n,
    )


def _fit_weights(bins: Sequence[BinEstimate], z: float) -> list[float]:
    """Inverse variance of each bin's log speedup (from its interval); a bin without an interval yet counts
    as much as the least certain bin that has one (1.0 when none has)."""
    known: list[float | None] = []
    for b in bins:
        if b.lo is not None and b.hi is not None and b.lo > 0 and z > 0:
            se = (math.log(b.hi) - math.log(b.lo)) / (2 * z)
            known.append(1.0 / max(se, MIN_SE) ** 2)
        else:
            known.append(None)
    floor = min((w for w in known if w is not None), default=1.0)
    return [floor if w is None else w for w in known]


def _fmt(x: float) -> str:
    return f"{x:.0f}" if x >= 10 else f"{x:.1f}".rstrip("0").rstrip(".")


def estimate(intervals: Sequence[Mapping[str, Any]], *, z: float = Z95) -> SpeedupEstimate:
    """Per-bin speedups with ``z``-sigma intervals and the crossover, from ``rates()``-shaped intervals."""
    return estimate_per_bin(per_bin(intervals), len(intervals), z=z)


def estimate_per_bin(grouped: Grouped, n: int, *, z: float = Z95) -> SpeedupEstimate:
    """``estimate`` of ``n`` intervals already grouped as ``per_bin`` groups them (bin -> mode ->
    [(tokens, time_s, steps)]): storage.queries.counter_samples reads them so, without building a dict
    per interval."""
    bins = tuple(_bin_estimate(b, grouped[b], z) for b in sorted(grouped))
    seconds = math.fsum(b.drafted_s + b.gated_s for b in bins)
    both = [b for b in bins if b.speedup is not None and b.speedup > 0]
    if not both:
        return SpeedupEstimate(bins, None, None, None, "not enough data", seconds, "no_data", n)
    cs = [float(b.batch_size) for b in both]
    weights = _fit_weights(both, z)
    fitted = fit_ratios([b.speedup for b in both if b.speedup is not None], weights)
    # Bounds: a bin without an interval yet (fewer than MIN_INTERVALS in a mode) is as uncertain as the least
    # certain bin that has one, as its fit weight is. Standing at its point estimate on both curves, it
    # made the crossover's interval a point wherever such bins bracketed it: "2.8 (2.8-2.8)" on the demo's
    # first minute. With no bin's interval yet there is no crossover interval at all.
    widest = max((math.log(b.hi / b.lo) / 2 for b in both if b.lo is not None and b.hi is not None),
                 default=None)  # fmt: skip
    if widest is None:
        fall_lo = fall_hi = None
    else:
        spread = math.exp(widest)
        lows = [b.lo if b.lo is not None else b.speedup / spread for b in both if b.speedup is not None]
        highs = [b.hi if b.hi is not None else b.speedup * spread for b in both if b.speedup is not None]
        # The pessimistic curve (lower bounds) falls first, the optimistic one (upper bounds) last.
        fall_lo = first_fall(cs, fit_ratios(lows, weights))
        fall_hi = first_fall(cs, fit_ratios(highs, weights))
    if fitted[0] < 1.0:
        # Loses from the smallest bin on; the optimistic curve may still cross somewhere in range.
        label = f"< {_fmt(cs[0])} (loses at every load seen)"
        return SpeedupEstimate(bins, None, None, fall_hi, label, seconds, "below_range", n)
    value = first_fall(cs, fitted)
    if value is None:
        label = f"> {_fmt(cs[-1])} (pays at every load seen)"
        return SpeedupEstimate(bins, None, fall_lo, None, label, seconds, "none_in_range", n)
    if widest is None:
        label = f"~{_fmt(value)} ({NO_INTERVAL_YET})"
        return SpeedupEstimate(bins, value, None, None, label, seconds, "found", n)
    lo = min(value, fall_lo if fall_lo is not None else cs[0])
    hi = max(value, fall_hi if fall_hi is not None else cs[-1])
    label = f"~{_fmt(value)} ({_fmt(lo)}-{_fmt(hi)})"
    return SpeedupEstimate(bins, value, lo, hi, label, seconds, "found", n)
