"""The engine counters of one rank as the fluid models feed them (simulator/harness.py's closed loop,
simulator/open_loop.py's open one): plugin/engine_counters.py's cumulative shape, whole steps only."""

from __future__ import annotations

import bisect
import math
import random
from typing import TYPE_CHECKING, Any

from ..plugin.engine_counters import COUNTERS_VERSION, MODES, counter_bins

if TYPE_CHECKING:  # the harness imports this module
    from .harness import _Mode


class FluidCounters:
    """The engine counters of one rank, cumulative, fed per tick (plugin/engine_counters.py's shape).

    A server counts whole decode steps, each with its tokens and its time; the fluid model makes fractions
    of steps per tick, so each (bin, mode) carries its unfinished step over to the next tick and publishes
    only whole ones (a sparse mode, e.g. the explored one at batch size 1, thus never shows time without
    the tokens made in it)."""

    def __init__(self, max_running_requests: int, noise_cv: float, rng: random.Random) -> None:
        self.bins = counter_bins(max_running_requests)
        n = len(self.bins)
        self.steps = {mode: [0] * n for mode in MODES}
        self.tokens = {mode: [0.0] * n for mode in MODES}
        self.time_s = {mode: [0.0] * n for mode in MODES}
        # the unfinished step of each (mode, bin): [steps, tokens, seconds]
        self.partial = {mode: [[0.0, 0.0, 0.0] for _ in range(n)] for mode in MODES}
        self.noise_cv = noise_cv
        self.rng = rng

    def bin_index(self, batch: int) -> int:
        """The index of the smallest bin >= ``batch`` (the last bin past them all: the bins are fixed)."""
        return min(bisect.bisect_left(self.bins, batch), len(self.bins) - 1)

    def add(self, batch: int, m: _Mode, seconds: float) -> None:
        i = self.bin_index(batch)
        for mode, steps_s, time_share, tok_share in (
            ("drafted", m.drafted_steps_s, m.drafted_time, m.drafted_tok_share),
            ("gated", m.gated_steps_s, 1.0 - m.drafted_time, 1.0 - m.drafted_tok_share),
        ):
            steps = steps_s * seconds
            if steps <= 0:
                continue
            part = self.partial[mode][i]
            part[0] += steps
            part[1] += tok_share * m.rate * seconds
            part[2] += time_share * seconds
            whole = math.floor(part[0] + 1e-9)
            if whole < 1:
                continue
            share = whole / part[0]
            tokens, spent = part[1] * share, part[2] * share
            if self.noise_cv > 0:  # each step's time carries noise_cv: n steps average it down
                spent *= max(0.2, 1.0 + self.noise_cv / math.sqrt(whole) * self.rng.gauss(0.0, 1.0))
            self.steps[mode][i] += whole
            self.tokens[mode][i] += tokens
            self.time_s[mode][i] += spent
            part[0] -= whole
            part[1] -= tokens
            part[2] -= part[2] * share

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
        }
