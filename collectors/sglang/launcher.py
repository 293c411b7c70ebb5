"""SGLang's launcher process as the plugin reports it (``launcher`` in each rank's block, plugin 0.4.8,
plugin/launcher_state.py): its long garbage collections, the times its Python was held, and whether its
collector is frozen; read into types and said in one line.

Every request's output passes through the launcher (its HTTP server and tokenizer manager), so a pause there
is a pause for every client even when the scheduler never stalled: on the H200 under Azure's replay every
stretch of a run's p99 TTFT was one of its full collections (data/gpu-runs/NOTEBOOK.md, 2026-12-05). `control
get` and the Control page say it with what stops it (SGLang's ``/freeze_gc``); a plugin that does not publish
the block reads as None.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ...plugin.stall_watch import LOG_LATE_S, clock_text

# What stops them, said where the launcher's collections ran long and nothing is frozen: SGLang's own advice
# in its long-collection warning, and what ended them on the H200.
FREEZE_ADVICE = ("SGLang's /freeze_gc (after a few warm-up requests) moves the objects that exist out of the "
                 "collector's scans; on the H200 it ended these pauses: `spectower control freeze-gc "
                 "--server URL --reason ...`")  # fmt: skip


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


@dataclass(frozen=True)
class Pause:
    """A long collection or a hold of a process's Python: when it ended (Unix seconds) and how long; a
    collection's generation where the plugin says it (plugin/gc_pauses.py), None for a hold."""

    at: float
    seconds: float
    generation: int | None = None


def _pauses(raw: Any) -> tuple[Pause, ...]:
    found = []
    for item in raw if isinstance(raw, list) else ():
        at, seconds = _number(_get(item, "at")), _number(_get(item, "seconds"))
        if at is not None and seconds is not None:
            found.append(Pause(at, seconds, _count(_get(item, "generation"))))
    return tuple(found)


def long_collections(gc_block: Any) -> tuple[Pause, ...]:
    """The newest long collections of a process's ``gc`` block (plugin/gc_pauses.py's one format: the
    launcher's, and each scheduler rank's own ``gc``); none where the block is missing or malformed."""
    return _pauses(gc_block.get("recent_long")) if isinstance(gc_block, Mapping) else ()


def _get(item: Any, key: str) -> Any:
    return item.get(key) if isinstance(item, Mapping) else None


@dataclass(frozen=True)
class LauncherReport:
    pid: int | None
    collections: int | None
    long: int | None  # collections of at least threshold_s
    threshold_s: float | None
    longest_s: float | None
    recent_long: tuple[Pause, ...]
    frozen: int | None  # objects gc.freeze() took out of the scans; None: a plugin before 0.4.8's gc block
    held: int | None  # the watch thread's wakes LOG_LATE_S late or more; None: no watch thread
    recent_held: tuple[Pause, ...]

    @property
    def advice(self) -> str | None:
        """What stops the pauses, where the launcher's collections ran long and nothing of it is frozen."""
        return FREEZE_ADVICE if self.long and self.frozen == 0 else None

    def summary(self, utc: bool = False) -> str:
        """``launcher (pid 637): 715 collections, 5 >= 0.05 s, the longest 0.41 s (the newest at 02:03:46.3);
        its Python held >= 0.25 s 6 times, the newest 0.44 s at 02:03:46.3; nothing frozen``."""
        zone = " UTC" if utc else ""
        parts = [f"{self.collections if self.collections is not None else '?'} collections"]
        if self.long and self.threshold_s is not None and self.longest_s is not None:
            last = self.recent_long[-1] if self.recent_long else None
            newest = f" (the newest at {clock_text(last.at, utc)}{zone})" if last else ""
            parts[0] += f", {self.long} >= {self.threshold_s:g} s, the longest {self.longest_s:.2f} s{newest}"
        elif self.threshold_s is not None:
            parts[0] += f", none >= {self.threshold_s:g} s"
        if self.held:
            held = self.recent_held[-1] if self.recent_held else None
            parts.append(f"its Python held >= {LOG_LATE_S:g} s {self.held} times"
                         + (f", the newest {held.seconds:.2f} s at {clock_text(held.at, utc)}{zone}"
                            if held else ""))  # fmt: skip
        elif self.held == 0:
            parts.append(f"its Python never held >= {LOG_LATE_S:g} s")
        if self.frozen is not None:
            frozen = f"{self.frozen:,} objects frozen".replace(",", " ")
            parts.append(frozen if self.frozen else "nothing frozen")
        who = f"pid {self.pid}" if self.pid is not None else "pid ?"
        return f"launcher ({who}, HTTP server and tokenizer manager): " + "; ".join(parts)


def launcher_report(block: Any) -> LauncherReport | None:
    """The plugin's ``launcher`` block read into types; None when there is none (a plugin before 0.4.8, the
    simulator)."""
    if not isinstance(block, Mapping):
        return None
    gc_raw, watch_raw = block.get("gc"), block.get("watch")
    gc: Mapping[str, Any] = gc_raw if isinstance(gc_raw, Mapping) else {}
    watch: Mapping[str, Any] | None = watch_raw if isinstance(watch_raw, Mapping) else None
    return LauncherReport(
        pid=_count(block.get("pid")),
        collections=_count(gc.get("collections")),
        long=_count(gc.get("long")),
        threshold_s=_number(gc.get("threshold_s")),
        longest_s=_number(gc.get("longest_s")),
        recent_long=long_collections(gc),
        frozen=_count(gc.get("frozen")),
        held=_count(watch.get("held")) if watch is not None else None,
        recent_held=_pauses(watch.get("recent_held")) if watch is not None else (),
    )


def first_launcher(blocks: Iterable[Any]) -> LauncherReport | None:
    """The launcher's report from the ranks' ``launcher`` blocks: the launcher is one process and every rank
    carries the same block, so the first that reads is it (None: no rank carries one)."""
    for block in blocks:
        report = launcher_report(block)
        if report is not None:
            return report
    return None
