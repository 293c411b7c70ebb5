"""The exploring stream's limit in the closed-loop harness (simulator/harness.py), by the plugin's rule.

The harness is a fluid model: its tables spread a window's exploring part over every batch the ceiling gates
(a share drafts each tick within the limit), so it has no exploring part to end. What plugin 0.4.3 decides
per exploring part (plugin/explore.py: the limit doubles after a part whose largest batch was above it, and
follows it down, with a doubling of headroom once escalated: 0.4.4) it decides here once
per window's worth of gated batches (``explore.window_batches`` at the share set now: about 8 500 at the
default share, fewer above it, plugin 0.4.16), from the batch of the tick that ends it: the plugin's
exploring part closes its window and lasts a few hundred batches, a second or two, about one tick. The
rules are the plugin's own (``explore.next_doublings``, ``explore.stream_limit``).
"""

from __future__ import annotations

from ..plugin import explore


class FluidWindows:
    """The limit's doublings for the batches the ceiling gates in windows, one window per
    ``explore.window_batches`` of them; ``tick_s``: the harness's tick, over which a mode's steps run."""

    def __init__(self, tick_s: float) -> None:
        self.tick_s = tick_s
        self.doublings = 0  # ExploreWindows.doublings
        self.windows = 0
        self._steps = 0.0  # gated batches of the current window so far

    def drafts(self, batch: int, ceiling: int) -> bool:
        """Whether a gated batch of ``batch`` drafts in the window's share (within the limit now)."""
        return explore.stream_drafts(batch, ceiling, self.doublings)

    def add(self, steps: float, batch: int, ceiling: int, window_batches: int) -> None:
        """``steps`` gated-by-ceiling batches of ``batch`` requests in windows ran this tick under
        ``ceiling``; a window's worth of them (``window_batches`` at the share now) ends with the plugin's
        rule."""
        self._steps += steps
        if self._steps < window_batches:
            return
        self._steps -= window_batches
        self.windows += 1
        self.doublings = explore.next_doublings(self.doublings, batch, ceiling)
