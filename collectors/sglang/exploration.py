"""A rank's exploration as the plugin reports it (``explore`` in each rank's block: plugin/gate.py
``explore_report``, its ``window`` from plugin/explore.py), said in one line: the share of each batch-size
bin's batches that run the other mode, whether it runs now (a lock pauses it), and its windows among the
batches the knob gates, with what a full server held back of them (plugin 0.4.12).

Exploring is what a policy pays to keep both modes measured; near capacity its windows cost every queued
request's first token, so `control get` and the Control page say where they stand. A plugin that does not
publish the block reads as None. ``window_counts`` sums the windows' cumulative counters over a server's
ranks, so that a benchmark can say what the windows did during each of its measurements (the difference of
two reads).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def summary(explore: Mapping[str, Any] | None) -> str | None:
    """One line for a rank's ``explore`` block; None where there is none."""
    if not explore:
        return None
    share = explore.get("share")
    if not isinstance(share, int | float) or isinstance(share, bool) or share <= 0:
        return "off (share 0)"
    state = "on" if explore.get("active") else "paused (a lock holds the knob)"
    line = f"{share:.1%} of each bin's batches, {state}"
    window = explore.get("window")
    if not isinstance(window, Mapping) or not window.get("cycle"):
        return line
    windows = window.get("windows", "?")
    if windows == 0:
        line += "; no exploring window among gated batches yet"
    else:
        line += (f"; windows among gated batches: {_counted(windows, 'exploring part')}, "
                 f"{window.get('timed_out', '?')} ended by their time cap")  # fmt: skip
    if window.get("phase"):
        line += f", now {window['phase']}"
    held = tuple(window.get(key, "?") for key in ("full_waited", "yielded", "forced"))
    if "full_waited" in window and held != (0, 0, 0):  # plugin 0.4.12; all three 0 says nothing
        line += (f"; a full server held back {_counted(held[0], 'batch', 'batches')}, cut "
                 f"{_counted(held[1], 'part')} short, {_counted(held[2], 'window')} ran full")  # fmt: skip
    return line


def _counted(n: object, one: str, many: str | None = None) -> str:
    """``n`` with its noun: "1 exploring part", "3 exploring parts" ("?" where the plugin left it out)."""
    return f"{n} {one if n == 1 else (many or one + 's')}"


# the window block's cumulative counters a measurement's difference reads (plugin/explore.py ``report``)
WINDOW_COUNTERS = ("windows", "timed_out", "warm_cut", "over_limit", "full_waited")
WINDOW_PHASES = ("cold", "warm", "explore")


def window_counts(doc: Any) -> dict[str, int] | None:
    """A ``/server_info`` document's exploring windows summed over its ranks: ``WINDOW_COUNTERS`` and the
    batches of each of ``WINDOW_PHASES``; None where no rank publishes a window block (no plugin, one before
    0.4.x's windows, windows off). A counter a rank leaves out or malformed counts 0."""
    states = doc.get("internal_states") if isinstance(doc, Mapping) else None
    totals = dict.fromkeys((*WINDOW_COUNTERS, *WINDOW_PHASES), 0)
    seen = False
    for state in states if isinstance(states, list) else []:
        block = state.get("spectower") if isinstance(state, Mapping) else None
        explore = block.get("explore") if isinstance(block, Mapping) else None
        window = explore.get("window") if isinstance(explore, Mapping) else None
        if not isinstance(window, Mapping) or not window.get("cycle"):
            continue
        seen = True
        raw = window.get("batches")
        batches: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
        for key, value in [*((k, window.get(k)) for k in WINDOW_COUNTERS),
                           *((k, batches.get(k)) for k in WINDOW_PHASES)]:  # fmt: skip
            if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
                totals[key] += value
    return totals if seen else None
