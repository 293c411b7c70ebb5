"""What the learning policy knows: spec-on and spec-off throughput per concurrency bin, and the benefit.

Observations are binned by running requests on a log scale (``bin = round(log(c) / log(ratio))``). Each
(bin, mode) cell keeps time-decayed least-squares sums of ``x = log(running)``, ``y = log(tok/s)``, so a
cell forgets (old samples fade with ``memory_s``) and the comparison inside one bin can correct for the two
modes having been seen at slightly different concurrency (a slope shared by both modes in the bin).

The benefit of speculation in a bin is ``g = log(on / off)`` at the bin's centre. Its structure is what
keeps exploration cheap: speculation's relative benefit falls with load (g is non-increasing in
concurrency, so there is one crossover), and it falls at most ``max_slope`` per unit of log-concurrency.
From a few measured bins that gives every other bin a lower and upper bound; a bin whose bounds share a
sign is decided without ever exploring it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

MODES = ("on", "off")
DEFAULT_BIN_RATIO = math.sqrt(2.0)
DEFAULT_MEMORY_S = 1800.0
# A prior on the throughput-vs-concurrency elasticity inside a bin (aggregate tok/s grows sub-linearly).
PRIOR_SLOPE = 0.8
PRIOR_SLOPE_WEIGHT = 0.02
# A prior on the per-observation log-noise, worth a few observations, so the first samples are humble.
PRIOR_SIGMA = 0.04
PRIOR_SIGMA_DOF = 4.0
MIN_SIGMA = 0.005
MIN_CELL_WEIGHT = 0.2
# Before two measured bins span this much log-concurrency, the benefit beyond the highest measured bin is
# assumed to fall at PRIOR_BENEFIT_SLOPE per unit log-concurrency (the shipped profiles fall 0.06-0.13).
PRIOR_BENEFIT_SLOPE = -0.1
MIN_TREND_SPAN = 1.0


@dataclass
class Cell:
    """Time-decayed sums for one (bin, mode); all sums are at time ``ts``."""

    ts: float = 0.0
    w: float = 0.0
    sx: float = 0.0
    sy: float = 0.0
    sxx: float = 0.0
    sxy: float = 0.0
    syy: float = 0.0
    n_total: int = 0

    def decayed(self, now: float, memory_s: float) -> Cell:
        k = math.exp(-max(0.0, now - self.ts) / memory_s)
        return Cell(now, self.w * k, self.sx * k, self.sy * k, self.sxx * k, self.sxy * k, self.syy * k,
                    self.n_total)

    def add(self, now: float, x: float, y: float, memory_s: float) -> None:
        d = self.decayed(max(now, self.ts), memory_s)
        self.ts, self.w = d.ts, d.w + 1.0
        self.sx, self.sy = d.sx + x, d.sy + y
        self.sxx, self.sxy, self.syy = d.sxx + x * x, d.sxy + x * y, d.syy + y * y
        self.n_total += 1

    def to_json(self) -> list[float]:
        return [self.ts, self.w, self.sx, self.sy, self.sxx, self.sxy, self.syy, float(self.n_total)]

    @classmethod
    def from_json(cls, value: Any, where: str) -> Cell:
        if (not isinstance(value, list) or len(value) != 8
                or not all(isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
                           for v in value)):
            raise ValueError(f"policy state: {where} must be a list of 8 finite numbers")
        ts, w, sx, sy, sxx, sxy, syy, n = value
        if w < 0:
            raise ValueError(f"policy state: {where} has a negative weight")
        return cls(float(ts), float(w), float(sx), float(sy), float(sxx), float(sxy), float(syy), int(n))


@dataclass(frozen=True)
class BinEstimate:
    bin: int
    g: float  # log(on/off) at the bin centre
    se: float  # its standard error
    w_on: float
    w_off: float


@dataclass
class BenefitEstimator:
    bin_ratio: float = DEFAULT_BIN_RATIO
    memory_s: float = DEFAULT_MEMORY_S
    max_slope: float = 0.3
    cells: dict[tuple[int, str], Cell] = field(default_factory=dict)

    def bin_of(self, running: float) -> int:
        return round(math.log(max(running, 1.0)) / math.log(self.bin_ratio))

    def centre_x(self, b: int) -> float:
        return b * math.log(self.bin_ratio)

    def add(self, now: float, running: float, tok_s: float, mode: str) -> int:
        b = self.bin_of(running)
        self.cells.setdefault((b, mode), Cell(ts=now)).add(now, math.log(running), math.log(tok_s),
                                                           self.memory_s)
        return b

    def weight(self, b: int, mode: str, now: float) -> float:
        cell = self.cells.get((b, mode))
        return cell.decayed(now, self.memory_s).w if cell else 0.0

    def estimates(self, now: float) -> dict[int, BinEstimate]:
        """Per bin with both modes seen: g and its standard error (noise pooled over all bins)."""
        fits: list[tuple[int, float, float, float, float, float]] = []
        ss, dof = PRIOR_SIGMA**2 * PRIOR_SIGMA_DOF, PRIOR_SIGMA_DOF
        for b in sorted({b for b, _ in self.cells}):
            on, off = self.cells.get((b, "on")), self.cells.get((b, "off"))
            if on is None or off is None:
                continue
            c_on, c_off = on.decayed(now, self.memory_s), off.decayed(now, self.memory_s)
            if c_on.w < MIN_CELL_WEIGHT or c_off.w < MIN_CELL_WEIGHT:
                continue
            stats = [_centred(c) for c in (c_on, c_off)]
            cxx = sum(s[3] for s in stats)
            cxy = sum(s[4] for s in stats)
            beta = (cxy + PRIOR_SLOPE_WEIGHT * PRIOR_SLOPE) / (cxx + PRIOR_SLOPE_WEIGHT)
            x0 = self.centre_x(b)
            a_on = stats[0][2] + beta * (x0 - stats[0][1])
            a_off = stats[1][2] + beta * (x0 - stats[1][1])
            resid = sum(s[5] - 2 * beta * s[4] + beta * beta * s[3] for s in stats)
            ss += max(resid, 0.0)
            dof += max(c_on.w + c_off.w - 3.0, 0.0)
            lever = (stats[0][1] - stats[1][1]) ** 2 / (cxx + PRIOR_SLOPE_WEIGHT)
            fits.append((b, a_on - a_off, 1 / c_on.w + 1 / c_off.w + lever, c_on.w, c_off.w, 0.0))
        sigma = max(math.sqrt(ss / dof), MIN_SIGMA)
        return {b: BinEstimate(b, g, sigma * math.sqrt(v), w_on, w_off) for b, g, v, w_on, w_off, _ in fits}

    def bounds(self, b: int, est: dict[int, BinEstimate], z: float) -> tuple[float, float]:
        """Lower and upper bound of g in bin ``b`` from every measured bin, by monotonicity + max slope."""
        lo, hi = -math.inf, math.inf
        xb = self.centre_x(b)
        for j, e in est.items():
            dx = xb - self.centre_x(j)
            g_lo, g_hi = e.g - z * e.se, e.g + z * e.se
            if j >= b:  # b is at lower load: at least as much benefit as j, at most max_slope more
                lo = max(lo, g_lo)
                hi = min(hi, g_hi - self.max_slope * dx)
            if j <= b:  # b is at higher load: at most as much benefit as j, at most max_slope less
                hi = min(hi, g_hi)
                lo = max(lo, g_lo - self.max_slope * dx)
        return lo, hi

    def predict(self, bins: list[int], est: dict[int, BinEstimate], z: float) -> dict[int, float]:
        """Point estimate of g per bin: a non-increasing (isotonic) fit of the measured bins, interpolated
        in log-concurrency between them, flat below them (the benefit only grows there, so that is the
        cautious guess), falling along their trend above them, and kept inside each bin's bounds."""
        measured = sorted(est)
        iso = _isotonic_decreasing([est[b].g for b in measured], [1 / max(est[b].se, 1e-6) ** 2
                                                                   for b in measured])
        trend = self._trend(measured, iso)
        out: dict[int, float] = {}
        for b in bins:
            if not measured:
                out[b] = 0.0
                continue
            if b <= measured[0]:
                g = iso[0]
            elif b >= measured[-1]:
                g = iso[-1] + trend * (self.centre_x(b) - self.centre_x(measured[-1]))
            else:
                i = max(k for k, m in enumerate(measured) if m <= b)
                b0, b1 = measured[i], measured[i + 1]
                t = (b - b0) / (b1 - b0)
                g = iso[i] + t * (iso[i + 1] - iso[i])
            lo, hi = self.bounds(b, est, z)
            out[b] = min(max(g, lo), hi)
        return out

    def _trend(self, measured: list[int], iso: list[float]) -> float:
        """How fast the benefit falls beyond the highest measured bin: the measured bins' slope when they
        span enough load, else a prior; never rising, never steeper than ``max_slope``."""
        slope = PRIOR_BENEFIT_SLOPE
        xs = [self.centre_x(b) for b in measured]
        if len(xs) >= 2 and xs[-1] - xs[0] >= MIN_TREND_SPAN:
            mx, my = sum(xs) / len(xs), sum(iso) / len(iso)
            sxx = sum((x - mx) ** 2 for x in xs)
            slope = sum((x - mx) * (y - my) for x, y in zip(xs, iso, strict=True)) / sxx
        return min(0.0, max(-self.max_slope, slope))

    def to_json(self) -> dict[str, Any]:
        return {f"{b}:{mode}": cell.to_json() for (b, mode), cell in sorted(self.cells.items())}

    def load_json(self, data: Any) -> None:
        if not isinstance(data, dict):
            raise ValueError("policy state: 'cells' must be an object")
        cells: dict[tuple[int, str], Cell] = {}
        for key, value in data.items():
            b_text, _, mode = str(key).partition(":")
            if mode not in MODES or not b_text.lstrip("-").isdigit():
                raise ValueError(f"policy state: bad cell key {key!r} (expected 'BIN:on' or 'BIN:off')")
            cells[(int(b_text), mode)] = Cell.from_json(value, f"cells[{key!r}]")
        self.cells = cells


def _centred(c: Cell) -> tuple[float, float, float, float, float, float]:
    """(w, mean x, mean y, Sxx, Sxy, Syy) about the cell's means."""
    mx, my = c.sx / c.w, c.sy / c.w
    return (c.w, mx, my, max(c.sxx - c.w * mx * mx, 0.0), c.sxy - c.w * mx * my,
            max(c.syy - c.w * my * my, 0.0))


def _isotonic_decreasing(values: list[float], weights: list[float]) -> list[float]:
    """Weighted least-squares non-increasing fit (pool-adjacent-violators)."""
    blocks: list[list[float]] = []  # [mean, weight, count]
    for v, w in zip(values, weights, strict=True):
        blocks.append([v, w, 1])
        while len(blocks) > 1 and blocks[-2][0] < blocks[-1][0]:
            m2, w2, n2 = blocks.pop()
            m1, w1, n1 = blocks.pop()
            blocks.append([(m1 * w1 + m2 * w2) / (w1 + w2), w1 + w2, n1 + n2])
    out: list[float] = []
    for m, _, n in blocks:
        out.extend([m] * int(n))
    return out
