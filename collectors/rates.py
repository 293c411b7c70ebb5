"""Rates from cumulative counters, safe across resets.

A counter that goes down (a server restart, a GPU reset, a wrapped hardware counter) starts a new
baseline: that interval yields no rate at all rather than a negative or double-counted one.
"""

from __future__ import annotations

import math
from collections.abc import Hashable


class CounterRates:
    """Per-key ``(ts, value)`` memory; ``update`` returns the rate since the previous value, or None."""

    def __init__(self) -> None:
        self._prev: dict[Hashable, tuple[float, float]] = {}
        self.resets = 0  # how many decreases were seen (for the health log and tests)
        self.wraps = 0  # decreases taken as a wrap of a counter with a known modulus

    def update(
        self, key: Hashable, ts: float, value: float | None, modulus: float | None = None
    ) -> float | None:
        """``modulus``: the counter wraps at this value (a hardware counter); a decrease is then one wrap,
        not a reset. More than one wrap between two reads cannot be seen: sample often enough."""
        if value is None or not math.isfinite(value) or value < 0:
            return None
        prev = self._prev.get(key)
        if prev is not None and ts <= prev[0]:
            # Same or older timestamp (clock step, duplicate read): no rate, keep the older baseline.
            return None
        self._prev[key] = (ts, value)
        if prev is None:
            return None
        dt = ts - prev[0]
        delta = value - prev[1]
        if delta < 0 and modulus is not None and prev[1] < modulus and value < modulus:
            self.wraps += 1
            delta += modulus
        elif delta < 0:
            self.resets += 1
            return None
        return delta / dt

    def forget(self, key: Hashable | None = None) -> None:
        """Drop one baseline (or all): the next value starts fresh (used after a detected restart)."""
        if key is None:
            self._prev.clear()
        else:
            self._prev.pop(key, None)
