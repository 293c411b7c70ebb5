"""What ``learn`` reads from decode-counter intervals: the estimate it moves on (thin bins kept on their
side), the kept-extend correction of a drafting bin's gated side, and the ceilings an estimate allows on the
counters' bin boundaries. The policy (control/policy/learn.py) reads its own snapshots through these; the warm
start (control/warm_start.py) reads the collector's stored intervals of the same server through the same ones,
so both put the ceiling where the same rule puts it.
"""

from __future__ import annotations

from typing import Any

from ...plugin import engine_counters, explore, knob_contract
from .. import speedup

# The crossover's interval for the move decision: the one every reader of the estimate shows (95 %); a
# chance exclusion of the current ceiling costs one change at most, and the dwell bounds those.
DEFAULT_Z = speedup.Z95
# A bin's estimate counts once each of its modes has steps in this many intervals (sample_s apart).
MIN_INTERVALS = speedup.MIN_INTERVALS
# Above every bin: the ceiling that drafts every batch (mapped to max_running_requests).
TOP = knob_contract.MAX_SPEC_MAX_BS
# A bin the ceiling drafts measures its gated side on explored batches, which keep the draft model's KV
# extend (the requests go on drafting after them); a bin the ceiling gates skips it outside exploration
# windows (plugin/explore.py). So a drafting bin's gated rate understates what gating it would serve by the
# extend's share of a gated step; those bins' gated tokens are scaled up by 1 / (1 - kept_extend_tax), so
# both sides of a bin compare what each choice would serve. The tax is the server's own where its counters
# measure it (plugin 0.4.6: control/kept_extend.py), else this constant (what the H200 measured with short
# prompts; 12-14 % with Azure's).
DEFAULT_KEPT_EXTEND_TAX = explore.DEFAULT_KEPT_EXTEND_TAX
# The key an interval carries the ceiling it ran under with (the engine counters have no such key).
CEILING_KEY = "learn_ceiling"


def bin_floor(x: float, bins: list[int]) -> int:
    """The largest bin <= ``x`` (0 when ``x`` is below the first bin): the ceiling that drafts exactly the
    bins at or below ``x``."""
    return max((b for b in bins if b <= x + 1e-9), default=0)


def _without(intervals: list[dict[str, Any]], bins: set[int]) -> list[dict[str, Any]]:
    """The intervals with these bins' steps left out (the estimator skips a bin without steps)."""
    if not bins:
        return intervals
    out = []
    for interval in intervals:
        keep = [int(b) not in bins for b in interval["bins"]]
        copy = dict(interval)
        for mode in engine_counters.MODES:
            block = dict(interval[mode])
            block["steps"] = [n if k else 0 for n, k in zip(block["steps"], keep, strict=True)]
            copy[mode] = block
        out.append(copy)
    return out


def estimate_without_thin(
    intervals: list[dict[str, Any]], z: float = DEFAULT_Z
) -> tuple[speedup.SpeedupEstimate, set[int]]:
    """The estimate learn moves on, and the thin bins left out of it: a bin seen in both modes in fewer than
    ``MIN_INTERVALS`` intervals has no interval yet and keeps the side it is on (out of the crossover's
    fit)."""
    whole = speedup.estimate(intervals, z=z)
    thin = {b.batch_size for b in whole.bins if b.speedup is not None and b.intervals < MIN_INTERVALS}
    return (speedup.estimate(_without(intervals, thin), z=z) if thin else whole), thin


def plan_ceilings(
    est: speedup.SpeedupEstimate, bins: list[int], max_running_requests: int
) -> tuple[int, int, int]:
    """(target ceiling, lowest and highest ceiling the estimate's interval allows), on bin boundaries.

    ``bins`` are the counters' bins; the bounds are ceilings (0, a bin, or ``max_running_requests``: every
    bin on). Bins the window has not measured in both modes keep the side they are on: when speculation
    pays at every bin measured, the target drafts up to the highest of them (or on, if that is the last
    bin); when it loses at every bin measured, it gates down to just below the lowest of them. So a bin the
    load left an hour ago is not switched on the strength of other bins."""
    measured = [b.batch_size for b in est.bins if b.speedup is not None]
    if est.status == "none_in_range":  # pays at every bin measured in both modes
        target, high = bin_floor(measured[-1], bins), TOP
        low = bin_floor(est.crossover_lo, bins) if est.crossover_lo is not None else target
    elif est.status == "below_range":  # loses from the smallest bin measured on
        target, low = bin_floor(measured[0] - 1, bins), 0
        high = bin_floor(est.crossover_hi, bins) if est.crossover_hi is not None else target
    else:
        assert est.crossover is not None
        target = bin_floor(est.crossover, bins)
        low = bin_floor(est.crossover_lo if est.crossover_lo is not None else est.crossover, bins)
        high = bin_floor(est.crossover_hi if est.crossover_hi is not None else est.crossover, bins)
    mrr = max_running_requests
    return ceiling_of(target, mrr), ceiling_of(low, mrr), ceiling_of(high, mrr)


def keep_or_move(knob: int | None, target: int, low: int, high: int, bins: list[int],
                 max_running_requests: int) -> int:  # fmt: skip
    """Where learn's rule puts the ceiling from ``knob``, given ``plan_ceilings``' (target, low, high): the
    knob itself when it is a bin boundary (0, a bin, or every bin on) within [low, high]; the allowed boundary
    nearest it (the lower on a tie) when it lies within them between two boundaries, as a threshold's 47
    does; else (outside them, or unknown) the target. Moving an in-range 47 to the target would switch bins
    no interval measured: with the load at bins 1-2 only, a warm start from the stored counters moved 47 to 2
    (a rehearsal on the simulator, 2026-12-04)."""
    if knob is None:
        return target
    mrr = max_running_requests
    value = ceiling_of(knob, mrr)
    allowed = sorted(c for c in {0, mrr, *(ceiling_of(b, mrr) for b in bins)} if low <= c <= high)
    if not allowed or not low <= value <= high:
        return target
    return min(allowed, key=lambda c: (abs(c - value), c))


def ceiling_of(bound: int, max_running_requests: int) -> int:
    """A bin boundary as a knob value: a bin at or above ``max_running_requests`` is every bin on."""
    return max_running_requests if bound >= max_running_requests else bound


def with_gated_scaled(interval: dict[str, Any], scaled: list[bool], scale: float) -> dict[str, Any]:
    """The interval with the gated tokens and rates of the bins ``scaled`` marks (one flag per bin) times
    ``scale``: a drafting bin's gated steps were explored in a drafting stream and kept the draft extend,
    so ``1 / (1 - kept_extend_tax)`` makes them a gated stream's (``DEFAULT_KEPT_EXTEND_TAX``)."""
    gated = dict(interval["gated"])
    gated["tokens"] = [t * scale if w else t for t, w in zip(gated["tokens"], scaled, strict=True)]
    gated["tok_s"] = [r * scale if r is not None and w else r
                      for r, w in zip(gated["tok_s"], scaled, strict=True)]  # fmt: skip
    return {**interval, "gated": gated}


def drafted_by(bins: list[Any], ceiling: int | None) -> list[bool]:
    """Per bin, whether ``ceiling`` drafts it (None: unknown, speculation as launched: every bin): the bins
    whose gated side ``with_gated_scaled`` corrects."""
    return [ceiling is None or int(b) <= ceiling for b in bins]


def corrected(intervals: list[dict[str, Any]], tax: float) -> list[dict[str, Any]]:
    """The intervals with the gated side of the bins each one's ceiling (``CEILING_KEY``; absent or None:
    every bin, speculation as launched) drafted scaled by ``1 / (1 - tax)``."""
    if tax == 0.0:
        return intervals
    scale = 1.0 / (1.0 - tax)
    return [with_gated_scaled(i, drafted_by(i["bins"], i.get(CEILING_KEY)), scale) for i in intervals]
