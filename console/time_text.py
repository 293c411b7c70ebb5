"""How long ago something happened, in words an operator reads at a glance: one implementation for the
console's pages and the CLI (which must not import the pages' Streamlit and pandas to say it)."""

from __future__ import annotations

import math
import time


def ago(ts: float | None, now: float | None = None) -> str:
    """``"12 s ago"``, ``"5 min ago"``, ``"2.5 h ago"``, ``"3.0 days ago"``; ``"never"`` for None, NaN or a
    missing value that is no number at all (pandas' NA, as the pages' frames hold one)."""
    if ts is None:
        return "never"
    try:
        when = float(ts)
    except TypeError:  # pandas' NA
        return "never"
    if math.isnan(when):
        return "never"
    s = max(0.0, (time.time() if now is None else now) - when)
    if s < 90:
        return f"{s:.0f} s ago"
    if s < 5400:
        return f"{s / 60:.0f} min ago"
    if s < 2 * 86400:
        return f"{s / 3600:.1f} h ago"
    return f"{s / 86400:.1f} days ago"
