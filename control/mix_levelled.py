"""A gated bin's explored drafting without the lean of its requests' mix (plugin 0.4.15's ``slots`` and
``mix`` blocks, plugin/part_mix.py).

Why: requests accept differently, and a stream keeps each one for as many steps as it needs. A window's
exploring part starts from a gated stream's batch, whose requests accept the ARITHMETIC mean A over its slots;
a steady drafting stream keeps its low-accept requests longer, so its requests accept the HARMONIC mean H. A
part that ends before its batch has turned over counts drafted steps that commit more tokens per request
than a steady drafting stream would: +7.5 % in the simulator with half the requests accepting 4 a verify and
half 2 and parts of 40 batches (tests/test_sim_part_mix.py). On an H100 (the 0.5 pair, 3-s parts of about
146 batches: data/gpu-runs/h100-8b-pair-triton-request-mix-2026-12-06) the batch at 48 had turned over by
the counted steps (accept per request 0.6-1.3 % over always on's, a part's own H within 0.3 % of it), and
what moved the reading was the draw: one part's batch is a handful of requests, and at 16 two parts' drew
the low kind more often (accept per request 6.6 % under always on's, the ratio 0.942; levelled, 0.992).
Learn would read drafting a gated bin by the requests one part happened to hold.

What: each explored drafted cell (a bin the interval's ceiling gated: ``masks``, per interval and bin, whether
the ceiling drafted it, ``learn_counters.ceiling_masks``) has its drafted tokens at ``slots x H``, what its
steps' requests would commit in a steady drafting stream. H is a property of the requests, not of the batch
size, so it is pooled over the window: every interval's ``mix`` block, every bin (``window_mix``). It is read
only where the window's parts hold ``MIN_MIX_REQUESTS`` requests from at least ``MIN_MIX_PARTS`` parts, and a
cell's factor (levelled tokens over its own) is held within ``FACTOR_BAND``: a bad row must not swing a
decision. And a cell is levelled only where H stands apart from its own accept per request beyond H's draw
(``tells_apart``: the intervals that hold parts as batch means, Student's t for their number): H comes from
the requests the parts began with, one batch's draw each, and once a part's batch has turned over its counted
steps hold other requests. With three parts at 16 on an H100 (2026-12-07) the first batches drew the low kind
more often, H 5.8 % under always on's accept per request while the counted steps read 1.1 % over it, and
levelling by that H moved the reading from 1.022 of always on to 0.953; the lean of short parts (+7.5 % in
the simulator, 14 parts) stands well beyond the draw and is levelled as before. The same factor scales the
cell's drafted ``prefilled`` tokens, so that control/prefilled.py's levelling after it (learn's
``as_choices`` applies this first) reads the cell's tokens as levelled here.
Steady drafted cells (their streams' requests already accept H) and every gated cell stay as measured, as do
an interval without the ``slots`` block (a plugin before 0.4.15; the collector's stored intervals carry it
from 0.4.15 on) and a cell without slots. ``levelled_samples`` does the same to the per-bin samples the
console and ``control get`` read (``kept_extend.corrected_estimate``), each bin's explored mode known per bin.
Standard library only, as the rest of the estimator's inputs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from ..plugin.engine_counters import MIX_FIELDS, mix_block, slots_block, with_rates
from .speedup import ratio_estimate, small_sample_z

# The window's mix is read from this many requests (their accept per verify varies from part to part) ...
MIN_MIX_REQUESTS = 16
# ... from at least this many parts (one part's requests are one batch's draw)
MIN_MIX_PARTS = 2
# A cell's levelled tokens over its measured ones, held within this band (the leans it takes out: 7.0-9.1 %
# more tokens per request-step in the simulator's short parts, a part's draw 6.6 % under always on's at 16
# on an H100): a factor outside it is a bad row, which must not swing a decision.
FACTOR_BAND = (0.8, 1.25)


class WindowMix(NamedTuple):
    """The request mix of a window's exploring parts, pooled over its intervals and bins: the arithmetic
    mean A of its requests' accept per verify (where a part starts), the harmonic mean H (what a steady
    drafting stream of them commits per request-step), the parts and their requests; and H's draw: its
    relative variance with the intervals that hold parts as batch means (``speedup.ratio_estimate``; None
    with fewer than 2 of them) and how many there were."""

    arithmetic: float
    harmonic: float
    parts: int
    requests: int
    harmonic_rel_var: float | None = None
    intervals: int = 0


def window_mix(intervals: Sequence[Mapping[str, Any]]) -> WindowMix | None:
    """The intervals' ``mix`` blocks summed over every interval and bin, each interval's (requests,
    inverse_sum) beside the sums for H's draw; None where no interval has one or its parts hold no
    request."""
    sums = dict.fromkeys(MIX_FIELDS, 0.0)
    per_interval: list[tuple[float, float]] = []
    for interval in intervals:
        mix = mix_block(interval)
        if mix is None:  # a plugin before 0.4.15, or a malformed block: no parts of it
            continue
        for field in sums:
            sums[field] += sum(mix[field])
        per_interval.append((sum(mix["requests"]), sum(mix["inverse_sum"])))
    return window_of(sums, per_interval)


def window_of(
    sums: Mapping[str, float], per_interval: Sequence[tuple[float, float]] = ()
) -> WindowMix | None:
    """The window's mix from its ``mix`` block's sums over every interval and bin (``parts``, ``requests``,
    ``accept_sum``, ``inverse_sum``: what ``storage.queries.counter_samples`` gives as ``mix_sums``) and each
    interval's (requests, inverse_sum) (its ``mix_intervals``; intervals without parts count nothing); None
    where its parts hold no request, or a sum is not a finite number (a bad stored row must not swing a
    decision)."""
    if not all(math.isfinite(sums[field]) for field in MIX_FIELDS) or sums["requests"] <= 0 \
            or sums["inverse_sum"] <= 0:
        return None
    held = [(r, inv) for r, inv in per_interval if math.isfinite(r + inv) and min(r, inv) > 0]
    _, rel_var = ratio_estimate(held)
    return WindowMix(sums["accept_sum"] / sums["requests"], sums["requests"] / sums["inverse_sum"],
                     round(sums["parts"]), round(sums["requests"]), rel_var, len(held))  # fmt: skip


def levelling_mix(intervals: Sequence[Mapping[str, Any]]) -> WindowMix | None:
    """The window's mix where it is enough to level by (``MIN_MIX_REQUESTS`` requests from ``MIN_MIX_PARTS``
    parts), else None."""
    return enough(window_mix(intervals))


def enough(mix: WindowMix | None) -> WindowMix | None:
    """``mix`` where it holds ``MIN_MIX_REQUESTS`` requests from ``MIN_MIX_PARTS`` parts, else None."""
    if mix is None or mix.requests < MIN_MIX_REQUESTS or mix.parts < MIN_MIX_PARTS:
        return None
    return mix


def mix_levelled_intervals(intervals: Sequence[Mapping[str, Any]],
                           masks: Sequence[Sequence[bool]]) -> list[dict[str, Any]]:  # fmt: skip
    """New intervals (the input is never changed) with each explored drafted cell's tokens at ``slots x H``
    (the module docstring), its factor held within ``FACTOR_BAND``, and its drafted ``prefilled`` tokens
    scaled by the same factor. A window whose mix is not enough to level by (``levelling_mix``) comes back
    as it was; one that is has the ``mix`` block taken from every interval, so levelling twice changes
    nothing."""
    if len(masks) != len(intervals):
        raise ValueError(f"masks: one per interval, got {len(masks)} for {len(intervals)}")
    mix = levelling_mix(intervals)
    if mix is None:
        return [dict(interval) for interval in intervals]
    out: list[dict[str, Any]] = []
    for interval, mask in zip(intervals, masks, strict=True):
        levelled = {key: value for key, value in interval.items() if key != "mix"}
        factors = _factors(interval, mask, mix)
        if any(f != 1.0 for f in factors):
            levelled["drafted"] = with_rates({**interval["drafted"], "tokens": _scaled(
                interval["drafted"]["tokens"], factors)})  # fmt: skip
            held = interval.get("prefilled")
            if isinstance(held, Mapping):
                drafted = {**held["drafted"], "tokens": _scaled(held["drafted"]["tokens"], factors)}
                levelled["prefilled"] = {**held, "drafted": drafted}
        out.append(levelled)
    return out


def _factors(interval: Mapping[str, Any], mask: Sequence[bool], window: WindowMix) -> list[float]:
    """Per bin, the factor its drafted tokens are levelled by: ``slots x H / tokens`` within ``FACTOR_BAND``
    for a cell the ceiling gated (``mask`` False) with slots and tokens, else 1 (an interval without the
    ``slots`` block: every bin)."""
    slots = slots_block(interval)
    if slots is None:
        return [1.0] * len(interval["bins"])
    rows = zip(mask, slots["drafted"], interval["drafted"]["tokens"], strict=True)
    return [1.0 if drafted else factor(requests, tokens, window) for drafted, requests, tokens in rows]


def factor(requests: float | None, tokens: float, window: WindowMix) -> float:
    """An explored drafted cell's (or sample's) levelled tokens over its own: ``requests x H / tokens`` held
    within ``FACTOR_BAND``; 1 where its slots are not known or it has none, or no tokens, or where the
    window's H does not tell it from the cell's own accept per request (``tells_apart``)."""
    if requests is None or requests <= 0 or tokens <= 0:
        return 1.0
    low, high = FACTOR_BAND
    raw = requests * window.harmonic / tokens
    return min(max(raw, low), high) if tells_apart(window, raw) else 1.0


def tells_apart(window: WindowMix, ratio: float) -> bool:
    """Whether H differs from a cell's accept per request by more than H's draw: ``|log ratio|`` (the cell's
    ``slots x H / tokens``) beyond the 95 % half-width of H's batch means (Student's t for their number,
    ``speedup.small_sample_z``). H is read from the requests the parts began with, one batch's draw each;
    once a part's batch has turned over its counted steps hold other requests, and levelling them by that
    draw moved an H100's reading at 16 from 1.022 of always on to 0.953 (three parts, 48 requests:
    data/gpu-runs/h100-8b-pair-triton-several-parts-2026-12-07), where the lean it is there for (short parts,
    no turnover: +7.5 % in the simulator, 14 parts) stands well beyond the draw."""
    half = draw_half_width(window)
    return half is not None and ratio > 0 and abs(math.log(ratio)) > half


def draw_half_width(window: WindowMix) -> float | None:
    """The 95 % half-width of H's draw in log terms (its intervals as batch means, Student's t for their
    number, ``speedup.small_sample_z``): what a cell's gap from H must pass (``tells_apart``); None with
    fewer than 2 intervals."""
    if window.harmonic_rel_var is None:
        return None
    return small_sample_z(window.intervals) * math.sqrt(window.harmonic_rel_var)


def _scaled(values: Sequence[float], factors: Sequence[float]) -> list[float]:
    """``values`` times ``factors``, a value whose factor is 1 as it was."""
    return [v if f == 1.0 else v * f for v, f in zip(values, factors, strict=True)]


# The estimate's per-bin grouping's drafted samples (``speedup.per_bin``: bin -> mode -> samples): each one's
# slots in the same order, None where its interval has no ``slots`` block (a plugin before 0.4.15)
SlotSamples = dict[int, list[float | None]]
Grouped = Mapping[int, Mapping[str, Sequence[tuple[float, float, int]]]]
Held = dict[int, dict[str, list[tuple[float, float, float] | None]]]  # control.prefilled.PrefilledSamples


def slot_samples(intervals: Sequence[Mapping[str, Any]]) -> SlotSamples | None:
    """Each drafted sample of ``speedup.per_bin(intervals)``'s slots, in its order; None where no interval
    has the ``slots`` block. ``storage.queries.counter_samples`` gives the same of the stored intervals."""
    if not any(slots_block(interval) is not None for interval in intervals):
        return None
    out: SlotSamples = {}
    for interval in intervals:
        block = slots_block(interval)
        for i, b in enumerate(interval["bins"]):
            if int(interval["drafted"]["steps"][i]) > 0:
                out.setdefault(int(b), []).append(None if block is None else float(block["drafted"][i]))
    return out


def levelled_samples(grouped: Grouped, prefilled: Held | None, slots: SlotSamples | None,
                     mix: WindowMix | None, explored: Mapping[int, str]) -> tuple[Grouped, Held | None]:
    """``mix_levelled_intervals`` on the estimate's per-bin grouping, each bin's explored mode known per bin
    (``explored``: bin -> the mode explored there, what ``prefilled.levelled_samples`` takes): each drafted
    sample of a bin that explored drafting has its tokens at ``slots x H`` (``factor``), and its prefilled
    tokens (``prefilled``, aligned with ``grouped``) scaled alike; everything else as it was, and both inputs
    themselves where the window's mix is not enough to level by (``enough``) or no sample has slots (the
    console's refresh copies nothing then). The inputs are never changed. Returns the grouping and the
    prefilled samples, for ``prefilled.levelled_samples`` after it."""
    window = enough(mix)
    if window is None or slots is None:
        return grouped, prefilled
    out: dict[int, Mapping[str, Sequence[tuple[float, float, int]]]] = dict(grouped)
    held = None if prefilled is None else dict(prefilled)
    for b, mode in explored.items():
        samples = grouped.get(b, {}).get("drafted")
        if mode != "drafted" or not samples:
            continue
        factors = [factor(n, tokens, window) for n, (tokens, _, _) in
                   zip(slots.get(b) or [None] * len(samples), samples, strict=True)]  # fmt: skip
        out[b] = {**grouped[b], "drafted": [(tokens * f, s, k)
                                            for f, (tokens, s, k) in zip(factors, samples, strict=True)]}
        mine = held.get(b) if held is not None else None
        if held is not None and mine and mine.get("drafted"):
            rows = zip(factors, mine["drafted"], strict=True)
            held[b] = {**mine, "drafted": [None if h is None else (h[0], h[1] * f, h[2]) for f, h in rows]}
    return out, held
