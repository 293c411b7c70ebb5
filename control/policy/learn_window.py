"""``learn``'s window read as the two choices of each bin (``learn_counters.as_choices``) and grouped as the
estimate reads it (``speedup.per_bin``), with each interval's part kept while it is in the window.

Why: learn re-derives its estimate over the whole window (``window_s``, about 120 intervals of ``sample_s``)
at every kept sample, and most of that was the same work on the same intervals again: each interval's
drafting side, its gated side and its samples per bin. Ten server-hours of decisions
(tests/test_control_policy_learn.py) spent 25 ms of learn's time per kept sample, most of it there.

What is kept, per interval, by identity: learn's intervals are built once
(``speedup.intervals_from_snapshots``) and never changed, and each kept part holds its interval, so no other
object can take its id while it is kept. Its drafting side (``learn_counters.drafting_side``) and drafted
samples, while the window reads its bins alike (``learn_counters.how_served``: the bins the window knows by
what their ceiling served); its gated side and gated samples while the kept extend's tax stays the same. The
parts of intervals that left the window (aged out, a restored window, a clock that went back) are dropped at
the next read; nothing here is persisted.

Exactly what ``as_choices`` then ``per_bin`` give (tests/test_learn_window.py compares them at every kept
sample): each part is what they compute for that interval, and the parts are combined in their order, so
every sum the estimate takes adds the same numbers in the same order. A window that levels an explored cell
(plugin 0.4.14's ``prefilled`` block, or 0.4.15's ``mix`` where it is enough to level by) sets each cell's
levelled time from the whole window's pooled cells: it is read by ``as_choices`` itself, with nothing kept.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .. import mix_levelled, prefilled, speedup
from .learn_counters import as_choices, drafting_side, gating_side, how_served, known_drafting


@dataclass
class _Kept:
    """One interval's parts: its drafting side for ``how`` and its gated side for ``scale``, each with its
    samples."""

    interval: Mapping[str, Any]
    how: tuple[int, ...]
    drafting: dict[str, Any]
    drafted_samples: speedup.ModeSamples
    scale: float | None = None
    gated: dict[str, Any] | None = None
    gated_samples: speedup.ModeSamples | None = None


def levels(window: Sequence[Mapping[str, Any]]) -> bool:
    """Whether ``learn_counters.as_choices`` levels a cell of this window (then each interval's choices
    depend on the whole window's cells): an interval carries the ``prefilled`` block, or the window's mix is
    enough to level by (``mix_levelled.levelling_mix``)."""
    return prefilled.carries_block(window) or mix_levelled.levelling_mix(window) is not None


class WindowChoices:
    """The window's choices and their grouping (``read``), each interval's part kept between reads."""

    def __init__(self) -> None:
        self._kept: dict[int, _Kept] = {}

    def read(
        self,
        window: list[dict[str, Any]],
        masks: list[list[bool]],
        scale: float,
        prefill_costs: Mapping[str, float] | None = None,
    ) -> tuple[list[dict[str, Any]], speedup.PerBin]:
        """``as_choices(window, masks, scale, prefill_costs)`` and its ``speedup.per_bin``; ``masks``: the
        window's ``learn_counters.ceiling_masks``."""
        if levels(window):
            self._kept = {}
            levelled = as_choices(window, masks, scale, prefill_costs)
            return levelled, speedup.per_bin(levelled)
        known = known_drafting(window, masks)
        kept: dict[int, _Kept] = {}
        choices: list[dict[str, Any]] = []
        parts: list[tuple[str, speedup.ModeSamples]] = []
        for interval, mask in zip(window, masks, strict=True):
            entry = self._part(interval, how_served(interval["bins"], mask, known))
            if entry.scale != scale or entry.gated is None or entry.gated_samples is None:
                entry.scale, entry.gated = scale, gating_side(interval["gated"], mask, scale)
                entry.gated_samples = speedup.mode_samples({"bins": interval["bins"], "gated": entry.gated},
                                                           "gated")  # fmt: skip
            kept[id(interval)] = entry
            # a window that levels nothing reads each interval as it is (as_choices' levelled copy of it)
            choices.append({**interval, "drafted": entry.drafting, "gated": entry.gated})
            parts += [("drafted", entry.drafted_samples), ("gated", entry.gated_samples)]
        self._kept = kept
        return choices, speedup.group_samples(parts)

    def _part(self, interval: Mapping[str, Any], how: tuple[int, ...]) -> _Kept:
        """The interval's kept parts where its drafting side is read ``how`` again, else new ones."""
        entry = self._kept.get(id(interval))
        if entry is not None and entry.interval is interval and entry.how == how:
            return entry
        drafting = drafting_side(interval["gated"], interval["drafted"], how)
        samples = speedup.mode_samples({"bins": interval["bins"], "drafted": drafting}, "drafted")
        return _Kept(interval, how, drafting, samples)
