"""The pauses a server's processes report in ``/server_info`` -> rows for storage (``server_pause``).

The spectower plugin publishes, per DP rank, the newest few of each kind of pause: the scheduler's output
stalls (``loop.recent``, plugin/loop_stalls.py), the scheduler's own long collections (``gc.recent_long``,
plugin/gc_pauses.py) and, the same block on every rank, SGLang's launcher's long collections and the times
its Python was held (``launcher``, plugin 0.4.8, plugin/launcher_state.py). They are read here with the
readers `control get` uses (collectors/sglang/stalls.py, launcher.py), the launcher's once per document.

These are short lists read again at every ``/server_info`` read, so ``NewPauses`` keeps per server what
was already handed over (the newest end per process and kind); storage's unique key skips any row a
restarted collector hands over again. A block that does not read (an odd field of an outside document)
gives no rows and never fails the scrape.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ...storage.integers import int_or_none
from .launcher import Pause, launcher_report, long_collections
from .stalls import loop_report

log = logging.getLogger(__name__)

DETAIL_CHARS = 200  # a stall's cause is one line; a longer one is cut here
LAUNCHER = "launcher"


@dataclass(frozen=True)
class PauseRow:
    """The ``ServerPause`` columns without ``server_id``: one pause of one process, ending at ``ts``."""

    ts: float
    seconds: float
    kind: str  # stall | gc | held (storage.models.PAUSE_KINDS)
    process: str  # "launcher" or "rank N"
    detail: str | None

    def as_row(self) -> dict[str, Any]:
        return dict(vars(self))


def _row(ts: float, seconds: float, kind: str, process: str, detail: str | None) -> PauseRow | None:
    """A row, or None for a pause no clock could have stamped (not finite, no end time, negative)."""
    if not (math.isfinite(ts) and math.isfinite(seconds)) or ts <= 0 or seconds < 0:
        return None
    return PauseRow(ts, seconds, kind, process, detail[:DETAIL_CHARS] if detail else None)


def _collections(process: str, found: Iterable[Pause], kind: str = "gc") -> list[PauseRow | None]:
    return [
        _row(p.at, p.seconds, kind, process, f"gen {p.generation}" if p.generation is not None else None)
        for p in found
    ]


def _stall_rows(process: str, block: Any) -> list[PauseRow | None]:
    """A rank's output stalls, each with its cause in one line as the detail."""
    loop = loop_report(block)
    return [_row(s.at, s.seconds, "stall", process, s.cause()) for s in loop.recent] if loop else []


def _gc_rows(process: str, block: Any) -> list[PauseRow | None]:
    """A scheduler rank's own long collections."""
    return _collections(process, long_collections(block))


def _launcher_rows(block: Any) -> list[PauseRow | None]:
    report = launcher_report(block)
    if report is None:
        return []
    return _collections(LAUNCHER, report.recent_long) + _collections(LAUNCHER, report.recent_held, "held")


def _read(what: str, read: Callable[..., list[PauseRow | None]], *args: Any) -> list[PauseRow]:
    """``read(*args)``'s rows, or none where its block does not read as the plugin writes it."""
    try:
        return [row for row in read(*args) if row is not None]
    except Exception as exc:  # an outside document: one odd block must cost its own rows, never the scrape
        log.debug("/server_info: %s's pauses left out: %s: %s", what, type(exc).__name__, exc)
        return []


def pause_rows(doc: Any) -> list[PauseRow]:
    """Every pause a decoded ``/server_info`` document reports (a PD router's decode workers' too): each
    rank's stalls and collections, then the launcher's collections and holds once."""
    from ...storage.bench_serving import effective_server_info  # the database layer, once it is needed

    engine = effective_server_info(doc) if isinstance(doc, dict) else None
    states = engine.get("internal_states") if isinstance(engine, Mapping) else None
    rows: list[PauseRow] = []
    launcher: Any = None
    for i, state in enumerate(states if isinstance(states, list) else ()):
        block = state.get("spectower") if isinstance(state, Mapping) else None
        if not isinstance(block, Mapping):
            continue  # no plugin on this rank: nothing reported, nothing wrong
        dp_rank = int_or_none(state.get("dp_rank"))
        process = f"rank {i if dp_rank is None else dp_rank}"
        # each block on its own: one that does not read costs its own rows only
        rows += _read(f"{process} loop", _stall_rows, process, block.get("loop"))
        rows += _read(f"{process} gc", _gc_rows, process, block.get("gc"))
        if launcher is None:  # the launcher is one process: every rank carries the same block
            launcher = block.get(LAUNCHER)
    rows += _read(LAUNCHER, _launcher_rows, launcher)
    return rows


class NewPauses:
    """One server's pauses already handed over: the newest end per (process, kind). The plugin's lists
    hold the newest few, so a pause that ends no later than the newest one kept is one kept before."""

    def __init__(self) -> None:
        self._newest: dict[tuple[str, str], float] = {}

    def new(self, rows: Iterable[PauseRow]) -> list[PauseRow]:
        """The rows not handed over before (and remember them)."""
        fresh = [r for r in rows if r.ts > self._newest.get((r.process, r.kind), -math.inf)]
        for r in fresh:
            key = (r.process, r.kind)
            self._newest[key] = max(r.ts, self._newest.get(key, -math.inf))
        return fresh
