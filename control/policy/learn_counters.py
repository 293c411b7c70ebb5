"""What ``learn`` reads from decode-counter intervals: the estimate it moves on (thin bins kept on their
side), the kept-extend correction of a drafting bin's gated side, and the ceilings an estimate allows on the
counters' bin boundaries. The policy (control/policy/learn.py) reads its own snapshots through these; the warm
start (control/warm_start.py) reads the collector's stored intervals of the same server through the same ones,
so both put the ceiling where the same rule puts it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ...plugin import engine_counters, explore, knob_contract
from .. import mix_levelled, prefilled, speedup

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


def estimate_without_thin(
    intervals: list[dict[str, Any]], z: float = DEFAULT_Z, samples: speedup.Grouped | None = None
) -> tuple[speedup.SpeedupEstimate, set[int]]:
    """The estimate learn moves on, and the thin bins left out of it: a bin seen in both modes in fewer than
    ``MIN_INTERVALS`` intervals has no interval yet and keeps the side it is on (out of the crossover's
    fit). ``samples``: the intervals' ``speedup.per_bin`` where the caller has it (learn's window keeps each
    interval's part, control/policy/learn_window.py). The bins are estimated each on its own, so the thin ones
    are left out of the grouping itself: the same estimate as the intervals with their steps taken out."""
    grouped = speedup.per_bin(intervals) if samples is None else samples
    whole = speedup.estimate_per_bin(grouped, len(intervals), z=z)
    thin = {b.batch_size for b in whole.bins if b.speedup is not None and b.intervals < MIN_INTERVALS}
    if not thin:
        return whole, thin
    kept = {b: modes for b, modes in grouped.items() if b not in thin}
    return speedup.estimate_per_bin(kept, len(intervals), z=z), thin


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


def as_choices(
    intervals: list[dict[str, Any]],
    masks: list[list[bool]],
    scale: float,
    prefill_costs: Mapping[str, float] | None = None,
) -> list[dict[str, Any]]:
    """The intervals as the two choices of each bin, which is what learn weighs there: drafting it against
    gating it. ``masks``: per interval, per bin, whether its ceiling drafted the bin.

    - What drafting a bin serves is everything the bin ran while the ceiling drafted it: its drafted steps
      and its gated ones together. Such a bin runs gated batches with the draft extend too: explored ones,
      and after every burst above the ceiling the drain, which holds the batch at 0 steps until the requests
      the burst left holed have finished (plugin/gated_decode.py). Under bursty traffic that is most of its
      steps (the 0.5 pair under Azure's replay on the H200, 2026-12-05: threshold:47 drafted 7-12 % of bins
      24-48's steps and those bins served 0.84-0.89 of always off's rate,
      data/gpu-runs/h200-8b-pair-triton-replay-2026-12-05b). Counting only the drafted steps credited
      drafting with a rate the bin never served. Where the intervals hold a bin drafted by its ceiling in
      ``MIN_INTERVALS`` of them, that is its drafting side; the drafting explored while the ceiling gated it
      is left out (its batches draft but drain nothing: it would read drafting as paying again as soon as
      the ceiling gates the bin). Elsewhere the explored drafting is all there is, and stands.
    - What gating a bin serves is its gated steps' rate, times ``scale`` = ``1 / (1 - kept_extend_tax)``
      where the ceiling drafted it: those steps kept the extend, which a bin the ceiling gates skips
      (``DEFAULT_KEPT_EXTEND_TAX``).

    A bin drafted by its ceiling that only drains so reads ``1 - kept_extend_tax``: gating it serves more.
    Under a steady load a drafted bin's gated steps are its explored ones, a few %, and its drafting side is
    its drafted rate within that share of the difference.

    Each explored cell (the mode its ceiling did not choose) is levelled twice, in this order. First a gated
    bin's explored drafting for its requests' mix (``mix_levelled.mix_levelled_intervals``, where the window
    carries plugin 0.4.15's ``slots`` and ``mix`` blocks and its parts hold enough requests): an exploring
    part starts from a gated stream's batch, whose requests accept their arithmetic mean, where a steady
    drafting stream's accept their harmonic mean H, so its tokens are set at ``slots x H``. Then each
    explored cell for the prefills in its steps (``prefilled.levelled_intervals``, where the intervals carry
    plugin 0.4.14's block): it sits in the other mode's stream and carries that stream's prefills, a drafting
    stream's more and dearer ones in a drafting bin's explored gated steps, a gated stream's in a gated bin's
    explored drafting. The mix sets the tokens, and the prefill levelling then adds its steady prefill
    seconds per token for those tokens (the mix levelling scales the cell's prefilled tokens alike). The
    drafting side of a bin its ceiling drafts adds the gated steps as measured: what that bin served,
    prefills and all.

    ``prefill_costs``: each mode's steady prefill seconds per token measured before (learn keeps the last
    its window measured), for the modes the intervals have no steady cell of (``prefilled.steady_costs``).

    The warm start (control/warm_start.py) reads the collector's stored intervals through here too; they
    carry the ``slots`` and ``mix`` blocks as ``rates()`` gives them (``storage.queries.counter_intervals``,
    plugin 0.4.15 on), so it levels as learn does."""
    if len(masks) != len(intervals):
        raise ValueError(f"masks: one per interval, got {len(masks)} for {len(intervals)}")
    levelled = prefilled.levelled_intervals(mix_levelled.mix_levelled_intervals(intervals, masks), masks,
                                            prefill_costs)  # fmt: skip
    known = known_drafting(intervals, masks)
    # the sides as levelled (the explored cells), but what drafting a drafted bin served is all it ran, as
    # measured: its gated steps with the prefills they carried
    out = []
    for interval, flat, mask in zip(intervals, levelled, masks, strict=True):
        how = how_served(interval["bins"], mask, known)
        out.append({**flat, "drafted": drafting_side(interval["gated"], flat["drafted"], how),
                    "gated": gating_side(flat["gated"], mask, scale)})  # fmt: skip
    return out


def known_drafting(intervals: list[dict[str, Any]], masks: list[list[bool]]) -> set[int]:
    """The bins ``as_choices`` reads by what their ceiling served: drafted by it and run in ``MIN_INTERVALS``
    of the intervals (elsewhere a drafted bin's drafting explored while its ceiling gated it stands)."""
    chosen_in: dict[int, int] = {}  # bin -> intervals in which its ceiling drafted it and it ran
    for interval, mask in zip(intervals, masks, strict=True):
        for i, (b, drafted) in enumerate(zip(interval["bins"], mask, strict=True)):
            if drafted and interval["drafted"]["steps"][i] + interval["gated"]["steps"][i] > 0:
                chosen_in[int(b)] = chosen_in.get(int(b), 0) + 1
    return {b for b, n in chosen_in.items() if n >= MIN_INTERVALS}


def how_served(bins: list[Any], mask: list[bool], known: set[int]) -> tuple[int, ...]:
    """Per bin of one interval, how ``as_choices`` reads its drafting side: 1 adds the gated steps to the
    drafted ones (its ceiling drafted the bin), -1 drops the drafted ones (explored while its ceiling gated a
    bin that ``known_drafting`` knows), 0 keeps them."""
    return tuple(1 if w else (-1 if int(b) in known else 0) for b, w in zip(bins, mask, strict=True))


def drafting_side(served_gated: Mapping[str, Any], drafted: Mapping[str, Any],
                  how: tuple[int, ...]) -> dict[str, Any]:  # fmt: skip
    """One interval's drafting side as ``as_choices`` reads it: its (levelled) ``drafted`` block, with the
    gated steps as measured (``served_gated``: what a drafted bin served, the prefills they carried and all)
    added or the drafted ones dropped per ``how_served``, and the rates of the bins it changed."""
    chosen = dict(drafted)
    for key in ("steps", "tokens", "time_s"):
        chosen[key] = [d + g if h > 0 else (0 if h < 0 else d)
                       for d, g, h in zip(chosen[key], served_gated[key], how, strict=True)]  # fmt: skip
    for key, num, den in (("tok_s", "tokens", "time_s"), ("step_s", "time_s", "steps")):
        rows = zip(chosen[num], chosen[den], chosen.get(key, [None] * len(how)), how, strict=True)
        chosen[key] = [(x / y if x > 0 and y > 0 else None) if h != 0 else r for x, y, r, h in rows]
    return chosen


def gating_side(flat_gated: Mapping[str, Any], mask: list[bool], scale: float) -> dict[str, Any]:
    """One interval's (levelled) gated block as ``as_choices`` reads it: the bins its ceiling drafted scaled
    by ``scale`` (their gated steps kept the draft extend)."""
    gated = dict(flat_gated)
    gated["tokens"] = [t * scale if w else t for t, w in zip(gated["tokens"], mask, strict=True)]
    gated["tok_s"] = [r * scale if r is not None and w else r
                      for r, w in zip(gated["tok_s"], mask, strict=True)]  # fmt: skip
    return gated


def drafted_by(bins: list[Any], ceiling: int | None) -> list[bool]:
    """Per bin, whether ``ceiling`` drafts it (None: unknown, speculation as launched: every bin): the bins
    ``as_choices`` reads as the two choices."""
    return [ceiling is None or int(b) <= ceiling for b in bins]


def ceiling_masks(intervals: list[dict[str, Any]]) -> list[list[bool]]:
    """Per interval, per bin, whether the ceiling it ran under (``CEILING_KEY``; absent or None: every bin,
    speculation as launched) drafted the bin."""
    return [drafted_by(i["bins"], i.get(CEILING_KEY)) for i in intervals]


def gated_while_drafted(intervals: list[dict[str, Any]], masks: list[list[bool]]) -> dict[int, float]:
    """Per bin a ceiling drafted in some interval, the share of its steps there that ran gated: the drain
    after bursts and explored gated batches. What learn says when it gates a bin whose drafted batches
    were faster (``as_choices``)."""
    steps: dict[int, list[int]] = {}
    for interval, mask in zip(intervals, masks, strict=True):
        for i, (b, drafted) in enumerate(zip(interval["bins"], mask, strict=True)):
            if drafted:
                cell = steps.setdefault(int(b), [0, 0])
                cell[0] += int(interval["gated"]["steps"][i])
                cell[1] += int(interval["drafted"]["steps"][i]) + int(interval["gated"]["steps"][i])
    return {b: gated / total for b, (gated, total) in sorted(steps.items()) if total > 0}


def thin_note(samples: speedup.Grouped, busy: set[int]) -> str:
    """How far the bins the load is in are from an interval: in how many intervals each mode ran there
    (a bin needs ``MIN_INTERVALS`` of each), and the decode-step seconds the window holds in all
    (``samples``: the window's ``speedup.per_bin``)."""
    seconds = math.fsum(t for modes in samples.values() for cells in modes.values() for _, t, _ in cells)
    parts = []
    for b in sorted(busy):
        counts = {mode: len(samples.get(b, {}).get(mode, ())) for mode in engine_counters.MODES}
        ran = ", ".join(f"{mode} in {n} interval{'' if n == 1 else 's'}" for mode, n in counts.items())
        parts.append(f"bin {b}: {ran}")
    where = "; ".join(parts) if parts else "no decode steps in the last sample"
    return f"{where}; {seconds:.0f} s of decode steps in the window"
