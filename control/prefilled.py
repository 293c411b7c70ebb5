"""A decode mode's rate without the lean of the prefills around it (plugin 0.4.14's ``prefilled`` block).

SGLang's overlap loop runs a prefill while a decode step is in flight, so the prefill's GPU time lies inside
the next decode step's span, and the counters count it in that step's mode and bin. A drafting stream
finishes requests faster, so its steps carry more prefills each (EXTEND batches per DECODE batch 2.4-2.5x a
gated stream's at 8-32 on an H100), and each prefill costs more: the draft model prefills too, which a gated
stream skips (plugin 0.4.10). Per output token a drafting stream's prefills cost 0.025 ms where a gated
stream's cost 0.018, hardly moving with the batch (an H100, 2026-12-06,
data/gpu-runs/h100-8b-pair-triton-prefilled-2026-12-06). An explored step carries the prefills of the stream
it sits in: a drafting bin's explored gated steps a drafting stream's, a gated bin's explored drafting steps
a gated stream's. Both lean toward drafting.

Here, per mode and bin: the steps split by whether their span held a prefill; the pure (prefill-free) step
time; the prefill seconds, the prefilled steps' time over what as many pure steps take; and a rate with a
given prefill cost per output token put back in: ``tokens / (pure seconds + p * tokens)``. With the bin's
own ``p`` over its modes (``prefill_s_per_token``: the first reading, which charged both modes one cost) a
bin that ran one mode reads its plain rate again. ``levelled_intervals`` levels the counters' intervals as
learn reads them: each explored cell at its mode's steady ``p``, taken from the bins where its ceiling chose
that mode; ``levelled_samples`` does the same to the per-bin samples the console reads
(``kept_extend.corrected_estimate``), each bin's minority mode the explored one. Standard library only, as
the rest of the estimator's inputs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..plugin.engine_counters import MODES, with_rates

# Fewer pure steps than this in a mode and bin: its pure step time is not read (the prefilled steps are a
# tenth to a quarter of a bin's; a pure step time from a handful would carry the prefill seconds' noise).
MIN_PURE_STEPS = 20


@dataclass(frozen=True)
class ModeSteps:
    """One mode's decode steps in one bin: all of them (``steps``, ``tokens``, ``time_s``: step time with
    the seconds outside the steps) and those whose span held a prefill (``prefilled_*``, the same way)."""

    steps: float
    tokens: float
    time_s: float
    prefilled_steps: float = 0.0
    prefilled_tokens: float = 0.0
    prefilled_time_s: float = 0.0

    @property
    def pure_steps(self) -> float:
        return self.steps - self.prefilled_steps

    @property
    def pure_time_s(self) -> float:
        return self.time_s - self.prefilled_time_s

    def pure_step_s(self) -> float | None:
        """Seconds of a step without a prefill; None with fewer than ``MIN_PURE_STEPS`` of them."""
        if self.pure_steps < MIN_PURE_STEPS or self.pure_time_s <= 0:
            return None
        return self.pure_time_s / self.pure_steps

    def prefill_s(self) -> float | None:
        """The prefilled steps' seconds over what as many pure steps take (never below 0); None where the
        pure step time is not known."""
        pure = self.pure_step_s()
        if pure is None:
            return None
        return max(0.0, self.prefilled_time_s - self.prefilled_steps * pure)

    def pure_s(self) -> float | None:
        """Every step at the pure step time: the mode's seconds without the prefills in its spans."""
        pure = self.pure_step_s()
        return None if pure is None else self.steps * pure


def prefill_s_per_token(modes: Sequence[ModeSteps]) -> float | None:
    """The bin's prefill seconds per output token over its modes; None where a mode with steps has no pure
    step time (its prefill seconds are not known) or no mode has tokens."""
    seconds, tokens = 0.0, 0.0
    for mode in modes:
        if mode.steps <= 0:
            continue
        prefill = mode.prefill_s()
        if prefill is None:
            return None
        seconds += prefill
        tokens += mode.tokens
    return seconds / tokens if tokens > 0 else None


def levelled_tok_s(mode: ModeSteps, per_token_s: float) -> float | None:
    """The mode's output tok/s with the bin's prefill seconds per token in place of its own spans' share."""
    pure = mode.pure_s()
    if pure is None or mode.tokens <= 0:
        return None
    return mode.tokens / (pure + per_token_s * mode.tokens)



def choice_cells(intervals: Sequence[Mapping[str, Any]],
           masks: Sequence[Sequence[bool]]) -> dict[tuple[int, str, bool], ModeSteps]:  # fmt: skip
    """(bin, mode, steady) -> the mode's steps in the bin over the intervals (each with its ``prefilled``
    block), ``steady`` where the mode is the one the interval's ceiling chose for the bin (``masks``: per
    interval, per bin, whether its ceiling drafted the bin)."""
    sums: dict[tuple[int, str, bool], list[float]] = {}
    for interval, mask in zip(intervals, masks, strict=True):
        block = interval["prefilled"]
        for mode in MODES:
            whole, pre = interval[mode], block[mode]
            for i, (b, drafted) in enumerate(zip(interval["bins"], mask, strict=True)):
                cell = sums.setdefault((int(b), mode, drafted == (mode == "drafted")), [0.0] * 6)
                values = (whole["steps"][i], whole["tokens"][i], whole["time_s"][i],
                          pre["steps"][i], pre["tokens"][i], pre["time_s"][i])  # fmt: skip
                for k, v in enumerate(values):
                    cell[k] += float(v)
    return {key: ModeSteps(*cell) for key, cell in sums.items()}


def steady_prefill_s_per_token(cells: Sequence[ModeSteps]) -> float | None:
    """One mode's prefill seconds per output token over its steady cells (one per bin), the cells without a
    pure step time left out; None where none has one. Per token it hardly moves with the batch (on an H100,
    2026-12-06: a gated stream 0.0175 and 0.0184 ms at 16 and 32, a drafting one 0.0245 and 0.0254 ms,
    data/gpu-runs/h100-8b-pair-triton-prefilled-2026-12-06), so a bin the mode only explores takes it from
    the bins where the mode runs steadily."""
    known = [cell for cell in cells if cell.steps > 0 and cell.prefill_s() is not None]
    return prefill_s_per_token(known) if known else None


def levelled_intervals(intervals: Sequence[Mapping[str, Any]],
                       masks: Sequence[Sequence[bool]]) -> list[dict[str, Any]]:  # fmt: skip
    """The intervals with each explored cell (a bin's mode that its interval's ceiling did not choose:
    ``masks``, per interval and bin, whether the ceiling drafted it) levelled: its prefilled steps at its
    pure step time (pooled over the intervals' explored steps of that bin and mode), plus the mode's steady
    prefill seconds per token (``steady_prefill_s_per_token`` over the bins where the ceiling chose it)
    times its tokens. Steady cells stay as measured.

    Why: an explored step carries the prefills of the stream it sits in, not of its own mode's stream. A
    drafting bin's explored gated steps carry a drafting stream's: more per step, and each with the draft
    model's prefill, which a gated stream skips (plugin 0.4.10); a gated bin's explored drafting steps carry
    a gated stream's fewer and cheaper ones. Both lean toward drafting. On an H100 (2026-12-06) the explored
    gated steps' pure steps, by the kept extend's tax, read 0.985 and 0.981 of a steady gated stream's at 16
    and 32, where all their steps read 1.001 and 0.909-0.952.

    Summed over the intervals an explored cell's time is ``ModeSteps.pure_s() + p * tokens``; each interval
    keeps its own pure steps' time, so the estimate's batch means still vary as the steps did. A cell is
    left as it is where its pure step time or its mode's steady prefill seconds are not known (fewer than
    ``MIN_PURE_STEPS`` pure steps; no steady cell of the mode: a ceiling at either end); an interval without
    the ``prefilled`` block (a plugin before 0.4.14; the collector's stored intervals carry it from 0.4.14 on,
    ``storage.queries.counter_intervals``) as it is. The block goes from every levelled interval, so
    levelling twice changes nothing."""
    if len(masks) != len(intervals):
        raise ValueError(f"masks: one per interval, got {len(masks)} for {len(intervals)}")
    pairs = [(interval, mask) for interval, mask in zip(intervals, masks, strict=True)
             if isinstance(interval.get("prefilled"), Mapping)]  # fmt: skip
    if not pairs:
        return [dict(interval) for interval in intervals]
    cells = choice_cells([i for i, _ in pairs], [m for _, m in pairs])
    per_token = {mode: steady_prefill_s_per_token([cell for (_, m, steady), cell in cells.items()
                                                   if m == mode and steady]) for mode in MODES}  # fmt: skip
    out: list[dict[str, Any]] = []
    for interval, mask in zip(intervals, masks, strict=True):
        block = interval.get("prefilled")
        if not isinstance(block, Mapping):
            out.append(dict(interval))
            continue
        levelled = {key: value for key, value in interval.items() if key != "prefilled"}
        for mode in MODES:
            whole, pre, p = interval[mode], block[mode], per_token[mode]
            times = list(whole["time_s"])
            for i, (b, drafted) in enumerate(zip(interval["bins"], mask, strict=True)):
                steady = drafted == (mode == "drafted")
                pure = cells[(int(b), mode, False)].pure_step_s() if not steady else None
                if p is None or pure is None or whole["steps"][i] <= 0:
                    continue
                times[i] = _levelled_s(whole["time_s"][i], pre["steps"][i], pre["time_s"][i],
                                       whole["tokens"][i], pure, p)
            levelled[mode] = with_rates({**whole, "time_s": times})
        out.append(levelled)
    return out


# The estimate's per-bin grouping (``speedup.per_bin``: bin -> mode -> [(tokens, time_s, steps)]) and, aligned
# with it sample for sample, each sample's prefilled steps, tokens and seconds; None where its interval has no
# ``prefilled`` block (a plugin before 0.4.14).
PrefilledSamples = dict[int, dict[str, list[tuple[float, float, float] | None]]]
Grouped = Mapping[int, Mapping[str, Sequence[tuple[float, float, int]]]]


def prefilled_samples(intervals: Sequence[Mapping[str, Any]]) -> PrefilledSamples | None:
    """Each sample of ``speedup.per_bin(intervals)``'s prefilled (steps, tokens, time_s), in the same order;
    None where no interval has the block. ``storage.queries.counter_samples`` gives the same of the stored
    intervals without building them."""
    if not any(isinstance(interval.get("prefilled"), Mapping) for interval in intervals):
        return None
    out: PrefilledSamples = {}
    for interval in intervals:
        block = interval.get("prefilled")
        for mode in MODES:
            for i, b in enumerate(interval["bins"]):
                if int(interval[mode]["steps"][i]) <= 0:
                    continue
                held = None
                if isinstance(block, Mapping):
                    mine = block[mode]
                    held = (float(mine["steps"][i]), float(mine["tokens"][i]), float(mine["time_s"][i]))
                out.setdefault(int(b), {m: [] for m in MODES})[mode].append(held)
    return out


def _sample_cell(samples: Sequence[tuple[float, float, int]],
                 held: Sequence[tuple[float, float, float] | None]) -> ModeSteps:  # fmt: skip
    """The samples whose prefilled steps are known, summed into one cell."""
    known = [(s, h) for s, h in zip(samples, held, strict=True) if h is not None]
    return ModeSteps(sum(s[2] for s, _ in known), sum(s[0] for s, _ in known), sum(s[1] for s, _ in known),
                     sum(h[0] for _, h in known), sum(h[1] for _, h in known), sum(h[2] for _, h in known))


def levelled_samples(
    grouped: Grouped, prefilled: PrefilledSamples | None, explored: Mapping[int, str]
) -> dict[int, dict[str, list[tuple[float, float, int]]]]:
    """``levelled_intervals`` on the estimate's per-bin grouping, where each bin's explored mode is known per
    bin rather than per interval (``explored``: bin -> the mode explored there, the other one steady; what
    the console reads from ``BinEstimate.ran_mostly``, having no ceiling per interval): each explored sample
    at its cell's pure step time plus the mode's steady prefill seconds per token, from the bins where that
    mode is the steady one. A bin not in ``explored`` (mixed), a sample whose prefilled steps are unknown,
    and every cell without a pure step time or a steady cost stay as they are."""
    out = {b: {mode: list(samples) for mode, samples in modes.items()} for b, modes in grouped.items()}
    if prefilled is None:
        return out

    def held(b: int, mode: str) -> Sequence[tuple[float, float, float] | None]:
        return prefilled.get(b, {}).get(mode) or [None] * len(grouped[b][mode])

    def cell(b: int, mode: str) -> ModeSteps:
        return _sample_cell(grouped[b][mode], held(b, mode))

    steady_bins = {mode: [b for b, other in explored.items() if b in grouped and other != mode]
                   for mode in MODES}  # fmt: skip
    per_token = {mode: steady_prefill_s_per_token([cell(b, mode) for b in bins])
                 for mode, bins in steady_bins.items()}  # fmt: skip
    for b, mode in explored.items():
        if b not in grouped or mode not in grouped[b]:
            continue
        p, pure = per_token[mode], cell(b, mode).pure_step_s()
        if p is None or pure is None:
            continue
        out[b][mode] = [
            (tokens, _levelled_s(seconds, h[0], h[2], tokens, pure, p), steps) if h is not None
            else (tokens, seconds, steps)
            for (tokens, seconds, steps), h in zip(grouped[b][mode], held(b, mode), strict=True)
        ]  # fmt: skip
    return out


def _levelled_s(seconds: float, held_steps: float, held_s: float, tokens: float, pure_s: float,
                per_token_s: float) -> float:  # fmt: skip
    """One sample's seconds levelled: its pure steps' own time, its prefilled steps at the pure step time,
    and ``per_token_s`` for each of its tokens (rounded as ``rates()`` rounds a step time)."""
    return round(max(0.0, seconds - held_s) + held_steps * pure_s + per_token_s * tokens, 9)
