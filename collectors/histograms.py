"""Percentiles of a Prometheus histogram over an interval, from the DELTA of its cumulative buckets.

The cumulative buckets since server start say little about the last second; the difference between two
scrapes is the histogram of just the requests observed in between. Interpolation inside a bucket is
linear, as PromQL's ``histogram_quantile`` does; a quantile that lands in the ``+Inf`` bucket returns the
highest finite bound (it is "at least that").
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping

Buckets = dict[float, float]  # upper bound (le) -> cumulative count


def bucket_delta(current: Mapping[float, float], previous: Mapping[float, float] | None) -> Buckets | None:
    """current - previous per bucket; None when the buckets reset (a count went down) or changed shape."""
    if previous is None:
        return None
    if set(current) != set(previous):
        return None
    out: Buckets = {}
    for le, count in current.items():
        d = count - previous[le]
        if d < 0:
            return None
        out[le] = d
    return out


def quantile(q: float, buckets: Mapping[float, float]) -> float | None:
    """The q-quantile (0..1) of cumulative ``buckets``; None when empty or malformed."""
    if not 0.0 <= q <= 1.0 or not buckets:
        return None
    bounds = sorted(buckets)
    if not math.isinf(bounds[-1]):
        return None  # a histogram without +Inf is malformed
    counts = [buckets[b] for b in bounds]
    # Cumulative counts must not decrease with le; garbage in gives nothing out.
    if any(c2 < c1 for c1, c2 in itertools.pairwise(counts)) or counts[-1] <= 0:
        return None
    rank = q * counts[-1]
    for i, (le, cum) in enumerate(zip(bounds, counts, strict=True)):
        if cum >= rank:
            if math.isinf(le):
                return bounds[-2] if len(bounds) > 1 else None
            lower = bounds[i - 1] if i > 0 else 0.0
            prev = counts[i - 1] if i > 0 else 0.0
            in_bucket = cum - prev
            if in_bucket <= 0:
                return le
            if i == 0 and le <= 0:
                return le
            return lower + (le - lower) * (rank - prev) / in_bucket
    return None
