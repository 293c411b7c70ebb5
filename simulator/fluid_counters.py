"""The engine counters of one rank as the fluid models feed them (simulator/harness.py's closed loop,
simulator/open_loop.py's open one): plugin/engine_counters.py's cumulative shape, whole steps only.

The ``extend`` block (plugin 0.4.6's: steady gated steps by whether the draft extend ran) is fed where the
model knows which its gated steps are (``add_extend``): a fluid model has no mode switch within a stream, so
every gated step counts there, settling or not, as a steady gated step does in the plugin.

A bin the ceiling gates drafts only in the plugin's exploring windows, whose exploring part ends each window:
its counters see that bin's drafting once a window, one interval per window. The fluid model spreads the
window's drafting over every tick, so ``add(..., hold_drafted=True)`` keeps it back and ``release_held``
publishes it when ``FluidWindows`` closes the window: without that, learn in the harness would have a gated
bin's intervals within a few samples and never wait for windows, as it does on a server."""

from __future__ import annotations

import bisect
import math
import random
from typing import TYPE_CHECKING, Any

from ..plugin.engine_counters import COUNTERS_VERSION, EXTEND_KINDS, MODES, counter_bins

if TYPE_CHECKING:  # the harness imports this module
    from .harness import _Mode


def _count(done: tuple[int, float, float] | None, i: int, steps: list[int], tokens: list[float],
           time_s: list[float]) -> None:  # fmt: skip
    """Add whole steps (``FluidCounters._whole``'s answer, None: none yet) to bin ``i`` of a block."""
    if done is not None:
        steps[i] += done[0]
        tokens[i] += done[1]
        time_s[i] += done[2]


class FluidCounters:
    """The engine counters of one rank, cumulative, fed per tick (plugin/engine_counters.py's shape).

    A server counts whole decode steps, each with its tokens and its time; the fluid model makes fractions
    of steps per tick, so each (bin, mode) carries its unfinished step over to the next tick and publishes
    only whole ones (a sparse mode, e.g. the explored one at batch size 1, thus never shows time without
    the tokens made in it). The ``extend`` block's kinds carry theirs the same way."""

    def __init__(self, max_running_requests: int, noise_cv: float, rng: random.Random,
                 extend_rng: random.Random | None = None) -> None:  # fmt: skip
        self.bins = counter_bins(max_running_requests)
        n = len(self.bins)
        self.steps = {mode: [0] * n for mode in MODES}
        self.tokens = {mode: [0.0] * n for mode in MODES}
        self.time_s = {mode: [0.0] * n for mode in MODES}
        # the unfinished step of each (mode, bin): [steps, tokens, seconds]
        self.partial = {mode: [[0.0, 0.0, 0.0] for _ in range(n)] for mode in MODES}
        self.noise_cv = noise_cv
        self.rng = rng
        # the extend block, per kind as the modes above; its noise draws from its own stream, so that the
        # bins' noise (and every count a test pins) is what it was before the block
        self.extend_steps = {kind: [0] * n for kind in EXTEND_KINDS}
        self.extend_tokens = {kind: [0.0] * n for kind in EXTEND_KINDS}
        self.extend_time_s = {kind: [0.0] * n for kind in EXTEND_KINDS}
        self.extend_partial = {kind: [[0.0, 0.0, 0.0] for _ in range(n)] for kind in EXTEND_KINDS}
        self.extend_rng = extend_rng if extend_rng is not None else random.Random("extend")
        # the explored drafting of the window now open, per bin: [steps, tokens, seconds] (``release_held``)
        self.held = [[0.0, 0.0, 0.0] for _ in range(n)]

    def bin_index(self, batch: int) -> int:
        """The index of the smallest bin >= ``batch`` (the last bin past them all: the bins are fixed)."""
        return min(bisect.bisect_left(self.bins, batch), len(self.bins) - 1)

    def add(self, batch: int, m: _Mode, seconds: float, hold_drafted: bool = False) -> None:
        """``seconds`` of mode ``m`` at ``batch``; ``hold_drafted``: its drafted steps are a window's
        explored drafting, kept back until ``release_held``."""
        i = self.bin_index(batch)
        for mode, steps_s, time_share, tok_share in (
            ("drafted", m.drafted_steps_s, m.drafted_time, m.drafted_tok_share),
            ("gated", m.gated_steps_s, 1.0 - m.drafted_time, 1.0 - m.drafted_tok_share),
        ):
            steps = steps_s * seconds
            if steps <= 0:
                continue
            made = (steps, tok_share * m.rate * seconds, time_share * seconds)
            if hold_drafted and mode == "drafted":
                self.held[i] = [h + x for h, x in zip(self.held[i], made, strict=True)]
            else:
                self._publish(mode, i, *made)

    def release_held(self) -> None:
        """The window closed: its explored drafting, kept back per bin, counts now."""
        for i, held in enumerate(self.held):
            if held[0] > 0:
                self._publish("drafted", i, *held)
            self.held[i] = [0.0, 0.0, 0.0]

    def _publish(self, mode: str, i: int, steps: float, tokens: float, seconds: float) -> None:
        done = self._whole(self.partial[mode][i], steps, tokens, seconds, self.rng)
        _count(done, i, self.steps[mode], self.tokens[mode], self.time_s[mode])

    def add_extend(self, batch: int, m: _Mode, seconds: float, kept: float, kept_time: float | None = None
                   ) -> None:  # fmt: skip
        """The gated steps of ``seconds`` in mode ``m`` at ``batch``, into the ``extend`` block: a share
        ``kept`` of them ran the draft extend, the rest skipped it. ``kept_time``: the kept ones' share of
        the gated time (a kept step is slower; default ``kept``: the mode's gated steps are of one kind).
        Every gated step makes one token per request, so the tokens split as the steps do."""
        steps = m.gated_steps_s * seconds
        if steps <= 0:
            return
        i = self.bin_index(batch)
        tokens, spent = (1.0 - m.drafted_tok_share) * m.rate * seconds, (1.0 - m.drafted_time) * seconds
        kept_time = kept if kept_time is None else kept_time
        for kind, step_share, time_share in (("kept", kept, kept_time),
                                             ("skipped", 1.0 - kept, 1.0 - kept_time)):  # fmt: skip
            if step_share <= 0:
                continue
            done = self._whole(self.extend_partial[kind][i], step_share * steps, step_share * tokens,
                               time_share * spent, self.extend_rng)  # fmt: skip
            _count(done, i, self.extend_steps[kind], self.extend_tokens[kind], self.extend_time_s[kind])

    def stall_extend(self, batch: int, m: _Mode, seconds: float, kept: float) -> None:
        """A prefill's ``seconds`` beside gated steps of mode ``m`` (open_loop_cost.count_stall): they land
        in the step in flight, the gated share by kind, as the plugin's step time has them."""
        if seconds <= 0:
            return
        i = self.bin_index(batch)
        gated = (1.0 - m.drafted_time) * seconds
        self.extend_partial["kept"][i][2] += kept * gated
        self.extend_partial["skipped"][i][2] += (1.0 - kept) * gated

    def _whole(self, part: list[float], steps: float, tokens: float, seconds: float, rng: random.Random
               ) -> tuple[int, float, float] | None:  # fmt: skip
        """Add to an unfinished step ``part`` ([steps, tokens, seconds]); the whole steps it now holds, with
        their tokens and (noisy) time, taken out of it, or None while it holds none."""
        part[0] += steps
        part[1] += tokens
        part[2] += seconds
        whole = math.floor(part[0] + 1e-9)
        if whole < 1:
            return None
        share = whole / part[0]
        tokens, spent = part[1] * share, part[2] * share
        if self.noise_cv > 0:  # each step's time carries noise_cv: n steps average it down
            spent *= max(0.2, 1.0 + self.noise_cv / math.sqrt(whole) * rng.gauss(0.0, 1.0))
        part[0] -= whole
        part[1] -= tokens
        part[2] -= part[2] * share
        return whole, tokens, spent

    def snapshot(self) -> dict[str, Any]:
        return {
            "version": COUNTERS_VERSION,
            "started_at": 0.0,
            "clock": "model",
            "bins": list(self.bins),
            **{
                mode: {
                    "steps": list(self.steps[mode]),
                    "tokens": [round(v, 6) for v in self.tokens[mode]],
                    "time_s": [round(v, 9) for v in self.time_s[mode]],
                }
                for mode in MODES
            },
            "unmatched": 0,
            "dropped": 0,
            "extend": {
                kind: {
                    "steps": list(self.extend_steps[kind]),
                    "tokens": [round(v, 6) for v in self.extend_tokens[kind]],
                    "time_s": [round(v, 9) for v in self.extend_time_s[kind]],
                }
                for kind in EXTEND_KINDS
            },
        }
