"""The scheduler's output stalls as the plugin reports them (``loop`` in its block, plugin/loop_stalls.py):
each long gap between two batch results, read into types and said in one line with what took the time.

`control get` prints them per rank (console/commands/rank_lines.py), each GPU call's summary lists them with
their UTC times (benchmarks/gpu/call_summary.py), and a replay's tail is set against them by time
(benchmarks/gpu/replay_table.py). A block from a plugin that does not publish it reads as None.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ...plugin.stall_watch import clock_text

PHASES = ("input", "schedule", "run", "result")
# What each part of a stall's time is, as the one-line cause says it.
_DOING = {
    "input": "taking in new requests",
    "schedule": "scheduling the next batch",
    "run": "running a batch",  # the overlap loop launches it here; the normal loop also waits for it
    "result": "waiting for a batch's result",
}


def _float(value: Any) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


@dataclass(frozen=True)
class StallBatch:
    """A batch that ran in a stall: its forward mode, requests, new tokens (an extend's) and its time."""

    mode: str
    requests: int | None
    tokens: int | None
    run_s: float
    result_s: float

    def text(self) -> str:
        parts = [self.mode]
        if self.requests is not None:
            parts.append(f"{self.requests} requests")
        if self.tokens is not None:
            parts.append(f"{self.tokens:,} new tokens".replace(",", " "))
        return ", ".join(parts)


@dataclass(frozen=True)
class StallSample:
    """The scheduler thread's stack ``after_s`` into a stall, taken while it ran ``phase`` (one of the four
    calls, or None between them): its innermost frames, innermost last (plugin/stall_watch.py)."""

    after_s: float
    phase: str | None
    stack: tuple[str, ...]


@dataclass(frozen=True)
class Stall:
    """One gap between two results of at least the plugin's threshold (``at``: Unix seconds at its end)."""

    at: float
    seconds: float
    phases: dict[str, float]
    gc_s: float
    other_s: float
    waiting_max: int
    received: int
    batches: tuple[StallBatch, ...]
    samples: tuple[StallSample, ...] = ()
    watch_late_s: float = 0.0  # how late the watch thread woke in it: the GIL held that long

    def where(self) -> str | None:
        """The innermost frame of the last stack sampled in the stall (None without one)."""
        for sample in reversed(self.samples):
            if sample.stack:
                return sample.stack[-1]
        return None

    @property
    def started(self) -> float:
        return self.at - self.seconds

    @property
    def gc_led(self) -> bool:
        """A garbage collection took half the stall or more: it is the cause, whatever call it fell in."""
        return self.gc_s >= self.seconds / 2

    def cause(self) -> str:
        """What took most of the stall, in words: a garbage collection when it was half the stall or more,
        else the largest of the four calls' times and the rest (``other``)."""
        if self.gc_led:
            return f"garbage collection {self.gc_s:.2f} s"
        parts = {**self.phases, "other": self.other_s}
        if not any(parts.values()):
            return "no breakdown reported"
        largest = max(parts, key=lambda p: parts[p])
        took = parts[largest]
        if largest == "other":
            if self.waiting_max:
                return f"nothing ran with {self.waiting_max} requests waiting {took:.2f} s"
            return f"outside the scheduler's four calls {took:.2f} s"
        said = f"{_DOING[largest]} {took:.2f} s"
        if largest == "input" and self.received:
            said += f" ({self.received} requests)"
        if largest in ("run", "result") and self.batches:
            top = max(self.batches, key=lambda b: b.run_s if largest == "run" else b.result_s)
            said += f" ({top.text()})"
        return said

    def text(self, utc: bool = True) -> str:
        gc = f"; gc {self.gc_s:.2f} s" if self.gc_s and not self.gc_led else ""
        where = self.where()
        at = f"; at {where}" if where else ""
        held = f"; the GIL held {self.watch_late_s:.2f} s" if self.watch_late_s else ""
        return f"{self.seconds:.2f} s to {clock_text(self.at, utc)}: {self.cause()}{gc}{at}{held}"


@dataclass(frozen=True)
class LoopReport:
    """A rank's ``loop`` block: the threshold, gaps and stalls counted, the longest and the newest ones."""

    threshold_s: float
    gaps: int
    stalls: int
    stall_seconds: float
    longest_s: float
    recent: tuple[Stall, ...]
    phase_seconds: dict[str, float]
    # each phase's calls since the launch (input and schedule: once per loop turn; run and result: per batch)
    phase_calls: dict[str, int] = field(default_factory=dict)
    # ``input`` by the kind of requests a call handled (plugin 0.4.11): kind -> (calls, seconds, requests)
    input_kinds: dict[str, tuple[int, float, int]] = field(default_factory=dict)
    # batches by forward mode (plugin 0.4.11): mode -> (batches run, run s, results, result s, new tokens)
    batch_modes: dict[str, tuple[int, float, int, float, int]] = field(default_factory=dict)

    def summary(self) -> str:
        if not self.stalls:
            return f"no gap between results >= {self.threshold_s:g} s in {self.gaps} gaps"
        gaps = "gap" if self.stalls == 1 else "gaps"
        return (f"{self.stalls} {gaps} between results >= {self.threshold_s:g} s of {self.gaps}, "
                f"{self.stall_seconds:.2f} s in all, the longest {self.longest_s:.2f} s")  # fmt: skip


def _stall(raw: Mapping[str, Any]) -> Stall:
    phases = _mapping(raw.get("phases"))
    batches = tuple(
        StallBatch(mode=str(b.get("mode") or "?"), requests=_int(b.get("requests")),
                   tokens=_int(b.get("tokens")), run_s=_float(b.get("run_s")),
                   result_s=_float(b.get("result_s")))
        for b in raw.get("batches") or () if isinstance(b, Mapping)
    )  # fmt: skip
    samples = tuple(
        StallSample(after_s=_float(s.get("after_s")),
                    phase=s.get("phase") if isinstance(s.get("phase"), str) else None,
                    stack=tuple(str(f) for f in s.get("stack") or () if isinstance(f, str)))
        for s in raw.get("samples") or () if isinstance(s, Mapping)
    )  # fmt: skip
    return Stall(at=_float(raw.get("at")), seconds=_float(raw.get("seconds")),
                 phases={p: _float(phases.get(p)) for p in PHASES}, gc_s=_float(raw.get("gc_s")),
                 other_s=_float(raw.get("other_s")), waiting_max=_int(raw.get("waiting_max")) or 0,
                 received=_int(raw.get("received")) or 0, batches=batches, samples=samples,
                 watch_late_s=_float(raw.get("watch_late_s")))  # fmt: skip


def loop_report(block: Any) -> LoopReport | None:
    """A rank's ``loop`` block (the plugin's), or None where it is missing or not a mapping."""
    if not isinstance(block, Mapping):
        return None
    phases = _mapping(block.get("phases"))
    recent = tuple(_stall(s) for s in block.get("recent") or () if isinstance(s, Mapping))
    return LoopReport(
        threshold_s=_float(block.get("threshold_s")),
        gaps=_int(block.get("gaps")) or 0,
        stalls=_int(block.get("stalls")) or 0,
        stall_seconds=_float(block.get("stall_seconds")),
        longest_s=_float(block.get("longest_stall_s")),
        recent=recent,
        phase_seconds={p: _float(_mapping(phases[p]).get("seconds")) for p in PHASES if p in phases},
        phase_calls={p: _int(_mapping(phases[p]).get("calls")) or 0 for p in PHASES if p in phases},
        input_kinds={
            str(kind): (_int(_mapping(e).get("calls")) or 0, _float(_mapping(e).get("seconds")),
                        _int(_mapping(e).get("requests")) or 0)
            for kind, e in _mapping(block.get("input_kinds")).items()
        },
        batch_modes={
            str(mode): (_int(_mapping(e).get("runs")) or 0, _float(_mapping(e).get("run_s")),
                        _int(_mapping(e).get("results")) or 0, _float(_mapping(e).get("result_s")),
                        _int(_mapping(e).get("tokens")) or 0)
            for mode, e in _mapping(block.get("batch_modes")).items()
        },
    )
