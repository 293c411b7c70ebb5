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
from .speedup import Grouped

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


# One interval's steps of a mode in a bin, as the estimate groups them: (tokens, time_s, steps); and beside
# it the steps among them whose span held a prefill, (steps, tokens, time_s), None where not known (an
# interval without the ``prefilled`` block: a plugin before 0.4.14).
Sample = tuple[float, float, int]
Held = tuple[float, float, float] | None
# (bin, mode, steady): a mode's cell in a bin, ``steady`` where it is the mode the ceiling chose there
CellKey = tuple[int, str, bool]
Records = dict[CellKey, list[tuple[Sample, Held]]]


def _cell(records: Sequence[tuple[Sample, Held]]) -> ModeSteps:
    """The records whose prefilled steps are known, summed into one cell."""
    known = [(s, h) for s, h in records if h is not None]
    return ModeSteps(sum(s[2] for s, _ in known), sum(s[0] for s, _ in known), sum(s[1] for s, _ in known),
                     sum(h[0] for _, h in known), sum(h[1] for _, h in known), sum(h[2] for _, h in known))


def _interval_records(intervals: Sequence[Mapping[str, Any]], masks: Sequence[Sequence[bool]]
                      ) -> tuple[Records, dict[CellKey, list[tuple[int, str, int]]]]:  # fmt: skip
    """Each cell's records over the intervals (each interval's steps there, ``masks``: per interval, per bin,
    whether its ceiling drafted the bin), and where each record came from: (interval, mode, bin index)."""
    records: Records = {}
    where: dict[CellKey, list[tuple[int, str, int]]] = {}
    for k, (interval, mask) in enumerate(zip(intervals, masks, strict=True)):
        bins = interval["bins"]
        if len(mask) != len(bins):
            raise ValueError(f"masks: interval {k} has {len(bins)} bins, its mask {len(mask)}")
        block = interval.get("prefilled")
        for mode in MODES:
            whole = interval[mode]
            tokens, seconds = whole["tokens"], whole["time_s"]
            pre = block[mode] if isinstance(block, Mapping) else None
            # a load sits in a few bins: the bins without steps are skipped before anything is built
            for i in [i for i, steps in enumerate(whole["steps"]) if steps > 0]:
                held: Held = None
                if pre is not None:
                    held = (float(pre["steps"][i]), float(pre["tokens"][i]), float(pre["time_s"][i]))
                key = (int(bins[i]), mode, mask[i] == (mode == "drafted"))
                records.setdefault(key, []).append(((tokens[i], seconds[i], whole["steps"][i]), held))
                where.setdefault(key, []).append((k, mode, i))
    return records, where


def choice_cells(intervals: Sequence[Mapping[str, Any]],
                 masks: Sequence[Sequence[bool]]) -> dict[CellKey, ModeSteps]:  # fmt: skip
    """(bin, mode, steady) -> the mode's steps in the bin over the intervals whose prefilled steps are known,
    ``steady`` where the mode is the one the interval's ceiling chose for the bin (``masks``: per interval,
    per bin, whether its ceiling drafted the bin)."""
    return {key: _cell(records) for key, records in _interval_records(intervals, masks)[0].items()}


def _levelled(
    cells: Mapping[CellKey, Sequence[tuple[Sample, Held]]], known_costs: Mapping[str, float] | None = None
) -> dict[CellKey, list[float | None]]:
    """The one rule of ``levelled_intervals`` and ``levelled_samples``: per explored cell (``steady`` False)
    whose pure step time and whose mode's steady prefill seconds per token are known (the cells' own, else
    ``known_costs``), each record's seconds levelled (``levelled_seconds``), None where its prefilled steps
    are not known."""
    pooled = {key: _cell(records) for key, records in cells.items()}
    per_token = _costs(pooled)
    out: dict[CellKey, list[float | None]] = {}
    for key, records in cells.items():
        _, mode, steady = key
        p = per_token[mode] if per_token[mode] is not None else (known_costs or {}).get(mode)
        pure = pooled[key].pure_step_s()
        if steady or p is None or pure is None:
            continue
        out[key] = [None if h is None else levelled_seconds(s[1], h[0], h[2], s[0], pure, p)
                    for s, h in records]  # fmt: skip
    return out


def _costs(pooled: Mapping[CellKey, ModeSteps]) -> dict[str, float | None]:
    return {mode: steady_prefill_s_per_token([cell for (_, m, steady), cell in pooled.items()
                                              if m == mode and steady]) for mode in MODES}  # fmt: skip


def carries_block(intervals: Sequence[Mapping[str, Any]]) -> bool:
    """Whether an interval carries the ``prefilled`` block (plugin 0.4.14 on): without it no step's prefill is
    known, so nothing is levelled and no cost is measured."""
    return any(isinstance(interval.get("prefilled"), Mapping) for interval in intervals)


def steady_costs(intervals: Sequence[Mapping[str, Any]], masks: Sequence[Sequence[bool]]) -> dict[str, float]:
    """Each mode's steady prefill seconds per output token over the intervals (``masks`` as
    ``levelled_intervals`` takes them), the modes whose steady cells say it: what a policy keeps so that a
    later window without a steady cell of a mode still levels its explored cells (``known_costs``)."""
    # without the block no step's prefill is known and no cell has a cost: the records need not be built
    # (learn asks at every kept sample, over its whole window)
    if not carries_block(intervals):
        return {}
    pooled = choice_cells(intervals, masks)
    return {mode: cost for mode, cost in _costs(pooled).items() if cost is not None}


def steady_prefill_s_per_token(cells: Sequence[ModeSteps]) -> float | None:
    """One mode's prefill seconds per output token over its steady cells (one per bin), the cells without a
    pure step time left out; None where none has one. Per token it hardly moves with the batch (on an H100,
    2026-12-06: a gated stream 0.0175 and 0.0184 ms at 16 and 32, a drafting one 0.0245 and 0.0254 ms,
    data/gpu-runs/h100-8b-pair-triton-prefilled-2026-12-06), so a bin the mode only explores takes it from
    the bins where the mode runs steadily."""
    known = [cell for cell in cells if cell.steps > 0 and cell.prefill_s() is not None]
    return prefill_s_per_token(known) if known else None


def levelled_intervals(intervals: Sequence[Mapping[str, Any]], masks: Sequence[Sequence[bool]],
                       known_costs: Mapping[str, float] | None = None) -> list[dict[str, Any]]:  # fmt: skip
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
    ``MIN_PURE_STEPS`` pure steps; no steady cell of the mode, a ceiling at either end or a steady load on
    one side of it, and no ``known_costs`` of the mode: what the same server's steady cells measured before,
    ``steady_costs``. On an H100, 2026-12-07, a load held at 48 above a ceiling of 24 left the explored
    drafting at 1.066 of always on's rate, 1.036 levelled at always on's cost,
    data/gpu-runs/h100-8b-pair-triton-five-parts-2026-12-07); an interval without
    the ``prefilled`` block (a plugin before 0.4.14; the collector's stored intervals carry it from 0.4.14 on,
    ``storage.queries.counter_intervals``) as it is. The block goes from every levelled interval, so
    levelling twice changes nothing."""
    if len(masks) != len(intervals):
        raise ValueError(f"masks: one per interval, got {len(masks)} for {len(intervals)}")
    if not carries_block(intervals):
        return [dict(interval) for interval in intervals]
    records, where = _interval_records(intervals, masks)
    times = [{mode: list(interval[mode]["time_s"]) for mode in MODES} for interval in intervals]
    for key, seconds in _levelled(records, known_costs).items():
        for (k, mode, i), levelled_s in zip(where[key], seconds, strict=True):
            if levelled_s is not None:
                times[k][mode][i] = levelled_s
    out: list[dict[str, Any]] = []
    for interval, own in zip(intervals, times, strict=True):
        if not isinstance(interval.get("prefilled"), Mapping):
            out.append(dict(interval))
            continue
        levelled = {key: value for key, value in interval.items() if key != "prefilled"}
        for mode in MODES:
            levelled[mode] = with_rates({**interval[mode], "time_s": own[mode]})
        out.append(levelled)
    return out


# The estimate's per-bin grouping (``speedup.per_bin``: bin -> mode -> [(tokens, time_s, steps)]) and, aligned
# with it sample for sample, each sample's prefilled steps, tokens and seconds; None where its interval has no
# ``prefilled`` block (a plugin before 0.4.14).
PrefilledSamples = dict[int, dict[str, list[tuple[float, float, float] | None]]]


def prefilled_samples(intervals: Sequence[Mapping[str, Any]]) -> PrefilledSamples | None:
    """Each sample of ``speedup.per_bin(intervals)``'s prefilled (steps, tokens, time_s), in the same order;
    None where no interval has the block. ``storage.queries.counter_samples`` gives the same of the stored
    intervals without building them."""
    if not carries_block(intervals):
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
    records: Records = {}
    for b, explored_mode in explored.items():
        for mode, samples in grouped.get(b, {}).items():
            held = prefilled.get(b, {}).get(mode) or [None] * len(samples)
            records[(b, mode, mode != explored_mode)] = list(zip(samples, held, strict=True))
    for (b, mode, _), seconds in _levelled(records).items():
        rows = zip(grouped[b][mode], seconds, strict=True)
        out[b][mode] = [(tokens, time_s if levelled_s is None else levelled_s, steps)
                        for (tokens, time_s, steps), levelled_s in rows]  # fmt: skip
    return out


def levelled_seconds(seconds: float, held_steps: float, held_s: float, tokens: float, pure_s: float,
                     per_token_s: float) -> float:  # fmt: skip
    """One sample's seconds levelled: its pure steps' own time, its prefilled steps at the pure step time,
    and ``per_token_s`` for each of its tokens (rounded as ``rates()`` rounds a step time)."""
    return round(max(0.0, seconds - held_s) + held_steps * pure_s + per_token_s * tokens, 9)
