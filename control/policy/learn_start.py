"""What the warm start (control/warm_start.py) hands ``learn`` besides a ceiling, checked as options are: each
mode's steady prefill cost the server's stored counters measured, and those stored intervals themselves (the
``history``), which open learn's window until they age out of it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from ...plugin import engine_counters
from .base import PolicyError
from .learn_counters import CEILING_KEY


def checked_costs(costs: Mapping[str, float] | None) -> dict[str, float]:
    """The warm start's prefill costs (seconds per output token by mode), each a finite number >= 0."""
    checked: dict[str, float] = {}
    for mode, cost in (costs or {}).items():
        if mode not in engine_counters.MODES or isinstance(cost, bool) or not isinstance(cost, int | float) \
                or not math.isfinite(cost) or cost < 0:
            modes = list(engine_counters.MODES)
            raise PolicyError(f"learn option 'prefill_costs': {mode!r} must be a mode of {modes} with a "
                              f"finite cost >= 0, got {cost!r}")  # fmt: skip
        checked[mode] = float(cost)
    return checked


def checked_history(history: Sequence[Mapping[str, Any]] | None) -> list[dict[str, Any]]:
    """The warm start's stored intervals (``storage.queries.counter_intervals``' shape, each with ``ts`` and
    the ceiling it ran under as ``CEILING_KEY``), oldest first; each must carry both modes' cells as a
    counters snapshot does (``engine_counters.validate``)."""
    checked: list[dict[str, Any]] = []
    for i, interval in enumerate(history or ()):
        where = f"learn option 'history': interval {i}"
        if not isinstance(interval, Mapping):
            raise PolicyError(f"{where} must be an object, got {type(interval).__name__}")
        ts, ceiling = interval.get("ts"), interval.get(CEILING_KEY)
        if isinstance(ts, bool) or not isinstance(ts, int | float) or not math.isfinite(ts):
            raise PolicyError(f"{where}: 'ts' must be a number, got {ts!r}")
        if ceiling is not None and (isinstance(ceiling, bool) or not isinstance(ceiling, int) or ceiling < 0):
            raise PolicyError(f"{where}: {CEILING_KEY!r} must be an integer >= 0 or null, got {ceiling!r}")
        # a stored interval has a snapshot's cells (``rates()``' shape): the counters' own check judges them
        problem = engine_counters.validate(dict(interval))
        if problem is not None:
            raise PolicyError(f"{where}: {problem}")
        checked.append(dict(interval))
    return sorted(checked, key=lambda h: float(h["ts"]))


def interval_end(interval: Mapping[str, Any]) -> float:
    """When a stored interval ends: its ``ts``, or for a rollup bucket (``res_s``) its start plus its span."""
    return float(interval["ts"]) + float(interval.get("res_s") or 0)


def in_window(history: list[dict[str, Any]], start: float, first: float) -> list[dict[str, Any]]:
    """The stored intervals that end after the window's ``start`` and no later than the policy's own first
    snapshot (``first``): its own intervals count the time after it, so a later one (a history from another
    clock, or one a restored window already holds) would count the same steps twice."""
    return [h for h in history if h["ts"] > start and interval_end(h) <= first]
