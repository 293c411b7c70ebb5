"""Speedup curves and crossovers from benchmark points and from live bins (pure functions, no I/O)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import pandas as pd


def bench_speedup(points: pd.DataFrame) -> pd.DataFrame:
    """One run's points -> ``concurrency, tok_s_on, tok_s_off, speedup`` (rows where both sides exist)."""
    cols = ["concurrency", "tok_s_on", "tok_s_off", "speedup"]
    if points.empty or "spec_on" not in points:
        return pd.DataFrame(columns=cols)
    p = points.dropna(subset=["concurrency", "output_throughput", "spec_on"])
    on = p[p["spec_on"].astype(bool)].groupby("concurrency")["output_throughput"].mean()
    off = p[~p["spec_on"].astype(bool)].groupby("concurrency")["output_throughput"].mean()
    both = pd.concat([on.rename("tok_s_on"), off.rename("tok_s_off")], axis=1).dropna()
    both = both[both["tok_s_off"] > 0]
    both["speedup"] = both["tok_s_on"] / both["tok_s_off"]
    return both.reset_index().rename(columns={"index": "concurrency"})[cols].sort_values("concurrency")


def crossover(concurrency: Sequence[float], speedup: Sequence[float]) -> float | None:
    """The first concurrency where speedup falls through 1.0, None if it never does.

    Interpolated linearly in log(concurrency), the same rule the sweep uses (collectors/bench/ratio.py),
    so a live estimate and a benchmark's stored crossover are comparable.
    """
    pairs = [(float(c), float(s)) for c, s in zip(concurrency, speedup, strict=True) if not math.isnan(s)]
    pairs.sort()
    for (c0, s0), (c1, s1) in itertools.pairwise(pairs):
        if s0 >= 1.0 > s1:
            frac = (s0 - 1.0) / (s0 - s1)
            if c0 > 0 and c1 > 0:
                return math.exp(math.log(c0) + frac * (math.log(c1) - math.log(c0)))
            return c0 + frac * (c1 - c0)
    return None


def interpolate(x: float, xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """Linear interpolation inside the measured range; None outside it or with no points."""
    pairs = sorted(zip(xs, ys, strict=True))
    if not pairs or x < pairs[0][0] or x > pairs[-1][0]:
        return None
    for (x0, y0), (x1, y1) in itertools.pairwise(pairs):
        if x0 <= x <= x1:
            return y0 if x1 == x0 else y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    return float(pairs[-1][1])


def knob_label(max_bs: int | None, max_running: int | None) -> str:
    """How an operator reads the knob: off, on, or a load threshold."""
    if max_bs is None:
        return "unknown"
    if max_bs <= 0:
        return "off"
    if max_running is not None and max_bs >= max_running:
        return "on"
    return f"threshold {max_bs}"
