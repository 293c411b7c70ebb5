"""Load traces: concurrency over time, for scoring policies in virtual time.

A trace is a list of ``(t_seconds, concurrency)`` points, read piecewise-linearly; two points at the same
``t`` make a step. A trace file is JSON ``[[t_seconds, concurrency], ...]``. The built-in traces are
deterministic per seed and sweep 1 .. ~90 concurrent requests, so they cross every shipped profile's
crossover region and reach past ``max_running_requests`` (the excess queues). ``jump`` is the adversary of
any policy that learns from load averages: every second the concurrency jumps to a new seeded level drawn
uniformly from 1 .. ``max_running_requests`` (the profile's when the caller names it, else 90), so no
decision interval ever sees one load.
"""

from __future__ import annotations

import bisect
import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..storage.files import FileReadError, is_file_path, parse_json_text, read_text_capped

DEFAULT_DURATION_S = 3600.0
BUILTIN_TRACES = ("day", "bursty", "ramp", "steps", "jump")
# Earlier names, still accepted: the live load patterns (`bench load --pattern`) say day and steps.
TRACE_ALIASES = {"diurnal": "day", "step": "steps"}
PEAK_CONCURRENCY = 90.0
STEP_LEVELS = (1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 90)
MAX_TRACE_POINTS = 1_000_000
MAX_TRACE_BYTES = 64 << 20  # a trace file: a million points of JSON text fit
# A trace's own reach: as long as the longest --duration a built-in trace takes, and far more clients than
# any server runs (the excess queues); past these a trace is a typo, and scoring it would not end.
MAX_TRACE_SECONDS = 30 * 86400.0
MAX_TRACE_CONCURRENCY = 1_000_000.0


class TraceError(ValueError):
    """A trace that cannot be used; the message names what is wrong."""


@dataclass(frozen=True)
class Trace:
    name: str
    times: tuple[float, ...]
    values: tuple[float, ...]

    @property
    def duration_s(self) -> float:
        return self.times[-1]

    def concurrency_at(self, t: float) -> float:
        """Concurrency at ``t``: linear between points, the later value at a step, held beyond the ends."""
        i = bisect.bisect_right(self.times, t)
        if i == 0:
            return self.values[0]
        if i >= len(self.times):
            return self.values[-1]
        t0, t1 = self.times[i - 1], self.times[i]
        v0, v1 = self.values[i - 1], self.values[i]
        if t1 <= t0:
            return v1
        return v0 + (v1 - v0) * (t - t0) / (t1 - t0)

    def to_json(self) -> list[list[float]]:
        return [[t, v] for t, v in zip(self.times, self.values, strict=True)]


def parse_trace(data: Any, source: str = "trace") -> Trace:
    if not isinstance(data, list) or not data:
        raise TraceError(f"{source}: a trace is a non-empty JSON list of [t_seconds, concurrency] pairs")
    if len(data) > MAX_TRACE_POINTS:
        raise TraceError(f"{source}: too many points ({len(data)} > {MAX_TRACE_POINTS})")
    times: list[float] = []
    values: list[float] = []
    for i, item in enumerate(data):
        if not isinstance(item, list | tuple) or len(item) != 2:
            raise TraceError(f"{source}: point [{i}] must be a pair [t_seconds, concurrency], got {item!r}")
        t, c = item
        for label, v in (("t_seconds", t), ("concurrency", c)):
            if not isinstance(v, int | float) or isinstance(v, bool) or not math.isfinite(v):
                raise TraceError(f"{source}: point [{i}] {label} must be a finite number, got {v!r}")
            if v < 0:
                raise TraceError(f"{source}: point [{i}] {label} must be >= 0, got {v!r}")
            top = MAX_TRACE_SECONDS if label == "t_seconds" else MAX_TRACE_CONCURRENCY
            if v > top:
                raise TraceError(f"{source}: point [{i}] {label} must be at most {top:g}, got {v!r}")
        if times and t < times[-1]:
            raise TraceError(f"{source}: point [{i}] t_seconds {t} goes back in time (previous {times[-1]})")
        times.append(float(t))
        values.append(float(c))
    if times[-1] <= 0:
        raise TraceError(f"{source}: the trace must span some time (last t_seconds is {times[-1]})")
    return Trace(Path(source).stem if source.endswith(".json") else source, tuple(times), tuple(values))


def load_trace(name_or_path: str, duration_s: float | None = None, seed: int = 0,
               max_running_requests: int | None = None) -> Trace:
    """A built-in trace by name (``duration_s`` long, default an hour; ``jump`` spans 1 ..
    ``max_running_requests``), or a trace JSON file by path."""
    if name_or_path in BUILTIN_TRACES or name_or_path in TRACE_ALIASES:
        return builtin_trace(name_or_path, duration_s or DEFAULT_DURATION_S, seed, max_running_requests)
    if not is_file_path(name_or_path):
        raise TraceError(f"trace {name_or_path!r}: no such file and no built-in trace of that name "
                         f"({', '.join(BUILTIN_TRACES)})")
    try:
        text = read_text_capped(name_or_path, MAX_TRACE_BYTES)
    except FileReadError as exc:
        raise TraceError(f"trace {name_or_path!r}: {exc}") from None
    try:
        data = parse_json_text(text)
    except FileReadError as exc:  # a request trace is told apart by its .csv name: say that form too
        raise TraceError(f"trace {name_or_path!r}: {exc}; a concurrency trace is JSON, a request trace "
                         "a .csv file") from None
    return parse_trace(data, source=name_or_path)


def builtin_trace(name: str, duration_s: float = DEFAULT_DURATION_S, seed: int = 0,
                  max_running_requests: int | None = None) -> Trace:
    """A built-in trace; ``max_running_requests`` is the top of ``jump`` (default ``PEAK_CONCURRENCY``)."""
    name = TRACE_ALIASES.get(name, name)
    if name not in BUILTIN_TRACES:
        raise TraceError(f"unknown built-in trace {name!r} ({', '.join(BUILTIN_TRACES)})")
    if not math.isfinite(duration_s) or duration_s < 60:
        raise TraceError(f"duration must be at least 60 s, got {duration_s!r}")
    top = PEAK_CONCURRENCY if max_running_requests is None else float(max_running_requests)
    if not math.isfinite(top) or top < 1:
        raise TraceError(f"max_running_requests must be >= 1, got {max_running_requests!r}")
    if name == "jump":
        points = _jump(duration_s, random.Random(f"{name}:{seed}"), int(top))
    else:
        points = _BUILDERS[name](duration_s, random.Random(f"{name}:{seed}"), seed)
    return parse_trace([[round(t, 3), round(max(c, 0.0), 3)] for t, c in points], source=name)


def _jitter(rng: random.Random, n: int, sd: float, keep: float) -> list[float]:
    """An AR(1) multiplicative jitter: short-term wobble around the trend."""
    out, e = [], 0.0
    for _ in range(n):
        e = keep * e + math.sqrt(1 - keep * keep) * rng.gauss(0.0, sd)
        out.append(math.exp(e))
    return out


def _diurnal(duration: float, rng: random.Random, seed: int) -> list[tuple[float, float]]:
    """One compressed day: a quiet night near 1, a morning climb, a peak near 90, an evening fall."""
    step = 10.0
    n = int(duration // step) + 1
    phase = rng.uniform(-0.03, 0.03)
    wobble = _jitter(rng, n, 0.12, 0.9)
    pts = []
    for i in range(n):
        t = min(i * step, duration)
        day = (1 - math.cos(2 * math.pi * (t / duration + phase))) / 2
        pts.append((t, max(1.0, (1 + (PEAK_CONCURRENCY - 1) * day**1.5) * wobble[i])))
    return pts


def _bursty(duration: float, rng: random.Random, seed: int) -> list[tuple[float, float]]:
    """A light baseline (1-4) with bursts: every size from 16 to 90 appears, in a seeded order."""
    peaks = [16.0, 24.0, 32.0, 48.0, 64.0, 90.0]
    rng.shuffle(peaks)
    pts: list[tuple[float, float]] = [(0.0, rng.uniform(1, 4))]
    t = 0.0
    k = 0
    mean_gap = duration / (2 * len(peaks))
    while t < duration:
        gap = rng.uniform(0.5, 1.5) * mean_gap
        t_burst = t + gap
        length = rng.uniform(0.4, 1.0) * mean_gap
        peak = peaks[k % len(peaks)] * rng.uniform(0.85, 1.15)
        base = rng.uniform(1, 4)
        edge = min(5.0, length / 4)  # seconds to ramp into and out of a burst
        tail = peak * rng.uniform(0.8, 1.1)
        after = rng.uniform(1, 4)
        for tt, c in ((t + gap / 2, base), (t_burst, base), (t_burst + edge, peak),
                      (t_burst + length - edge, tail), (t_burst + length, after)):
            if tt <= duration:
                pts.append((tt, c))
        t = t_burst + length
        k += 1
    if pts[-1][0] < duration:
        pts.append((duration, pts[-1][1]))
    return pts


def _ramp(duration: float, rng: random.Random, seed: int) -> list[tuple[float, float]]:
    """Up from 1 to the peak over the first 60 % of the run, then back down, with a little wobble."""
    step = 10.0
    n = int(duration // step) + 1
    wobble = _jitter(rng, n, 0.06, 0.8)
    pts = []
    for i in range(n):
        t = min(i * step, duration)
        u = t / duration
        shape = u / 0.6 if u <= 0.6 else (1 - u) / 0.4
        pts.append((t, max(1.0, (1 + (PEAK_CONCURRENCY - 1) * shape) * wobble[i])))
    return pts


def _step(duration: float, rng: random.Random, seed: int) -> list[tuple[float, float]]:
    """Held levels 1 .. 90: ascending for seed 0, a seeded order otherwise."""
    order = list(STEP_LEVELS) if seed == 0 else rng.sample(list(STEP_LEVELS), len(STEP_LEVELS))
    hold = duration / len(order)
    pts: list[tuple[float, float]] = []
    for i, c in enumerate(order):
        pts.append((i * hold, float(c)))
        pts.append(((i + 1) * hold, float(c)))
    return pts


def _jump(duration: float, rng: random.Random, top: int) -> list[tuple[float, float]]:
    """Every second a new level, uniform over the integers 1 .. ``top`` (held for that second)."""
    pts: list[tuple[float, float]] = []
    seconds = math.ceil(duration)
    for i in range(seconds):
        level = float(rng.randint(1, top))
        pts.append((float(i), level))
        pts.append((min(float(i + 1), duration), level))
    return pts


_BUILDERS: dict[str, Callable[[float, random.Random, int], list[tuple[float, float]]]] = {
    "day": _diurnal,
    "bursty": _bursty,
    "ramp": _ramp,
    "steps": _step,
}  # and "jump" (``_jump``), which takes the top level instead of the seed
