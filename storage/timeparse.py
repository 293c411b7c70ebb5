"""Reading the times a user types: ISO 8601, Unix seconds, ``now``, or relative (``-1h``, ``-30m``)."""

from __future__ import annotations

import math
import re
import time
from datetime import UTC, datetime

_RELATIVE = re.compile(r"^(?:now)?\s*-\s*(\d+(?:\.\d+)?)\s*(s|m|h|d|w)$", re.IGNORECASE)
_UNIT_S = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}


def parse_time(value: str | float | int, field: str = "time", now: float | None = None) -> float:
    """Unix seconds for ``value``. Naive ISO times are UTC. Raises ValueError naming ``field``."""
    now = time.time() if now is None else now
    if isinstance(value, int | float) and not isinstance(value, bool):
        if not math.isfinite(value):
            raise ValueError(f"{field}: not a finite time: {value!r}")
        return float(value)
    text = str(value).strip()
    if not text:
        raise ValueError(f"{field}: empty time")
    if text.lower() == "now":
        return now
    m = _RELATIVE.match(text)
    if m:
        return now - float(m.group(1)) * _UNIT_S[m.group(2).lower()]
    try:
        number = float(text)
    except ValueError:
        number = None
    if number is not None and math.isfinite(number):
        return number
    try:
        dt = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise ValueError(
            f"{field}: cannot read {text!r} as a time; use ISO 8601 (2026-11-29T21:00:00Z), "
            "Unix seconds, 'now', or a relative time such as -1h, -30m, -7d"
        ) from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.timestamp()
