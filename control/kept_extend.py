"""What the draft model's KV extend costs a gated step on this server: the tax learn corrects by.

A bin the ceiling drafts measures its gated side on batches that keep the draft extend (explored gated
batches among drafting ones, and the drain after a burst), while gating that bin for good would skip it
(plugin/gated_decode.py). So learn scales those gated rates up by ``1 / (1 - tax)`` before it compares the
modes (``policy.learn_counters.as_choices``). The tax is not a constant: on the H200 it was 7 % of a
gated step with 64-token prompts (data/gpu-runs/NOTEBOOK.md, "The four policies", 2.) and 12-14 % at bins
24-32 under Azure's conversation prompts (the 2026-12-04 replay: the extend's attention reads the whole
context), where a constant 7 % left the gated side 5-7 % low and learn drafting where it lost.

The engine counters (plugin 0.4.6 on) measure it: their ``extend`` block counts steady gated steps (the
previous step gated too) by whether the extend ran (plugin/engine_counters.py). A bin the ceiling gates has
both kinds: a window's cold part skips the extend, its warm part (and the exploring part's batches above the
stream's limit) keep it. ``measure`` compares them per bin, tokens per second of step time on each side, and
pools the bins with enough steps on both sides, weighted by the scarcer side's steps, as a geometric mean of
the per-bin ratios. The bins it is measured in are the gated ones, above the ceiling; it is applied to the
drafting ones below. Without such a bin (an operator's lock explores nothing, so nothing keeps the extend;
a plugin before 0.4.6) the caller's constant stands (``explore.DEFAULT_KEPT_EXTEND_TAX``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..plugin.engine_counters import EXTEND_KINDS, ExtendBlock, sum_blocks
from ..plugin.explore import DEFAULT_KEPT_EXTEND_TAX
from . import mix_levelled, speedup
from . import prefilled as prefills

# A bin's tax counts once each side has this many steady gated steps: a step's time varies by a few % with
# its batch's mix, so 64 steps put a bin's mean within about 1 % (the H200's warm parts run a few hundred
# batches per window of 8192, about a minute).
MIN_STEPS = 64
# Never above this: learn's option refuses 0.5 and more, and a tax that high means the two sides did not
# measure the same thing (a burst's batches in one, idle ones in the other).
MAX_TAX = 0.45


@dataclass(frozen=True)
class BinTax:
    batch_size: int
    tax: float  # 1 - (kept tok/s) / (skipped tok/s), in [0, MAX_TAX]
    kept_steps: int
    skipped_steps: int


@dataclass(frozen=True)
class KeptExtendTax:
    """The pooled tax and what it stands on."""

    tax: float
    bins: tuple[BinTax, ...]

    @property
    def steps(self) -> int:
        """The kept steps it stands on (the scarcer side, as a rule)."""
        return sum(b.kept_steps for b in self.bins)

    def label(self) -> str:
        sizes = [b.batch_size for b in self.bins]
        where = f"bin {sizes[0]}" if len(sizes) == 1 else f"bins {sizes[0]}-{sizes[-1]}"
        return f"{100 * self.tax:.1f} % measured ({where}, {self.steps} steps with the extend)"


def totals(intervals: Iterable[Mapping[str, Any]]) -> tuple[list[int], ExtendBlock] | None:
    """The ``extend`` blocks of these intervals (``engine_counters.rates()``'s shape) summed per bin, on the
    union of their bins (the last interval's: the bins only grow), or None when none has the block."""
    found = [(interval["bins"], block) for interval in intervals
             if isinstance(block := interval.get("extend"), Mapping)]  # fmt: skip
    if not found:
        return None
    bins = sorted({int(b) for these, _ in found for b in these})
    index = {b: i for i, b in enumerate(bins)}
    return bins, {kind: sum_blocks([(these, block[kind]) for these, block in found], index)
                  for kind in EXTEND_KINDS}  # fmt: skip


def measure(bins: list[int], summed: ExtendBlock, min_steps: int = MIN_STEPS) -> KeptExtendTax | None:
    """The tax over per-bin totals of kept and skipped steady gated steps, or None when no bin has
    ``min_steps`` on both sides."""
    found: list[BinTax] = []
    kept, skipped = summed.get("kept"), summed.get("skipped")
    if kept is None or skipped is None:
        return None
    for i, b in enumerate(bins):
        k_steps, s_steps = int(kept["steps"][i]), int(skipped["steps"][i])
        if min(k_steps, s_steps) < min_steps:
            continue
        k_time, s_time = kept["time_s"][i], skipped["time_s"][i]
        k_tok, s_tok = kept["tokens"][i], skipped["tokens"][i]
        if min(k_time, s_time, k_tok, s_tok) <= 0:
            continue
        ratio = (k_tok / k_time) / (s_tok / s_time)
        found.append(BinTax(int(b), _clamp(1.0 - ratio), k_steps, s_steps))
    if not found:
        return None
    weights = [min(b.kept_steps, b.skipped_steps) for b in found]
    log_ratio = sum(w * math.log(1.0 - b.tax) for w, b in zip(weights, found, strict=True)) / sum(weights)
    return KeptExtendTax(_clamp(1.0 - math.exp(log_ratio)), tuple(found))


def from_intervals(
    intervals: Iterable[Mapping[str, Any]], min_steps: int = MIN_STEPS
) -> KeptExtendTax | None:
    """``measure`` over the summed ``extend`` blocks of these intervals."""
    return from_totals(totals(intervals), min_steps)


def from_totals(
    found: tuple[list[int], ExtendBlock] | None, min_steps: int = MIN_STEPS
) -> KeptExtendTax | None:
    """``measure`` over per-bin totals (``totals``, or ``storage.queries.extend_totals``'s answer), None
    where there are none."""
    return measure(*found, min_steps=min_steps) if found is not None else None


def or_assumed(
    found: KeptExtendTax | float | None, assumed: float = DEFAULT_KEPT_EXTEND_TAX
) -> tuple[float, str]:
    """The tax to correct by and how it is known, for a reason line: measured (``found``), else a number
    taken as assumed (``found`` itself when it is one, else ``assumed``: nothing measured it)."""
    if isinstance(found, KeptExtendTax):
        return found.tax, f"kept extend {found.label()}"
    tax = assumed if found is None else found
    return tax, f"kept extend {100 * tax:g} % assumed (none measured)"


def corrected_estimate(
    grouped: Mapping[int, Mapping[str, list[tuple[float, float, int]]]], n: int, tax: float,
    prefilled: prefills.PrefilledSamples | None = None, slots: mix_levelled.SlotSamples | None = None,
    mix: mix_levelled.WindowMix | None = None,
) -> tuple[speedup.SpeedupEstimate, tuple[int, ...]]:
    """``speedup.estimate_per_bin`` as learn reads a bin: each bin's minority mode
    (``BinEstimate.ran_mostly``: measured on explored batches inside the other one's stream) levelled as
    learn levels its explored cells, first a bin's explored drafting for its requests' mix where ``slots``
    (each drafted sample's) and the window's ``mix`` allow (``mix_levelled.levelled_samples``, plugin 0.4.15
    on), then for the prefills in its steps where ``prefilled`` says which steps held one
    (``prefilled.levelled_samples``, plugin 0.4.14 on); and the gated side of each bin that ran mostly
    drafted (explored batches that kept the extend) scaled by ``1 / (1 - tax)``, as learn scales the bins its
    ceiling drafts; and those bins. What the console and ``control get`` show, where the knob each interval
    ran under is not at hand."""
    raw = speedup.estimate_per_bin(grouped, n)
    mostly = {b.batch_size: b.ran_mostly for b in raw.bins if b.ran_mostly is not None}
    explored = {b: "gated" if ran == "drafted" else "drafted" for b, ran in mostly.items()}
    levelled: mix_levelled.Grouped = grouped
    if slots is not None:
        levelled, prefilled = mix_levelled.levelled_samples(grouped, prefilled, slots, mix, explored)
    if prefilled is not None:
        levelled = prefills.levelled_samples(levelled, prefilled, explored)
    drafted = tuple(b for b, ran in mostly.items() if ran == "drafted")
    if not drafted or tax <= 0:
        return (speedup.estimate_per_bin(levelled, n) if levelled is not grouped else raw), ()
    scale = 1.0 / (1.0 - tax)
    scaled: dict[int, Mapping[str, Sequence[tuple[float, float, int]]]] = dict(levelled)
    for b in drafted:
        modes = levelled[b]
        scaled[b] = {**modes, "gated": [(t * scale, s, k) for t, s, k in modes.get("gated", [])]}
    return speedup.estimate_per_bin(scaled, n), drafted


def _clamp(tax: float) -> float:
    # at most 1 (a side faster than the other by chance reads 0, not a negative tax), at most MAX_TAX
    return min(MAX_TAX, max(0.0, tax))
